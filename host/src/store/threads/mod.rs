//! Thread continuity: a client that posts its whole history on every call pays for what is
//! new, not for the whole history again.
//!
//! For each thread the store keeps the last compaction's answer and a hash chain over the raw
//! messages it stands for ([`ThreadState`]). A request whose messages start with those raw
//! messages is compacted from that answer plus its new messages instead of from the raw
//! history. While that stays under the high watermark no stage runs: no LLM call, and the
//! answer starts with the previous answer byte for byte, so the main model's prompt cache
//! hits. Past the watermark the chain compacts that conversation (earlier summaries carried),
//! and its answer becomes the thread's new state. A request that does not extend the stored
//! messages (history edited, truncated, branched) is compacted from scratch, where the summary
//! cache still spares what it can.
//!
//! The thread is the request's `thread_id`, or else a key derived from its leading messages
//! (the system prompt and the user's opening turn); `[threads] derive_key = false` or a
//! caller's opt-out turns that off.
//!
//! A message counts as sent again when it is the same but for its *marks* (see [`marks`]):
//! what a client moves from request to request without changing the message, such as Claude
//! Code's `cache_control` on its newest block.
//!
//! The store keeps the states (this module's [`ThreadStore`], implemented by both backends);
//! this is the one home of the concept: the `[threads]` table, the keys, the hash chain, the
//! marks and the stored state.

mod marks;

use futures::future::BoxFuture;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use tamp_plugin_api::rules::protect::opening_turn;
use tamp_plugin_api::{Message, Role};

use super::StoreError;
use crate::config_error::FieldError;
use crate::digest::message_digest;

pub use marks::{remarked, unmarked};

/// `[threads]` in the chain file.
#[derive(Debug, Clone, Copy, Deserialize, Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, default)]
pub struct ThreadsConfig {
    /// Keep each thread's last answer and continue from it.
    pub enabled: bool,
    /// Without a `thread_id`, name the thread by its leading messages (the system prompt and
    /// the user's opening turn).
    pub derive_key: bool,
    /// A thread not compacted for this long starts over from its raw history (seconds).
    pub ttl_secs: u64,
    /// At most this many threads are kept; the least recently compacted go first.
    pub max_threads: u64,
}

impl Default for ThreadsConfig {
    fn default() -> Self {
        ThreadsConfig {
            enabled: true,
            derive_key: true,
            ttl_secs: 24 * 3600,
            max_threads: 100_000,
        }
    }
}

impl ThreadsConfig {
    pub fn limits(&self) -> ThreadLimits {
        ThreadLimits {
            ttl_secs: self.ttl_secs,
            max_threads: self.max_threads,
        }
    }

    /// Checks the section's own rules; the error names the field.
    pub fn validate(&self) -> Result<(), FieldError> {
        // Checked as every other number of seconds is: a u64 cannot be inf, but a TTL of
        // years is a typo all the same.
        crate::bounded::positive_seconds(self.ttl_secs as f64)
            .map_err(|message| FieldError::new("threads", "ttl_secs", message))?;
        if self.max_threads == 0 {
            return Err(FieldError::new(
                "threads",
                "max_threads",
                "must be greater than 0",
            ));
        }
        Ok(())
    }
}

/// The store key of a conversation's thread, if it has one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ThreadKey {
    pub key: String,
    /// Derived from the leading messages rather than given.
    pub derived: bool,
}

impl ThreadKey {
    /// `thread_id` when given; else, with `derive`, a hash of the leading system messages and
    /// the user's opening turn ([`opening_turn`]), or of the leading system messages and the
    /// first user message when there is no opening turn (none when there is no user message).
    pub fn of(thread_id: Option<&str>, messages: &[Message], derive: bool) -> Option<ThreadKey> {
        if let Some(id) = thread_id {
            return Some(ThreadKey {
                key: format!("id:{id}"),
                derived: false,
            });
        }
        if !derive {
            return None;
        }
        // The system prompt and the user's opening turn (Codex's own context message alone is
        // the same for every session in one folder on one day); without one, the first user
        // message.
        let opening = &messages[..opening_turn(messages)];
        let lead: Vec<&Message> = if opening.iter().any(|m| m.role == Role::User) {
            opening.iter().collect()
        } else {
            let first_user = messages.iter().find(|m| m.role == Role::User)?;
            opening.iter().chain(std::iter::once(first_user)).collect()
        };
        let mut h = Sha256::new();
        h.update(b"tamp-thread-lead");
        for m in lead {
            h.update(message_digest(m));
        }
        Some(ThreadKey {
            key: format!("lead:{}", hex::encode(&h.finalize()[..16])),
            derived: true,
        })
    }
}

