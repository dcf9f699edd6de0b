//! The layers of `src/`, bottom to top, and the check that no module reaches up: every `crate::` (or `super::` up to the crate root) path in a module names its own layer or one below, and the peers of a layer never name each other; the layers below `ops` (its backends over what they share); and that no import circle spans more than one file's type and its operations; and that no function hands its errors past its file as a `String`.
//!
//! Test code (`#[cfg(test)]` items and the files they declare) is left out: a test may build
//! its fixtures from anywhere. The layer table of the book's architecture page
//! (`docs/src/contributor-guide/architecture.md`) lists the same layers in the same order, and
//! [`the_architecture_page_lists_the_layers_bottom_to_top`] keeps the two in step.

use std::collections::{BTreeMap, BTreeSet};
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
    &[
        "controller",
        "webhook",
        "dataapi",
        "gateway",
        "egress_proxy",
    ],
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
/// code is left to read paths from. Line breaks are kept (after what replaces a comment or a
/// literal), so a position in the result is on the line it was on in `source`.
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
            let start = i;
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
            out.extend(line_breaks(&chars[start..i.min(chars.len())]));
        } else if c == 'r'
            && (i == 0 || !is_ident(chars[i - 1]) || chars[i - 1] == 'b')
            && matches!(next, Some('"' | '#'))
            && chars[i + 1..]
                .iter()
                .find(|&&c| c != '#')
                .is_some_and(|&c| c == '"')
        {
            let hashes = chars[i + 1..].iter().take_while(|&&c| c == '#').count();
            let start = i;
            i += 1 + hashes + 1;
            while i < chars.len() {
                if chars[i] == '"' && chars[i + 1..].iter().take(hashes).all(|&c| c == '#') {
                    i += 1 + hashes;
                    break;
                }
                i += 1;
            }
            out.push_str("\"\"");
            out.extend(line_breaks(&chars[start..i.min(chars.len())]));
        } else if c == '"' {
            let start = i;
            i += 1;
            while i < chars.len() && chars[i] != '"' {
                i += if chars[i] == '\\' { 2 } else { 1 };
            }
            i += 1;
            out.push_str("\"\"");
            out.extend(line_breaks(&chars[start..i.min(chars.len())]));
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

/// The line breaks of `chars`, to keep the lines of what is left out.
fn line_breaks(chars: &[char]) -> impl Iterator<Item = char> + '_ {
    chars.iter().copied().filter(|&c| c == '\n')
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

/// `code` (already stripped) without its `#[cfg(test)]` items (their line breaks kept), and the
/// names of the test modules it declares in files of their own (`#[cfg(test)] mod tests;`).
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
            kept.extend(line_breaks(&chars[i..end]));
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

/// The items of a `{...}` group whose `{` is already taken off: the text of each, up to the
/// `}` that closes the group.
fn group_items(group: &str) -> Vec<&str> {
    let mut items = Vec::new();
    let mut depth = 0;
    let mut item_start = 0;
    for (at, c) in group.char_indices() {
        match c {
            '{' => depth += 1,
            '}' if depth == 0 => {
                items.push(&group[item_start..at]);
                break;
            }
            '}' => depth -= 1,
            ',' if depth == 0 => {
                items.push(&group[item_start..at]);
                item_start = at + 1;
            }
            _ => {}
        }
    }
    items
}

/// The top-level modules other than its own that the code of a module at `module` names,
/// through `crate::` paths or `super::` paths that climb to the crate root.
fn referenced_modules(code: &str, module: &[String]) -> BTreeSet<String> {
    let mut found: BTreeSet<String> = rooted_paths(code, module)
        .into_iter()
        .filter_map(|path| path.into_iter().next())
        .collect();
    found.retain(|name| module.first() != Some(name));
    found
}

/// Whether a path may start at byte `at` of `code`: it does not continue an identifier or
/// another path.
fn starts_path(code: &str, at: usize) -> bool {
    code[..at]
        .chars()
        .next_back()
        .is_none_or(|c| !(c.is_alphanumeric() || c == '_' || c == '$' || c == ':'))
}

/// The `crate::` and `super::` paths of the code of the module at `module`, made absolute (a
/// `super::` path that climbs past the crate root starts at the root).
fn rooted_paths(code: &str, module: &[String]) -> Vec<Vec<String>> {
    let mut found = Vec::new();
    for (at, _) in code.match_indices("crate::") {
        if starts_path(code, at) {
            found.extend(expand_paths(&code[at + "crate::".len()..]));
        }
    }
    for (at, _) in code.match_indices("super::") {
        if !starts_path(code, at) {
            continue;
        }
        let mut rest = &code[at..];
        let mut climbs = 0;
        while let Some(after) = rest.strip_prefix("super::") {
            climbs += 1;
            rest = after.trim_start();
        }
        let base = &module[..module.len().saturating_sub(climbs)];
        for path in expand_paths(rest) {
            let mut absolute = base.to_vec();
            absolute.extend(path);
            found.push(absolute);
        }
    }
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
    non_test_files()
        .into_iter()
        .filter(|(file, _)| !file.module.is_empty())
        .collect()
}

/// The files of `src/` that are not test code, the crate root's included, each with its code
/// stripped of comments, literals and `#[cfg(test)]` items.
fn non_test_files() -> Vec<(SourceFile, String)> {
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
            !test_modules
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

/// The modules below a top-level module that are layered in their own right: the module, and
/// its layers bottom to top above the rest of it. The rest (the modules not listed) is the
/// bottom layer, whose modules may use each other; a listed module uses the rest and the
/// listed layers below its own, never a peer; the module's own `mod.rs` only declares and
/// re-exports.
const SUBLAYERS: &[(&str, &[&[&str]])] = &[("ops", &[&["local", "cluster"], &["config"]])];

/// The path prefixes after `crate::` or `super::` (already climbed) at the start of `rest`:
/// `a::b::{c, d::e}` is `a::b::c` and `a::b::d::e`; each path ends at its last identifier
/// followed by `::`, plus that one (so `a::B` is `[a, B]`).
fn expand_paths(rest: &str) -> Vec<Vec<String>> {
    let rest = rest.trim_start();
    if let Some(group) = rest.strip_prefix('{') {
        return group_items(group)
            .into_iter()
            .flat_map(expand_paths)
            .collect();
    }
    let Some(ident) = leading_ident(rest) else {
        return Vec::new();
    };
    let after = rest.trim_start()[ident.len()..].trim_start();
    match after.strip_prefix("::") {
        Some(more) => {
            let tails = expand_paths(more);
            if tails.is_empty() {
                vec![vec![ident.to_owned()]]
            } else {
                tails
                    .into_iter()
                    .map(|tail| {
                        let mut path = vec![ident.to_owned()];
                        path.extend(tail);
                        path
                    })
                    .collect()
            }
        }
        None => vec![vec![ident.to_owned()]],
    }
}

/// The child modules a file declares in files of their own (`mod name;`, `pub mod name;`).
fn declared_children(code: &str) -> Vec<String> {
    let words: Vec<&str> = code
        .split(|c: char| !(c.is_alphanumeric() || c == '_' || c == ';'))
        .filter(|w| !w.is_empty())
        .collect();
    words
        .windows(2)
        .filter(|pair| pair[0] == "mod")
        .filter_map(|pair| pair[1].strip_suffix(';').map(str::to_owned))
        .collect()
}

/// Every path the code of the module at `module` names, made absolute: `crate::` paths,
/// `super::` paths, and paths through the child modules it declares. `pub use` items
/// (re-exports) are left out: they make a module's items reachable, they use nothing.
fn absolute_paths(code: &str, module: &[String]) -> BTreeSet<Vec<String>> {
    let mut code = code.to_owned();
    while let Some(at) = code.find("pub use ") {
        let end = code[at..].find(';').map_or(code.len(), |end| at + end + 1);
        code.replace_range(at..end, " ");
    }
    let mut found: BTreeSet<Vec<String>> = rooted_paths(&code, module).into_iter().collect();
    for child in declared_children(&code) {
        let prefix = format!("{child}::");
        for (at, _) in code.match_indices(&prefix) {
            if starts_path(&code, at) {
                for path in expand_paths(&code[at..]) {
                    let mut absolute = module.to_vec();
                    absolute.extend(path);
                    found.insert(absolute);
                }
            }
        }
    }
    found
}

/// What is wrong with the module at `module` naming `paths`, by [`SUBLAYERS`].
fn sublayer_violations(
    file: &str,
    module: &[String],
    paths: &BTreeSet<Vec<String>>,
) -> Vec<String> {
    let mut found = Vec::new();
    for (parent, layers) in SUBLAYERS {
        if module.first().map(String::as_str) != Some(*parent) || module.len() < 2 {
            continue;
        }
        let layer_of = |name: &str| {
            layers
                .iter()
                .position(|layer| layer.contains(&name))
                .map_or(0, |at| at + 1)
        };
        let own_name = module[1].as_str();
        let own = layer_of(own_name);
        for path in paths {
            if path.first().map(String::as_str) != Some(*parent) || path.len() < 2 {
                continue;
            }
            let target = path[1].as_str();
            if target == own_name {
                continue;
            }
            let layer = layer_of(target);
            if layer > own {
                found.push(format!(
                    "{file}: {parent}::{own_name} uses {parent}::{target} from the higher layer {layer}"
                ));
            } else if layer == own && layer > 0 {
                found.push(format!(
                    "{file}: {parent}::{own_name} uses its peer {parent}::{target}; peers never use each other"
                ));
            }
        }
    }
    found
}

/// The import graph of the non-test files: for each file's module, the modules of the other
/// files it names (a path names the file of its longest prefix that is a module of a file).
fn file_graph() -> BTreeMap<Vec<String>, BTreeSet<Vec<String>>> {
    let files = product_files();
    let modules: BTreeSet<Vec<String>> = files.iter().map(|(f, _)| f.module.clone()).collect();
    let mut graph = BTreeMap::new();
    for (file, code) in &files {
        let mut edges = BTreeSet::new();
        for path in absolute_paths(code, &file.module) {
            if let Some(target) = (1..=path.len())
                .rev()
                .map(|n| path[..n].to_vec())
                .find(|prefix| modules.contains(prefix))
                && target != file.module
            {
                edges.insert(target);
            }
        }
        graph.insert(file.module.clone(), edges);
    }
    graph
}

/// The strongly connected components of `graph` restricted to `nodes` that hold more than
/// one node: its import circles.
fn circles(
    graph: &BTreeMap<Vec<String>, BTreeSet<Vec<String>>>,
    nodes: &BTreeSet<Vec<String>>,
) -> Vec<BTreeSet<Vec<String>>> {
    let reaches = |from: &Vec<String>| {
        let mut seen = BTreeSet::new();
        let mut todo = vec![from.clone()];
        while let Some(node) = todo.pop() {
            for next in graph.get(&node).into_iter().flatten() {
                if nodes.contains(next) && seen.insert(next.clone()) {
                    todo.push(next.clone());
                }
            }
        }
        seen
    };
    let reach: BTreeMap<&Vec<String>, BTreeSet<Vec<String>>> =
        nodes.iter().map(|n| (n, reaches(n))).collect();
    let mut done = BTreeSet::new();
    let mut found = Vec::new();
    for node in nodes {
        if done.contains(node) {
            continue;
        }
        let component: BTreeSet<Vec<String>> = nodes
            .iter()
            .filter(|other| {
                *other == node || (reach[node].contains(*other) && reach[*other].contains(node))
            })
            .cloned()
            .collect();
        done.extend(component.iter().cloned());
        if component.len() > 1 {
            found.push(component);
        }
    }
    found
}

/// The import circles that span more than one file's type and its operations: a circle is
/// allowed only when one of its files is the parent module of all the others (`local.rs` and
/// `local/gc.rs`) and the others form no circle without it.
fn wide_circles(
    graph: &BTreeMap<Vec<String>, BTreeSet<Vec<String>>>,
    nodes: &BTreeSet<Vec<String>>,
) -> Vec<String> {
    let mut found = Vec::new();
    for circle in circles(graph, nodes) {
        let parent = circle.iter().find(|candidate| {
            circle.iter().all(|other| {
                other.len() > candidate.len() && other.starts_with(candidate) || other == *candidate
            })
        });
        let name = |module: &Vec<String>| format!("{}.rs", module.join("/"));
        match parent {
            Some(parent) => {
                let mut rest = circle.clone();
                rest.remove(parent);
                found.extend(wide_circles(graph, &rest));
            }
            None => found.push(format!(
                "an import circle: {}",
                circle.iter().map(name).collect::<Vec<_>>().join(", ")
            )),
        }
    }
    found
}

#[test]
fn no_import_circle_spans_more_than_one_file_and_its_operations() {
    let graph = file_graph();
    let nodes: BTreeSet<Vec<String>> = graph.keys().cloned().collect();
    let found = wide_circles(&graph, &nodes);
    assert!(found.is_empty(), "{}", found.join("\n"));
}

#[test]
fn the_modules_below_ops_keep_their_layers() {
    let mut found = Vec::new();
    for (file, code) in product_files() {
        let name = file.path.strip_prefix(src()).unwrap().display().to_string();
        let paths = absolute_paths(&code, &file.module);
        found.extend(sublayer_violations(
            &format!("src/{name}"),
            &file.module,
            &paths,
        ));
    }
    assert!(found.is_empty(), "{}", found.join("\n"));
}

#[test]
fn the_circle_and_sublayer_checks_resolve_paths() {
    let module = |m: &[&str]| m.iter().map(|s| (*s).to_owned()).collect::<Vec<String>>();
    let paths = absolute_paths(
        "mod gc;\nuse super::{Local, backend::{Backend, X}};\nfn f() { gc::run(); crate::ops::cluster::C; }\npub use x::Y;",
        &module(&["ops", "local"]),
    );
    assert!(paths.contains(&module(&["ops", "Local"])));
    assert!(paths.contains(&module(&["ops", "backend", "Backend"])));
    assert!(paths.contains(&module(&["ops", "local", "gc", "run"])));
    assert!(paths.contains(&module(&["ops", "cluster", "C"])));
    assert!(
        !paths.iter().any(|p| p.contains(&"Y".to_owned())),
        "re-exports use nothing"
    );
    assert_eq!(
        sublayer_violations("f.rs", &module(&["ops", "local"]), &paths),
        ["f.rs: ops::local uses its peer ops::cluster; peers never use each other"]
    );
    let graph: BTreeMap<Vec<String>, BTreeSet<Vec<String>>> = [
        (module(&["a"]), [module(&["a", "b"])].into()),
        (module(&["a", "b"]), [module(&["a"])].into()),
        (module(&["c"]), [module(&["d"])].into()),
        (module(&["d"]), [module(&["c"])].into()),
    ]
    .into();
    let nodes = graph.keys().cloned().collect();
    assert_eq!(
        wide_circles(&graph, &nodes),
        ["an import circle: c.rs, d.rs"]
    );
}

/// Whether `code` ends with a visibility that reaches past its file: `pub`, `pub(crate)`,
/// `pub(super)`, `pub(in path)`, with the qualifiers a `fn` or `trait` may carry after it.
fn ends_visible(code: &str) -> bool {
    let mut rest = code.trim_end();
    loop {
        let word_start = rest
            .rfind(|c: char| !(c.is_alphanumeric() || c == '_' || c == '"'))
            .map_or(0, |at| at + 1);
        match &rest[word_start..] {
            "async" | "const" | "unsafe" | "extern" | "\"\"" | "auto" => {
                rest = rest[..word_start].trim_end();
            }
            _ => break,
        }
    }
    if let Some(inner) = rest.strip_suffix(')') {
        let Some(open) = inner.rfind('(') else {
            return false;
        };
        rest = inner[..open].trim_end();
    }
    rest.strip_suffix("pub").is_some_and(|before| {
        before
            .chars()
            .next_back()
            .is_none_or(|c| !(c.is_alphanumeric() || c == '_'))
    })
}

/// The positions of the word `word` in `code` (not part of a longer identifier).
fn word_positions<'a>(code: &'a str, word: &'a str) -> impl Iterator<Item = usize> + 'a {
    let is_ident = |c: char| c.is_alphanumeric() || c == '_';
    code.match_indices(word)
        .map(|(at, _)| at)
        .filter(move |&at| {
            code[..at].chars().next_back().is_none_or(|c| !is_ident(c))
                && code[at + word.len()..]
                    .chars()
                    .next()
                    .is_none_or(|c| !is_ident(c))
        })
}

/// The end of the angle-bracket group whose `<` is at `open` (the byte after its `>`); `->`
/// is not a bracket.
fn angle_group_end(code: &str, open: usize) -> Option<usize> {
    let mut depth = 0usize;
    let mut previous = ' ';
    for (at, c) in code[open..].char_indices() {
        match c {
            '<' => depth += 1,
            '>' if previous != '-' => {
                depth -= 1;
                if depth == 0 {
                    return Some(open + at + 1);
                }
            }
            _ => {}
        }
        previous = c;
    }
    None
}

/// Whether the type `ty` holds a `Result<_, String>` anywhere (`Result<(), String>`,
/// `BoxFuture<'_, Result<T, String>>`, `Result<Result<T, String>, E>`).
fn holds_result_of_string(ty: &str) -> bool {
    let ty: String = ty.split_whitespace().collect();
    word_positions(&ty, "Result").any(|at| {
        let open = at + "Result".len();
        if !ty[open..].starts_with('<') {
            return false;
        }
        let Some(end) = angle_group_end(&ty, open) else {
            return false;
        };
        let args = ty[open + 1..end - 1].trim_end_matches(',');
        let mut depth = 0i32;
        let mut previous = ' ';
        let mut last = 0;
        for (at, c) in args.char_indices() {
            match c {
                '<' | '(' | '[' => depth += 1,
                '>' if previous != '-' => depth -= 1,
                ')' | ']' => depth -= 1,
                ',' if depth == 0 => last = at + 1,
                _ => {}
            }
            previous = c;
        }
        last > 0
            && matches!(
                &args[last..],
                "String" | "std::string::String" | "alloc::string::String"
            )
    })
}

/// The return type of the `fn` whose keyword is at `at` in `code`: what follows `->` after its
/// parameters, up to its body, its `;` or its `where`; `None` when it returns `()`.
fn return_type(code: &str, at: usize) -> Option<&str> {
    let signature_end = code[at..]
        .find(['{', ';'])
        .map_or(code.len(), |end| at + end);
    let signature = &code[at..signature_end];
    let mut angle = 0i32;
    let mut previous = ' ';
    let mut params = None;
    for (i, c) in signature.char_indices() {
        match c {
            '<' => angle += 1,
            '>' if previous != '-' => angle -= 1,
            '(' if angle == 0 => {
                params = Some(i);
                break;
            }
            _ => {}
        }
        previous = c;
    }
    let mut depth = 0;
    let mut close = None;
    for (i, c) in signature[params?..].char_indices() {
        match c {
            '(' => depth += 1,
            ')' => {
                depth -= 1;
                if depth == 0 {
                    close = Some(params? + i + 1);
                    break;
                }
            }
            _ => {}
        }
    }
    let after = signature[close?..].trim_start().strip_prefix("->")?;
    let end = word_positions(after, "where").next().unwrap_or(after.len());
    Some(&after[..end])
}

/// The functions of `code` (stripped, without test items) whose errors cross their file as
/// text: each `pub` fn (any `pub(..)`), each fn of a `pub` trait, and each fn named as a clap
/// `value_parser`, whose return type holds a `Result<_, String>`; as `file:line: fn name`.
fn string_errors(file: &str, code: &str) -> Vec<String> {
    let chars: Vec<char> = code.chars().collect();
    let to_byte = |char_at: usize| chars[..char_at].iter().map(|c| c.len_utf8()).sum::<usize>();
    let to_char = |byte_at: usize| code[..byte_at].chars().count();
    let public_traits: Vec<(usize, usize)> = word_positions(code, "trait")
        .filter(|&at| ends_visible(&code[..at]))
        .map(|at| (at, to_byte(item_end(&chars, to_char(at)))))
        .collect();
    let value_parsers: BTreeSet<&str> = word_positions(code, "value_parser")
        .filter_map(|at| {
            code[at + "value_parser".len()..]
                .trim_start()
                .strip_prefix('=')
        })
        .filter_map(|rest| {
            let path = rest.trim_start();
            let end = path
                .find(|c: char| !(c.is_alphanumeric() || c == '_' || c == ':'))
                .unwrap_or(path.len());
            path[..end].rsplit("::").next()
        })
        .collect();
    word_positions(code, "fn")
        .filter_map(|at| {
            let name = leading_ident(&code[at + 2..])?;
            let visible = ends_visible(&code[..at])
                || public_traits
                    .iter()
                    .any(|&(start, end)| start < at && at < end)
                || value_parsers.contains(name);
            (visible && return_type(code, at).is_some_and(holds_result_of_string)).then(|| {
                let line = code[..at].matches('\n').count() + 1;
                format!("{file}:{line}: fn {name}")
            })
        })
        .collect()
}

#[test]
fn no_result_of_string_crosses_a_module_boundary() {
    let mut found = Vec::new();
    for (file, code) in non_test_files() {
        let name = file.path.strip_prefix(src()).unwrap().display().to_string();
        found.extend(string_errors(&format!("src/{name}"), &code));
    }
    assert!(
        found.is_empty(),
        "functions whose errors leave their file as a String (give each a typed error named for what failed):\n{}",
        found.join("\n")
    );
}

#[test]
fn the_string_error_check_finds_public_and_parser_fns_on_their_lines_and_ignores_the_rest() {
    let check = |source: &str| {
        let (code, _) = without_test_items(&strip_comments_and_literals(source));
        string_errors("f.rs", &code)
    };
    let flagged = r##"
        /// a doc comment
        /* a block
           comment */
        const S: &str = "a
        string";
        pub fn a() -> Result<(), String> {}
        pub(crate) async fn b(x: impl Fn(u8) -> String) -> Result<
            Vec<(u8, u8)>,
            String,
        > { todo!() }
        pub(in crate::x) fn c<F: Fn() -> u8>(f: F) -> BoxFuture<'static, Result<u8, String>>;
        pub(super) fn d() -> Result<Result<u8, String>, Error> where T: X {}
        pub trait T { fn e(&self) -> std::result::Result<u8, std::string::String>; }
        #[arg(long, value_parser = parse_f)]
        fn parse_f(v: &str) -> Result<u8, String> {}
    "##;
    assert_eq!(
        check(flagged),
        [
            "f.rs:7: fn a",
            "f.rs:8: fn b",
            "f.rs:12: fn c",
            "f.rs:13: fn d",
            "f.rs:14: fn e",
            "f.rs:16: fn parse_f",
        ]
    );
    let quiet = r##"
        fn private() -> Result<u8, String> {}
        pub fn labels() -> Result<BTreeMap<String, String>, Error> {}
        pub fn text() -> String {}
        pub fn alias() -> Result<String> {}
        pub fn takes(f: impl Fn() -> Result<u8, String>) {}
        // pub fn commented() -> Result<u8, String> {}
        trait Private { fn g(&self) -> Result<u8, String>; }
        impl FromStr for X { fn from_str(s: &str) -> Result<Self, Self::Err> {} }
        #[cfg(test)]
        pub fn in_a_test() -> Result<u8, String> {}
    "##;
    assert_eq!(check(quiet), Vec::<String>::new());
}
