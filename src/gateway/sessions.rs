//! Chat sessions kept in errand's object store, so they outlive a gateway restart and any replica resumes them: one write-once object per turn, each session its caller's own.
//!
//! A session is `sessions/<namespace>/<deployment uid>/<owner>/<session>/<turn>.json`, each
//! turn the user's message and the agent's answer. The owner is a digest of the caller's
//! identity as the TokenReview names it (user name and uid): a caller lists, reads and
//! continues only their own sessions, and another caller's session is, to them, a session that
//! does not exist (404, the same answer as for a name never used). The deployment's uid keeps
//! a re-created deployment of the same name from inheriting the old conversations. Turns are
//! never rewritten: two turns racing for the same number cannot both be stored, and the loser
//! is told to retry (409). A session holds at most [`SessionLimits::max_turns`] turns and ends
//! [`SessionLimits::retention`] after its last turn: it is then deleted when next touched. The
//! store sweep removes every session of a deployment that is gone
//! ([`crate::retention::sweep::Kind::Sessions`]).

use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;
use jiff::Timestamp;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use super::refusal::Refusal;
use crate::cluster::access::UserInfo;
use crate::store::{Listed, Store, StoreError};

/// Turns a session may hold by default.
pub const DEFAULT_MAX_TURNS: usize = 200;
/// How long a session lasts after its last turn by default: 30 days.
pub const DEFAULT_RETENTION: Duration = Duration::from_secs(30 * 24 * 3600);

/// How large and how old a session may grow.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SessionLimits {
    /// Turns a session may hold; one more is refused (409) and a new session must start.
    pub max_turns: usize,
    /// How long a session lasts after its last turn (`None`: until its deployment goes).
    pub retention: Option<Duration>,
}

impl Default for SessionLimits {
    fn default() -> Self {
        Self {
            max_turns: DEFAULT_MAX_TURNS,
            retention: Some(DEFAULT_RETENTION),
        }
    }
}

impl SessionLimits {
    /// Whether a session whose last turn was stored at `last` has ended by `now`.
    pub fn expired(&self, last: Timestamp, now: Timestamp) -> bool {
        self.retention.is_some_and(|retention| {
            let retention =
                jiff::SignedDuration::try_from(retention).unwrap_or(jiff::SignedDuration::MAX);
            now.duration_since(last) > retention
        })
    }

    /// `Ok` when a session of `turns` turns may take one more.
    pub fn room_for_a_turn(&self, session: &str, turns: usize) -> Result<(), Refusal> {
        if turns < self.max_turns {
            return Ok(());
        }
        Err(Refusal::new(
            409,
            "SessionFull",
            format!(
                "session {session:?} has {turns} turns, the most a session may hold \
                 (the gateway's limit): start a new session"
            ),
        ))
    }
}

/// Whose sessions, of which deployment: the store prefix they live under.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SessionScope {
    prefix: String,
}

impl SessionScope {
    /// The sessions `user` has with the deployment of uid `deployment_uid` in `namespace`.
    pub fn new(namespace: &str, deployment_uid: &str, user: &UserInfo) -> Self {
        let identity = format!(
            "{}\n{}",
            user.username,
            user.uid.as_deref().unwrap_or_default()
        );
        let owner = hex::encode(&Sha256::digest(identity.as_bytes())[..16]);
        Self {
            prefix: format!("{}{owner}/", deployment_prefix(namespace, deployment_uid)),
        }
    }

    fn session(&self, session: &str) -> String {
        format!("{}{session}/", self.prefix)
    }

    fn turn_key(&self, session: &str, index: usize) -> String {
        format!("{}{index:06}.json", self.session(session))
    }
}

/// Where every session with the deployment of uid `deployment_uid` lives, whoever its owner.
fn deployment_prefix(namespace: &str, deployment_uid: &str) -> String {
    format!("sessions/{namespace}/{deployment_uid}/")
}

/// One turn of a session.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Turn {
    /// What the user said.
    pub user: String,
    /// What the agent answered.
    pub assistant: String,
    /// When the answer came (RFC 3339).
    pub at: String,
}

/// A session in a listing.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct SessionSummary {
    /// Its name.
    pub name: String,
    /// How many turns it has.
    pub turns: usize,
    /// When its last turn was stored (RFC 3339).
    pub updated: String,
}