/// The hash chain over `messages`, each without its marks: entry `i` stands for the first `i`
/// messages (entry 0 for none), so one pass gives the hash of every leading run.
pub fn prefix_hashes(messages: &[Message]) -> Vec<String> {
    let mut out = Vec::with_capacity(messages.len() + 1);
    let mut current: [u8; 32] = Sha256::digest(b"tamp-thread-prefix").into();
    out.push(hex::encode(current));
    for m in messages {
        let mut h = Sha256::new();
        h.update(current);
        h.update(message_digest(&unmarked(m)));
        current = h.finalize().into();
        out.push(hex::encode(current));
    }
    out
}

/// What a request continues from: the state's answer, when the request's messages start with
/// the raw messages it stands for.
pub fn continuation<'s>(state: &'s ThreadState, hashes: &[String]) -> Option<&'s [Message]> {
    let covered = usize::try_from(state.covered).ok()?;
    (hashes.get(covered) == Some(&state.prefix_hash)).then_some(&state.output[..])
}

/// How many leading messages `a` and `b` share, marks aside (a provider's prompt cache does
/// not hold them).
pub fn common_prefix(a: &[Message], b: &[Message]) -> usize {
    a.iter()
        .zip(b)
        .take_while(|(x, y)| x == y || unmarked(x) == unmarked(y))
        .count()
}

/// The thread part of a compaction's report.
#[derive(Debug, Clone, Serialize)]
pub struct ThreadReport {
    /// `given` (the request's `thread_id`) or `derived` (from its leading messages).
    pub key: &'static str,
    /// The request extended the thread's last compaction and started from its answer.
    pub continued: bool,
    /// Leading messages of the request that the previous answer stood for.
    pub messages_covered: u64,
    /// Tokens of this answer that are an unchanged prefix of the thread's previous answer
    /// (what the main model's prompt cache can reuse).
    pub prefix_kept_tokens: u64,
    /// This answer was stored for the thread's next request.
    pub stored: bool,
    /// The thread's stored state no longer matched its seal (altered in the store): it was
    /// not used, and the request was compacted from its raw history.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub state_refused: bool,
    /// Why the thread's last answer was not continued though it was there (another chain
    /// made it): the request was compacted from its raw history.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub started_over: Option<String>,
    /// Why the thread state could not be read or written, when it could not: the request
    /// was then compacted as if the thread were new.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

// What the store keeps for each thread, and the trait both backends implement. A state
// expires after a time to live and the number of threads kept is bounded; both limits are
// applied as states are written, so the table never grows past them for long (SQLite for one
// host, PostgreSQL so that replicas share it).

/// What a thread's last compaction returned, and for which raw messages.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ThreadState {
    /// How many leading messages of the client's raw history `output` stands for.
    pub covered: u64,
    /// The hash chain over those messages (see [`prefix_hashes`]).
    pub prefix_hash: String,
    /// The conversation tamp answered with: what a request that extends the covered messages
    /// starts from.
    pub output: Vec<Message>,
    /// The identity of the chain that answered (`Chain::identity`); empty in a state an
    /// earlier tamp stored, which no chain continues.
    #[serde(default)]
    pub chain: String,
}

/// How long thread states live and how many are kept.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ThreadLimits {
    /// A state not written for this long is gone (seconds).
    pub ttl_secs: u64,
    /// At most this many threads; the least recently written go first.
    pub max_threads: u64,
}

/// Where thread states live. Implemented by both stores.
pub trait ThreadStore: Send + Sync {
    /// The state of `key`, unless it is older than `ttl_secs`. A state that no longer matches
    /// its seal (altered in the database) is [`StoreError::Damaged`], never returned.
    fn get_thread(
        &self,
        key: &str,
        ttl_secs: u64,
    ) -> BoxFuture<'_, Result<Option<ThreadState>, StoreError>>;

    /// Replaces the state of `key`, then drops expired states and the oldest beyond
    /// `limits.max_threads`.
    fn put_thread(
        &self,
        key: &str,
        state: &ThreadState,
        limits: ThreadLimits,
    ) -> BoxFuture<'_, Result<(), StoreError>>;

    /// Checks every state kept against its seal (see `store::seal`), and that it reads back.
    fn verify_threads(&self) -> BoxFuture<'_, Result<super::RecordCheck, StoreError>>;
}

/// What the states read back say: each damaged one, or one that does not parse, named.
pub(crate) fn thread_check(
    read: Vec<(String, Result<Option<ThreadState>, super::DamagedRecord>)>,
) -> super::RecordCheck {
    let mut check = super::RecordCheck::default();
    for (key, state) in read {
        check.checked += 1;
        match state {
            Ok(Some(_)) => {}
            Ok(None) => check.damaged.push(super::DamagedRecord {
                what: format!("the thread state of {key}"),
                detail: "it does not read as a thread state".into(),
            }),
            Err(damaged) => check.damaged.push(damaged),
        }
    }
    check
}

