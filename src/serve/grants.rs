//! The grant endpoint: a pod's `errand-stage` container trades its projected ServiceAccount token for its execution's signed store URLs, valid for the run's budget from that moment.
//!
//! Grants signed when a pod starts make a run's URLs independent of how long it waited in a
//! queue. The token proves which pod asks: a TokenReview with errand's audience
//! ([`GRANT_TOKEN_AUDIENCE`]) answers the pod's name and uid, and that pod must be the one the
//! execution's Job runs. Every replica answers, leader or not: it needs only the API server
//! and the signing key the replicas share. The checks ([`identity`], [`check_pod`]) are pure;
//! [`GrantEndpoint::handle`] is the shell that fetches what they look at.

use std::sync::Arc;
use std::time::Duration;

use http_body_util::BodyExt;
use hyper::body::{Body, Bytes};
use hyper::{Method, Request, Response, StatusCode};
use jiff::Timestamp;
use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec, TokenReviewStatus};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::api::PostParams;
use kube::{Api, Client};

use super::blobs::{ResponseBody, text};
use crate::api::contract::GRANT_TOKEN_AUDIENCE;
use crate::cluster::listener::{bearer_token, read_body};
use crate::controller::build::SNAPSHOT_KEY;
use crate::controller::config::ControllerConfig;
use crate::controller::metrics::Metrics;
use crate::controller::names::{job_name, snapshot_config_map_name};
use crate::resolve::run_tokens::RunTokens;
use crate::resolve::{RunAllowance, RunBudget, Snapshot};
use crate::runner::end_report::RUN_ENDED_ENDPOINT;
use crate::store::grants::{ReportGrant, UrlSigner, issue_grants};
use crate::store::keys::ExecutionId;

/// The extra field of a pod-bound ServiceAccount token's user naming its pod.
const POD_NAME_EXTRA: &str = "authentication.kubernetes.io/pod-name";
/// The extra field naming the pod's uid.
const POD_UID_EXTRA: &str = "authentication.kubernetes.io/pod-uid";
/// The prefix of a ServiceAccount's user name, before `<namespace>:<name>`.
const SERVICE_ACCOUNT_PREFIX: &str = "system:serviceaccount:";
/// The largest request body: an execution id is well under 1 KiB.
const BODY_LIMIT: usize = 4096;
/// How long one request may take, API calls and signing included; the pod asks again.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(20);

/// The pod a token was issued to, as the TokenReview tells it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TokenIdentity {
    /// The namespace of its ServiceAccount, which is the pod's.
    pub namespace: String,
    /// The pod's name.
    pub pod_name: String,
    /// The pod's uid.
    pub pod_uid: String,
}

/// Why a request for grants is refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// No `Authorization: Bearer` header.
    #[error("no bearer token: send the pod's projected token")]
    NoToken,
    /// The body is not an execution id.
    #[error("the request body is not an execution id: {0}")]
    BadRequest(String),
    /// The API server did not accept the token for errand's audience.
    #[error("the token is not valid for audience {GRANT_TOKEN_AUDIENCE}: {0}")]
    Unauthenticated(String),
    /// The token is valid but bound to no pod (a plain ServiceAccount or user token).
    #[error("the token is not bound to a pod")]
    NotPodBound,
    /// The token's pod is not the execution's.
    #[error("the token's pod {pod} is not the pod of execution {namespace}/{execution}: {why}")]
    NotThisExecution {
        /// The token's pod, `<namespace>/<name>`.
        pod: String,
        /// The execution's namespace.
        namespace: String,
        /// The execution's name.
        execution: String,
        /// What does not match.
        why: String,
    },
}

impl Refusal {
    /// The HTTP status of the refusal: 401 without a token, 400 for a malformed body, 403
    /// otherwise.
    pub fn status(&self) -> StatusCode {
        match self {
            Refusal::NoToken => StatusCode::UNAUTHORIZED,
            Refusal::BadRequest(_) => StatusCode::BAD_REQUEST,
            _ => StatusCode::FORBIDDEN,
        }
    }
}

