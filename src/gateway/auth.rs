//! Who may invoke a deployment: the caller's bearer token checked with a TokenReview, then a SubjectAccessReview of `create` on `agentdeployments/invoke` in the namespace, each answer kept for a few seconds.
//!
//! [`decide`] is pure; [`ClusterAuthorizer`] asks the API server. Answers (allowed or
//! refused) are cached for [`CACHE_SECONDS`] by the token's digest, namespace and
//! deployment, as the API server's own webhook authenticator and authorizer do, so a chat does
//! not cost two API calls a message; a failure to ask is never cached.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec, TokenReviewStatus};
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SubjectAccessReview, SubjectAccessReviewStatus,
};
use kube::api::PostParams;
use kube::{Api, Client};
use sha2::{Digest, Sha256};

use super::answer_cache::AnswerCache;
use super::refusal::Refusal;
use crate::api::GROUP;
use crate::cluster::access::{UserInfo, access_review};

/// How long an answer is reused.
pub const CACHE_SECONDS: u64 = 10;
/// The most answers kept at once (each a token digest, a namespace and a name).
pub const CACHE_CAPACITY: usize = 4096;
/// The resource and subresource a caller needs `create` on.
pub const INVOKE_RESOURCE: (&str, &str) = ("agentdeployments", "invoke");

/// Decides whether a token may invoke a deployment.
pub trait Authorizer: Send + Sync {
    /// The caller, when the holder of `token` may invoke deployment `name` in `namespace`
    /// (any deployment there when `None`: a request by agent).
    fn authorize<'a>(
        &'a self,
        token: Option<&'a str>,
        namespace: &'a str,
        name: Option<&'a str>,
    ) -> BoxFuture<'a, Result<UserInfo, Refusal>>;
}

/// The user a reviewed token belongs to, or 401.
pub fn user(status: &TokenReviewStatus) -> Result<UserInfo, Refusal> {
    if status.authenticated != Some(true) {
        let why = status.error.as_deref().unwrap_or("the token is not valid");
        return Err(Refusal::new(
            401,
            "Unauthorized",
            format!("the bearer token was not accepted: {why}"),
        ));
    }
    let user = status.user.clone().unwrap_or_default();
    Ok(UserInfo {
        username: user.username.unwrap_or_default(),
        uid: user.uid,
        groups: user.groups.unwrap_or_default(),
        extra: user.extra.unwrap_or_default().into_iter().collect(),
    })
}

/// The SubjectAccessReview of `user` invoking `name` (or any deployment) in `namespace`.
pub fn invoke_review(user: &UserInfo, namespace: &str, name: Option<&str>) -> SubjectAccessReview {
    let (resource, subresource) = INVOKE_RESOURCE;
    access_review(
        user,
        ResourceAttributes {
            group: Some(GROUP.to_owned()),
            resource: Some(resource.to_owned()),
            subresource: Some(subresource.to_owned()),
            verb: Some("create".to_owned()),
            namespace: Some(namespace.to_owned()),
            name: name.map(str::to_owned),
            ..ResourceAttributes::default()
        },
    )
}

/// Allowed, or 403 naming the user, the verb, the resource and the namespace.
pub fn decide(
    user: &UserInfo,
    namespace: &str,
    name: Option<&str>,
    status: &SubjectAccessReviewStatus,
) -> Result<(), Refusal> {
    if status.allowed && status.denied != Some(true) {
        return Ok(());
    }
    let (resource, subresource) = INVOKE_RESOURCE;
    let what = name.map_or_else(
        || "agentdeployments".to_owned(),
        |n| format!("agentdeployment {n:?}"),
    );
    let mut message = format!(
        "User {:?} cannot create resource \"{resource}/{subresource}\" in API group {GROUP:?} in \
         the namespace {namespace:?} ({what})",
        user.username
    );
    if let Some(reason) = status.reason.as_deref().filter(|r| !r.is_empty()) {
        message.push_str(": ");
        message.push_str(reason);
    }
    Err(Refusal::new(403, "Forbidden", message))
}

/// What an answer is cached by: the token's sha256, the namespace and the deployment.
type CacheKey = (Vec<u8>, String, Option<String>);

