//! The summary cache: no summary is paid for twice.
//!
//! Two kinds of entries, both scoped to a [`CacheScope`] (thread, strategy, stage-config hash):
//!
//! - **Answers**, keyed by the exact LLM request (and the provider that would answer it). A
//!   prefix-stable strategy asks the same questions about the unchanged older part of a
//!   growing conversation, so those calls are answered from the store.
//! - **Ranges**, keyed by the content hashes of a run of messages: the summary a strategy
//!   wrote for exactly those messages. A strategy asking about a longer run gets the longest
//!   cached leading run back and summarizes only what is new (see plugin-api's
//!   `sdk::incremental`).
//!
//! Without a thread id the scope's thread part is empty, so identical requests and identical
//! leading messages hit across conversations; with one, entries stay within the thread.

use futures::future::BoxFuture;
use sha2::{Digest, Sha256};
use tamp_plugin_api::{LlmRequest, LlmResponse, Message};

use super::StoreError;
use crate::digest::{hash_answer_inputs, message_digest, CacheKey};

/// Where cache entries apply: one thread (or none), one strategy, one stage config.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CacheScope {
    digest: CacheKey,
}

impl CacheScope {
    /// `config_hash` is [`crate::digest::config_hash`] of the stage's config.
    pub fn new(thread_id: Option<&str>, strategy: &str, config_hash: &str) -> Self {
        let mut h = Sha256::new();
        // Length-prefixed parts, so no two different scopes hash the same bytes.
        for part in [thread_id.unwrap_or(""), strategy, config_hash] {
            h.update((part.len() as u64).to_le_bytes());
            h.update(part.as_bytes());
        }
        h.update([u8::from(thread_id.is_some())]);
        CacheScope {
            digest: h.finalize().into(),
        }
    }

    /// The key of `request` as answered by `provider`.
    pub fn request_key(&self, provider: &str, request: &LlmRequest) -> CacheKey {
        let mut h = Sha256::new();
        h.update(b"answer");
        h.update(self.digest);
        h.update((provider.len() as u64).to_le_bytes());
        h.update(provider.as_bytes());
        hash_answer_inputs(&mut h, request);
        h.finalize().into()
    }

    /// The keys of every leading run of `messages`: `keys[k]` is the key of
    /// `messages[..=k]`. Each key chains the one before it, so computing all of them costs
    /// one hash per message.
    pub fn range_keys(&self, messages: &[Message]) -> Vec<CacheKey> {
        let mut keys = Vec::with_capacity(messages.len());
        let mut previous: CacheKey = self.digest;
        for message in messages {
            let mut h = Sha256::new();
            h.update(b"range");
            h.update(previous);
            h.update(message_digest(message));
            previous = h.finalize().into();
            keys.push(previous);
        }
        keys
    }
}

/// A store of cached answers and range summaries.
pub trait SummaryCache: Send + Sync {
    /// The cached answer to a request, if any.
    fn get_answer(&self, key: CacheKey) -> BoxFuture<'_, Result<Option<LlmResponse>, StoreError>>;

    /// Caches an answer (a later put for the same key is ignored: the first answer stands).
    fn put_answer(
        &self,
        key: CacheKey,
        answer: LlmResponse,
    ) -> BoxFuture<'_, Result<(), StoreError>>;

    /// Among `range_keys` (as from [`CacheScope::range_keys`]), the longest run with a cached
    /// summary: `(messages covered, summary)`.
    fn longest_range(
        &self,
        range_keys: Vec<CacheKey>,
    ) -> BoxFuture<'_, Result<Option<(usize, String)>, StoreError>>;

    /// Caches `summary` as the summary of the run whose key is `key` (`len` messages).
    fn put_range(
        &self,
        key: CacheKey,
        len: usize,
        summary: String,
    ) -> BoxFuture<'_, Result<(), StoreError>>;

    /// Checks every cached answer and range against its seal (see `store::seal`).
    fn verify_cache(&self) -> BoxFuture<'_, Result<super::RecordCheck, StoreError>>;
}

