//! Reading the same YAML manifests `kubectl apply` takes: errand resources and Secrets, bounded in size and checked against their schemas.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::Path;

use serde_json::Value;

use crate::api::{Agent, AgentEnvironment, AgentExecution, AgentExtension, AgentRuntime, Fileset};
use crate::resolve::{Problem, Resource, check_extension, check_object, check_structure, decode};

/// One Kubernetes object from a manifest file.
#[derive(Clone, Debug)]
pub enum ManifestObject {
    /// An `errand.dev/v1alpha1` Agent.
    Agent(Box<Agent>),
    /// An `errand.dev/v1alpha1` AgentEnvironment.
    Environment(Box<AgentEnvironment>),
    /// An `errand.dev/v1alpha1` AgentRuntime (cluster-scoped).
    Runtime(Box<AgentRuntime>),
    /// An `errand.dev/v1alpha1` AgentExtension (cluster-scoped).
    Extension(Box<AgentExtension>),
    /// An `errand.dev/v1alpha1` Fileset.
    Fileset(Box<Fileset>),
    /// An `errand.dev/v1alpha1` AgentExecution.
    Execution(Box<AgentExecution>),
    /// A `v1` Secret: name, namespace and its string values.
    Secret {
        /// Secret name.
        name: String,
        /// Namespace, when the manifest names one.
        namespace: Option<String>,
        /// Key to value, from `stringData` and base64-decoded `data`.
        data: BTreeMap<String, String>,
    },
}

/// The most a manifest (or spec file) may hold: what the Kubernetes API server accepts in one
/// request (3 MiB).
pub const MAX_MANIFEST_BYTES: u64 = 3 * 1024 * 1024;

/// Why a manifest file could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ReadManifestError {
    /// The file could not be opened or read.
    #[error("{path}: {message}")]
    Unreadable {
        /// The file.
        path: String,
        /// What went wrong.
        message: String,
    },
    /// The file is larger than [`MAX_MANIFEST_BYTES`].
    #[error(
        "{path}: larger than {MAX_MANIFEST_BYTES} bytes (3 MiB), the most the Kubernetes API server accepts in one request"
    )]
    TooLarge {
        /// The file.
        path: String,
    },
    /// The file is not UTF-8 text.
    #[error("{path}: not UTF-8 text")]
    NotText {
        /// The file.
        path: String,
    },
}

/// Reads a manifest file, refusing one over [`MAX_MANIFEST_BYTES`] without reading it whole.
pub fn read_manifest_file(path: &Path) -> Result<String, ReadManifestError> {
    let shown = path.display().to_string();
    let unreadable = |e: std::io::Error| ReadManifestError::Unreadable {
        path: shown.clone(),
        message: crate::archive::io_words(&e),
    };
    let file = std::fs::File::open(path).map_err(unreadable)?;
    let mut bytes = Vec::new();
    file.take(MAX_MANIFEST_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(unreadable)?;
    if bytes.len() as u64 > MAX_MANIFEST_BYTES {
        return Err(ReadManifestError::TooLarge { path: shown });
    }
    String::from_utf8(bytes).map_err(|_| ReadManifestError::NotText { path: shown })
}

/// What is wrong with one document of a manifest.
#[derive(Debug, Clone, PartialEq)]
pub enum DocumentError {
    /// The object breaks its schema or CEL rules (as the API server would refuse it).
    Invalid {
        /// Its kind.
        kind: String,
        /// Its name, if it has one.
        name: Option<String>,
        /// Every problem, each naming its field.
        problems: Vec<Problem>,
    },
    /// The document is not an object errand reads.
    Unsupported(String),
}

impl std::fmt::Display for DocumentError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DocumentError::Invalid {
                kind,
                name,
                problems,
            } => {
                write!(f, "{kind}")?;
                if let Some(name) = name {
                    write!(f, " {name:?}")?;
                }
                f.write_str(" is invalid: ")?;
                let listed: Vec<String> = problems.iter().map(ToString::to_string).collect();
                f.write_str(&listed.join("; "))
            }
            DocumentError::Unsupported(message) => f.write_str(message),
        }
    }
}

