//! Chat sessions kept in errand's object store, so they outlive a gateway restart and any replica resumes them: one write-once object per turn.
//!
//! A session is `sessions/<namespace>/<deployment>/<session>/<turn>.json`, each turn the
//! user's message and the agent's answer. Turns are never rewritten: two turns racing for
//! the same number cannot both be stored, and the loser is told to retry (409).

use bytes::Bytes;
use futures::StreamExt;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::refusal::Refusal;
use crate::store::{Store, StoreError};

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

fn prefix(namespace: &str, deployment: &str) -> String {
    format!("sessions/{namespace}/{deployment}/")
}

fn turn_key(namespace: &str, deployment: &str, session: &str, index: usize) -> String {
    format!("{}{session}/{index:06}.json", prefix(namespace, deployment))
}

fn unavailable(error: StoreError) -> Refusal {
    Refusal::new(
        503,
        "Unavailable",
        format!("the session store failed: {error}"),
    )
}

/// The sessions of one deployment, in a store.
#[derive(Clone)]
pub struct Sessions {
    store: Store,
}

impl Sessions {
    /// Sessions kept in `store`.
    pub fn new(store: Store) -> Self {
        Self { store }
    }

    /// The turns of a session so far (none for a new session).
    pub async fn history(
        &self,
        namespace: &str,
        deployment: &str,
        session: &str,
    ) -> Result<Vec<Turn>, Refusal> {
        let listed = self
            .store
            .list(&format!("{}{session}/", prefix(namespace, deployment)))
            .await
            .map_err(unavailable)?;
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

    /// Stores turn number `index` (its place in the history) of a session.
    pub async fn record(
        &self,
        namespace: &str,
        deployment: &str,
        session: &str,
        index: usize,
        turn: &Turn,
    ) -> Result<(), Refusal> {
        let key = turn_key(namespace, deployment, session, index);
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

    /// The sessions of a deployment, by name.
    pub async fn list(
        &self,
        namespace: &str,
        deployment: &str,
    ) -> Result<Vec<SessionSummary>, Refusal> {
        let base = prefix(namespace, deployment);
        let listed = self.store.list(&base).await.map_err(unavailable)?;
        let mut sessions: Vec<SessionSummary> = Vec::new();
        for object in listed {
            let Some((name, _)) = object
                .key
                .strip_prefix(&base)
                .and_then(|k| k.split_once('/'))
            else {
                continue;
            };
            let updated = object.last_modified.to_string();
            match sessions.last_mut() {
                Some(last) if last.name == name => {
                    last.turns += 1;
                    last.updated = last.updated.clone().max(updated);
                }
                _ => sessions.push(SessionSummary {
                    name: name.to_owned(),
                    turns: 1,
                    updated,
                }),
            }
        }
        Ok(sessions)
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

    #[tokio::test]
    async fn sessions_survive_a_new_store_handle_and_a_racing_turn_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("file://{}", dir.path().display());
        let sessions = Sessions::new(Store::open(&url).unwrap());
        sessions
            .record("ns", "calc", "s1", 0, &turn("a", "b"))
            .await
            .unwrap();
        sessions
            .record("ns", "calc", "s1", 1, &turn("c", "d"))
            .await
            .unwrap();
        sessions
            .record("ns", "calc", "s2", 0, &turn("e", "f"))
            .await
            .unwrap();
        let raced = sessions
            .record("ns", "calc", "s1", 1, &turn("x", "y"))
            .await;
        assert_eq!(raced.unwrap_err().status, 409);
        // A gateway started anew reads them from the store.
        let again = Sessions::new(Store::open(&url).unwrap());
        let history = again.history("ns", "calc", "s1").await.unwrap();
        assert_eq!(history, [turn("a", "b"), turn("c", "d")]);
        let listed = again.list("ns", "calc").await.unwrap();
        let names: Vec<(&str, usize)> = listed.iter().map(|s| (s.name.as_str(), s.turns)).collect();
        assert_eq!(names, [("s1", 2), ("s2", 1)]);
        assert!(again.history("ns", "calc", "new").await.unwrap().is_empty());
    }
}