/// A cache entry as read back: the entry, or, when it no longer matches its seal, a miss
/// (logged: a broken cache costs a call, never a compaction).
pub(crate) fn checked<T>(location: &str, read: Result<T, super::DamagedRecord>) -> Option<T> {
    match read {
        Ok(entry) => Some(entry),
        Err(damaged) => {
            tracing::warn!(
                store = %location,
                "summary cache: {} is damaged, read as a miss: {}",
                damaged.what,
                damaged.detail
            );
            None
        }
    }
}

/// What the cache's entries read back say.
pub(crate) fn record_check(
    read: impl Iterator<Item = Result<(), super::DamagedRecord>>,
) -> super::RecordCheck {
    let mut check = super::RecordCheck::default();
    for entry in read {
        check.checked += 1;
        if let Err(damaged) = entry {
            check.damaged.push(damaged);
        }
    }
    check
}

#[cfg(test)]
mod tests {
    use super::*;
    use tamp_plugin_api::Role;

    fn msgs(texts: &[&str]) -> Vec<Message> {
        texts
            .iter()
            .map(|t| Message::text(Role::User, *t))
            .collect()
    }

    #[test]
    fn scopes_differ_by_every_part() {
        let base = CacheScope::new(Some("t"), "s", "c");
        assert_ne!(base, CacheScope::new(Some("u"), "s", "c"));
        assert_ne!(base, CacheScope::new(Some("t"), "x", "c"));
        assert_ne!(base, CacheScope::new(Some("t"), "s", "d"));
        assert_ne!(base, CacheScope::new(None, "s", "c"));
        // Length prefixes: moving a character between parts changes the scope.
        assert_ne!(
            CacheScope::new(Some("ab"), "c", "x"),
            CacheScope::new(Some("a"), "bc", "x")
        );
        assert_eq!(base, CacheScope::new(Some("t"), "s", "c"));
    }

    #[test]
    fn range_keys_are_prefix_stable() {
        let scope = CacheScope::new(None, "s", "c");
        let short = scope.range_keys(&msgs(&["a", "b"]));
        let long = scope.range_keys(&msgs(&["a", "b", "c"]));
        assert_eq!(short[..], long[..2]);
        assert_ne!(long[1], long[2]);
        let other = scope.range_keys(&msgs(&["a", "x", "c"]));
        assert_eq!(other[0], long[0]);
        assert_ne!(
            other[2], long[2],
            "a changed message changes every later key"
        );
    }

    #[test]
    fn request_keys_ignore_the_label_only() {
        let scope = CacheScope::new(None, "s", "c");
        let r = LlmRequest::new("sys", "prompt", 100);
        let key = scope.request_key("p", &r);
        assert_eq!(key, scope.request_key("p", &r.clone().with_label("other")));
        assert_ne!(key, scope.request_key("q", &r));
        let mut longer = r.clone();
        longer.max_output_tokens = 101;
        assert_ne!(key, scope.request_key("p", &longer));
        let mut schema = r.clone();
        schema.response_schema_json = tamp_plugin_api::FfiOption::RSome("{}".into());
        assert_ne!(key, scope.request_key("p", &schema));
        let mut moved = r.clone();
        moved.system = "sysp".into();
        moved.prompt = "rompt".into();
        assert_ne!(key, scope.request_key("p", &moved));
    }

    /// Pinned: a changed key would miss every answer and range cached before it.
    #[test]
    fn keys_are_pinned() {
        let scope = CacheScope::new(Some("t"), "s", "c");
        let request = LlmRequest::new("sys", "prompt", 100);
        assert_eq!(
            hex::encode(scope.request_key("p", &request)),
            "5cef6e96408fcd08887b397341e12d3c0ab86fdbc761b5fec47ab5dff9edd01c"
        );
        let messages = [
            Message::text(Role::User, "a"),
            Message::text(Role::Assistant, "b"),
        ];
        assert_eq!(
            hex::encode(scope.range_keys(&messages)[1]),
            "6c379c717192257ec89aa3d48b14495f127556a93bfd45f65869671e24aabcff"
        );
    }
}
