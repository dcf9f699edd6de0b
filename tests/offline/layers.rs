//! The layers of `src/`, bottom to top, and the check that no module reaches up: every `crate::` (or `super::` up to the crate root) path in a module names its own layer or one below, and the peers of a layer never name each other.
//!
//! Test code (`#[cfg(test)]` items and the files they declare) is left out: a test may build
//! its fixtures from anywhere. The layer table of the book's architecture page
//! (`docs/src/contributor-guide/architecture.md`) lists the same layers in the same order, and
//! [`the_architecture_page_lists_the_layers_bottom_to_top`] keeps the two in step.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// The top-level modules of `src/`, from the bottom layer to the top one. A module may use
/// the modules of the layers below its own; the modules of one layer are peers and use none
/// of each other. `lib.rs` and `main.rs` only declare and wire them.
const LAYERS: &[&[&str]] = &[
    &["api"],
    &["archive"],
    &["resolve"],
    &["store"],
    &["retention", "telemetry", "outbound"],
    &["runner"],
    &["local"],
    &["cluster"],
    &["controller", "webhook", "dataapi", "gateway"],
    &["serve"],
    &["ops"],
    &["cli"],
];

fn layer_of(module: &str) -> Option<usize> {
    LAYERS.iter().position(|layer| layer.contains(&module))
}

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// One `.rs` file of `src/` with its module path (`src/controller/build/mod.rs` is
/// `["controller", "build"]`; `lib.rs` and `main.rs` are the crate root, `[]`).
struct SourceFile {
    path: PathBuf,
    module: Vec<String>,
    text: String,
}

fn source_files() -> Vec<SourceFile> {
    let mut files = Vec::new();
    let mut dirs = vec![src()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let relative = path.strip_prefix(src()).unwrap();
                let mut module: Vec<String> = relative
                    .with_extension("")
                    .iter()
                    .map(|part| part.to_string_lossy().into_owned())
                    .collect();
                if module.last().is_some_and(|last| last == "mod")
                    || module == ["lib"]
                    || module == ["main"]
                {
                    module.pop();
                }
                let text = std::fs::read_to_string(&path).unwrap();
                files.push(SourceFile { path, module, text });
            }
        }
    }
    files.sort_by(|a, b| a.path.cmp(&b.path));
    files
}

/// `source` without comments, and with every string and char literal emptied, so that only
/// code is left to read paths from.
fn strip_comments_and_literals(source: &str) -> String {
    let chars: Vec<char> = source.chars().collect();
    let mut out = String::with_capacity(source.len());
    let mut i = 0;
    let is_ident = |c: char| c.is_alphanumeric() || c == '_';
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        if c == '/' && next == Some('/') {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            let mut depth = 0;
            while i < chars.len() {
                if chars[i] == '/' && chars.get(i + 1) == Some(&'*') {
                    depth += 1;
                    i += 2;
                } else if chars[i] == '*' && chars.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
            out.push(' ');
        } else if c == 'r'
            && (i == 0 || !is_ident(chars[i - 1]) || chars[i - 1] == 'b')
            && matches!(next, Some('"' | '#'))
            && chars[i + 1..]
                .iter()
                .find(|&&c| c != '#')
                .is_some_and(|&c| c == '"')
        {
            let hashes = chars[i + 1..].iter().take_while(|&&c| c == '#').count();
            i += 1 + hashes + 1;
            while i < chars.len() {
                if chars[i] == '"' && chars[i + 1..].iter().take(hashes).all(|&c| c == '#') {
                    i += 1 + hashes;
                    break;
                }
                i += 1;
            }
            out.push_str("\"\"");
        } else if c == '"' {
            i += 1;
            while i < chars.len() && chars[i] != '"' {
                i += if chars[i] == '\\' { 2 } else { 1 };
            }
            i += 1;
            out.push_str("\"\"");
        } else if c == '\'' && next == Some('\\') {
            i += 2;
            while i < chars.len() && chars[i] != '\'' {
                i += 1;
            }
            i += 1;
            out.push_str("' '");
        } else if c == '\'' && chars.get(i + 2) == Some(&'\'') {
            i += 3;
            out.push_str("' '");
        } else {
            out.push(c);
            i += 1;
        }
    }
    out
}

