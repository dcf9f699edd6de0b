//! Reading the same YAML manifests `kubectl apply` takes: errand resources and Secrets.

use std::collections::BTreeMap;

use serde::Deserialize;

use crate::api::{Agent, AgentEnvironment, AgentExecution, Fileset};

/// One Kubernetes object from a manifest file.
#[derive(Clone, Debug)]
pub enum ManifestObject {
    /// An `errand.dev/v1alpha1` Agent.
    Agent(Box<Agent>),
    /// An `errand.dev/v1alpha1` AgentEnvironment.
    Environment(Box<AgentEnvironment>),
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

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct TypeMeta {
    api_version: Option<String>,
    kind: Option<String>,
}

/// Parses every document of a YAML (or JSON) manifest stream; `source` names it in errors.
pub fn parse_manifests(text: &str, source: &str) -> Result<Vec<ManifestObject>, String> {
    let documents: Vec<serde_json::Value> =
        serde_saphyr::from_multiple(text).map_err(|e| format!("{source}: not valid YAML: {e}"))?;
    documents
        .into_iter()
        .filter(|doc| !doc.is_null())
        .enumerate()
        .map(|(index, doc)| {
            parse_one(doc).map_err(|e| format!("{source}: document {}: {e}", index + 1))
        })
        .collect()
}

fn parse_one(doc: serde_json::Value) -> Result<ManifestObject, String> {
    let meta: TypeMeta = serde_json::from_value(doc.clone()).map_err(|e| e.to_string())?;
    let api_version = meta.api_version.unwrap_or_default();
    let kind = meta.kind.unwrap_or_default();
    let typed = |e: serde_json::Error| format!("{kind}: {e}");
    match (api_version.as_str(), kind.as_str()) {
        ("errand.dev/v1alpha1", "Agent") => serde_json::from_value(doc)
            .map(|o| ManifestObject::Agent(Box::new(o)))
            .map_err(typed),
        ("errand.dev/v1alpha1", "AgentEnvironment") => serde_json::from_value(doc)
            .map(|o| ManifestObject::Environment(Box::new(o)))
            .map_err(typed),
        ("errand.dev/v1alpha1", "Fileset") => serde_json::from_value(doc)
            .map(|o| ManifestObject::Fileset(Box::new(o)))
            .map_err(typed),
        ("errand.dev/v1alpha1", "AgentExecution") => serde_json::from_value(doc)
            .map(|o| ManifestObject::Execution(Box::new(o)))
            .map_err(typed),
        ("v1", "Secret") => parse_secret(doc),
        _ => Err(format!(
            "apiVersion {api_version:?} kind {kind:?} is not something errand applies (errand.dev/v1alpha1 Agent, AgentEnvironment, Fileset, AgentExecution, or v1 Secret)"
        )),
    }
}

fn parse_secret(doc: serde_json::Value) -> Result<ManifestObject, String> {
    let secret: k8s_openapi::api::core::v1::Secret =
        serde_json::from_value(doc).map_err(|e| format!("Secret: {e}"))?;
    let name = secret
        .metadata
        .name
        .ok_or("Secret: metadata.name is required")?;
    let mut data: BTreeMap<String, String> = BTreeMap::new();
    for (key, bytes) in secret.data.unwrap_or_default() {
        let value = String::from_utf8(bytes.0)
            .map_err(|_| format!("Secret {name:?}: data.{key} is not UTF-8 text"))?;
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
    fn names_the_document_and_kind_on_error() {
        let error =
            parse_manifests("apiVersion: apps/v1\nkind: Deployment\n", "d.yaml").unwrap_err();
        assert!(error.starts_with("d.yaml: document 1: apiVersion \"apps/v1\" kind \"Deployment\" is not something errand applies"), "{error}");
    }
}