/// Parses every document of a YAML (or JSON) manifest stream; `source` names it in errors.
/// Each object is checked as the API server would check it on create: its CRD's schema
/// (types, unknown fields, enums, bounds) and CEL rules (an AgentExecution's when it is run).
pub fn parse_manifests(text: &str, source: &str) -> Result<Vec<ManifestObject>, ManifestError> {
    manifest_documents(text, source)?
        .into_iter()
        .enumerate()
        .map(|(index, doc)| {
            parse_document(doc).map_err(|error| ManifestError::Document {
                manifest: source.to_owned(),
                number: index + 1,
                error,
            })
        })
        .collect()
}

/// A manifest stream that cannot be read as objects errand applies.
#[derive(Debug, thiserror::Error)]
pub enum ManifestError {
    /// Larger than a manifest may be.
    #[error(transparent)]
    TooLarge(ReadManifestError),
    /// Not a YAML (or JSON) stream errand reads; the message says why.
    #[error("{manifest}: {message}")]
    NotYaml { manifest: String, message: String },
    /// One document (numbered from 1) is not an object errand applies, or breaks its schema.
    #[error("{manifest}: document {number}: {error}")]
    Document {
        manifest: String,
        number: usize,
        error: DocumentError,
    },
}

/// The documents of a YAML (or JSON) manifest stream as they are written, empty ones left out;
/// `source` names it in errors.
pub fn manifest_documents(text: &str, source: &str) -> Result<Vec<Value>, ManifestError> {
    if text.len() as u64 > MAX_MANIFEST_BYTES {
        return Err(ManifestError::TooLarge(ReadManifestError::TooLarge {
            path: source.to_owned(),
        }));
    }
    yaml_documents(text).map_err(|error| ManifestError::NotYaml {
        manifest: source.to_owned(),
        message: error.to_string(),
    })
}

/// The most documents one manifest or spec file may hold; a file of 3 MiB of small objects
/// stays below it.
pub const MAX_MANIFEST_DOCUMENTS: usize = 10_000;
/// The most values (mappings, sequences and scalars, aliases expanded) one file may hold.
pub const MAX_MANIFEST_VALUES: usize = 250_000;
/// The deepest one file may nest mappings and sequences.
pub const MAX_MANIFEST_DEPTH: usize = 64;

/// How errand parses a user's YAML: the parser's guards against hostile input, at the limits
/// the docs name.
fn yaml_options() -> serde_saphyr::Options {
    let mut budget = serde_saphyr::Budget::default();
    budget.max_documents = MAX_MANIFEST_DOCUMENTS;
    budget.max_nodes = MAX_MANIFEST_VALUES;
    budget.max_depth = MAX_MANIFEST_DEPTH;
    let mut options = serde_saphyr::Options::default();
    options.budget = Some(budget);
    options
}

/// The documents of YAML (or JSON) `text`, empty ones left out; or why they cannot be read, in
/// the user's terms (never the parser's own names for its limits).
pub fn yaml_documents(text: &str) -> Result<Vec<Value>, YamlError> {
    let documents: Vec<Value> = serde_saphyr::from_multiple_with_options(text, yaml_options())
        .map_err(|e| YamlError::Unreadable(yaml_reason(&e)))?;
    Ok(documents.into_iter().filter(|doc| !doc.is_null()).collect())
}

/// The one document of YAML (or JSON) `text`, given with `flag` (`--spec-file`), which takes a
/// single one: null when the text holds none.
pub fn yaml_document(text: &str, flag: &str) -> Result<Value, YamlError> {
    let mut documents = yaml_documents(text)?;
    match documents.len() {
        0 => Ok(Value::Null),
        1 => Ok(documents.remove(0)),
        count => Err(YamlError::Documents {
            count,
            flag: flag.to_owned(),
        }),
    }
}