/// The end (exclusive) of the item that starts at `start`: through its `;`, or through the
/// `}` that closes its first `{`.
fn item_end(code: &[char], start: usize) -> usize {
    let mut i = start;
    while i < code.len() && code[i] != ';' && code[i] != '{' {
        i += 1;
    }
    if i == code.len() || code[i] == ';' {
        return (i + 1).min(code.len());
    }
    let mut depth = 0;
    while i < code.len() {
        match code[i] {
            '{' => depth += 1,
            '}' => {
                depth -= 1;
                if depth == 0 {
                    return i + 1;
                }
            }
            _ => {}
        }
        i += 1;
    }
    code.len()
}

/// `code` (already stripped) without its `#[cfg(test)]` items, and the names of the test
/// modules it declares in files of their own (`#[cfg(test)] mod tests;`).
fn without_test_items(code: &str) -> (String, Vec<String>) {
    const CFG_TEST: &str = "#[cfg(test)]";
    let cfg_test: Vec<char> = CFG_TEST.chars().collect();
    let chars: Vec<char> = code.chars().collect();
    let mut kept = String::with_capacity(code.len());
    let mut test_modules = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        if chars[i..].starts_with(&cfg_test) {
            let start = i + CFG_TEST.len();
            let end = item_end(&chars, start);
            let item: String = chars[start..end].iter().collect();
            let words: Vec<&str> = item
                .split(|c: char| !(c.is_alphanumeric() || c == '_'))
                .filter(|w| !w.is_empty())
                .collect();
            if item.trim_end().ends_with(';')
                && let Some(at) = words.iter().position(|w| *w == "mod")
                && let Some(name) = words.get(at + 1)
            {
                test_modules.push((*name).to_owned());
            }
            i = end;
        } else {
            kept.push(chars[i]);
            i += 1;
        }
    }
    (kept, test_modules)
}

/// The first identifier at the start of `rest`, after white space.
fn leading_ident(rest: &str) -> Option<&str> {
    let rest = rest.trim_start();
    let end = rest
        .find(|c: char| !(c.is_alphanumeric() || c == '_'))
        .unwrap_or(rest.len());
    (end > 0).then(|| &rest[..end])
}

/// The first segments after a path prefix: one identifier, or each item of a `{...}` group.
fn first_segments(rest: &str) -> Vec<String> {
    let rest = rest.trim_start();
    let Some(group) = rest.strip_prefix('{') else {
        return leading_ident(rest).map(str::to_owned).into_iter().collect();
    };
    let mut segments = Vec::new();
    let mut depth = 0;
    let mut item_start = 0;
    for (at, c) in group.char_indices() {
        match c {
            '{' => depth += 1,
            '}' if depth == 0 => {
                segments.extend(leading_ident(&group[item_start..at]).map(str::to_owned));
                break;
            }
            '}' => depth -= 1,
            ',' if depth == 0 => {
                segments.extend(leading_ident(&group[item_start..at]).map(str::to_owned));
                item_start = at + 1;
            }
            _ => {}
        }
    }
    segments
}

/// The top-level modules other than its own that the code of a module at `module` names,
/// through `crate::` paths or `super::` paths that climb to the crate root.
fn referenced_modules(code: &str, module: &[String]) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    let starts_path = |at: usize| {
        code[..at]
            .chars()
            .next_back()
            .is_none_or(|c| !(c.is_alphanumeric() || c == '_' || c == '$' || c == ':'))
    };
    for (at, _) in code.match_indices("crate::") {
        if starts_path(at) {
            found.extend(first_segments(&code[at + "crate::".len()..]));
        }
    }
    for (at, _) in code.match_indices("super::") {
        if !starts_path(at) {
            continue;
        }
        let mut rest = &code[at..];
        let mut climbs = 0;
        while let Some(after) = rest.strip_prefix("super::") {
            climbs += 1;
            rest = after.trim_start();
        }
        if climbs >= module.len() {
            found.extend(first_segments(rest));
        }
    }
    found.retain(|name| module.first() != Some(name));
    found
}

/// What is wrong with a module in `from` naming each of `to`.
fn violations(file: &str, from: &str, to: &BTreeSet<String>) -> Vec<String> {
    let Some(own) = layer_of(from) else {
        return vec![format!("{file}: module {from} has no layer in LAYERS")];
    };
    to.iter()
        .filter_map(|target| match layer_of(target) {
            None => Some(format!(
                "{file}: {from} uses {target}, which has no layer in LAYERS"
            )),
            Some(layer) if layer > own => Some(format!(
                "{file}: {from} (layer {own}) uses {target} from the higher layer {layer}"
            )),
            Some(layer) if layer == own => Some(format!(
                "{file}: {from} uses its peer {target}; peers never use each other"
            )),
            Some(_) => None,
        })
        .collect()
}

