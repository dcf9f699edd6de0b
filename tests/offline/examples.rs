//! The operator examples and the chart's copies stay true: valid examples resolve, each invalid one is refused naming the field its header promises, and the chart ships the same CRDs and calculator as the repository.

use std::path::{Path, PathBuf};

use errand::api::{AgentSchedule, FilesetStatus};
use errand::local::{ManifestObject, parse_manifests};
use errand::resolve::{
    ClassKind, InMemoryCatalog, Problem, admit_creation, resolve_execution, schedule,
};
use jiff::Timestamp;

const NS: &str = "team-a";

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn manifests(path: &Path) -> Vec<ManifestObject> {
    let text = std::fs::read_to_string(path).unwrap();
    parse_manifests(&text, &path.display().to_string()).unwrap()
}

fn yaml_files(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    files
}

/// A namespace holding every object the valid examples define, and both Filesets pushed.
fn example_catalog() -> InMemoryCatalog {
    // A cluster with Kubernetes' own PriorityClasses and the test node's RuntimeClass only.
    let mut catalog = InMemoryCatalog::default()
        .with_class(ClassKind::Priority, "system-cluster-critical")
        .with_class(ClassKind::Priority, "system-node-critical")
        .with_class(ClassKind::Runtime, "gvisor");
    for file in [
        "calculator/agent.yaml",
        "environment/secret.yaml",
        "environment/environment.yaml",
        "nemo/runtime.yaml",
        "nemo/agent.yaml",
        "extension/extension.yaml",
    ] {
        for manifest in manifests(&repo().join("examples").join(file)) {
            catalog = match manifest {
                ManifestObject::Agent(agent) => {
                    let name = agent.metadata.name.clone().unwrap();
                    catalog.with_agent(NS, &name, agent.spec)
                }
                ManifestObject::Environment(environment) => {
                    let name = environment.metadata.name.clone().unwrap();
                    catalog.with_environment(NS, &name, environment.spec)
                }
                ManifestObject::Runtime(runtime) => {
                    let name = runtime.metadata.name.clone().unwrap();
                    catalog.with_runtime(&name, runtime.spec)
                }
                ManifestObject::Extension(extension) => {
                    let name = extension.metadata.name.clone().unwrap();
                    catalog.with_extension(&name, extension.spec)
                }
                ManifestObject::Secret { name, data, .. } => {
                    let pairs: Vec<(&str, &str)> =
                        data.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
                    catalog.with_secret(NS, &name, &pairs)
                }
                other => panic!("{file}: unexpected {other:?}"),
            };
        }
    }
    let pushed = |digit: char| FilesetStatus {
        digest: Some(format!("sha256:{}", digit.to_string().repeat(64))),
        ..FilesetStatus::default()
    };
    catalog
        .with_fileset(NS, "repo", pushed('a'))
        .with_fileset(NS, "datasets", pushed('b'))
}

fn execution_in(path: &Path) -> errand::api::AgentExecution {
    match manifests(path).pop() {
        Some(ManifestObject::Execution(execution)) => *execution,
        other => panic!(
            "{}: expected an AgentExecution, got {other:?}",
            path.display()
        ),
    }
}

#[test]
fn every_valid_example_execution_resolves() {
    let catalog = example_catalog();
    let examples = repo().join("examples");
    let valid = [
        "calculator/execution.yaml",
        "environment/execution.yaml",
        "extension/execution.yaml",
        "inline-agent/execution.yaml",
        "nemo/execution.yaml",
        "workdir/execution.yaml",
    ];
    for file in valid {
        let execution = execution_in(&examples.join(file));
        if let Err(e) = resolve_execution(NS, &execution.spec, &catalog) {
            panic!("examples/{file}: {e}");
        }
    }
    let gpu = execution_in(&examples.join("environment/execution.yaml"));
    let snapshot = resolve_execution(NS, &gpu.spec, &catalog).unwrap();
    let limits = &snapshot.compute.resources.unwrap().limits;
    assert_eq!(limits["nvidia.com/gpu"].0, "1");
    assert_eq!(snapshot.secrets[0].env, "OPENAI_API_KEY");
    // The NeMo calculator names no runtime: it runs with the `deepagents` AgentRuntime, whose
    // default compute it gets.
    let nemo = execution_in(&examples.join("nemo/execution.yaml"));
    let snapshot = resolve_execution(NS, &nemo.spec, &catalog).unwrap();
    assert_eq!(snapshot.agent.runtime_name.as_deref(), Some("deepagents"));
    assert_eq!(snapshot.command(), ["/usr/local/bin/test-harness"]);
    assert_eq!(snapshot.compute.resources.unwrap().limits["cpu"].0, "500m");
}

/// The header line `# refused: FIELD (by)` of an invalid example.
fn refused_field(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap();
    let header = text.lines().next().unwrap_or_default();
    let field = header
        .strip_prefix("# refused: ")
        .and_then(|rest| rest.split_whitespace().next())
        .unwrap_or_else(|| panic!("{}: no `# refused: FIELD` header", path.display()));
    field.to_owned()
}

/// The AgentSchedule `path` holds, if it holds one.
fn schedule_in(path: &Path) -> Option<AgentSchedule> {
    let text = std::fs::read_to_string(path).unwrap();
    text.contains("\nkind: AgentSchedule\n")
        .then(|| serde_saphyr::from_str(&text).expect("an AgentSchedule"))
}

