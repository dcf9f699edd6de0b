//! The README's first section, run as a new user runs it: its commands verbatim and in order on a fresh home, each printing what the README shows; then the data directory holds only files and directories of the modes the docs promise.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use regex::Regex;

/// The README section the test runs.
const SECTION: &str = "## Run an agent (fresh machine, no cluster)";

/// One command of the README and what it shows it printing.
#[derive(Debug)]
struct Step {
    command: String,
    expected: Vec<String>,
}

/// The commands of the README's `SECTION`, in order: each line of a ```` ```sh ```` block (a
/// plain ```` ``` ```` block right after a one-command `sh` block is what it prints), and each
/// `$ ` line of a ```` ```console ```` block with the lines below it.
fn steps(readme: &str) -> Vec<Step> {
    let start = readme.find(SECTION).expect("the README's first section");
    let section = &readme[start + SECTION.len()..];
    let section = &section[..section.find("\n## ").unwrap_or(section.len())];
    let mut steps: Vec<Step> = Vec::new();
    let mut block: Option<(String, Vec<&str>)> = None;
    let mut last_sh: Option<usize> = None;
    for line in section.lines() {
        match (&mut block, line.strip_prefix("```")) {
            (None, Some(lang)) => block = Some((lang.to_owned(), Vec::new())),
            (Some((lang, lines)), Some("")) => {
                match lang.as_str() {
                    "sh" => {
                        let before = steps.len();
                        steps.extend(lines.iter().filter(|l| !l.is_empty()).map(|l| Step {
                            command: (*l).to_owned(),
                            expected: Vec::new(),
                        }));
                        last_sh = (steps.len() == before + 1).then_some(before);
                    }
                    "" => {
                        let step = last_sh
                            .take()
                            .expect("a printed-output block follows a one-command sh block");
                        steps[step].expected = lines.iter().map(|l| (*l).to_owned()).collect();
                    }
                    "console" => {
                        for l in lines.iter() {
                            match l.strip_prefix("$ ") {
                                Some(command) => steps.push(Step {
                                    command: command.to_owned(),
                                    expected: Vec::new(),
                                }),
                                None => steps
                                    .last_mut()
                                    .expect("a console block starts with a command")
                                    .expected
                                    .push((*l).to_owned()),
                            }
                        }
                    }
                    other => panic!("a ```{other} block in the README's first section"),
                }
                block = None;
            }
            (Some((_, lines)), _) => lines.push(line),
            (None, None) => {}
        }
    }
    steps
}

/// Text with what differs from run to run (generated names, digests, sizes, durations) replaced
/// by placeholders and the column padding collapsed to one space.
fn normalized(lines: &[String]) -> Vec<String> {
    let rules = [
        (r"calculator-[a-z0-9]{5}\b", "calculator-NAME"),
        (r"\b[0-9a-f]{64}\b", "SHA256"),
        (r"\b\d+(\.\d+)? (B|KiB|MiB|GiB)\b", "SIZE"),
        (r"\b\d+(\.\d+)?s\b", "SECONDS"),
        (r"\s+", " "),
    ]
    .map(|(pattern, with)| (Regex::new(pattern).unwrap(), with));
    lines
        .iter()
        .map(|line| {
            rules
                .iter()
                .fold(line.trim_end().to_owned(), |text, (pattern, with)| {
                    pattern.replace_all(&text, *with).into_owned()
                })
        })
        .collect()
}

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// A new user's machine: a home with no errand data and no kubeconfig, `errand` on the `PATH`,
/// and the repository's `examples/` in the working directory.
struct Machine {
    dir: tempfile::TempDir,
}

impl Machine {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let bin = dir.path().join("bin");
        std::fs::create_dir(&bin).unwrap();
        std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_errand"), bin.join("errand")).unwrap();
        let work = dir.path().join("work");
        std::fs::create_dir(&work).unwrap();
        std::os::unix::fs::symlink(repo().join("examples"), work.join("examples")).unwrap();
        Self { dir }
    }

    fn work(&self) -> PathBuf {
        self.dir.path().join("work")
    }

    /// The data directory the README names: `$XDG_DATA_HOME/errand`.
    fn data(&self) -> PathBuf {
        self.dir.path().join("data/errand")
    }

    /// `sh -c LINE` as the user's shell runs it; `cargo run -q --` is `errand` (the README says
    /// so), since cargo cannot run inside its own test.
    fn shell(&self, line: &str) -> Command {
        let line = line.replace("cargo run -q --", "errand");
        let mut command = Command::new("sh");
        command
            .args(["-c", &line])
            .env_clear()
            .env(
                "PATH",
                format!(
                    "{}:/usr/local/bin:/usr/bin:/bin",
                    self.dir.path().join("bin").display()
                ),
            )
            .env("HOME", self.dir.path())
            .env("XDG_DATA_HOME", self.dir.path().join("data"))
            .env("LANG", "C.UTF-8")
            .current_dir(self.work());
        command
    }
}