/// Asks the API server, with a short cache.
pub struct ClusterAuthorizer {
    client: Client,
    cache: Mutex<AnswerCache<CacheKey, Result<UserInfo, Refusal>>>,
}

impl ClusterAuthorizer {
    /// An authorizer asking through `client`.
    pub fn new(client: Client) -> Self {
        Self {
            client,
            cache: Mutex::new(AnswerCache::new(
                Duration::from_secs(CACHE_SECONDS),
                CACHE_CAPACITY,
            )),
        }
    }

    async fn ask(
        &self,
        token: &str,
        namespace: &str,
        name: Option<&str>,
    ) -> Result<UserInfo, Refusal> {
        let unavailable = |what: &str, e: kube::Error| {
            Refusal::new(503, "Unavailable", format!("{what} failed: {e}"))
        };
        let review = TokenReview {
            spec: TokenReviewSpec {
                token: Some(token.to_owned()),
                audiences: None,
            },
            ..TokenReview::default()
        };
        let reviewed = Api::<TokenReview>::all(self.client.clone())
            .create(&PostParams::default(), &review)
            .await
            .map_err(|e| unavailable("reviewing the token", e))?;
        let user = user(&reviewed.status.unwrap_or_default())?;
        let access = Api::<SubjectAccessReview>::all(self.client.clone())
            .create(
                &PostParams::default(),
                &invoke_review(&user, namespace, name),
            )
            .await
            .map_err(|e| unavailable("reviewing access", e))?;
        decide(&user, namespace, name, &access.status.unwrap_or_default())?;
        Ok(user)
    }
}

impl Authorizer for ClusterAuthorizer {
    fn authorize<'a>(
        &'a self,
        token: Option<&'a str>,
        namespace: &'a str,
        name: Option<&'a str>,
    ) -> BoxFuture<'a, Result<UserInfo, Refusal>> {
        Box::pin(async move {
            let token = token.ok_or_else(|| {
                Refusal::new(
                    401,
                    "Unauthorized",
                    "no bearer token: send Authorization: Bearer <token>",
                )
            })?;
            let key = (
                Sha256::digest(token.as_bytes()).to_vec(),
                namespace.to_owned(),
                name.map(str::to_owned),
            );
            let cached = self
                .cache
                .lock()
                .expect("not poisoned")
                .get(&key, Instant::now());
            if let Some(answer) = cached {
                return answer;
            }
            let answer = self.ask(token, namespace, name).await;
            if answer.as_ref().is_err_and(|r| r.status == 503) {
                return answer;
            }
            self.cache
                .lock()
                .expect("not poisoned")
                .insert(key, answer.clone(), Instant::now());
            answer
        })
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::authentication::v1::UserInfo as ReviewedUser;

    use super::*;

    #[test]
    fn an_unauthenticated_token_is_401_and_a_user_is_read_from_the_review() {
        let refused = user(&TokenReviewStatus::default()).unwrap_err();
        assert_eq!(refused.status, 401);
        let alice = user(&TokenReviewStatus {
            authenticated: Some(true),
            user: Some(ReviewedUser {
                username: Some("system:serviceaccount:team-a:app".into()),
                groups: Some(vec!["system:serviceaccounts".into()]),
                ..ReviewedUser::default()
            }),
            ..TokenReviewStatus::default()
        })
        .unwrap();
        assert_eq!(alice.username, "system:serviceaccount:team-a:app");
    }

    #[test]
    fn the_review_asks_for_create_on_the_invoke_subresource() {
        let alice = UserInfo {
            username: "alice".into(),
            ..UserInfo::default()
        };
        let review = serde_json::to_value(invoke_review(&alice, "team-a", Some("calc"))).unwrap();
        assert_eq!(
            review["spec"]["resourceAttributes"],
            serde_json::json!({
                "group": "errand.dev", "resource": "agentdeployments", "subresource": "invoke",
                "verb": "create", "namespace": "team-a", "name": "calc",
            })
        );
        let denied = decide(
            &alice,
            "team-a",
            Some("calc"),
            &SubjectAccessReviewStatus::default(),
        )
        .unwrap_err();
        assert_eq!(denied.status, 403);
        assert!(
            denied.message.contains("\"agentdeployments/invoke\""),
            "{}",
            denied.message
        );
    }
}