/// Why a YAML (or JSON) text cannot be read as the documents asked for.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum YamlError {
    /// The parser refused it; why, in the user's terms (never the parser's names for its
    /// limits).
    #[error("{0}")]
    Unreadable(String),
    /// Several documents where the flag takes one.
    #[error(
        "holds {count} YAML documents; {flag} takes one (apply several objects with `errand apply -f`)"
    )]
    Documents {
        /// How many the text holds.
        count: usize,
        /// The flag that takes one (`--spec-file`).
        flag: String,
    },
}

/// Why the parser refused a text, in words: a limit named with its number and what to do, a
/// syntax error with its line and column, no source excerpt.
fn yaml_reason(error: &serde_saphyr::Error) -> String {
    use serde_saphyr::Error;
    use serde_saphyr::budget::BudgetBreach;
    let mut inner = error;
    while let Error::WithSnippet { error, .. } | Error::AliasError { error, .. } = inner {
        inner = error;
    }
    let Error::Budget { breach, .. } = inner else {
        let text = inner.to_string();
        let text = text.strip_prefix("error: ").unwrap_or(&text);
        return format!("not valid YAML: {text}");
    };
    match breach {
        BudgetBreach::Documents { .. } => format!(
            "holds more than {MAX_MANIFEST_DOCUMENTS} YAML documents; errand reads at most \
             {MAX_MANIFEST_DOCUMENTS} per file: split it"
        ),
        BudgetBreach::Nodes { .. } => format!(
            "holds more than {MAX_MANIFEST_VALUES} values (mappings, sequences and scalars, \
             aliases expanded); errand reads at most {MAX_MANIFEST_VALUES} per file: split it"
        ),
        BudgetBreach::Depth { .. } => format!(
            "nests mappings and sequences more than {MAX_MANIFEST_DEPTH} levels deep, the most \
             errand reads"
        ),
        BudgetBreach::Aliases { .. }
        | BudgetBreach::Anchors { .. }
        | BudgetBreach::AliasAnchorRatio { .. }
        | BudgetBreach::MergeKeys { .. }
        | BudgetBreach::RecordedAnchorEvents { .. }
        | BudgetBreach::RecordedAnchorBytes { .. } => {
            "expands more YAML aliases, anchors or merge keys than errand allows; write the \
             values out"
                .to_owned()
        }
        _ => "is more YAML than errand reads in one file (too many events or too much text); \
              split it"
            .to_owned(),
    }
}

/// Reads one document as the object it declares, checked against its schema.
pub fn parse_document(doc: Value) -> Result<ManifestObject, DocumentError> {
    let text_field = |field: &str| {
        doc.get(field)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned()
    };
    let (api_version, kind) = (text_field("apiVersion"), text_field("kind"));
    let name = doc
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .map(str::to_owned);
    let invalid = |problems: Vec<Problem>| DocumentError::Invalid {
        kind: kind.clone(),
        name: name.clone(),
        problems,
    };
    let resource = match (api_version.as_str(), kind.as_str()) {
        ("v1", "Secret") => {
            let problems = check_structure(&secret_schema(), &doc);
            if !problems.is_empty() {
                return Err(invalid(problems));
            }
            let secret = decode(doc).map_err(|p| invalid(vec![p]))?;
            return secret_object(secret).map_err(|p| invalid(vec![p]));
        }
        ("errand.dev/v1alpha1", kind) => Resource::from_kind(kind),
        _ => None,
    };
    let Some(resource) = resource else {
        return Err(DocumentError::Unsupported(format!(
            "apiVersion {api_version:?} kind {kind:?} is not something errand applies (errand.dev/v1alpha1 Agent, AgentEnvironment, AgentRuntime, AgentExtension, Fileset, AgentExecution, or v1 Secret)"
        )));
    };
    // An AgentExecution is not applied but run, and `errand execute`'s flags may complete it:
    // its CEL rules hold when it is created, here only its structure.
    let problems = match resource {
        Resource::AgentExecution => check_structure(resource.schema(), &doc),
        _ => check_object(resource, &doc),
    };
    if !problems.is_empty() {
        return Err(invalid(problems));
    }
    let typed = |p: Problem| invalid(vec![p]);
    Ok(match resource {
        Resource::Agent => ManifestObject::Agent(Box::new(decode(doc).map_err(typed)?)),
        Resource::AgentEnvironment => {
            ManifestObject::Environment(Box::new(decode(doc).map_err(typed)?))
        }
        Resource::AgentRuntime => ManifestObject::Runtime(Box::new(decode(doc).map_err(typed)?)),
        Resource::AgentExtension => {
            let extension: AgentExtension = decode(doc).map_err(typed)?;
            // What the webhook checks beyond the schema: result names and the config schema.
            let problems = check_extension(&extension.spec);
            if !problems.is_empty() {
                return Err(invalid(problems));
            }
            ManifestObject::Extension(Box::new(extension))
        }
        Resource::Fileset => ManifestObject::Fileset(Box::new(decode(doc).map_err(typed)?)),
        Resource::AgentExecution => {
            ManifestObject::Execution(Box::new(decode(doc).map_err(typed)?))
        }
    })
}