#[test]
fn the_readme_quick_start_runs_in_order_on_a_fresh_home_and_prints_what_it_shows() {
    let readme = std::fs::read_to_string(repo().join("README.md")).unwrap();
    let steps = steps(&readme);
    assert!(
        steps.len() >= 9,
        "the README's first section has fewer commands than expected: {steps:#?}"
    );
    assert_eq!(
        steps[0].command,
        "cargo run -q -- execute --local --agent examples/calculator/agent.yaml --input \"What is 12 multiplied by 8?\""
    );
    let machine = Machine::new();
    for step in &steps {
        assert!(
            !step.expected.is_empty(),
            "the README shows no output for `{}`",
            step.command
        );
        let output = machine.shell(&step.command).output().unwrap();
        let stdout = String::from_utf8_lossy(&output.stdout);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(
            output.status.success() && stderr.is_empty(),
            "`{}` failed ({:?}):\n{stdout}{stderr}",
            step.command,
            output.status
        );
        let printed: Vec<String> = stdout.lines().map(str::to_owned).collect();
        assert_eq!(
            normalized(&printed),
            normalized(&step.expected),
            "`{}` printed what the README does not show:\n{stdout}",
            step.command
        );
    }
    assert_private(&machine.data());
    // The one file the user asked for outside it has the mode the user's umask gives.
    let umask = machine.shell("umask").output().unwrap();
    let umask = u32::from_str_radix(String::from_utf8_lossy(&umask.stdout).trim(), 8).unwrap();
    let downloaded = machine.work().join("artifacts.tar.gz");
    assert_eq!(
        mode(&downloaded),
        0o666 & !umask,
        "{}",
        downloaded.display()
    );
}

fn mode(path: &Path) -> u32 {
    std::fs::symlink_metadata(path)
        .unwrap()
        .permissions()
        .mode()
        & 0o777
}

/// What the docs promise for the data directory: every file 0600 and every directory 0700.
fn assert_private(data: &Path) {
    let mut wrong = Vec::new();
    let mut seen = 0;
    let mut pending = vec![data.to_owned()];
    while let Some(path) = pending.pop() {
        seen += 1;
        let kind = std::fs::symlink_metadata(&path).unwrap().file_type();
        let want = if kind.is_dir() {
            pending.extend(std::fs::read_dir(&path).unwrap().map(|e| e.unwrap().path()));
            0o700
        } else if kind.is_file() {
            0o600
        } else {
            continue;
        };
        if mode(&path) != want {
            wrong.push(format!("{:o} {}", mode(&path), path.display()));
        }
    }
    assert!(seen > 20, "the data directory holds almost nothing: {seen}");
    assert!(
        wrong.is_empty(),
        "not the mode the docs promise (files 0600, directories 0700): {wrong:#?}"
    );
}

#[test]
fn the_steps_are_read_from_sh_output_and_console_blocks() {
    let readme = format!(
        "# x\n{SECTION}\n\n```sh\nerrand a\n```\n\ntext\n\n```\nA\n```\n\n```console\n$ errand b\nB1\nB2\n$ errand c\nC\n```\n\n## next\n\n```sh\nerrand z\n```\n"
    );
    let steps = steps(&readme);
    let pairs: Vec<(&str, Vec<&str>)> = steps
        .iter()
        .map(|s| {
            (
                s.command.as_str(),
                s.expected.iter().map(String::as_str).collect(),
            )
        })
        .collect();
    assert_eq!(
        pairs,
        vec![
            ("errand a", vec!["A"]),
            ("errand b", vec!["B1", "B2"]),
            ("errand c", vec!["C"]),
        ]
    );
    assert_eq!(
        normalized(&["x  calculator-4a0df  (0.02s) 1.6 KiB 30 B".to_owned()]),
        ["x calculator-NAME (SECONDS) SIZE SIZE"]
    );
}
