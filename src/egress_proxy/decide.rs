//! The egress proxy's decisions, pure: who is calling (the one running errand pod at the source address), where to (a CONNECT authority or an absolute `http` URL), and whether that run's host names allow it; and on the model route, which of the run's models a call is for and whether it bears the run's placeholder token.

use std::net::IpAddr;

use hyper::{Method, StatusCode, Uri};
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;

use crate::api::EgressHost;
use crate::api::contract::{
    DEPLOYMENT_UID_LABEL, EGRESS_HOSTS_ANNOTATION, EXECUTION_UID_LABEL, MODEL_ROUTES_ANNOTATION,
};
use crate::resolve::egress::host_allowed;
use crate::resolve::model_credentials::{MODEL_ROUTE_PREFIX, ProxiedModel, model_path};
use crate::resolve::run_tokens::RunTokens;

/// The largest request body the model route carries (it is read whole, so the upstream gets
/// its length).
pub const MAX_MODEL_REQUEST_BYTES: usize = 16 << 20;

/// Where a request goes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    /// The host name, lowercase, without a trailing dot.
    pub host: String,
    /// The TCP port.
    pub port: u16,
}

/// The calling run: its pod, the host names it may reach and the models it calls.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Caller {
    /// `namespace/pod`, for the log.
    pub pod: String,
    /// The pod's namespace: the run's, where its model keys' Secrets are.
    pub namespace: String,
    /// The uid of the run (execution or deployment) the pod belongs to, from its label.
    pub run_uid: Option<String>,
    /// The run's host rules (none when its pod carries none).
    pub hosts: Vec<EgressHost>,
    /// The run's proxied models (none when its pod carries none).
    pub models: Vec<ProxiedModel>,
}

/// Why the proxy refuses a request. The caller sees [`Refusal::message`], which names nothing
/// it did not send; the log names the rest.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// No running errand pod has the source address.
    UnknownCaller,
    /// More than one pod has it, so the caller cannot be told.
    AmbiguousCaller,
    /// The caller's pod carries a host list or model list that does not parse.
    UnreadableRules,
    /// Neither a CONNECT to `host:port` nor an absolute `http://` URL.
    Malformed(&'static str),
    /// The target is an address: the proxy serves host names.
    AddressTarget,
    /// The run's host rules do not list the target.
    NotListed,
    /// Every address of the name is in a range the outbound policy denies (or it has none).
    DeniedAddress,
    /// No connection in time, or refused.
    Unreachable,
    /// The model route names a model the run does not proxy.
    UnknownModel,
    /// The model route's bearer token is not the calling run's placeholder.
    WrongToken,
    /// The model's key cannot be read from its Secret.
    KeyUnavailable,
    /// The request to the model is larger than the route carries.
    TooLarge,
}

impl Refusal {
    /// The answer's status.
    pub fn status(&self) -> StatusCode {
        match self {
            Refusal::Malformed(_) => StatusCode::BAD_REQUEST,
            Refusal::Unreachable | Refusal::KeyUnavailable => StatusCode::BAD_GATEWAY,
            Refusal::UnknownModel => StatusCode::NOT_FOUND,
            Refusal::WrongToken => StatusCode::UNAUTHORIZED,
            Refusal::TooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            _ => StatusCode::FORBIDDEN,
        }
    }

    /// A short, stable label for the log and metrics.
    pub fn label(&self) -> &'static str {
        match self {
            Refusal::UnknownCaller => "unknown_caller",
            Refusal::AmbiguousCaller => "ambiguous_caller",
            Refusal::UnreadableRules => "unreadable_rules",
            Refusal::Malformed(_) => "malformed",
            Refusal::AddressTarget => "address",
            Refusal::NotListed => "not_listed",
            Refusal::DeniedAddress => "denied_address",
            Refusal::Unreachable => "unreachable",
            Refusal::UnknownModel => "unknown_model",
            Refusal::WrongToken => "wrong_token",
            Refusal::KeyUnavailable => "key_unavailable",
            Refusal::TooLarge => "too_large",
        }
    }

    /// One line for the caller about `target` (when known).
    pub fn message(&self, target: Option<&Target>) -> String {
        let to = target.map_or_else(String::new, |t| format!(" {}:{}", t.host, t.port));
        match self {
            Refusal::UnknownCaller | Refusal::AmbiguousCaller => {
                "errand's egress proxy serves only the running pods of runs whose environment \
                 lists egress.hosts or proxies model credentials"
                    .to_owned()
            }
            Refusal::UnreadableRules => {
                "this pod's host or model list cannot be read; recreate the run".to_owned()
            }
            Refusal::Malformed(what) => format!("not a proxy request: {what}"),
            Refusal::AddressTarget => format!(
                "refused{to}: the proxy reaches host names only; an address is reached directly \
                 when the environment lists its range in egress.allow"
            ),
            Refusal::NotListed => format!(
                "refused{to}: not in this run's egress.hosts (an operator or the environment's \
                 owner adds it there)"
            ),
            Refusal::DeniedAddress => {
                format!("refused{to}: the name resolves only to addresses runs may not reach")
            }
            Refusal::Unreachable => format!("no connection{to}"),
            Refusal::UnknownModel => {
                "no model of this run with proxied credentials has that alias".to_owned()
            }
            Refusal::WrongToken => "refused: the bearer token is not this run's placeholder \
                                    (it is good only from the run's own pod while it runs)"
                .to_owned(),
            Refusal::KeyUnavailable => {
                "the model's key cannot be read from its Secret; ask the environment's owner"
                    .to_owned()
            }
            Refusal::TooLarge => format!(
                "the request is larger than the model route carries ({} MiB)",
                MAX_MODEL_REQUEST_BYTES >> 20
            ),
        }
    }
}

