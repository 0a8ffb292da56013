//! What the proxy tells about each request: one line in the log at the default level (target
//! `tamp::access`), and the running totals of its recent threads (`GET /tamp/v1/threads`).
//!
//! A line names the request (method and route, the model, the thread), what the chain did
//! (tokens in → out, pages written), and the upstream's answer (status, time to its head):
//!
//! ```text
//! POST /v1/messages model=claude-opus-5-5 thread=session:0de6b6e7 tokens=61422->14861 pages=3 compaction=compacted upstream=200 412ms
//! ```
//!
//! An upstream that cannot be reached is a warning. Never a header, never a key, never an
//! upstream URL (whose userinfo may hold a credential).

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::Serialize;

use super::outcome::Outcome;

/// The log target of the access lines; `tamp proxy` shows it at `info` by default.
pub const TARGET: &str = "tamp::access";

/// How many threads the status view keeps; the least recently seen go first.
const MAX_THREADS: usize = 256;

/// What a compacted route's body came to, for its line.
#[derive(Debug, Clone, Default)]
pub struct Note {
    pub model: Option<String>,
    pub thread: Option<String>,
    pub tokens: Option<(u64, u64)>,
    pub pages: usize,
    /// The outcome's label (`compacted`, `unchanged`, `skipped`).
    pub compaction: Option<&'static str>,
}

impl Note {
    pub fn of(outcome: &Outcome) -> Note {
        Note {
            model: outcome.model().map(str::to_string),
            thread: outcome.thread().map(str::to_string),
            tokens: outcome.tokens(),
            pages: outcome.pages().len(),
            compaction: Some(outcome.label()),
        }
    }
}

/// Logs one request's line: its method and path (no query: a query may carry a key), the
/// upstream's status (or the proxy's own answer's) and the time to it.
pub fn log(method: &str, path: &str, note: &Note, status: u16, elapsed: Duration) {
    let mut line = format!("{method} {}", printable(path));
    if let Some(model) = &note.model {
        line.push_str(&format!(" model={}", printable(model)));
    }
    if let Some(thread) = &note.thread {
        line.push_str(&format!(" thread={}", printable(thread)));
    }
    if let Some((before, after)) = note.tokens {
        line.push_str(&format!(" tokens={before}->{after}"));
    }
    if note.pages > 0 {
        line.push_str(&format!(" pages={}", note.pages));
    }
    if let Some(compaction) = note.compaction {
        line.push_str(&format!(" compaction={compaction}"));
    }
    line.push_str(&format!(" upstream={status} {}ms", elapsed.as_millis()));
    tracing::info!(target: TARGET, "{line}");
}

/// A client's string as one token of a log line: at most 120 printable ASCII characters.
fn printable(text: &str) -> String {
    text.chars()
        .take(120)
        .map(|c| if c.is_ascii_graphic() { c } else { '?' })
        .collect()
}

/// One thread's totals in the status view.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct ThreadTotals {
    pub thread: String,
    /// The model of its latest request.
    pub model: Option<String>,
    /// Seconds since the Unix epoch.
    pub first_seen: u64,
    pub last_seen: u64,
    pub requests: u64,
    /// Tokens the agent sent, and tokens forwarded, over the requests that were counted.
    pub tokens_in: u64,
    pub tokens_out: u64,
    /// Requests whose compaction wrote pages.
    pub compactions: u64,
    pub pages: u64,
}

/// The recent threads' totals, in memory (a restart starts them over).
#[derive(Default)]
pub struct RecentThreads {
    threads: Mutex<HashMap<String, ThreadTotals>>,
}

impl RecentThreads {
    /// Adds a request of `note.thread` (nothing without one).
    pub fn record(&self, note: &Note) {
        let Some(thread) = &note.thread else {
            return;
        };
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let mut threads = self.threads.lock().unwrap_or_else(PoisonError::into_inner);
        if !threads.contains_key(thread) && threads.len() >= MAX_THREADS {
            let oldest = threads
                .values()
                .min_by_key(|t| t.last_seen)
                .map(|t| t.thread.clone());
            if let Some(oldest) = oldest {
                threads.remove(&oldest);
            }
        }
        let totals = threads
            .entry(thread.clone())
            .or_insert_with(|| ThreadTotals {
                thread: thread.clone(),
                model: None,
                first_seen: now,
                last_seen: now,
                requests: 0,
                tokens_in: 0,
                tokens_out: 0,
                compactions: 0,
                pages: 0,
            });
        totals.last_seen = now;
        totals.requests += 1;
        if note.model.is_some() {
            totals.model.clone_from(&note.model);
        }
        if let Some((before, after)) = note.tokens {
            totals.tokens_in += before;
            totals.tokens_out += after;
        }
        if note.pages > 0 {
            totals.compactions += 1;
            totals.pages += note.pages as u64;
        }
    }

    /// The threads, most recently seen first.
    pub fn list(&self) -> Vec<ThreadTotals> {
        let threads = self.threads.lock().unwrap_or_else(PoisonError::into_inner);
        let mut list: Vec<ThreadTotals> = threads.values().cloned().collect();
        list.sort_by(|a, b| b.last_seen.cmp(&a.last_seen).then(a.thread.cmp(&b.thread)));
        list
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn note(thread: &str, tokens: (u64, u64), pages: usize) -> Note {
        Note {
            model: Some("m".into()),
            thread: Some(thread.into()),
            tokens: Some(tokens),
            pages,
            compaction: Some("compacted"),
        }
    }

    #[test]
    fn a_thread_s_requests_add_up_and_the_oldest_thread_goes_past_the_bound() {
        let recent = RecentThreads::default();
        recent.record(&note("session:a", (100, 40), 2));
        recent.record(&note("session:a", (120, 60), 0));
        recent.record(&Note::default());
        let list = recent.list();
        assert_eq!(list.len(), 1);
        let a = &list[0];
        assert_eq!(
            (
                a.requests,
                a.tokens_in,
                a.tokens_out,
                a.compactions,
                a.pages
            ),
            (2, 220, 100, 1, 2)
        );
        for i in 0..MAX_THREADS + 5 {
            recent.record(&note(&format!("t{i}"), (1, 1), 0));
        }
        assert_eq!(recent.list().len(), MAX_THREADS);
    }

    #[test]
    fn a_client_s_text_is_one_printable_token() {
        assert_eq!(printable("a b\nc\u{202e}"), "a?b?c?");
        assert_eq!(printable(&"x".repeat(500)).len(), 120);
    }
}
