//! Which request is which: a method and a path become a [`Route`], with the attributes the API server authorized it under, or the refusal a Kubernetes API server would answer.
//!
//! Pure: no I/O. Every object path is
//! `/apis/data.errand.dev/v1alpha1/namespaces/{namespace}/{resource}/{name}[/{subresource}[/{part}]]`,
//! which the API server reads as `resource`, `name` and `subresource` (the part after the
//! subresource is not part of what it authorizes), with the verb `get` for GET and HEAD and
//! `update` for PUT.

use crate::api::data::{
    CONTENT_SUBRESOURCE, DATA_GROUP, DATA_VERSION, EXECUTIONS_RESOURCE, FILESETS_RESOURCE,
    RESULTS_SUBRESOURCE,
};

use super::status::Refusal;

/// What a request asks for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Route {
    /// A discovery document: public to every authenticated caller, as the built-in
    /// `system:discovery` role makes them on every cluster.
    Discovery(Discovery),
    /// Something about one object.
    Object(ObjectRequest),
}

/// The discovery documents.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Discovery {
    /// `/apis`: the groups this server serves.
    Groups,
    /// `/apis/data.errand.dev`.
    Group,
    /// `/apis/data.errand.dev/v1alpha1`: the resources.
    Resources,
}

/// A request about one object of a namespace.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ObjectRequest {
    /// The object's namespace.
    pub namespace: String,
    /// The object's name (the execution or the Fileset).
    pub name: String,
    /// What is asked of it.
    pub action: Action,
    /// HEAD: the answer without its body.
    pub head: bool,
}

/// What is asked of an object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// The execution's results (`agentexecutions/{name}` or `agentexecutions/{name}/results`).
    ListResults {
        /// Whether it was asked through the `results` subresource.
        subresource: bool,
    },
    /// The bytes of one result (`agentexecutions/{name}/results/{result}`).
    GetResult(String),
    /// The Fileset's content record (`filesets/{name}`).
    DescribeContent,
    /// The Fileset's `tar.gz` (`GET filesets/{name}/content`).
    GetContent,
    /// A new `tar.gz` for the Fileset (`PUT filesets/{name}/content`).
    PutContent,
}

/// The attributes the API server authorized the request under, and errand checks again.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Attributes {
    /// `get` or `update`.
    pub verb: &'static str,
    /// `agentexecutions` or `filesets`.
    pub resource: &'static str,
    /// `results`, `content`, or none.
    pub subresource: Option<&'static str>,
    /// The object's namespace.
    pub namespace: String,
    /// The object's name.
    pub name: String,
}

impl Attributes {
    /// `resource` or `resource/subresource`, as RBAC rules name it.
    pub fn resource_path(&self) -> String {
        match self.subresource {
            Some(sub) => format!("{}/{sub}", self.resource),
            None => self.resource.to_owned(),
        }
    }
}

impl ObjectRequest {
    /// The attributes of this request.
    pub fn attributes(&self) -> Attributes {
        let (verb, resource, subresource) = match &self.action {
            Action::ListResults { subresource: false } => ("get", EXECUTIONS_RESOURCE, None),
            Action::ListResults { subresource: true } | Action::GetResult(_) => {
                ("get", EXECUTIONS_RESOURCE, Some(RESULTS_SUBRESOURCE))
            }
            Action::DescribeContent => ("get", FILESETS_RESOURCE, None),
            Action::GetContent => ("get", FILESETS_RESOURCE, Some(CONTENT_SUBRESOURCE)),
            Action::PutContent => ("update", FILESETS_RESOURCE, Some(CONTENT_SUBRESOURCE)),
        };
        Attributes {
            verb,
            resource,
            subresource,
            namespace: self.namespace.clone(),
            name: self.name.clone(),
        }
    }
}