/// The caller at `address`: the one running pod among `pods` with that address.
pub fn caller<'a>(
    pods: impl IntoIterator<Item = &'a Pod>,
    address: IpAddr,
) -> Result<Caller, Refusal> {
    let address = address.to_canonical().to_string();
    let mut found = pods.into_iter().filter(|pod| {
        let Some(status) = &pod.status else {
            return false;
        };
        let has_address = status.pod_ip.as_deref() == Some(address.as_str())
            || status.pod_ips.iter().flatten().any(|ip| ip.ip == address);
        has_address && status.phase.as_deref() == Some("Running")
    });
    let pod = found.next().ok_or(Refusal::UnknownCaller)?;
    if found.next().is_some() {
        return Err(Refusal::AmbiguousCaller);
    }
    let labels = pod.labels();
    let namespace = pod.namespace().unwrap_or_default();
    Ok(Caller {
        pod: format!("{namespace}/{}", pod.name_any()),
        run_uid: labels
            .get(EXECUTION_UID_LABEL)
            .or_else(|| labels.get(DEPLOYMENT_UID_LABEL))
            .cloned(),
        namespace,
        hosts: annotated(pod, EGRESS_HOSTS_ANNOTATION)?,
        models: annotated(pod, MODEL_ROUTES_ANNOTATION)?,
    })
}

/// The list (JSON) `pod` carries in `annotation`; none when it carries none.
fn annotated<T: serde::de::DeserializeOwned>(
    pod: &Pod,
    annotation: &str,
) -> Result<Vec<T>, Refusal> {
    match pod.annotations().get(annotation) {
        Some(json) => serde_json::from_str(json).map_err(|_| Refusal::UnreadableRules),
        None => Ok(Vec::new()),
    }
}

/// Whether a request is for the model route: origin form (not a proxy request), on its path.
pub fn is_model_request(method: &Method, uri: &Uri) -> bool {
    method != Method::CONNECT
        && uri.scheme().is_none()
        && uri.path().starts_with(MODEL_ROUTE_PREFIX)
}

/// A call on the model route: the model and the URL it goes to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ModelCall {
    /// The proxied model.
    pub model: ProxiedModel,
    /// The model's `base_url` with the rest of the request's path and its query.
    pub upstream: String,
}

/// The model call `caller` makes to `path_and_query` with `authorization`: its own model, and
/// its own placeholder token as the bearer.
pub fn model_call(
    caller: &Caller,
    path_and_query: &str,
    authorization: Option<&str>,
    tokens: &RunTokens,
) -> Result<ModelCall, Refusal> {
    let (alias, rest) =
        model_path(path_and_query).ok_or(Refusal::Malformed("not a path on the model route"))?;
    let model = caller
        .models
        .iter()
        .find(|model| model.alias == alias)
        .ok_or(Refusal::UnknownModel)?;
    let presented = authorization
        .and_then(|value| value.split_once(' '))
        .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
        .map(|(_, token)| token.trim());
    let run_uid = caller.run_uid.as_deref().ok_or(Refusal::WrongToken)?;
    match presented {
        Some(token) if tokens.verify(&caller.namespace, run_uid, token) => {}
        _ => return Err(Refusal::WrongToken),
    }
    let upstream = if rest.is_empty() {
        model.base_url.clone()
    } else {
        format!("{}/{rest}", model.base_url)
    };
    Ok(ModelCall {
        model: model.clone(),
        upstream,
    })
}

