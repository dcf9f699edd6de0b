//! An execution's request from what `execute` and `create` are given: the spec from `--spec`/`--spec-file` or a manifest, with the flags laid over it, a base workdir directory pushed as a Fileset, and `--env` set in its environment.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::backend::{Backend, PushedFileset, undo_push};
use super::execute::{ExecutionRequest, RunInputs};
use super::lookup::{Wanted, object_names};
use super::notify::NotifyChange;
use super::{Error, ErrorCode};
use crate::api::{AgentEnvironmentSpec, AgentExecutionSpec, Reference, Workdir};
use crate::local::{
    DocumentError, ManifestObject, ObjectKind, parse_document, parse_manifests, read_manifest_file,
    yaml_document,
};
use crate::resolve::{InvalidSpec, object_name, parse_spec, workspace_name};

/// What the command line says of the spec: each field overrides the same field of `spec` or
/// `spec_file`.
#[derive(Clone, Debug, Default)]
pub struct SpecFlags {
    /// `--agent`: an applied Agent's name, or a manifest file holding one.
    pub agent: Option<String>,
    /// `--input`.
    pub input: Option<String>,
    /// `--environment`: an applied AgentEnvironment's name, or a manifest file holding one.
    pub environment: Option<String>,
    /// `--workdir.base-workdir`: a Fileset, or a directory to push as one.
    pub base_workdir: Option<String>,
    /// `--timeout-seconds`.
    pub timeout_seconds: Option<i64>,
    /// `--auto-telemetry`.
    pub auto_telemetry: bool,
    /// `--spec`: the whole spec as JSON or YAML.
    pub spec: Option<String>,
    /// `--spec-file`.
    pub spec_file: Option<PathBuf>,
    /// `--name`.
    pub name: Option<String>,
    /// The notification flags (their webhook goes into the spec).
    pub notify: NotifyChange,
}

/// The spec and name from `--spec`/`--spec-file`: an AgentExecution, or a bare spec in either
/// shape (the CRD's camelCase spec or the NeMo job spec) for `namespace`. Either is checked
/// against the AgentExecution schema (types, unknown fields, bounds), each problem naming its
/// field; the CEL rules hold for the spec the flags complete, when it is created.
fn base_spec(
    args: &SpecFlags,
    namespace: &str,
) -> Result<(AgentExecutionSpec, Option<String>), Error> {
    let (text, source) = match (&args.spec, &args.spec_file) {
        (Some(json), _) => (json.clone(), "--spec".to_owned()),
        (None, Some(path)) => (read_text(path, "--spec-file")?, path.display().to_string()),
        (None, None) => return Ok((AgentExecutionSpec::default(), None)),
    };
    let flag = if args.spec.is_some() {
        "--spec"
    } else {
        "--spec-file"
    };
    let value = yaml_document(&text, flag)
        .map_err(|reason| Error::new(ErrorCode::InvalidManifest, format!("{source}: {reason}")))?;
    if value.get("kind").is_some() {
        return match parse_document(value) {
            Ok(ManifestObject::Execution(execution)) => {
                Ok((execution.spec, execution.metadata.name))
            }
            Ok(_) => Err(Error::new(
                ErrorCode::InvalidManifest,
                format!("{source}: expected an AgentExecution"),
            )),
            Err(DocumentError::Invalid { kind, problems, .. }) if kind == "AgentExecution" => {
                Err(InvalidSpec { problems }.into())
            }
            Err(error) => Err(Error::new(
                ErrorCode::InvalidManifest,
                format!("{source}: {error}"),
            )),
        };
    }
    Ok((parse_spec(value, namespace)?, None))
}

/// A manifest file's text, refused when it is larger than the API server would take.
fn read_text(path: &Path, flag: &str) -> Result<String, Error> {
    read_manifest_file(path).map_err(|e| Error::manifest_file(flag, e))
}

/// The extensions a manifest file is recognised by.
const MANIFEST_EXTENSIONS: [&str; 3] = ["yaml", "yml", "json"];

/// What a flag that takes a manifest file or an object's name was taken for.
#[derive(Debug, PartialEq, Eq)]
enum FileOrName {
    /// A manifest file to read.
    File,
    /// An object's name in the target namespace (a `NAMESPACE/` prefix removed).
    Name(String),
}