/// The fields of a `v1` Secret manifest errand reads or allows.
fn secret_schema() -> Value {
    let strings = serde_json::json!({"type": "object", "additionalProperties": {"type": "string"}});
    serde_json::json!({
        "type": "object",
        "properties": {
            "data": strings,
            "stringData": strings,
            "type": {"type": "string"},
            "immutable": {"type": "boolean"},
        },
    })
}

fn secret_object(secret: k8s_openapi::api::core::v1::Secret) -> Result<ManifestObject, Problem> {
    let name = secret
        .metadata
        .name
        .ok_or_else(|| Problem::new("metadata.name", "Required value"))?;
    let mut data: BTreeMap<String, String> = BTreeMap::new();
    for (key, bytes) in secret.data.unwrap_or_default() {
        let value = String::from_utf8(bytes.0)
            .map_err(|_| Problem::new(format!("data[{key}]"), "is not UTF-8 text"))?;
        data.insert(key, value);
    }
    data.extend(secret.string_data.unwrap_or_default());
    Ok(ManifestObject::Secret {
        name,
        namespace: secret.metadata.namespace,
        data,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_multi_document_streams() {
        let text = "apiVersion: v1\nkind: Secret\nmetadata: {name: keys}\nstringData: {openai: sk-1}\n---\n\
                    apiVersion: errand.dev/v1alpha1\nkind: Fileset\nmetadata: {name: repo}\nspec: {}\n";
        let parsed = parse_manifests(text, "m.yaml").unwrap();
        assert!(
            matches!(&parsed[0], ManifestObject::Secret { name, data, .. } if name == "keys" && data["openai"] == "sk-1")
        );
        assert!(
            matches!(&parsed[1], ManifestObject::Fileset(f) if f.metadata.name.as_deref() == Some("repo"))
        );
    }

    #[test]
    fn type_errors_and_unknown_fields_name_their_field() {
        let text = "apiVersion: errand.dev/v1alpha1\nkind: AgentExecution\nmetadata: {name: x}\n\
                    spec: {agentRef: {name: a}, timeoutSeconds: \"30\", timeout_seconds: 1}\n";
        let error = parse_manifests(text, "e.yaml").unwrap_err().to_string();
        assert!(
            error.starts_with("e.yaml: document 1: AgentExecution \"x\" is invalid: spec.timeoutSeconds: invalid type: string \"30\", expected an integer; spec.timeout_seconds: unknown field \"timeout_seconds\""),
            "{error}"
        );
        let secret = "apiVersion: v1\nkind: Secret\nmetadata: {name: s}\nstringdata: {a: b}\n";
        let error = parse_manifests(secret, "s.yaml").unwrap_err().to_string();
        assert!(
            error.starts_with("s.yaml: document 1: Secret \"s\" is invalid: stringdata: unknown field \"stringdata\""),
            "{error}"
        );
    }

    #[test]
    fn names_the_document_and_kind_on_error() {
        let error = parse_manifests("apiVersion: apps/v1\nkind: Deployment\n", "d.yaml")
            .unwrap_err()
            .to_string();
        assert!(error.starts_with("d.yaml: document 1: apiVersion \"apps/v1\" kind \"Deployment\" is not something errand applies"), "{error}");
    }
}
