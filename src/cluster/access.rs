//! Who a caller is and what they may do: the user a request is made for, and the SubjectAccessReview that asks the API server's authorizer about them.
//!
//! Pure. The data API learns the user from the front proxy, the gateway from a TokenReview;
//! both ask the same question the same way.

use std::collections::BTreeMap;

use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};

/// The user a request is made for.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct UserInfo {
    /// The user name.
    pub username: String,
    /// The user's uid, when known.
    pub uid: Option<String>,
    /// The user's groups.
    pub groups: Vec<String>,
    /// Extra attributes (lowercase keys), such as the scopes of a token.
    pub extra: BTreeMap<String, Vec<String>>,
}

/// The review that asks whether `user` may do what `attributes` say.
pub fn access_review(user: &UserInfo, attributes: ResourceAttributes) -> SubjectAccessReview {
    SubjectAccessReview {
        metadata: Default::default(),
        spec: SubjectAccessReviewSpec {
            user: Some(user.username.clone()),
            uid: user.uid.clone(),
            groups: Some(user.groups.clone()),
            extra: (!user.extra.is_empty()).then(|| user.extra.clone()),
            resource_attributes: Some(attributes),
            non_resource_attributes: None,
        },
        status: None,
    }
}