/// The SQL of the thread table, the same on both backends but for the blob types.
pub(crate) const MIGRATION_SQLITE: &str = "CREATE TABLE threads (
        key         TEXT PRIMARY KEY NOT NULL,
        state_json  TEXT NOT NULL,
        updated_at  INTEGER NOT NULL
    );
    CREATE INDEX threads_by_updated_at ON threads (updated_at);";

#[cfg(feature = "postgres")]
pub(crate) const MIGRATION_POSTGRES: &str = "CREATE TABLE threads (
        key         TEXT PRIMARY KEY,
        state_json  TEXT NOT NULL,
        updated_at  BIGINT NOT NULL
    );
    CREATE INDEX threads_by_updated_at ON threads (updated_at);";

#[cfg(test)]
mod tests {
    use super::*;

    fn msgs(texts: &[(Role, &str)]) -> Vec<Message> {
        texts.iter().map(|(r, t)| Message::text(*r, *t)).collect()
    }

    #[test]
    fn a_given_id_names_the_thread_else_the_leading_messages_do() {
        let a = msgs(&[
            (Role::System, "s"),
            (Role::User, "task"),
            (Role::Assistant, "x"),
        ]);
        let b = msgs(&[
            (Role::System, "s"),
            (Role::User, "task"),
            (Role::Assistant, "y"),
        ]);
        let c = msgs(&[(Role::System, "s"), (Role::User, "other task")]);
        let given = ThreadKey::of(Some("t-1"), &a, true).unwrap();
        assert_eq!(given.key, "id:t-1");
        assert!(!given.derived);
        let ka = ThreadKey::of(None, &a, true).unwrap();
        assert!(ka.derived && ka.key.starts_with("lead:"));
        assert_eq!(Some(ka.clone()), ThreadKey::of(None, &b, true));
        assert_ne!(Some(ka), ThreadKey::of(None, &c, true));
        assert_eq!(ThreadKey::of(None, &a, false), None);
        assert_eq!(
            ThreadKey::of(None, &msgs(&[(Role::System, "s")]), true),
            None
        );
        // Codex's first user message is its own context, the same for every session in one
        // folder; the task after it names the thread, from the first request on.
        let codex = |task: &str, replied: bool| {
            let mut m = vec![
                (Role::System, "s"),
                (Role::User, "<environment_context>"),
                (Role::User, task),
            ];
            if replied {
                m.push((Role::Assistant, "on it"));
            }
            ThreadKey::of(None, &msgs(&m), true).unwrap()
        };
        assert_eq!(codex("task", false), codex("task", true));
        assert_ne!(codex("task", true), codex("other task", true));
    }

    #[test]
    fn a_request_continues_only_when_it_starts_with_the_covered_messages() {
        let raw = msgs(&[(Role::User, "a"), (Role::Assistant, "b"), (Role::User, "c")]);
        let hashes = prefix_hashes(&raw);
        assert_eq!(hashes.len(), 4);
        let state = ThreadState {
            covered: 2,
            prefix_hash: hashes[2].clone(),
            output: msgs(&[(Role::User, "summary")]),
            chain: String::new(),
        };
        assert_eq!(continuation(&state, &hashes), Some(&state.output[..]));
        // The same messages after an edit of the second one: no continuation.
        let edited = msgs(&[(Role::User, "a"), (Role::Assistant, "B"), (Role::User, "c")]);
        assert_eq!(continuation(&state, &prefix_hashes(&edited)), None);
        // Shorter than the covered messages: no continuation.
        assert_eq!(continuation(&state, &prefix_hashes(&raw[..1])), None);
    }

    #[test]
    fn the_section_is_validated_by_field() {
        assert!(ThreadsConfig::default().validate().is_ok());
        let zero = ThreadsConfig {
            ttl_secs: 0,
            ..ThreadsConfig::default()
        };
        assert!(zero
            .validate()
            .unwrap_err()
            .to_string()
            .starts_with("threads.ttl_secs: must be a positive number of seconds"));
        for bad in [
            ThreadsConfig {
                ttl_secs: 31 * 86_400,
                ..ThreadsConfig::default()
            },
            ThreadsConfig {
                max_threads: 0,
                ..ThreadsConfig::default()
            },
        ] {
            assert!(bad.validate().is_err(), "{bad:?}");
        }
        assert_eq!(common_prefix(&msgs(&[(Role::User, "a")]), &[]), 0);
    }
}