/// The messages an agent server's `/chat` gets: every earlier turn, then `message`.
pub fn messages(history: &[Turn], message: &str) -> Vec<Value> {
    history
        .iter()
        .flat_map(|turn| {
            [
                json!({"role": "user", "content": turn.user}),
                json!({"role": "assistant", "content": turn.assistant}),
            ]
        })
        .chain([json!({"role": "user", "content": message})])
        .collect()
}

fn unavailable(error: StoreError) -> Refusal {
    Refusal::new(
        503,
        "Unavailable",
        format!("the session store failed: {error}"),
    )
}

/// Sessions, in a store.
#[derive(Clone)]
pub struct Sessions {
    store: Store,
    limits: SessionLimits,
}

impl Sessions {
    /// Sessions kept in `store` within `limits`.
    pub fn new(store: Store, limits: SessionLimits) -> Self {
        Self { store, limits }
    }

    /// What a session may hold.
    pub fn limits(&self) -> SessionLimits {
        self.limits
    }

    /// The turn objects of a session, deleting them when the session has ended.
    async fn live_turns(
        &self,
        scope: &SessionScope,
        session: &str,
    ) -> Result<Vec<Listed>, Refusal> {
        let listed = self
            .store
            .list(&scope.session(session))
            .await
            .map_err(unavailable)?;
        let last = listed.iter().map(|o| o.last_modified).max();
        match last {
            Some(last) if self.limits.expired(last, Timestamp::now()) => {
                self.store
                    .delete_prefix(&scope.session(session))
                    .await
                    .map_err(unavailable)?;
                Ok(Vec::new())
            }
            _ => Ok(listed),
        }
    }

    /// The turns of one of the scope's sessions so far (none for a new session, an ended
    /// one, or another caller's).
    pub async fn history(&self, scope: &SessionScope, session: &str) -> Result<Vec<Turn>, Refusal> {
        let listed = self.live_turns(scope, session).await?;
        let mut turns = Vec::with_capacity(listed.len());
        for object in listed {
            let mut body = self
                .store
                .get(&object.key)
                .await
                .map_err(unavailable)?
                .into_stream();
            let mut bytes = Vec::new();
            while let Some(chunk) = body.next().await {
                bytes.extend_from_slice(&chunk.map_err(|e| {
                    Refusal::new(503, "Unavailable", format!("reading {}: {e}", object.key))
                })?);
            }
            let turn = serde_json::from_slice(&bytes).map_err(|e| {
                Refusal::new(
                    500,
                    "Internal",
                    format!("{} is not a turn: {e}", object.key),
                )
            })?;
            turns.push(turn);
        }
        Ok(turns)
    }

    /// Stores turn number `index` (its place in the history) of one of the scope's sessions.
    pub async fn record(
        &self,
        scope: &SessionScope,
        session: &str,
        index: usize,
        turn: &Turn,
    ) -> Result<(), Refusal> {
        self.limits.room_for_a_turn(session, index)?;
        let key = scope.turn_key(session, index);
        let bytes = Bytes::from(serde_json::to_vec(turn).expect("a turn serializes"));
        let body = futures::stream::once(async move { Ok::<_, std::io::Error>(bytes) }).boxed();
        match self.store.put_new(&key, body).await {
            Ok(_) => Ok(()),
            Err(StoreError::AlreadyExists { .. }) => Err(Refusal::new(
                409,
                "Conflict",
                format!(
                    "session {session:?} got another turn at the same time; send the message again"
                ),
            )),
            Err(e) => Err(unavailable(e)),
        }
    }

