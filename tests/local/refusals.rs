//! Bad and hostile input on the local backend, class by class: every command that reads a user's file, directory or name refuses what errand cannot take whole as bad input (exit 2, an input code), in the user's terms with no parser internals, and keeps what was saved before; every documented phase is accepted wherever phases are.

use std::fs::{self, File};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::support::local::Home;

/// The codes of a refused input; each exits 2.
const INPUT_CODES: [&str; 3] = ["invalid_argument", "invalid_manifest", "invalid_spec"];

/// What a message about the user's input must never show: the parser's API, its budget's
/// names, Debug-formatted errors (`Os { code: 2, kind: NotFound, .. }`) and structs. (A
/// message may quote the user's own line, `kind: Agent` included.)
const INTERNALS: [&str; 14] = [
    "from_str_multiple",
    "budget breached",
    "Nodes {",
    "Documents {",
    "Depth {",
    "Os {",
    "Custom {",
    "kind: NotFound",
    "kind: PermissionDenied",
    "kind: IsADirectory",
    "kind: InvalidData",
    "kind: Uncategorized",
    "(os error",
    " { ",
];

/// Runs `args` with `-o json` and checks it refused its input as input: exit 2, an input code,
/// a message with no internals. Returns the message.
fn refused_as_input(home: &Home, args: &[&str]) -> String {
    let (code, answer) = home.json(args);
    let error = answer["error"]["code"].as_str().unwrap_or_default();
    let message = answer["error"]["message"].as_str().unwrap_or_default();
    assert_eq!(code, 2, "{args:?} exited {code}: {answer}");
    assert!(
        INPUT_CODES.contains(&error),
        "{args:?} refused its input as {error:?}: {message}"
    );
    for internal in INTERNALS {
        assert!(
            !message.contains(internal),
            "{args:?} shows {internal:?}: {message}"
        );
    }
    message.to_owned()
}

/// The bad files every file-reading command is fed, each with a word its message must hold.
fn bad_files(home: &Home) -> Vec<(PathBuf, &'static str)> {
    let many = |n: usize, document: &str| vec![document; n].join("---\n");
    let values = format!("a: [{}]\n", vec!["1"; 250_001].join(","));
    let nested = format!("a: {}{}\n", "[".repeat(100), "]".repeat(100));
    let mut big = "a: ".to_owned();
    big.push_str(&"x".repeat(3 * 1024 * 1024 + 1));
    let directory = home.path().join("folder");
    fs::create_dir_all(&directory).unwrap();
    let not_text = home.path().join("not-text.yaml");
    fs::write(&not_text, b"a: \xff\xfe\n").unwrap();
    vec![
        (
            home.write("syntax.yaml", "kind: Agent\nmetadata: {name: x\n  foo: [\n"),
            "line 3",
        ),
        (home.write("nul.yaml", "\0\u{1}"), "not valid YAML"),
        (home.write("two.yaml", "a: 1\n---\nb: 2\n"), "document"),
        (
            home.write("many.yaml", &many(10_001, "a: 1\n")),
            "at most 10000",
        ),
        (home.write("values.yaml", &values), "at most 250000"),
        (home.write("nested.yaml", &nested), "64 levels"),
        (home.write("alias.yaml", "a: &x 1\nb: *y\n"), "anchor"),
        (home.write("big.yaml", &big), "3 MiB"),
        (not_text, "UTF-8"),
        (directory, "directory"),
    ]
}

#[test]
fn every_file_a_command_reads_is_refused_as_input_in_the_users_terms() {
    let home = Home::new();
    let agent = home.agent("calc", "echo ok");
    for (file, words) in bad_files(&home) {
        let file = file.to_str().unwrap();
        let commands: Vec<Vec<&str>> = vec![
            vec!["apply", "-f", file],
            vec!["execute", "--spec-file", file],
            vec!["create", "--spec-file", file],
            vec!["execute", "--agent", file],
            vec!["execute", "--agent", &agent, "--environment", file],
            vec![
                "agents",
                "create",
                "--name",
                "from-config",
                "--agent-config",
                file,
            ],
            vec!["execute", "--agent", &agent, "--env-file", file],
        ];
        for args in commands {
            let message = refused_as_input(&home, &args);
            // A one-document flag says how many it got; apply reads each document. `--agent`
            // and `--environment` read what is not a file as a name (whether they say why is
            // the file-or-name class of issue 31, item 1).
            let two = file.ends_with("two.yaml");
            // An env file is lines of KEY=VALUE, whatever its YAML: refused by line.
            let env_file = args.contains(&"--env-file") && !file.ends_with("folder");
            let named = file.ends_with("folder")
                && args
                    .iter()
                    .any(|a| *a == "--agent" || *a == "--environment");
            assert!(
                two || named || env_file || message.contains(words),
                "{args:?}: {message:?} does not say {words:?}"
            );
        }
    }
    // Standard input from a file takes any bytes, but not a directory.
    let folder = home.path().join("folder");
    let message = refused_as_input(
        &home,
        &[
            "execute",
            "--agent",
            &agent,
            "--stdin-file",
            folder.to_str().unwrap(),
        ],
    );
    assert!(message.contains("is a directory"), "{message}");
    let two = home.path().join("two.yaml");
    let message = refused_as_input(&home, &["execute", "--spec-file", two.to_str().unwrap()]);
    assert!(
        message.contains("holds 2 YAML documents; --spec-file takes one"),
        "{message}"
    );
    let (_, agents) = home.json(&["agents"]);
    assert_eq!(
        agents["agents"].as_array().map(Vec::len),
        Some(0),
        "{agents}"
    );
}