/// Decides whether `value` of `flag` is a manifest file or the name of a `kind` in
/// `namespace`, and when it can be neither says why each did not apply: a value that names
/// no file and could not be a name (a path with more than one `/`, an absolute path, a
/// `.yaml` file name, a name Kubernetes refuses) is refused as a missing file, never taken for
/// a reference to another workspace.
fn file_or_name(value: &str, flag: &str, kind: &str, namespace: &str) -> Result<FileOrName, Error> {
    let path = Path::new(value);
    let manifest_extension = path
        .extension()
        .and_then(|e| e.to_str())
        .is_some_and(|e| MANIFEST_EXTENSIONS.contains(&e));
    let not_a_name = not_a_name(value, manifest_extension);
    match std::fs::metadata(path) {
        Ok(meta) if meta.is_file() && (manifest_extension || not_a_name.is_some()) => {
            return Ok(FileOrName::File);
        }
        Ok(meta) if meta.is_dir() && not_a_name.is_some() => {
            return Err(Error::argument(format!(
                "{flag} {value}: a directory, not a manifest file, and it is not {kind} name ({})",
                not_a_name.unwrap_or_default()
            )));
        }
        _ => {}
    }
    if let Some(why) = not_a_name {
        return Err(Error::argument(format!(
            "{flag} {value}: no such file, and it is not {kind} name ({why})"
        )));
    }
    workspace_name(value, flag, namespace)
        .map(FileOrName::Name)
        .map_err(|mut problem| {
            let file = if path.is_dir() {
                format!("; {value:?} is a directory, not a manifest file")
            } else {
                format!("; no file {value:?} exists either")
            };
            problem.message.push_str(&file);
            InvalidSpec {
                problems: vec![problem],
            }
            .into()
        })
}

/// Why `value` cannot be an object's name (`NAME` or `NAMESPACE/NAME`), if it cannot.
fn not_a_name(value: &str, manifest_extension: bool) -> Option<String> {
    if value.starts_with('/') {
        return Some("an absolute path; names have no '/' but one after a NAMESPACE".into());
    }
    if value.matches('/').count() > 1 {
        return Some("names have no '/' but one after a NAMESPACE".into());
    }
    if manifest_extension {
        let extensions = MANIFEST_EXTENSIONS.map(|e| format!(".{e}")).join(", ");
        return Some(format!(
            "a value ending in {extensions} is read as a manifest file"
        ));
    }
    let name = value.split_once('/').map_or(value, |(_, name)| name);
    object_name(name).err().map(|invalid| invalid.to_string())
}

/// What a flag that takes a manifest file or a name gave.
enum Picked<T> {
    /// The spec from the manifest file.
    Inline(T),
    /// An object's name, its `NAMESPACE/` prefix removed.
    Named(String),
}

/// The spec in the manifest file `value` names, picked by `pick`; or, when `value` is an
/// object's name, that name.
fn manifest_file_object<T>(
    value: &str,
    flag: &str,
    kind: &str,
    namespace: &str,
    pick: impl FnOnce(ManifestObject) -> Option<T>,
) -> Result<Picked<T>, Error> {
    if let FileOrName::Name(name) = file_or_name(value, flag, kind, namespace)? {
        return Ok(Picked::Named(name));
    }
    let text = read_text(Path::new(value), flag)?;
    let mut objects = parse_manifests(&text, value)?;
    if objects.len() != 1 {
        return Err(Error::new(
            ErrorCode::InvalidManifest,
            format!(
                "{flag} {value}: expected exactly one object, found {}",
                objects.len()
            ),
        ));
    }
    pick(objects.remove(0))
        .map(Picked::Inline)
        .ok_or_else(|| Error::argument(format!("{flag} {value}: the file does not hold {kind}")))
}

/// The spec (and the name given, if any) from `--spec`/`--spec-file` with the flags applied,
/// and the `--env` variables set in its environment. A directory given as the base workdir is
/// pushed to `backend` as a Fileset (and taken back when a later step fails).
pub async fn request(
    args: &SpecFlags,
    inputs: RunInputs,
    backend: &dyn Backend,
) -> Result<ExecutionRequest, Error> {
    let namespace = backend.namespace();
    let (mut spec, name) = base_spec(args, namespace)?;
    let pushed = apply_flags(backend, args, namespace, &mut spec).await?;
    if let Err(error) = add_env(backend, &mut spec, &inputs.env).await {
        undo_push(backend, pushed.as_ref()).await;
        return Err(error);
    }
    Ok(ExecutionRequest {
        spec,
        name: args.name.clone().or(name),
        pushed,
        inputs,
    })
}