    /// The scope's sessions that have not ended, by name.
    pub async fn list(&self, scope: &SessionScope) -> Result<Vec<SessionSummary>, Refusal> {
        let listed = self.store.list(&scope.prefix).await.map_err(unavailable)?;
        let mut sessions: Vec<(SessionSummary, Timestamp)> = Vec::new();
        for object in listed {
            let Some((name, _)) = object
                .key
                .strip_prefix(&scope.prefix)
                .and_then(|k| k.split_once('/'))
            else {
                continue;
            };
            match sessions.last_mut() {
                Some((last, newest)) if last.name == name => {
                    last.turns += 1;
                    *newest = (*newest).max(object.last_modified);
                }
                _ => sessions.push((
                    SessionSummary {
                        name: name.to_owned(),
                        turns: 1,
                        updated: String::new(),
                    },
                    object.last_modified,
                )),
            }
        }
        let now = Timestamp::now();
        Ok(sessions
            .into_iter()
            .filter(|(_, newest)| !self.limits.expired(*newest, now))
            .map(|(summary, newest)| SessionSummary {
                updated: newest.to_string(),
                ..summary
            })
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn turn(user: &str, assistant: &str) -> Turn {
        Turn {
            user: user.into(),
            assistant: assistant.into(),
            at: "2026-11-30T16:00:00Z".into(),
        }
    }

    #[test]
    fn the_agent_gets_the_whole_conversation() {
        let history = [turn("hi", "hello")];
        assert_eq!(
            messages(&history, "again"),
            [
                json!({"role": "user", "content": "hi"}),
                json!({"role": "assistant", "content": "hello"}),
                json!({"role": "user", "content": "again"}),
            ]
        );
    }

    fn user(name: &str, uid: &str) -> UserInfo {
        UserInfo {
            username: name.into(),
            uid: Some(uid.into()),
            groups: vec![],
            extra: Default::default(),
        }
    }

    fn sessions(limits: SessionLimits) -> (tempfile::TempDir, String, Sessions) {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("file://{}", dir.path().display());
        let sessions = Sessions::new(Store::open(&url).unwrap(), limits);
        (dir, url, sessions)
    }

    #[tokio::test]
    async fn sessions_survive_a_new_store_handle_and_a_racing_turn_is_refused() {
        let (_dir, url, sessions) = sessions(SessionLimits::default());
        let alice = SessionScope::new("ns", "uid-1", &user("alice", "a1"));
        sessions
            .record(&alice, "s1", 0, &turn("a", "b"))
            .await
            .unwrap();
        sessions
            .record(&alice, "s1", 1, &turn("c", "d"))
            .await
            .unwrap();
        sessions
            .record(&alice, "s2", 0, &turn("e", "f"))
            .await
            .unwrap();
        let raced = sessions.record(&alice, "s1", 1, &turn("x", "y")).await;
        assert_eq!(raced.unwrap_err().status, 409);
        // A gateway started anew reads them from the store.
        let again = Sessions::new(Store::open(&url).unwrap(), SessionLimits::default());
        let history = again.history(&alice, "s1").await.unwrap();
        assert_eq!(history, [turn("a", "b"), turn("c", "d")]);
        let listed = again.list(&alice).await.unwrap();
        let names: Vec<(&str, usize)> = listed.iter().map(|s| (s.name.as_str(), s.turns)).collect();
        assert_eq!(names, [("s1", 2), ("s2", 1)]);
        assert!(again.history(&alice, "new").await.unwrap().is_empty());
    }

    #[tokio::test]
    async fn a_session_is_its_callers_and_its_deployments_own() {
        let (_dir, _url, sessions) = sessions(SessionLimits::default());
        let alice = SessionScope::new("ns", "uid-1", &user("alice", "a1"));
        sessions
            .record(&alice, "s1", 0, &turn("secret", "kept"))
            .await
            .unwrap();
        for other in [
            SessionScope::new("ns", "uid-1", &user("bob", "b1")),
            // The same name with another uid: another identity (a re-created ServiceAccount).
            SessionScope::new("ns", "uid-1", &user("alice", "a2")),
            // A deployment re-created under the same name has another uid.
            SessionScope::new("ns", "uid-2", &user("alice", "a1")),
        ] {
            assert!(sessions.history(&other, "s1").await.unwrap().is_empty());
            assert!(sessions.list(&other).await.unwrap().is_empty());
        }
        assert_eq!(sessions.history(&alice, "s1").await.unwrap().len(), 1);
    }

    #[tokio::test]
    async fn a_full_session_refuses_a_turn_and_an_ended_one_is_gone() {
        let limits = SessionLimits {
            max_turns: 1,
            retention: Some(Duration::from_secs(3600)),
        };
        let (_dir, _url, sessions) = sessions(limits);
        let alice = SessionScope::new("ns", "uid-1", &user("alice", "a1"));
        sessions
            .record(&alice, "s1", 0, &turn("a", "b"))
            .await
            .unwrap();
        let full = sessions
            .record(&alice, "s1", 1, &turn("c", "d"))
            .await
            .unwrap_err();
        assert_eq!((full.status, full.reason), (409, "SessionFull"));

        let now = Timestamp::now();
        let hour_and_a_bit = jiff::SignedDuration::from_secs(3601);
        assert!(limits.expired(now - hour_and_a_bit, now));
        assert!(!limits.expired(now - jiff::SignedDuration::from_secs(3599), now));
        let forever = SessionLimits {
            retention: None,
            ..limits
        };
        assert!(!forever.expired(now - jiff::SignedDuration::from_hours(24 * 3650), now));
    }
}