/// A directory `levels` deep (`d/d/…/d/leaf`), made through directory handles: its path is
/// longer than Linux resolves.
fn deep_tree(root: &Path, levels: usize) {
    fs::create_dir_all(root).unwrap();
    let mut dir = File::open(root).unwrap();
    for _ in 0..levels {
        let inside = |name: &str| format!("/proc/self/fd/{}/{name}", dir.as_raw_fd());
        fs::create_dir(inside("d")).unwrap();
        dir = File::open(inside("d")).unwrap();
    }
    fs::write(format!("/proc/self/fd/{}/leaf", dir.as_raw_fd()), "lost?").unwrap();
}

/// The trees a push cannot take whole, each with a word its refusal must hold and whether
/// it is a directory (which `--workdir.base-workdir` pushes; anything else it reads as a
/// Fileset's name).
fn bad_trees(home: &Home) -> Vec<(PathBuf, &'static str, bool)> {
    let tree = |name: &str| {
        let dir = home.path().join(name);
        fs::create_dir_all(&dir).unwrap();
        fs::write(dir.join("kept.txt"), "kept").unwrap();
        dir
    };
    let deep = home.path().join("deep");
    deep_tree(&deep, 2_100);
    let absolute = tree("absolute");
    std::os::unix::fs::symlink("/etc/passwd", absolute.join("passwd")).unwrap();
    let outside = tree("outside");
    std::os::unix::fs::symlink("../../etc", outside.join("up")).unwrap();
    let looped = tree("loop");
    std::os::unix::fs::symlink("b", looped.join("a")).unwrap();
    std::os::unix::fs::symlink("a", looped.join("b")).unwrap();
    let fifo = tree("fifo");
    nix::unistd::mkfifo(&fifo.join("pipe"), nix::sys::stat::Mode::S_IRWXU).unwrap();
    let file = home.write("a-file", "not a directory");
    vec![
        (deep, "longer than", true),
        (absolute, "absolute", true),
        (outside, "outside", true),
        (looped, "loop", true),
        (fifo, "fifo", true),
        (file, "not a directory", false),
        (home.path().join("no-such-dir"), "no-such-dir", false),
    ]
}

/// The blobs in the local store's `filesets/` (the pushed content).
fn stored_blobs(home: &Home) -> usize {
    let dir = home.path().join("home/store/filesets/default");
    fs::read_dir(dir).map_or(0, |entries| entries.count())
}

#[test]
fn a_tree_a_push_cannot_take_whole_is_refused_whole_and_keeps_what_was_saved() {
    let home = Home::new();
    let agent = home.agent("calc", "echo ok");
    let good = home.path().join("good");
    fs::create_dir_all(&good).unwrap();
    fs::write(good.join("f.txt"), "saved").unwrap();
    let (code, pushed) = home.json(&["filesets", "push", "data", good.to_str().unwrap()]);
    assert_eq!(code, 0, "{pushed}");
    let digest = pushed["fileset"]["status"]["digest"].clone();
    let blobs = stored_blobs(&home);
    for (dir, words, is_dir) in bad_trees(&home) {
        let dir = dir.to_str().unwrap();
        let mut commands = vec![vec!["filesets", "push", "data", dir]];
        if is_dir {
            commands.push(vec![
                "execute",
                "--agent",
                &agent,
                "--workdir.base-workdir",
                dir,
            ]);
        }
        for args in commands {
            let message = refused_as_input(&home, &args);
            assert!(message.contains(words), "{args:?}: {message}");
        }
        let (_, listed) = home.json(&["filesets", "list"]);
        let data = listed["filesets"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["metadata"]["name"] == "data")
            .unwrap_or_else(|| panic!("Fileset data is gone: {listed}"));
        assert_eq!(data["status"]["digest"], digest, "{dir} changed data");
        assert_eq!(
            stored_blobs(&home),
            blobs,
            "{dir} left content in the store"
        );
    }
    let (_, runs) = home.json(&["list"]);
    assert_eq!(runs["executions"], Value::Array(Vec::new()), "{runs}");
}