/// Applies the flags on top of the spec; returns the Fileset it pushed, if any.
async fn apply_flags(
    backend: &dyn Backend,
    args: &SpecFlags,
    namespace: &str,
    spec: &mut AgentExecutionSpec,
) -> Result<Option<PushedFileset>, Error> {
    let mut pushed = None;
    if let Some(agent) = &args.agent {
        let picked = manifest_file_object(agent, "--agent", "an Agent", namespace, |m| match m {
            ManifestObject::Agent(agent) => Some(agent.spec),
            _ => None,
        })?;
        (spec.agent, spec.agent_ref) = match picked {
            Picked::Inline(inline) => (Some(inline), None),
            Picked::Named(name) => {
                require_named(backend, ObjectKind::Agent, &name, "--agent", agent).await?;
                (None, Some(Reference::named(name)))
            }
        };
    }
    if let Some(environment) = &args.environment {
        let picked = manifest_file_object(
            environment,
            "--environment",
            "an AgentEnvironment",
            namespace,
            |m| match m {
                ManifestObject::Environment(environment) => Some(environment.spec),
                _ => None,
            },
        )?;
        (spec.environment, spec.environment_ref) = match picked {
            Picked::Inline(inline) => (Some(inline), None),
            Picked::Named(name) => {
                let flag = "--environment";
                require_named(backend, ObjectKind::Environment, &name, flag, environment).await?;
                (None, Some(Reference::named(name)))
            }
        };
    }
    if let Some(base) = &args.base_workdir {
        refuse_missing_directory(base)?;
        let base = if Path::new(base).is_dir() {
            let entry = backend.push_fileset(None, Path::new(base)).await?;
            let name = entry.name.clone();
            pushed = Some(entry);
            name
        } else {
            let name = base.split('#').next().unwrap_or(base);
            if !name.contains('/') {
                let flag = "--workdir.base-workdir";
                require_named(backend, ObjectKind::Fileset, name, flag, base).await?;
            }
            base.clone()
        };
        spec.workdir.get_or_insert_with(Workdir::default).base = Some(base);
    }
    if let Some(input) = &args.input {
        spec.input = input.clone();
    }
    if let Some(seconds) = args.timeout_seconds {
        spec.timeout_seconds = seconds;
    }
    if args.auto_telemetry {
        spec.auto_telemetry = true;
    }
    if let Some(notify) = args.notify.webhook()? {
        spec.notify = Some(notify);
    }
    Ok(pushed)
}

/// Refuses `name` (given to `flag` as `value`) as `not_found` when no `kind` of that name is in
/// the namespace, listing those that are, so that a user hears that before anything is
/// created; when they cannot be listed the creation says what is wrong in its own words.
async fn require_named(
    backend: &dyn Backend,
    kind: ObjectKind,
    name: &str,
    flag: &str,
    value: &str,
) -> Result<(), Error> {
    let Ok(names) = object_names(backend, kind).await else {
        return Ok(());
    };
    if names.iter().any(|n| n == name) {
        return Ok(());
    }
    let mut wanted = Wanted::object(kind, backend.namespace());
    let path = Path::new(value);
    let file = if path.is_dir() {
        format!("{value} is a directory, not a manifest file")
    } else {
        format!("no file {value} exists")
    };
    wanted.create = match kind {
        ObjectKind::Fileset => format!(
            "push one with `errand filesets push NAME DIR`, or give {flag} a directory to push"
        ),
        _ => format!("{}, or give {flag} its manifest file", wanted.create),
    };
    let error = wanted.not_found(name, &names);
    let taken = match kind {
        ObjectKind::Fileset => "taken for a Fileset's name".to_owned(),
        _ => format!("{file}, so it was taken for a name"),
    };
    Err(Error::new(
        error.code,
        format!("{flag} {value}: {taken}: {}", error.message),
    ))
}

/// Refuses a `--workdir.base-workdir` that reads as a path (`/…`, `./…`, `../…`, `~…`) but
/// names no directory, which would otherwise be taken for a `namespace/fileset` reference.
fn refuse_missing_directory(base: &str) -> Result<(), Error> {
    let looks_like_path = ["/", "./", "../", "~"].iter().any(|p| base.starts_with(p))
        || base.split('#').next().unwrap_or(base).matches('/').count() > 1;
    let path = Path::new(base);
    if path.is_dir() || !(looks_like_path || path.exists()) {
        return Ok(());
    }
    let what = if path.exists() {
        "is not a directory"
    } else {
        "does not exist"
    };
    Err(Error::argument(format!(
        "--workdir.base-workdir {base}: the directory {what} (give a directory to push, or a Fileset as NAME[#PATH/])"
    )))
}

/// Sets the `--env` variables in the execution's environment, over the environment's own: in
/// its inline environment, or, when it names an AgentEnvironment, in a copy of that one made
/// inline (the execution's snapshot holds the merged values either way).
async fn add_env(
    backend: &dyn Backend,
    spec: &mut AgentExecutionSpec,
    env: &BTreeMap<String, String>,
) -> Result<(), Error> {
    if env.is_empty() {
        return Ok(());
    }
    if let Some(reference) = spec.environment_ref.take() {
        let objects = backend.objects(ObjectKind::Environment).await?;
        let object = objects
            .iter()
            .find(|o| o["metadata"]["name"] == reference.name.as_str())
            .ok_or_else(|| {
                Error::new(
                    ErrorCode::NotFound,
                    format!(
                        "--environment {}: no AgentEnvironment of that name in namespace {:?} to add --env to",
                        reference.name,
                        backend.namespace()
                    ),
                )
            })?;
        let named: AgentEnvironmentSpec =
            serde_json::from_value(object["spec"].clone()).map_err(|e| {
                Error::new(
                    ErrorCode::InvalidManifest,
                    format!("AgentEnvironment {}: {e}", reference.name),
                )
            })?;
        spec.environment = Some(named);
    }
    spec.environment
        .get_or_insert_with(AgentEnvironmentSpec::default)
        .overlay
        .env
        .extend(env.clone());
    Ok(())
}