/// Who a reviewed token belongs to: it must be authenticated for errand's audience and bound to
/// a pod.
pub fn identity(status: &TokenReviewStatus) -> Result<TokenIdentity, Refusal> {
    let audiences = status.audiences.as_deref().unwrap_or_default();
    if status.authenticated != Some(true) || !audiences.iter().any(|a| a == GRANT_TOKEN_AUDIENCE) {
        let why = status.error.clone().filter(|e| !e.is_empty());
        return Err(Refusal::Unauthenticated(
            why.unwrap_or_else(|| "not authenticated".to_owned()),
        ));
    }
    let user = status.user.as_ref().ok_or(Refusal::NotPodBound)?;
    let namespace = user
        .username
        .as_deref()
        .and_then(|u| u.strip_prefix(SERVICE_ACCOUNT_PREFIX))
        .and_then(|rest| rest.split_once(':'))
        .map(|(namespace, _)| namespace.to_owned())
        .ok_or(Refusal::NotPodBound)?;
    let extra = |key: &str| {
        let values = user.extra.as_ref()?.get(key)?;
        match values.as_slice() {
            [value] if !value.is_empty() => Some(value.clone()),
            _ => None,
        }
    };
    Ok(TokenIdentity {
        namespace,
        pod_name: extra(POD_NAME_EXTRA).ok_or(Refusal::NotPodBound)?,
        pod_uid: extra(POD_UID_EXTRA).ok_or(Refusal::NotPodBound)?,
    })
}

/// The controller owner reference of `meta`, if its kind is `kind`.
fn controller_of<'a>(meta: &'a ObjectMeta, kind: &str) -> Option<&'a OwnerReference> {
    meta.owner_references
        .as_ref()?
        .iter()
        .find(|o| o.controller == Some(true) && o.kind == kind)
}

/// Checks that the token's pod is the pod of `execution`: in its namespace, with the uid the
/// token is bound to, controlled by the execution's Job, which the execution (by uid) controls.
/// `pod` and `job` are what the API server holds under the token's pod name and the
/// execution's Job name (`None`: not found).
pub fn check_pod(
    token: &TokenIdentity,
    execution: &ExecutionId,
    pod: Option<&Pod>,
    job: Option<&Job>,
) -> Result<(), Refusal> {
    let refuse = |why: String| Refusal::NotThisExecution {
        pod: format!("{}/{}", token.namespace, token.pod_name),
        namespace: execution.namespace.clone(),
        execution: execution.name.clone(),
        why,
    };
    if token.namespace != execution.namespace {
        return Err(refuse("it is in another namespace".into()));
    }
    let pod = pod.ok_or_else(|| refuse("the pod no longer exists".into()))?;
    if pod.metadata.uid.as_deref() != Some(token.pod_uid.as_str()) {
        return Err(refuse(
            "the token is bound to an earlier pod of that name".into(),
        ));
    }
    let expected_job = job_name(&execution.name);
    if controller_of(&pod.metadata, "Job").map(|o| o.name.as_str()) != Some(expected_job.as_str()) {
        return Err(refuse(format!(
            "the pod is not controlled by Job {expected_job}"
        )));
    }
    let job = job.ok_or_else(|| refuse(format!("Job {expected_job} does not exist")))?;
    let pod_job_uid = controller_of(&pod.metadata, "Job").map(|o| o.uid.as_str());
    if pod_job_uid != job.metadata.uid.as_deref() {
        return Err(refuse(format!(
            "the pod belongs to an earlier Job {expected_job}"
        )));
    }
    let owner = controller_of(&job.metadata, "AgentExecution");
    if owner.map(|o| (o.name.as_str(), o.uid.as_str()))
        != Some((execution.name.as_str(), execution.uid.as_str()))
    {
        return Err(refuse(format!(
            "Job {expected_job} is not controlled by the execution with uid {}",
            execution.uid
        )));
    }
    Ok(())
}

/// Why grants could not be issued, though the request may be good.
#[derive(Debug, thiserror::Error)]
enum Unavailable {
    #[error("{0}: {1}")]
    Api(String, kube::Error),
    #[error("the execution's snapshot: {0}")]
    Snapshot(String),
    #[error("signing: {0}")]
    Sign(#[from] crate::store::grants::GrantError),
    #[error("the request took longer than {0:?}")]
    TimedOut(Duration),
}

/// What a request comes to.
enum Outcome {
    Granted(Vec<u8>),
    Refused(Refusal),
    Unavailable(Unavailable),
}

impl From<Refusal> for Outcome {
    fn from(refusal: Refusal) -> Self {
        Outcome::Refused(refusal)
    }
}

impl From<Unavailable> for Outcome {
    fn from(unavailable: Unavailable) -> Self {
        Outcome::Unavailable(unavailable)
    }
}

/// Issues grants to the pods that prove they are their execution's, at
/// [`GRANTS_ENDPOINT`](crate::store::grant_request::GRANTS_ENDPOINT):
/// a `POST` with `Authorization: Bearer <token>` and the execution's id
/// (`{"namespace", "name", "uid"}`) as its JSON body.
pub struct GrantEndpoint {
    client: Client,
    signer: Arc<dyn UrlSigner>,
    allowance: RunAllowance,
    /// Where runners report their runs' ends and the tokens they report with, when the
    /// replicas share a signing key.
    report: Option<(String, RunTokens)>,
    metrics: Arc<Metrics>,
}

impl GrantEndpoint {
    /// The endpoint: it reviews tokens and reads pods, Jobs and snapshots with `client`, signs
    /// with `signer` for a run's budget under `config`'s allowance, tells runners where to
    /// report their end (`config`'s controller URL and run-ended tokens), and counts what it
    /// signed in `metrics`.
    pub fn new(
        client: Client,
        signer: Arc<dyn UrlSigner>,
        config: &ControllerConfig,
        metrics: Arc<Metrics>,
    ) -> Self {
        let report = config.run_end_tokens.clone().map(|tokens| {
            let base = config.controller_url.trim_end_matches('/');
            (format!("{base}{RUN_ENDED_ENDPOINT}"), tokens)
        });
        Self {
            client,
            signer,
            allowance: config.allowance(),
            report,
            metrics,
        }
    }