/// Names Kubernetes refuses as object names (not DNS-1123 subdomains).
const BAD_NAMES: [&str; 6] = ["a..b", "a.-b", "a-.b", "-a", "A", ".a"];

#[test]
fn names_the_cluster_refuses_are_refused_at_every_entry_point() {
    let home = Home::new();
    let agent = home.agent("calc", "echo ok");
    let dir = home.path().join("tree");
    fs::create_dir_all(&dir).unwrap();
    fs::write(dir.join("f"), "x").unwrap();
    let dir = dir.to_str().unwrap();
    let too_long = "a".repeat(254);
    for name in BAD_NAMES.iter().copied().chain([too_long.as_str()]) {
        let manifest = |kind: &str, spec: &str| {
            home.write(
                "named.yaml",
                &format!(
                    "apiVersion: errand.dev/v1alpha1\nkind: {kind}\nmetadata: {{name: {name:?}}}\nspec: {spec}\n"
                ),
            )
        };
        let agent_spec =
            "{runtime: {image: i, command: [sh]}, config: {config_format: agents-spec-v1}}";
        for (kind, spec) in [
            ("Agent", agent_spec),
            ("AgentEnvironment", "{}"),
            ("Fileset", "{}"),
        ] {
            let file = manifest(kind, spec);
            refused_as_input(&home, &["apply", "-f", file.to_str().unwrap()]);
        }
        let secret = home.write(
            "secret.yaml",
            &format!(
                "apiVersion: v1\nkind: Secret\nmetadata: {{name: {name:?}}}\nstringData: {{k: v}}\n"
            ),
        );
        refused_as_input(&home, &["apply", "-f", secret.to_str().unwrap()]);
        refused_as_input(&home, &["filesets", "push", name, dir]);
        refused_as_input(&home, &["execute", "--agent", &agent, "--name", name]);
        refused_as_input(&home, &["create", "--agent", &agent, "--name", name]);
        refused_as_input(
            &home,
            &[
                "agents",
                "create",
                "--name",
                name,
                "--agent-config",
                &config(&home),
            ],
        );
    }
    // A namespace is a DNS-1123 label: no dots, at most 63 characters.
    for namespace in ["a.b", "a..b", &"a".repeat(64)] {
        refused_as_input(&home, &["-n", namespace, "list"]);
        let file = home.write(
            "namespaced.yaml",
            &format!("apiVersion: errand.dev/v1alpha1\nkind: Fileset\nmetadata: {{name: ok, namespace: {namespace:?}}}\nspec: {{}}\n"),
        );
        refused_as_input(&home, &["apply", "-f", file.to_str().unwrap()]);
    }
    let (_, filesets) = home.json(&["filesets", "list"]);
    assert_eq!(filesets["filesets"], Value::Array(Vec::new()), "{filesets}");
    let (_, runs) = home.json(&["list"]);
    assert_eq!(runs["executions"], Value::Array(Vec::new()), "{runs}");
    // The same names with valid parts are accepted.
    let (code, answer) = home.json(&["filesets", "push", "a.b-c.d", dir]);
    assert_eq!(code, 0, "{answer}");
}

/// A bare agent config file.
fn config(home: &Home) -> String {
    home.write("config.yaml", "config_format: agents-spec-v1\nname: x\n")
        .to_str()
        .unwrap()
        .to_owned()
}

/// The phases the AgentExecution reference lists for `status.phase`.
fn documented_phases() -> Vec<String> {
    let page = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/src/reference/agentexecution.md");
    let page = fs::read_to_string(page).unwrap();
    let start = page
        .find("- `status.phase`")
        .expect("the reference lists status.phase");
    let entry = &page[start..];
    let entry = &entry[..entry[1..].find("\n- ").map_or(entry.len(), |end| end + 1)];
    let phases: Vec<String> = entry
        .split('"')
        .skip(1)
        .step_by(2)
        .map(str::to_owned)
        .collect();
    assert!(phases.len() >= 8, "read {phases:?} from {entry}");
    phases
}

#[test]
fn every_documented_phase_is_accepted_wherever_phases_are() {
    let home = Home::new();
    let phases = documented_phases();
    let all: Vec<&str> = errand::api::Phase::ALL.iter().map(|p| p.as_str()).collect();
    assert_eq!(phases, all, "the docs and errand list different phases");
    for phase in &phases {
        // As the status spells it and as `--state`'s help writes it.
        for spelled in [phase.clone(), phase.to_lowercase()] {
            let (code, answer) = home.json(&["list", "--state", &spelled]);
            assert_eq!(code, 0, "list --state {spelled}: {answer}");
        }
    }
    let message = refused_as_input(&home, &["list", "--state", "done"]);
    for phase in &phases {
        assert!(
            message.contains(&phase.to_lowercase()),
            "the refusal does not list {phase}: {message}"
        );
    }
}