/// What admission finds wrong with a schedule: its timing, then its template resolved as an
/// execution's create.
fn schedule_problems(schedule: &AgentSchedule, catalog: &InMemoryCatalog) -> Vec<Problem> {
    if let Err(invalid) = schedule::check(&schedule.spec, Timestamp::now()) {
        return invalid.problems;
    }
    let template = &schedule.spec.execution_template.spec;
    match admit_creation(template, resolve_execution(NS, template, catalog)) {
        Ok(_) => Vec::new(),
        Err(invalid) => schedule::in_template(invalid).problems,
    }
}

#[test]
fn the_example_schedule_is_valid() {
    let schedule = schedule_in(&repo().join("examples/schedule/schedule.yaml")).unwrap();
    assert_eq!(schedule_problems(&schedule, &example_catalog()), []);
}

#[test]
fn every_invalid_example_is_refused_naming_its_field() {
    let catalog = example_catalog();
    let files = yaml_files(&repo().join("examples/invalid"));
    assert_eq!(files.len(), 25, "the bad inputs of the admission rules");
    for path in files {
        let field = refused_field(&path);
        if let Some(schedule) = schedule_in(&path) {
            let problems = schedule_problems(&schedule, &catalog);
            assert!(
                problems.iter().any(|p| p.field.starts_with(&field)),
                "{}: expected a problem at {field}, got: {problems:?}",
                path.display()
            );
            continue;
        }
        // Reading the manifest checks its schema, as the API server does first; what passes
        // is resolved with the rules of a create.
        let text = std::fs::read_to_string(&path).unwrap();
        let execution = match parse_manifests(&text, &path.display().to_string()) {
            Err(error) => {
                let message = error.to_string();
                assert!(
                    message.contains(&format!("{field}: ")),
                    "{}: expected a problem at {field}, got: {message}",
                    path.display()
                );
                continue;
            }
            Ok(mut objects) => match objects.pop() {
                Some(ManifestObject::Execution(execution)) => execution,
                other => panic!(
                    "{}: expected an AgentExecution, got {other:?}",
                    path.display()
                ),
            },
        };
        let resolution = resolve_execution(NS, &execution.spec, &catalog);
        let error = admit_creation(&execution.spec, resolution)
            .map(|_| ())
            .expect_err(&format!("{} must be refused", path.display()));
        assert!(
            error.problems.iter().any(|p| p.field.starts_with(&field)),
            "{}: expected a problem at {field}, got: {error}",
            path.display()
        );
    }
}

#[test]
fn the_chart_ships_the_committed_crds() {
    let committed = yaml_files(&repo().join("crds"));
    let shipped = yaml_files(&repo().join("charts/errand/crds"));
    let names = |files: &[PathBuf]| -> Vec<String> {
        files
            .iter()
            .map(|f| f.file_name().unwrap().to_string_lossy().into_owned())
            .collect()
    };
    assert_eq!(names(&shipped), names(&committed));
    for (ours, theirs) in committed.iter().zip(&shipped) {
        assert!(
            std::fs::read(ours).unwrap() == std::fs::read(theirs).unwrap(),
            "{} differs from {}: copy crds/ into charts/errand/crds/",
            theirs.display(),
            ours.display()
        );
    }
}

#[test]
fn the_chart_test_runs_the_example_calculator() {
    let Some(ManifestObject::Agent(agent)) =
        manifests(&repo().join("examples/calculator/agent.yaml")).pop()
    else {
        panic!("the calculator example is an Agent");
    };
    let script = &agent.spec.runtime.as_ref().expect("a runtime").command[2];
    let shipped =
        std::fs::read_to_string(repo().join("charts/errand/files/calculator.sh")).unwrap();
    assert_eq!(
        &shipped, script,
        "charts/errand/files/calculator.sh differs from the calculator example's script"
    );
}

#[test]
fn the_nemo_examples_are_the_calculator_config_and_a_job_spec_errand_reads() {
    let nemo = repo().join("examples/nemo");
    let read = |file: &str| -> serde_json::Value {
        serde_saphyr::from_str(&std::fs::read_to_string(nemo.join(file)).unwrap()).unwrap()
    };
    // The Agent wraps the bare config exactly (what `errand agents create` makes of it).
    let Some(ManifestObject::Agent(agent)) = manifests(&nemo.join("agent.yaml")).pop() else {
        panic!("examples/nemo/agent.yaml is an Agent");
    };
    assert_eq!(
        serde_json::to_value(&agent.spec.config).unwrap(),
        read("calculator-agent.yaml")
    );
    let spec = errand::resolve::parse_spec(read("run.yaml"), "default").unwrap();
    assert_eq!(spec.agent_ref.unwrap().name, "research-agent");
    assert_eq!(spec.timeout_seconds, 600);
    let workdir = spec.workdir.unwrap();
    assert_eq!(workdir.base.as_deref(), Some("project-source"));
    assert_eq!(
        workdir.artifact_mounts[0].fileset_ref,
        "config-artifact#config.yaml"
    );
    assert_eq!(workdir.artifact_mounts[0].mount_path, "app/config.yaml");
    // In another namespace its `default/` references are refused, each naming its field.
    let refused = errand::resolve::parse_spec(read("run.yaml"), NS).unwrap_err();
    let fields: Vec<&str> = refused.problems.iter().map(|p| p.field.as_str()).collect();
    assert_eq!(
        fields,
        ["workdir.artifact_mounts[0].ref", "workdir.base_workdir"]
    );
}