    /// Where the run of `execution` reports its end, unless an extension's step saves its
    /// manifest (then only the pod's end tells).
    fn report_grant(&self, execution: &ExecutionId, snapshot: &Snapshot) -> Option<ReportGrant> {
        let (url, tokens) = self
            .report
            .as_ref()
            .filter(|_| snapshot.extension.is_none())?;
        Some(ReportGrant {
            url: url.clone(),
            token: tokens.mint(&execution.namespace, &execution.uid),
        })
    }

    /// Answers one request: 200 with the grants, 401/400/403 for a refusal (the pod gives up),
    /// 503 when the API server or the signer could not answer (the pod asks again).
    pub async fn handle<B>(&self, request: Request<B>) -> Response<ResponseBody>
    where
        B: Body<Data = Bytes> + Send + 'static,
        B::Error: std::error::Error + Send + Sync + 'static,
    {
        if request.method() != Method::POST {
            return text(StatusCode::METHOD_NOT_ALLOWED, "only POST\n");
        }
        let outcome = match tokio::time::timeout(REQUEST_TIMEOUT, self.grant(request)).await {
            Ok(outcome) => outcome,
            Err(_) => Unavailable::TimedOut(REQUEST_TIMEOUT).into(),
        };
        match outcome {
            Outcome::Granted(json) => Response::builder()
                .status(StatusCode::OK)
                .header("content-type", "application/json")
                .header("cache-control", "no-store")
                .body(
                    http_body_util::Full::new(Bytes::from(json))
                        .map_err(|n| match n {})
                        .boxed_unsync(),
                )
                .expect("a response from valid parts"),
            Outcome::Refused(refusal) => {
                tracing::warn!(%refusal, "refused a request for grants");
                text(refusal.status(), format!("{refusal}\n"))
            }
            Outcome::Unavailable(e) => {
                tracing::warn!(error = %e, "could not issue grants");
                text(StatusCode::SERVICE_UNAVAILABLE, format!("{e}\n"))
            }
        }
    }

    async fn grant<B>(&self, request: Request<B>) -> Outcome
    where
        B: Body<Data = Bytes> + Send + 'static,
        B::Error: std::error::Error + Send + Sync + 'static,
    {
        let Some(token) = bearer_token(request.headers()) else {
            return Refusal::NoToken.into();
        };
        let body = match read_body(request.into_body(), BODY_LIMIT).await {
            Ok(body) => body,
            Err(e) => return Refusal::BadRequest(e.to_string()).into(),
        };
        let execution: ExecutionId = match serde_json::from_slice(&body) {
            Ok(execution) => execution,
            Err(e) => return Refusal::BadRequest(e.to_string()).into(),
        };
        match self.issue(&token, &execution).await {
            Ok(json) => {
                tracing::info!(
                    namespace = %execution.namespace,
                    execution = %execution.name,
                    "issued grants"
                );
                Outcome::Granted(json)
            }
            Err(outcome) => outcome,
        }
    }

