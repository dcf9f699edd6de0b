//! `errand apply -f` against a cluster: server-side apply of errand's kinds and Secrets, every object dry-run first so that a refusal stores nothing.
//!
//! The API server checks each object (schema, CEL rules, the admission webhook) and its
//! refusal is reported as it gave it, naming the field. Objects are applied in the order
//! given; only a failure after every dry run passed (a conflict, a lost connection) can leave
//! some applied, and the error says which.

use kube::api::{Patch, PatchParams, ValidationDirective};
use kube::core::{ApiResource, DynamicObject};
use kube::{Api, Client};
use serde_json::{Value, json};

use super::api_error;
use crate::api::{Agent, AgentEnvironment, AgentExecution, AgentExtension, AgentRuntime, Fileset};
use crate::ops::backend::{Applied, Document};
use crate::ops::{Error, ErrorCode};

/// The field manager of everything errand's command line writes.
pub const FIELD_MANAGER: &str = "errand";

/// One document ready to apply.
struct Planned<'a> {
    document: &'a Document,
    resource: ApiResource,
    /// `None` for a cluster-scoped kind (AgentRuntime, AgentExtension).
    namespace: Option<String>,
    name: String,
    object: Value,
}

impl Planned<'_> {
    fn api(&self, client: &Client) -> Api<DynamicObject> {
        match &self.namespace {
            Some(namespace) => Api::namespaced_with(client.clone(), namespace, &self.resource),
            None => Api::all_with(client.clone(), &self.resource),
        }
    }

    fn applied(&self) -> Applied {
        Applied {
            kind: self.resource.kind.clone(),
            namespace: self.namespace.clone(),
            name: self.name.clone(),
        }
    }
}

/// The API resource of a document's `apiVersion` and `kind`, if errand applies it.
fn resource_of(object: &Value) -> Option<ApiResource> {
    let text = |field: &str| {
        object
            .get(field)
            .and_then(Value::as_str)
            .unwrap_or_default()
    };
    Some(match (text("apiVersion"), text("kind")) {
        ("v1", "Secret") => ApiResource::erase::<k8s_openapi::api::core::v1::Secret>(&()),
        ("errand.dev/v1alpha1", "Agent") => ApiResource::erase::<Agent>(&()),
        ("errand.dev/v1alpha1", "AgentEnvironment") => ApiResource::erase::<AgentEnvironment>(&()),
        ("errand.dev/v1alpha1", "AgentRuntime") => ApiResource::erase::<AgentRuntime>(&()),
        ("errand.dev/v1alpha1", "AgentExtension") => ApiResource::erase::<AgentExtension>(&()),
        ("errand.dev/v1alpha1", "Fileset") => ApiResource::erase::<Fileset>(&()),
        ("errand.dev/v1alpha1", "AgentExecution") => ApiResource::erase::<AgentExecution>(&()),
        _ => return None,
    })
}

/// Each document with its resource, name and namespace (`namespace` unless it names one).
fn plan<'a>(documents: &'a [Document], namespace: &str) -> Result<Vec<Planned<'a>>, Error> {
    documents
        .iter()
        .map(|document| {
            let refused = |message: String| {
                Error::new(ErrorCode::InvalidManifest, format!("{}: {message}", document.source))
            };
            let resource = resource_of(&document.object).ok_or_else(|| {
                refused(format!(
                    "apiVersion {} kind {} is not something errand applies (errand.dev/v1alpha1 Agent, AgentEnvironment, AgentRuntime, AgentExtension, Fileset, AgentExecution, or v1 Secret)",
                    document.object["apiVersion"], document.object["kind"]
                ))
            })?;
            let name = document
                .object
                .pointer("/metadata/name")
                .and_then(Value::as_str)
                .ok_or_else(|| refused(format!("{}: metadata.name is required", resource.kind)))?
                .to_owned();
            let mut object = document.object.clone();
            let namespace = if ["AgentRuntime", "AgentExtension"].contains(&resource.kind.as_str()) {
                // Cluster-scoped: a namespace in the manifest is ignored, as the API server does.
                if let Some(metadata) = object["metadata"].as_object_mut() {
                    metadata.remove("namespace");
                }
                None
            } else {
                match object.pointer("/metadata/namespace").and_then(Value::as_str) {
                    Some(namespace) => Some(namespace.to_owned()),
                    None => {
                        object["metadata"]["namespace"] = json!(namespace);
                        Some(namespace.to_owned())
                    }
                }
            };
            Ok(Planned {
                document,
                resource,
                namespace,
                name,
                object,
            })
        })
        .collect()
}

