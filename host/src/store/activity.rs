//! What `tamp serve` and `tamp proxy` did with each request, kept for their console: one row
//! per request (the access log's fields, and what the chain reported), one per compaction
//! (its stages' report and what stands for each page it wrote), and each thread's running
//! totals, updated with every request, so that the threads view reads one row per thread
//! however many requests there were.
//!
//! Both backends keep it (schema 9), so every replica sharing a PostgreSQL store sees the
//! threads of all. A server writes its requests in batches off the request path (see
//! `console::record`), and deletes what is older than the chain file's `[console]
//! retention_days`, and the oldest requests past its `max_requests`.
//!
//! **Prefix reuse.** A provider's prompt cache reads a request's unchanged prefix of the
//! previous request of its thread. The totals keep, beside the tokens sent and forwarded, how
//! many of them such a prefix held ([`ThreadTotals::in_cached`], [`ThreadTotals::out_cached`]),
//! reckoned as each request is added: an agent's request extends the one before, so a request
//! that the chain did not change shares all of the previous one (up to its own length), and a
//! compaction shares what its report measured ([`RequestRecord::prefix_kept`]). Tokens sent
//! and forwarded are those the chain counted; a request forwarded unread (its length alone
//! showed the chain would leave it as it was) has only a bound, and counts in neither.

use futures::future::BoxFuture;
use serde::Serialize;

use super::StoreError;

/// One request as a server saw it.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct RequestRecord {
    /// When it arrived, in milliseconds since the Unix epoch (the recording host's clock).
    pub at_ms: u64,
    /// `proxy` or `serve`.
    pub server: String,
    /// The method and path, no query (`POST /v1/messages`).
    pub route: String,
    /// The status of the answer (the upstream's, for a forwarded request).
    pub status: u16,
    /// Milliseconds to the answer's head.
    pub duration_ms: u64,
    pub thread: Option<String>,
    pub model: Option<String>,
    /// What the chain did: `compacted`, `unchanged` or `skipped`.
    pub outcome: Option<String>,
    /// Tokens the client sent, when the chain counted them ([`Self::set_tokens`]).
    pub tokens_in: Option<u64>,
    /// Tokens forwarded upstream, when the chain counted them.
    pub tokens_out: Option<u64>,
    /// For a body forwarded unread: the most tokens it can hold.
    pub tokens_at_most: Option<u64>,
    /// Pages the request's compaction wrote.
    pub pages: u32,
    /// For a request a stage acted on: the tokens of its answer that are an unchanged
    /// prefix of what the thread's previous request forwarded.
    pub prefix_kept: Option<u64>,
    /// The budget the request was compacted against ([`Self::set_budget`]): max tokens,
    /// high and low watermarks.
    pub max_tokens: Option<u64>,
    pub high_tokens: Option<u64>,
    pub low_tokens: Option<u64>,
    /// The summarizer's own calls: input and output tokens, and their cost in millionths of a
    /// US dollar when the chain file prices them.
    pub llm_input_tokens: u64,
    pub llm_output_tokens: u64,
    pub llm_cost_micro_usd: Option<u64>,
    /// Why there was no answer from upstream, or the proxy's own error code.
    pub error: Option<String>,
    /// What the compaction did, when a stage acted (written on its own, read on its own).
    #[serde(skip)]
    pub compaction: Option<CompactionRecord>,
}

impl RequestRecord {
    /// The tokens sent and forwarded, when counted.
    pub fn set_tokens(&mut self, tokens: Option<(u64, u64)>) {
        (self.tokens_in, self.tokens_out) = (tokens.map(|t| t.0), tokens.map(|t| t.1));
    }

    /// The budget: max tokens, high and low watermarks.
    pub fn set_budget(&mut self, budget: Option<(u64, u64, u64)>) {
        (self.max_tokens, self.high_tokens, self.low_tokens) = match budget {
            Some((max, high, low)) => (Some(max), Some(high), Some(low)),
            None => (None, None, None),
        };
    }
}

/// A compaction as the console shows it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CompactionRecord {
    /// The chain's report (`ChainReport` as JSON): each stage's status, reason, tokens,
    /// calls, pages and details.
    pub report_json: String,
    /// What stands for each page written, as JSON (`console::compaction::Replacement`s).
    pub replacements_json: String,
}