/// The files of `src/` below the crate root that are not test code, each with its code
/// stripped of comments, literals and `#[cfg(test)]` items.
fn product_files() -> Vec<(SourceFile, String)> {
    let files: Vec<(SourceFile, (String, Vec<String>))> = source_files()
        .into_iter()
        .map(|file| {
            let stripped = without_test_items(&strip_comments_and_literals(&file.text));
            (file, stripped)
        })
        .collect();
    let test_modules: Vec<Vec<String>> = files
        .iter()
        .flat_map(|(file, (_, names))| {
            names.iter().map(|name| {
                let mut path = file.module.clone();
                path.push(name.clone());
                path
            })
        })
        .collect();
    files
        .into_iter()
        .filter(|(file, _)| {
            !file.module.is_empty()
                && !test_modules
                    .iter()
                    .any(|test| file.module.starts_with(test))
        })
        .map(|(file, (code, _))| (file, code))
        .collect()
}

/// Every violation in the crate's non-test code.
fn crate_violations() -> Vec<String> {
    let mut found = Vec::new();
    for (file, code) in product_files() {
        let name = file.path.strip_prefix(src()).unwrap().display().to_string();
        let targets = referenced_modules(&code, &file.module);
        found.extend(violations(
            &format!("src/{name}"),
            &file.module[0],
            &targets,
        ));
    }
    found
}

#[test]
fn no_module_uses_a_layer_above_its_own_or_a_peer() {
    let found = crate_violations();
    assert!(found.is_empty(), "back-edges:\n{}", found.join("\n"));
}

#[test]
fn every_module_of_src_has_a_layer_and_every_layer_a_module() {
    let modules: BTreeSet<String> = product_files()
        .into_iter()
        .map(|(file, _)| file.module[0].clone())
        .collect();
    let layered: BTreeSet<String> = LAYERS
        .iter()
        .flat_map(|layer| layer.iter().map(|m| (*m).to_owned()))
        .collect();
    assert_eq!(modules, layered);
}

#[test]
fn the_architecture_page_lists_the_layers_bottom_to_top() {
    let page = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/src/contributor-guide/architecture.md"),
    )
    .unwrap();
    let layout = page
        .split("\n## Layers")
        .nth(1)
        .expect("the architecture page has a Layers section");
    let listed: Vec<&str> = layout
        .lines()
        .take_while(|line| !line.starts_with("## "))
        .filter_map(|line| line.strip_prefix("| `src/"))
        .filter_map(|rest| rest.split_once("/`").map(|(module, _)| module))
        .collect();
    let layers: Vec<&str> = LAYERS
        .iter()
        .flat_map(|layer| layer.iter().copied())
        .collect();
    assert_eq!(listed, layers);
}

#[test]
fn the_check_finds_back_edges_and_peer_edges_and_ignores_tests_comments_and_strings() {
    let check = |module: &[&str], source: &str| {
        let module: Vec<String> = module.iter().map(|m| (*m).to_owned()).collect();
        let (code, _) = without_test_items(&strip_comments_and_literals(source));
        violations("f.rs", &module[0], &referenced_modules(&code, &module))
    };
    assert_eq!(
        check(&["store", "keys"], "use crate::api::Phase;\n"),
        Vec::<String>::new()
    );
    assert_eq!(check(&["api"], "use crate::cli::Cli;").len(), 1);
    assert_eq!(
        check(&["controller"], "use crate::{api::Phase, webhook::x};"),
        ["f.rs: controller uses its peer webhook; peers never use each other"]
    );
    assert_eq!(
        check(&["runner", "pod"], "let x = crate::serve::run;").len(),
        1
    );
    assert_eq!(check(&["cli"], "use super::controller::X;").len(), 0);
    assert_eq!(
        check(&["store", "grants"], "use super::super::cli;").len(),
        1
    );
    assert_eq!(check(&["store", "grants"], "use super::keys;").len(), 0);
    assert_eq!(check(&["store"], "use crate::nowhere::X;").len(), 1);
    let quiet = r##"
        // use crate::cli;
        /* crate::cli */
        /// [`crate::cli`]
        let a = "crate::cli"; let b = r#"crate::cli"#; let c = '"'; let d = 'x';
        fn f<'a>(x: &'a str) {}
        #[cfg(test)]
        mod tests {
            use crate::cli::Cli;
        }
    "##;
    assert_eq!(check(&["store"], quiet), Vec::<String>::new());
    assert_eq!(
        without_test_items("#[cfg(test)]\npub(crate) mod tests;\nfn f() {}").1,
        ["tests"]
    );
}
