//! Run tokens: what a run's pod presents to errand, minted per run and per purpose as an HMAC under the controller's signing key, so every replica agrees and no one without the key can make one.
//!
//! Two purposes share the key and never each other's tokens: the model route's placeholder
//! (`errand-run-…`, see [`super::model_credentials`]) and the run-ended report's bearer
//! (`errand-end-…`, see [`crate::runner::end_report`]). The same key also seals what the
//! controller records on an execution for itself ([`RunTokens::seal`]).

use base64::Engine;
use ring::hmac;

/// What a token is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Purpose {
    /// The placeholder of a proxied model's key, presented to the model route.
    ModelCredentials,
    /// The bearer of the runner's run-ended report.
    RunEnded,
}

impl Purpose {
    fn prefix(self) -> &'static str {
        match self {
            Purpose::ModelCredentials => "errand-run-",
            Purpose::RunEnded => "errand-end-",
        }
    }

    fn domain(self) -> &'static str {
        match self {
            Purpose::ModelCredentials => "errand model credentials",
            Purpose::RunEnded => "errand run ended",
        }
    }
}

/// Mints and checks the tokens of one purpose.
#[derive(Clone, PartialEq, Eq)]
pub struct RunTokens {
    signing_key: std::sync::Arc<[u8]>,
    purpose: Purpose,
}

impl std::fmt::Debug for RunTokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "RunTokens({:?}, ..)", self.purpose)
    }
}

fn encode(tag: &[u8]) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(tag)
}

impl RunTokens {
    /// The model route's placeholder tokens under `signing_key`.
    pub fn models(signing_key: &[u8]) -> Self {
        Self::new(signing_key, Purpose::ModelCredentials)
    }

    /// The run-ended reports' tokens and seals under `signing_key`.
    pub fn run_ended(signing_key: &[u8]) -> Self {
        Self::new(signing_key, Purpose::RunEnded)
    }

    fn new(signing_key: &[u8], purpose: Purpose) -> Self {
        Self {
            signing_key: signing_key.into(),
            purpose,
        }
    }

    fn key(&self) -> hmac::Key {
        hmac::Key::new(hmac::HMAC_SHA256, &self.signing_key)
    }

    fn message(&self, namespace: &str, run_uid: &str) -> String {
        format!("{}\n{namespace}\n{run_uid}", self.purpose.domain())
    }

    /// The token of the run with `run_uid` in `namespace`.
    pub fn mint(&self, namespace: &str, run_uid: &str) -> String {
        let tag = hmac::sign(&self.key(), self.message(namespace, run_uid).as_bytes());
        format!("{}{}", self.purpose.prefix(), encode(tag.as_ref()))
    }

    /// Whether `presented` is that run's token (compared in constant time).
    pub fn verify(&self, namespace: &str, run_uid: &str, presented: &str) -> bool {
        presented
            .strip_prefix(self.purpose.prefix())
            .is_some_and(|encoded| self.verify_tag(self.message(namespace, run_uid), encoded))
    }

    fn seal_message(&self, bytes: &[u8]) -> Vec<u8> {
        [self.purpose.domain().as_bytes(), b" seal\n", bytes].concat()
    }

    /// The seal of `bytes`: only a holder of the key can make it.
    pub fn seal(&self, bytes: &[u8]) -> String {
        encode(hmac::sign(&self.key(), &self.seal_message(bytes)).as_ref())
    }

    /// Whether `seal` is the seal of `bytes` (compared in constant time).
    pub fn verify_seal(&self, bytes: &[u8], seal: &str) -> bool {
        self.verify_tag(self.seal_message(bytes), seal)
    }

    fn verify_tag(&self, message: impl AsRef<[u8]>, encoded: &str) -> bool {
        let Ok(tag) = base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(encoded) else {
            return false;
        };
        hmac::verify(&self.key(), message.as_ref(), &tag).is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: &[u8] = b"0123456789abcdef0123456789abcdef";

    #[test]
    fn a_token_is_good_only_for_its_own_run_and_purpose_under_the_same_key() {
        let tokens = RunTokens::models(KEY);
        let token = tokens.mint("team", "uid-1");
        assert!(token.starts_with("errand-run-"));
        assert!(tokens.verify("team", "uid-1", &token));
        assert!(!tokens.verify("team", "uid-2", &token));
        assert!(!tokens.verify("other", "uid-1", &token));
        assert!(!tokens.verify("team", "uid-1", "errand-run-AAAA"));
        assert!(!tokens.verify("team", "uid-1", "sk-anything"));
        let other = RunTokens::models(b"another key, as long as the first one");
        assert!(!other.verify("team", "uid-1", &token));
        let ended = RunTokens::run_ended(KEY);
        let end_token = ended.mint("team", "uid-1");
        assert!(end_token.starts_with("errand-end-"));
        assert!(ended.verify("team", "uid-1", &end_token));
        assert!(!ended.verify("team", "uid-1", &token));
        let retagged = token.replacen("errand-run-", "errand-end-", 1);
        assert!(!ended.verify("team", "uid-1", &retagged));
        assert!(!tokens.verify("team", "uid-1", &end_token));
    }

    #[test]
    fn a_seal_holds_only_for_the_bytes_it_sealed() {
        let ended = RunTokens::run_ended(KEY);
        let seal = ended.seal(b"{\"a\":1}");
        assert!(ended.verify_seal(b"{\"a\":1}", &seal));
        assert!(!ended.verify_seal(b"{\"a\":2}", &seal));
        assert!(!ended.verify_seal(b"{\"a\":1}", "AAAA"));
        assert!(!RunTokens::models(KEY).verify_seal(b"{\"a\":1}", &seal));
        assert!(!ended.verify_seal(b"{\"a\":1}", &ended.mint("team", "uid")));
    }
}