/// A request as read back: its number in the store and whether a compaction is recorded
/// for it, besides what was recorded.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct RequestRow {
    /// The request's number in the store: its compaction's id too.
    pub seq: i64,
    /// Whether a compaction is recorded for it.
    pub compacted: bool,
    /// What was recorded, its compaction left out (read with `ActivityStore::compaction`).
    #[serde(flatten)]
    pub request: RequestRecord,
}

/// A compaction as read back.
#[derive(Clone, Debug, PartialEq)]
pub struct CompactionRow {
    pub request: RequestRow,
    pub report_json: String,
    pub replacements_json: String,
}

/// A thread's totals over the requests recorded for it (those deleted by retention
/// included, while the thread itself is kept).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct ThreadTotals {
    pub thread: String,
    /// The server that recorded its first request (`proxy`, `serve`).
    pub server: String,
    /// The model of its latest request that named one.
    pub model: Option<String>,
    /// Seconds since the Unix epoch.
    pub first_seen: u64,
    pub last_seen: u64,
    pub requests: u64,
    /// Requests whose tokens were counted (not forwarded unread).
    pub counted: u64,
    /// Tokens the agent sent, and tokens forwarded, over the counted requests.
    pub tokens_in: u64,
    pub tokens_out: u64,
    /// Of those, the tokens a prompt cache could read: an unchanged prefix of the previous
    /// request (see the module's documentation).
    pub in_cached: u64,
    pub out_cached: u64,
    /// Requests whose compaction wrote pages, and the pages written.
    pub compactions: u64,
    pub pages: u64,
    /// The summarizer's calls: input and output tokens, and their cost in millionths of a
    /// US dollar where priced.
    pub llm_input_tokens: u64,
    pub llm_output_tokens: u64,
    pub llm_cost_micro_usd: u64,
}

/// Which threads to list.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ThreadQuery {
    /// Only threads whose name or model holds this text (any case).
    pub text: Option<String>,
    /// Only threads with at least one compaction.
    pub compacted_only: bool,
    /// At most this many, most recently seen first.
    pub limit: usize,
}

/// What `prune` deleted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Pruned {
    pub requests: u64,
    pub threads: u64,
}

/// The activity record of both stores.
pub trait ActivityStore: Send + Sync {
    /// Adds `requests` (in the order they came), their compactions and their threads'
    /// totals, in one transaction.
    fn record_requests(
        &self,
        requests: Vec<RequestRecord>,
    ) -> BoxFuture<'_, Result<(), StoreError>>;

    /// The threads `query` asks for, most recently seen first.
    fn threads(&self, query: ThreadQuery) -> BoxFuture<'_, Result<Vec<ThreadTotals>, StoreError>>;

    /// One thread's totals, if it is recorded.
    fn thread(&self, thread: &str) -> BoxFuture<'_, Result<Option<ThreadTotals>, StoreError>>;

    /// The latest `limit` requests of `thread`, oldest first.
    fn thread_requests(
        &self,
        thread: &str,
        limit: usize,
    ) -> BoxFuture<'_, Result<Vec<RequestRow>, StoreError>>;

    /// The compaction recorded with request `seq`.
    fn compaction(&self, seq: i64) -> BoxFuture<'_, Result<Option<CompactionRow>, StoreError>>;

    /// The latest `limit` requests that failed (an upstream error, or an answer of status
    /// 400 and above), newest first.
    fn failed_requests(&self, limit: usize) -> BoxFuture<'_, Result<Vec<RequestRow>, StoreError>>;

    /// Deletes requests and compactions from before `before_ms`, threads last seen before
    /// it, and the oldest requests beyond the newest `max_requests`.
    fn prune(&self, before_ms: u64, max_requests: u64)
        -> BoxFuture<'_, Result<Pruned, StoreError>>;
}

/// `text` as a pattern for a `LIKE … ESCAPE '\'` that finds it anywhere: its `%`, `_` and `\`
/// taken literally.
pub(crate) fn like_anywhere(text: &str) -> String {
    let mut pattern = String::from("%");
    for c in text.to_lowercase().chars() {
        if matches!(c, '%' | '_' | '\\') {
            pattern.push('\\');
        }
        pattern.push(c);
    }
    pattern.push('%');
    pattern
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_filter_is_text_never_a_pattern() {
        assert_eq!(like_anywhere("Session:A"), "%session:a%");
        assert_eq!(like_anywhere("50%_x\\"), "%50\\%\\_x\\\\%");
    }
}