/// Where a request goes: a CONNECT's `host:port`, or a plain request's absolute `http://` URL
/// (port 80 unless it names one).
pub fn target(method: &Method, uri: &Uri) -> Result<Target, Refusal> {
    let (host, port) = if method == Method::CONNECT {
        let authority = uri
            .authority()
            .ok_or(Refusal::Malformed("CONNECT needs host:port"))?;
        let port = authority
            .port_u16()
            .ok_or(Refusal::Malformed("CONNECT needs host:port"))?;
        (authority.host(), port)
    } else {
        if uri.scheme_str() != Some("http") {
            return Err(Refusal::Malformed(
                "a plain request names an absolute http:// URL (HTTPS goes through CONNECT)",
            ));
        }
        let host = uri
            .host()
            .ok_or(Refusal::Malformed("the URL names no host"))?;
        (host, uri.port_u16().unwrap_or(80))
    };
    let host = host.trim_end_matches('.').to_ascii_lowercase();
    if host.trim_matches(['[', ']']).parse::<IpAddr>().is_ok() || port == 0 {
        return Err(Refusal::AddressTarget);
    }
    Ok(Target { host, port })
}

/// Whether `caller` may reach `target`.
pub fn decide(caller: &Caller, target: &Target) -> Result<(), Refusal> {
    if host_allowed(&caller.hosts, &target.host, target.port) {
        Ok(())
    } else {
        Err(Refusal::NotListed)
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::{PodIP, PodStatus};
    use std::collections::BTreeMap;

    use super::*;

    fn pod(name: &str, ip: &str, phase: &str, hosts: Option<&str>) -> Pod {
        let mut pod = Pod::default();
        pod.metadata.name = Some(name.to_owned());
        pod.metadata.namespace = Some("team".to_owned());
        pod.metadata.annotations = hosts
            .map(|hosts| BTreeMap::from([(EGRESS_HOSTS_ANNOTATION.to_owned(), hosts.to_owned())]));
        pod.status = Some(PodStatus {
            phase: Some(phase.to_owned()),
            pod_ip: Some(ip.to_owned()),
            pod_ips: Some(vec![PodIP { ip: ip.to_owned() }]),
            ..PodStatus::default()
        });
        pod
    }

    #[test]
    fn the_caller_is_the_one_running_pod_at_the_address() {
        let hosts = r#"[{"host":"api.example.com","ports":[443]}]"#;
        let pods = [
            pod("run", "10.0.0.5", "Running", Some(hosts)),
            pod("done", "10.0.0.6", "Succeeded", Some(hosts)),
            pod("twin-a", "10.0.0.7", "Running", None),
            pod("twin-b", "10.0.0.7", "Running", None),
            pod("bad", "10.0.0.8", "Running", Some("{not json")),
        ];
        let at = |ip: &str| caller(&pods, ip.parse().unwrap());
        let found = at("10.0.0.5").unwrap();
        assert_eq!(found.pod, "team/run");
        assert_eq!(found.hosts[0].host, "api.example.com");
        assert_eq!(at("::ffff:10.0.0.5").unwrap().pod, "team/run");
        assert_eq!(
            at("10.0.0.6"),
            Err(Refusal::UnknownCaller),
            "a finished pod"
        );
        assert_eq!(at("10.0.0.9"), Err(Refusal::UnknownCaller));
        assert_eq!(at("10.0.0.7"), Err(Refusal::AmbiguousCaller));
        assert_eq!(at("10.0.0.8"), Err(Refusal::UnreadableRules));
    }

    #[test]
    fn a_target_is_a_connect_authority_or_an_absolute_http_url_and_never_an_address() {
        let target_of = |method: Method, uri: &str| target(&method, &uri.parse().unwrap());
        assert_eq!(
            target_of(Method::CONNECT, "API.example.com.:443"),
            Ok(Target {
                host: "api.example.com".into(),
                port: 443
            })
        );
        assert_eq!(
            target_of(Method::GET, "http://example.com/x?y"),
            Ok(Target {
                host: "example.com".into(),
                port: 80
            })
        );
        for (method, uri) in [
            (Method::GET, "/relative"),
            (Method::GET, "https://example.com/"),
            (Method::CONNECT, "example.com"),
        ] {
            assert!(
                matches!(target_of(method, uri), Err(Refusal::Malformed(_))),
                "{uri}"
            );
        }
        for uri in ["169.254.169.254:80", "[::1]:443", "127.0.0.1:0"] {
            assert_eq!(
                target_of(Method::CONNECT, uri),
                Err(Refusal::AddressTarget),
                "{uri}"
            );
        }
    }

    #[test]
    fn a_caller_reaches_only_what_its_hosts_list() {
        let caller = Caller {
            pod: "team/run".into(),
            hosts: crate::api::Egress::default()
                .with_hosts(&[("api.example.com", &[443])])
                .hosts,
            ..Caller::default()
        };
        let to = |host: &str, port| Target {
            host: host.into(),
            port,
        };
        assert_eq!(decide(&caller, &to("api.example.com", 443)), Ok(()));
        assert_eq!(
            decide(&caller, &to("api.example.com", 80)),
            Err(Refusal::NotListed)
        );
        let refusal = decide(&caller, &to("other.example.com", 443)).unwrap_err();
        assert!(
            refusal
                .message(Some(&to("other.example.com", 443)))
                .contains("other.example.com:443: not in this run's egress.hosts")
        );
    }
}