    /// Reviews the token, checks its pod against the execution and signs the grants.
    async fn issue(&self, token: &str, execution: &ExecutionId) -> Result<Vec<u8>, Outcome> {
        let review = TokenReview {
            spec: TokenReviewSpec {
                token: Some(token.to_owned()),
                audiences: Some(vec![GRANT_TOKEN_AUDIENCE.to_owned()]),
            },
            ..TokenReview::default()
        };
        let reviewed = Api::<TokenReview>::all(self.client.clone())
            .create(&PostParams::default(), &review)
            .await
            .map_err(|e| Unavailable::Api("reviewing the token".into(), e))?;
        let token = identity(&reviewed.status.unwrap_or_default())?;
        let namespace = execution.namespace.as_str();
        // Nothing is read in another namespace than the token's: check_pod refuses that first.
        let (pod, job) = if token.namespace == namespace {
            self.pod_and_job(&token.pod_name, execution).await?
        } else {
            (None, None)
        };
        check_pod(&token, execution, pod.as_ref(), job.as_ref())?;
        let snapshot = self.snapshot(execution).await?;
        let expires = RunBudget::of(&snapshot, self.allowance).urls_expire_at(Timestamp::now());
        let signing = std::time::Instant::now();
        let grants = issue_grants(self.signer.as_ref(), execution, &snapshot, expires).await;
        self.metrics
            .grants_issued(signing.elapsed().as_secs_f64(), grants.is_ok());
        let mut grants = grants.map_err(Unavailable::from)?;
        grants.report = self.report_grant(execution, &snapshot);
        Ok(serde_json::to_vec(&grants).expect("grants always serialize"))
    }

    /// The pod `pod_name` and the execution's Job, in its namespace, if they exist.
    async fn pod_and_job(
        &self,
        pod_name: &str,
        execution: &ExecutionId,
    ) -> Result<(Option<Pod>, Option<Job>), Unavailable> {
        let namespace = execution.namespace.as_str();
        let pod = Api::<Pod>::namespaced(self.client.clone(), namespace)
            .get_opt(pod_name)
            .await
            .map_err(|e| Unavailable::Api(format!("reading pod {pod_name}"), e))?;
        let job_name = job_name(&execution.name);
        let job = Api::<Job>::namespaced(self.client.clone(), namespace)
            .get_opt(&job_name)
            .await
            .map_err(|e| Unavailable::Api(format!("reading Job {job_name}"), e))?;
        Ok((pod, job))
    }

