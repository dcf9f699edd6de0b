//! Whether the user may: the SubjectAccessReview each request is checked with, and the refusal a denied review becomes.
//!
//! Pure. The review asks about exactly the attributes the Kubernetes API server authorized
//! before it proxied the request (group `data.errand.dev`, the resource and subresource of the
//! path, `get` or `update`), so one RBAC rule decides both checks; errand repeats the check
//! because it trusts the front proxy for who the user is, not for what the user may do.

use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SubjectAccessReview, SubjectAccessReviewStatus,
};

use super::authn::UserInfo;
use super::route::Attributes;
use super::status::{Refusal, Subject};
use crate::api::data::{DATA_GROUP, DATA_VERSION};

/// The review that asks whether `user` may do what `attributes` say.
pub fn access_review(user: &UserInfo, attributes: &Attributes) -> SubjectAccessReview {
    crate::cluster::access::access_review(
        user,
        ResourceAttributes {
            group: Some(DATA_GROUP.to_owned()),
            version: Some(DATA_VERSION.to_owned()),
            resource: Some(attributes.resource.to_owned()),
            subresource: attributes.subresource.map(str::to_owned),
            verb: Some(attributes.verb.to_owned()),
            namespace: Some(attributes.namespace.clone()),
            name: Some(attributes.name.clone()),
            ..ResourceAttributes::default()
        },
    )
}

/// Allowed, or the 403 the API server would answer with, naming the user, the verb, the
/// resource, the group and the namespace, and the authorizer's reason when it gave one.
pub fn decide(
    user: &UserInfo,
    attributes: &Attributes,
    status: &SubjectAccessReviewStatus,
) -> Result<(), Refusal> {
    if status.allowed && status.denied != Some(true) {
        return Ok(());
    }
    let resource = attributes.resource_path();
    let mut message = format!(
        "{}.{DATA_GROUP} {:?} is forbidden: User {:?} cannot {} resource {:?} in API group {:?} \
         in the namespace {:?}",
        attributes.resource,
        attributes.name,
        user.username,
        attributes.verb,
        resource,
        DATA_GROUP,
        attributes.namespace,
    );
    if let Some(reason) = status.reason.as_deref().filter(|r| !r.is_empty()) {
        message.push_str(": ");
        message.push_str(reason);
    }
    Err(Refusal::new(
        403,
        "Forbidden",
        message,
        Some(Subject {
            resource: &resource,
            name: &attributes.name,
        }),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn alice() -> UserInfo {
        UserInfo {
            username: "alice".into(),
            uid: Some("u-1".into()),
            groups: vec!["system:authenticated".into()],
            extra: [("scopes".to_owned(), vec!["read".to_owned()])].into(),
        }
    }

    fn results_of(namespace: &str) -> Attributes {
        Attributes {
            verb: "get",
            resource: "agentexecutions",
            subresource: Some("results"),
            namespace: namespace.into(),
            name: "calc".into(),
        }
    }

    #[test]
    fn the_review_asks_about_the_user_and_the_attributes_of_the_path() {
        let review = access_review(&alice(), &results_of("team-b"));
        let json = serde_json::to_value(&review).unwrap();
        assert_eq!(
            json["spec"],
            serde_json::json!({
                "user": "alice", "uid": "u-1", "groups": ["system:authenticated"],
                "extra": {"scopes": ["read"]},
                "resourceAttributes": {
                    "group": "data.errand.dev", "version": "v1alpha1",
                    "resource": "agentexecutions", "subresource": "results",
                    "verb": "get", "namespace": "team-b", "name": "calc",
                },
            })
        );
        assert_eq!(json["kind"], "SubjectAccessReview");
    }

    #[test]
    fn a_denial_is_a_403_naming_user_verb_resource_and_namespace() {
        let denied = SubjectAccessReviewStatus {
            allowed: false,
            reason: Some("no RBAC policy matched".into()),
            ..Default::default()
        };
        let refusal = decide(&alice(), &results_of("team-b"), &denied).unwrap_err();
        assert_eq!(refusal.code, 403);
        assert_eq!(
            refusal.status.message.as_deref(),
            Some(
                "agentexecutions.data.errand.dev \"calc\" is forbidden: User \"alice\" cannot get \
                 resource \"agentexecutions/results\" in API group \"data.errand.dev\" in the \
                 namespace \"team-b\": no RBAC policy matched"
            )
        );
        let allowed = SubjectAccessReviewStatus {
            allowed: true,
            ..Default::default()
        };
        assert_eq!(decide(&alice(), &results_of("team-a"), &allowed), Ok(()));
        let vetoed = SubjectAccessReviewStatus {
            allowed: true,
            denied: Some(true),
            ..Default::default()
        };
        assert!(decide(&alice(), &results_of("team-a"), &vetoed).is_err());
    }
}