/// Applies every document with server-side apply, all or nothing as far as the API allows:
/// every object is dry-run first, and any refusal (each one reported) stores none.
pub async fn apply(
    client: &Client,
    namespace: &str,
    documents: &[Document],
) -> Result<Vec<Applied>, Error> {
    let planned = plan(documents, namespace)?;
    let params = PatchParams {
        field_validation: Some(ValidationDirective::Strict),
        ..PatchParams::apply(FIELD_MANAGER)
    };
    let dry_run = PatchParams {
        dry_run: true,
        ..params.clone()
    };
    let mut refusals = Vec::new();
    for item in &planned {
        if let Err(e) = item
            .api(client)
            .patch(&item.name, &dry_run, &Patch::Apply(&item.object))
            .await
        {
            refusals.push((item, api_error(e)));
        }
    }
    if !refusals.is_empty() {
        let code = refusals[0].1.code;
        let message = refusals
            .iter()
            .map(|(item, e)| format!("{}: {}", item.document.source, e.message))
            .collect::<Vec<_>>()
            .join("; ");
        let per_object: Vec<Value> = refusals
            .iter()
            .map(|(item, e)| {
                json!({
                    "source": item.document.source,
                    "kind": item.resource.kind,
                    "name": item.name,
                    "code": e.code,
                    "message": e.message,
                    "causes": e.details.as_ref().map(|(_, causes)| causes.clone()),
                })
            })
            .collect();
        return Err(Error {
            code,
            message: format!("nothing applied: {message}"),
            details: Some(("refused", Value::Array(per_object))),
        });
    }
    let mut applied = Vec::new();
    for item in &planned {
        if let Err(e) = item
            .api(client)
            .patch(&item.name, &params, &Patch::Apply(&item.object))
            .await
        {
            let e = api_error(e);
            let done: Vec<String> = applied
                .iter()
                .map(|a: &Applied| format!("{}/{}", a.kind, a.name))
                .collect();
            return Err(Error {
                message: format!(
                    "{}: {} (applied before it: {})",
                    item.document.source,
                    e.message,
                    if done.is_empty() {
                        "none".to_owned()
                    } else {
                        done.join(", ")
                    }
                ),
                ..e
            });
        }
        applied.push(item.applied());
    }
    Ok(applied)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::{Document, plan};

    fn document(object: serde_json::Value) -> Document {
        Document {
            source: "objects.yaml: document 1".into(),
            object,
        }
    }

    #[test]
    fn each_document_is_planned_in_its_own_namespace_or_the_targeted_one() {
        let documents = [
            document(json!({"apiVersion": "errand.dev/v1alpha1", "kind": "Agent",
                "metadata": {"name": "calc"}, "spec": {}})),
            document(json!({"apiVersion": "v1", "kind": "Secret",
                "metadata": {"name": "key", "namespace": "team-b"}})),
        ];
        let planned = plan(&documents, "team-a").unwrap();
        let placed: Vec<(&str, &str, &str)> = planned
            .iter()
            .map(|p| {
                (
                    p.resource.kind.as_str(),
                    p.namespace.as_deref().unwrap_or("(cluster)"),
                    p.name.as_str(),
                )
            })
            .collect();
        assert_eq!(
            placed,
            [("Agent", "team-a", "calc"), ("Secret", "team-b", "key")]
        );
        assert_eq!(planned[0].object["metadata"]["namespace"], "team-a");
    }

    #[test]
    fn what_errand_does_not_apply_is_refused_naming_its_document() {
        let refused = plan(
            &[document(json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "x"}}))],
            "team-a",
        )
        .err()
        .unwrap();
        assert_eq!(refused.code, "invalid_manifest");
        assert!(
            refused.message.starts_with("objects.yaml: document 1: apiVersion \"v1\" kind \"ConfigMap\" is not something errand applies"),
            "{}",
            refused.message
        );
        let nameless = plan(
            &[document(
                json!({"apiVersion": "errand.dev/v1alpha1", "kind": "Fileset",
                "metadata": {}}),
            )],
            "team-a",
        )
        .err()
        .unwrap();
        assert_eq!(
            nameless.message,
            "objects.yaml: document 1: Fileset: metadata.name is required"
        );
    }
}
