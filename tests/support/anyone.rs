//! A gateway authorizer that lets every caller in, as one user: for tests of what the gateway does once a caller is authorized.

use futures::future::BoxFuture;

use errand::cluster::access::UserInfo;
use errand::gateway::auth::Authorizer;
use errand::gateway::refusal::Refusal;

/// Authorizes every caller as user `anyone`.
pub struct Anyone;

impl Authorizer for Anyone {
    fn authorize<'a>(
        &'a self,
        _: Option<&'a str>,
        _: &'a str,
        _: Option<&'a str>,
    ) -> BoxFuture<'a, Result<UserInfo, Refusal>> {
        Box::pin(async {
            Ok(UserInfo {
                username: "anyone".to_owned(),
                uid: None,
                groups: Vec::new(),
                extra: Default::default(),
            })
        })
    }
}