    /// The execution's snapshot, from its ConfigMap (which the execution must own).
    async fn snapshot(&self, execution: &ExecutionId) -> Result<Snapshot, Unavailable> {
        let name = snapshot_config_map_name(&execution.name);
        let config_map = Api::<ConfigMap>::namespaced(self.client.clone(), &execution.namespace)
            .get(&name)
            .await
            .map_err(|e| Unavailable::Api(format!("reading ConfigMap {name}"), e))?;
        let owned = controller_of(&config_map.metadata, "AgentExecution")
            .is_some_and(|o| o.uid == execution.uid);
        if !owned {
            return Err(Unavailable::Snapshot(format!(
                "ConfigMap {name} is not the execution's"
            )));
        }
        let json = config_map
            .data
            .as_ref()
            .and_then(|d| d.get(SNAPSHOT_KEY))
            .ok_or_else(|| {
                Unavailable::Snapshot(format!("ConfigMap {name} has no {SNAPSHOT_KEY}"))
            })?;
        serde_json::from_str(json).map_err(|e| Unavailable::Snapshot(e.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use k8s_openapi::api::authentication::v1::UserInfo;

    use super::*;

    fn reviewed(audience: &str, user: &str, extra: &[(&str, &str)]) -> TokenReviewStatus {
        TokenReviewStatus {
            authenticated: Some(true),
            audiences: Some(vec![audience.to_owned()]),
            user: Some(UserInfo {
                username: Some(user.to_owned()),
                extra: Some(
                    extra
                        .iter()
                        .map(|(k, v)| ((*k).to_owned(), vec![(*v).to_owned()]))
                        .collect::<BTreeMap<_, _>>(),
                ),
                ..UserInfo::default()
            }),
            error: None,
        }
    }

    fn pod_token() -> TokenReviewStatus {
        reviewed(
            GRANT_TOKEN_AUDIENCE,
            "system:serviceaccount:team-a:default",
            &[
                (POD_NAME_EXTRA, "errand-calc-x7k2p"),
                (POD_UID_EXTRA, "pod-uid"),
            ],
        )
    }

    fn owner(kind: &str, name: &str, uid: &str) -> OwnerReference {
        OwnerReference {
            api_version: "v1".into(),
            kind: kind.into(),
            name: name.into(),
            uid: uid.into(),
            controller: Some(true),
            ..OwnerReference::default()
        }
    }

    fn pod_of(uid: &str, job_uid: &str) -> Pod {
        Pod {
            metadata: ObjectMeta {
                name: Some("errand-calc-x7k2p".into()),
                uid: Some(uid.into()),
                owner_references: Some(vec![owner("Job", "errand-calc", job_uid)]),
                ..ObjectMeta::default()
            },
            ..Pod::default()
        }
    }

    fn job_of(execution_uid: &str) -> Job {
        Job {
            metadata: ObjectMeta {
                name: Some("errand-calc".into()),
                uid: Some("job-uid".into()),
                owner_references: Some(vec![owner("AgentExecution", "calc", execution_uid)]),
                ..ObjectMeta::default()
            },
            ..Job::default()
        }
    }

    #[test]
    fn a_pod_bound_token_for_errands_audience_names_its_pod() {
        assert_eq!(
            identity(&pod_token()),
            Ok(TokenIdentity {
                namespace: "team-a".into(),
                pod_name: "errand-calc-x7k2p".into(),
                pod_uid: "pod-uid".into(),
            })
        );
    }

    #[test]
    fn other_tokens_are_refused() {
        let mut unauthenticated = pod_token();
        unauthenticated.authenticated = Some(false);
        unauthenticated.error = Some("token audiences [\"api\"] is invalid".into());
        assert_eq!(
            identity(&unauthenticated),
            Err(Refusal::Unauthenticated(
                "token audiences [\"api\"] is invalid".into()
            ))
        );
        let other_audience = reviewed(
            "https://kubernetes.default.svc",
            "system:serviceaccount:team-a:default",
            &[(POD_NAME_EXTRA, "p"), (POD_UID_EXTRA, "u")],
        );
        assert!(matches!(
            identity(&other_audience),
            Err(Refusal::Unauthenticated(_))
        ));
        let unbound = reviewed(
            GRANT_TOKEN_AUDIENCE,
            "system:serviceaccount:team-a:default",
            &[],
        );
        assert_eq!(identity(&unbound), Err(Refusal::NotPodBound));
        let user = reviewed(
            GRANT_TOKEN_AUDIENCE,
            "alice",
            &[(POD_NAME_EXTRA, "p"), (POD_UID_EXTRA, "u")],
        );
        assert_eq!(identity(&user), Err(Refusal::NotPodBound));
    }

    #[test]
    fn only_the_executions_own_pod_gets_its_grants() {
        let token = identity(&pod_token()).unwrap();
        let execution = ExecutionId::test();
        let (pod, job) = (pod_of("pod-uid", "job-uid"), job_of(&execution.uid));
        assert_eq!(
            check_pod(&token, &execution, Some(&pod), Some(&job)),
            Ok(())
        );

        let why = |result: Result<(), Refusal>| match result {
            Err(Refusal::NotThisExecution { why, .. }) => why,
            other => panic!("expected a refusal, got {other:?}"),
        };
        let other_execution = ExecutionId {
            name: "other".into(),
            ..ExecutionId::test()
        };
        assert_eq!(
            why(check_pod(&token, &other_execution, Some(&pod), Some(&job))),
            "the pod is not controlled by Job errand-other"
        );
        let recreated = ExecutionId {
            uid: "another-uid".into(),
            ..ExecutionId::test()
        };
        assert!(
            why(check_pod(&token, &recreated, Some(&pod), Some(&job)))
                .starts_with("Job errand-calc is not controlled by the execution")
        );
        let elsewhere = ExecutionId {
            namespace: "team-b".into(),
            ..ExecutionId::test()
        };
        assert_eq!(
            why(check_pod(&token, &elsewhere, Some(&pod), Some(&job))),
            "it is in another namespace"
        );
        assert_eq!(
            why(check_pod(&token, &execution, None, Some(&job))),
            "the pod no longer exists"
        );
        let replaced = pod_of("new-pod-uid", "job-uid");
        assert_eq!(
            why(check_pod(&token, &execution, Some(&replaced), Some(&job))),
            "the token is bound to an earlier pod of that name"
        );
        let orphan = pod_of("pod-uid", "old-job-uid");
        assert_eq!(
            why(check_pod(&token, &execution, Some(&orphan), Some(&job))),
            "the pod belongs to an earlier Job errand-calc"
        );
        assert_eq!(
            why(check_pod(&token, &execution, Some(&pod), None)),
            "Job errand-calc does not exist"
        );
    }

    #[test]
    fn refusals_answer_401_400_or_403() {
        assert_eq!(Refusal::NoToken.status(), StatusCode::UNAUTHORIZED);
        assert_eq!(
            Refusal::BadRequest("x".into()).status(),
            StatusCode::BAD_REQUEST
        );
        assert_eq!(Refusal::NotPodBound.status(), StatusCode::FORBIDDEN);
    }
}
