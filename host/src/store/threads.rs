//! Thread state: for each thread, the last compaction's result and the raw messages it
//! stands for, so that a client that posts its whole history again starts from that result
//! instead of from the raw history (see [`crate::threads`]).
//!
//! Both backends keep it (SQLite for one host, PostgreSQL so that replicas share it). A state
//! expires after a time to live and the number of threads kept is bounded; both limits are
//! applied as states are written, so the table never grows past them for long.

use futures::future::BoxFuture;
use serde::{Deserialize, Serialize};
use tamp_plugin_api::Message;

use super::StoreError;

/// What a thread's last compaction returned, and for which raw messages.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ThreadState {
    /// How many leading messages of the client's raw history `output` stands for.
    pub covered: u64,
    /// The hash chain over those messages (see [`crate::threads::prefix_hashes`]).
    pub prefix_hash: String,
    /// The conversation tamp answered with: what a request that extends the covered messages
    /// starts from.
    pub output: Vec<Message>,
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
    /// The state of `key`, unless it is older than `ttl_secs`.
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
