//! The discovery documents of `data.errand.dev/v1alpha1`, so that `kubectl api-resources` lists its resources and `kubectl get --raw` reaches them as any aggregated API.
//!
//! The legacy documents only: asked for `/apis` with aggregated discovery in `Accept`, this
//! server answers the plain group list, and the aggregation layer then reads the resources
//! from `/apis/data.errand.dev/v1alpha1`, as it does for every server that predates
//! aggregated discovery. The resources share their names with the `errand.dev` kinds they
//! hold data of, as `metrics.k8s.io` does with `pods`; the APIService's low group priority
//! keeps `kubectl get agentexecutions` on `errand.dev`.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
    APIGroup, APIGroupList, APIResource, APIResourceList, GroupVersionForDiscovery,
};

use crate::api::data::{
    CONTENT_KIND, CONTENT_SUBRESOURCE, DATA_API_VERSION, DATA_GROUP, DATA_VERSION,
    EXECUTIONS_RESOURCE, FILESETS_RESOURCE, RESULTS_KIND, RESULTS_SUBRESOURCE,
};

use super::route::Discovery;

fn group() -> APIGroup {
    let version = GroupVersionForDiscovery {
        group_version: DATA_API_VERSION.to_owned(),
        version: DATA_VERSION.to_owned(),
    };
    APIGroup {
        name: DATA_GROUP.to_owned(),
        preferred_version: Some(version.clone()),
        server_address_by_client_cidrs: None,
        versions: vec![version],
    }
}

fn resource(name: String, singular: &str, kind: &str, verbs: &[&str]) -> APIResource {
    APIResource {
        kind: kind.to_owned(),
        name,
        namespaced: true,
        singular_name: singular.to_owned(),
        verbs: verbs.iter().map(|v| (*v).to_owned()).collect(),
        ..APIResource::default()
    }
}

fn resources() -> APIResourceList {
    APIResourceList {
        group_version: DATA_API_VERSION.to_owned(),
        resources: vec![
            resource(
                EXECUTIONS_RESOURCE.to_owned(),
                "agentexecution",
                RESULTS_KIND,
                &["get"],
            ),
            resource(
                format!("{EXECUTIONS_RESOURCE}/{RESULTS_SUBRESOURCE}"),
                "",
                RESULTS_KIND,
                &["get"],
            ),
            resource(
                FILESETS_RESOURCE.to_owned(),
                "fileset",
                CONTENT_KIND,
                &["get"],
            ),
            resource(
                format!("{FILESETS_RESOURCE}/{CONTENT_SUBRESOURCE}"),
                "",
                CONTENT_KIND,
                &["get", "update"],
            ),
        ],
    }
}

/// The JSON of the document.
pub fn document(which: Discovery) -> Vec<u8> {
    match which {
        Discovery::Groups => serde_json::to_vec(&APIGroupList {
            groups: vec![group()],
        }),
        Discovery::Group => serde_json::to_vec(&group()),
        Discovery::Resources => serde_json::to_vec(&resources()),
    }
    .expect("discovery documents serialize")
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;

    fn parsed(which: Discovery) -> Value {
        serde_json::from_slice(&document(which)).unwrap()
    }

    #[test]
    fn the_group_list_names_the_one_group_and_version() {
        let groups = parsed(Discovery::Groups);
        assert_eq!(groups["kind"], "APIGroupList");
        assert_eq!(groups["groups"][0]["name"], "data.errand.dev");
        assert_eq!(
            groups["groups"][0]["preferredVersion"],
            json!({"groupVersion": "data.errand.dev/v1alpha1", "version": "v1alpha1"})
        );
        assert_eq!(parsed(Discovery::Group)["kind"], "APIGroup");
    }

    #[test]
    fn the_resources_have_the_verbs_their_paths_serve() {
        let list = parsed(Discovery::Resources);
        assert_eq!(list["kind"], "APIResourceList");
        assert_eq!(list["groupVersion"], "data.errand.dev/v1alpha1");
        let verbs: Vec<(String, Value, Value)> = list["resources"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| {
                (
                    r["name"].as_str().unwrap().to_owned(),
                    r["verbs"].clone(),
                    r["kind"].clone(),
                )
            })
            .collect();
        assert_eq!(
            verbs,
            vec![
                (
                    "agentexecutions".into(),
                    json!(["get"]),
                    json!("AgentExecutionResults")
                ),
                (
                    "agentexecutions/results".into(),
                    json!(["get"]),
                    json!("AgentExecutionResults")
                ),
                ("filesets".into(), json!(["get"]), json!("FilesetContent")),
                (
                    "filesets/content".into(),
                    json!(["get", "update"]),
                    json!("FilesetContent")
                ),
            ]
        );
        assert!(
            list["resources"]
                .as_array()
                .unwrap()
                .iter()
                .all(|r| r["namespaced"] == true)
        );
    }
}
