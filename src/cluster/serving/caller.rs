//! How the admission webhook tells the API server from any other caller: a secret last segment of its path, which only the webhook configuration (cluster-scoped, readable by cluster administrators only) holds.
//!
//! Admission resolves a create against live objects with the controller's credentials; its
//! answer says whether a Secret, a key or a Fileset exists. Answered to anyone who can open a
//! connection, that is an oracle for the names of objects in every namespace. The API server
//! authenticates to no webhook unless its admission configuration gives it a client
//! certificate, so the controller writes a token into the path the API server calls, and the
//! webhook answers only that path. Every replica derives the same token from the key the
//! replicas share, so no new Secret is needed and a new key gives a new token.

use ring::hmac;

/// The token of the webhook's path, derived from the replicas' shared `key` (32 hex
/// characters: 128 bits).
pub fn path_token(key: &[u8]) -> String {
    let key = hmac::Key::new(hmac::HMAC_SHA256, key);
    let tag = hmac::sign(&key, b"errand.dev/admission-webhook-path");
    hex::encode(&tag.as_ref()[..16])
}

/// `path` with `token` as its last segment: the first segment of `path` (the webhook's own
/// path, as the chart writes it) followed by the token, whatever token was there before.
pub fn authenticated_path(path: &str, token: &str) -> String {
    let base = path
        .trim_start_matches('/')
        .split('/')
        .next()
        .unwrap_or_default();
    format!("/{base}/{token}")
}

/// Whether `path` is `base` followed by `token` as its own segment, compared in constant time
/// so that a caller cannot learn the token a byte at a time.
pub fn is_authenticated(path: &str, base: &str, token: &str) -> bool {
    let Some(given) = path
        .strip_prefix(base)
        .and_then(|rest| rest.strip_prefix('/'))
    else {
        return false;
    };
    given.len() == token.len()
        && given
            .bytes()
            .zip(token.bytes())
            .fold(0u8, |diff, (a, b)| diff | (a ^ b))
            == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_token_is_the_same_for_one_key_and_differs_between_keys() {
        let token = path_token(b"0123456789abcdef0123456789abcdef");
        assert_eq!(token.len(), 32);
        assert!(token.bytes().all(|b| b.is_ascii_hexdigit()));
        assert_eq!(token, path_token(b"0123456789abcdef0123456789abcdef"));
        assert_ne!(token, path_token(b"another key of thirty-two chars!"));
    }

    #[test]
    fn the_authenticated_path_replaces_any_earlier_token() {
        assert_eq!(
            authenticated_path("/validate-agentexecution", "t1"),
            "/validate-agentexecution/t1"
        );
        assert_eq!(
            authenticated_path("/validate-agentexecution/old", "t2"),
            "/validate-agentexecution/t2"
        );
    }

    #[test]
    fn only_the_exact_token_authenticates() {
        let base = "/validate-agentexecution";
        assert!(is_authenticated(
            "/validate-agentexecution/abc",
            base,
            "abc"
        ));
        for path in [
            "/validate-agentexecution",
            "/validate-agentexecution/",
            "/validate-agentexecution/abd",
            "/validate-agentexecution/abcd",
            "/validate-agentexecution/ab",
            "/validate-agentexecutionabc",
            "/validate-agentdeployment/abc",
        ] {
            assert!(!is_authenticated(path, base, "abc"), "{path}");
        }
    }
}