/// The route of `method` on `path` (without its query), or the refusal to answer with.
pub fn route(method: &str, path: &str) -> Result<Route, Refusal> {
    let segments: Vec<&str> = path.trim_end_matches('/').split('/').skip(1).collect();
    let read = matches!(method, "GET" | "HEAD");
    let read_only = |route: Route| {
        if read {
            Ok(route)
        } else {
            Err(Refusal::method_not_allowed(method, "GET"))
        }
    };
    match segments.as_slice() {
        ["apis"] => read_only(Route::Discovery(Discovery::Groups)),
        ["apis", DATA_GROUP] => read_only(Route::Discovery(Discovery::Group)),
        ["apis", DATA_GROUP, DATA_VERSION] => read_only(Route::Discovery(Discovery::Resources)),
        [
            "apis",
            DATA_GROUP,
            DATA_VERSION,
            "namespaces",
            namespace,
            resource,
            name,
            rest @ ..,
        ] if !namespace.is_empty() && !name.is_empty() => {
            let action = match (*resource, rest) {
                (EXECUTIONS_RESOURCE, []) => Action::ListResults { subresource: false },
                (EXECUTIONS_RESOURCE, [RESULTS_SUBRESOURCE]) => {
                    Action::ListResults { subresource: true }
                }
                (EXECUTIONS_RESOURCE, [RESULTS_SUBRESOURCE, result]) if !result.is_empty() => {
                    Action::GetResult((*result).to_owned())
                }
                (FILESETS_RESOURCE, []) => Action::DescribeContent,
                (FILESETS_RESOURCE, [CONTENT_SUBRESOURCE]) => match method {
                    "PUT" => Action::PutContent,
                    _ if read => Action::GetContent,
                    _ => return Err(Refusal::method_not_allowed(method, "GET or PUT")),
                },
                _ => return Err(Refusal::no_such_path(path)),
            };
            if !read && action != Action::PutContent {
                return Err(Refusal::method_not_allowed(method, "GET"));
            }
            Ok(Route::Object(ObjectRequest {
                namespace: (*namespace).to_owned(),
                name: (*name).to_owned(),
                action,
                head: method == "HEAD",
            }))
        }
        _ => Err(Refusal::no_such_path(path)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BASE: &str = "/apis/data.errand.dev/v1alpha1/namespaces/team-a";

    fn object(method: &str, rest: &str) -> ObjectRequest {
        match route(method, &format!("{BASE}/{rest}")) {
            Ok(Route::Object(request)) => request,
            other => panic!("{method} {rest}: {other:?}"),
        }
    }

    #[test]
    fn discovery_paths_are_served_to_reads_only() {
        assert_eq!(
            route("GET", "/apis"),
            Ok(Route::Discovery(Discovery::Groups))
        );
        assert_eq!(
            route("GET", "/apis/data.errand.dev/"),
            Ok(Route::Discovery(Discovery::Group))
        );
        assert_eq!(
            route("GET", "/apis/data.errand.dev/v1alpha1"),
            Ok(Route::Discovery(Discovery::Resources))
        );
        assert_eq!(route("POST", "/apis").unwrap_err().code, 405);
    }

    #[test]
    fn each_object_path_has_the_attributes_the_api_server_authorized() {
        let cases = [
            ("GET", "agentexecutions/calc", "get", "agentexecutions"),
            (
                "GET",
                "agentexecutions/calc/results",
                "get",
                "agentexecutions/results",
            ),
            (
                "GET",
                "agentexecutions/calc/results/output_workdir",
                "get",
                "agentexecutions/results",
            ),
            (
                "HEAD",
                "agentexecutions/calc/results/run_result",
                "get",
                "agentexecutions/results",
            ),
            ("GET", "filesets/src", "get", "filesets"),
            ("GET", "filesets/src/content", "get", "filesets/content"),
            ("PUT", "filesets/src/content", "update", "filesets/content"),
        ];
        for (method, rest, verb, resource) in cases {
            let request = object(method, rest);
            let attributes = request.attributes();
            assert_eq!(attributes.verb, verb, "{method} {rest}");
            assert_eq!(attributes.resource_path(), resource, "{method} {rest}");
            assert_eq!(attributes.namespace, "team-a");
            assert_eq!(request.head, method == "HEAD");
        }
        assert_eq!(
            object("GET", "agentexecutions/calc/results/output_workdir").action,
            Action::GetResult("output_workdir".into())
        );
        assert_eq!(object("GET", "filesets/src").name, "src");
    }

    #[test]
    fn other_paths_are_not_found_and_other_methods_not_allowed() {
        for path in [
            "/",
            "/healthz",
            "/apis/errand.dev/v1alpha1",
            "/apis/data.errand.dev/v1beta1",
            &format!("{BASE}/agents/a"),
            &format!("{BASE}/agentexecutions"),
            &format!("{BASE}/agentexecutions/calc/logs"),
            &format!("{BASE}/agentexecutions/calc/results/a/b"),
            &format!("{BASE}/filesets/src/content/x"),
            "/apis/data.errand.dev/v1alpha1/namespaces//filesets/src",
        ] {
            let refusal = route("GET", path).unwrap_err();
            assert_eq!(refusal.code, 404, "{path}");
            assert_eq!(refusal.status.reason.as_deref(), Some("NotFound"));
        }
        for (method, rest) in [
            ("PUT", "agentexecutions/calc/results/run_result"),
            ("DELETE", "filesets/src/content"),
            ("POST", "filesets/src/content"),
            ("PUT", "filesets/src"),
        ] {
            let refusal = route(method, &format!("{BASE}/{rest}")).unwrap_err();
            assert_eq!(refusal.code, 405, "{method} {rest}");
        }
    }
}
