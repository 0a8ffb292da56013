//! What the proxy tells about each request: one line in the log at the default level (target
//! `tamp::access`), and the same fields as the request's record for the console (which keeps
//! them in the store, where `GET /tamp/v1/threads` reads each thread's totals).
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

use std::time::{Duration, SystemTime};

use super::outcome::Outcome;
use crate::console::ChainRun;
use crate::store::activity::RequestRecord;

/// The log target of the access lines; `tamp proxy` shows it at `info` by default.
pub const TARGET: &str = "tamp::access";

/// What a compacted route's body came to, for its line (and the console's record of it).
#[derive(Debug, Default)]
pub struct Note {
    pub model: Option<String>,
    pub thread: Option<String>,
    pub tokens: Option<(u64, u64)>,
    pub pages: usize,
    /// The outcome's label (`compacted`, `unchanged`, `skipped`).
    pub compaction: Option<&'static str>,
    /// For a body forwarded unread: the most tokens it can hold.
    pub at_most: Option<u64>,
    /// The budget its model is compacted against: max tokens, high and low watermarks.
    pub budget: Option<(u64, u64, u64)>,
    /// The proxy's error code, when it answered one (the upstream unreachable, say).
    pub error: Option<String>,
    /// What the chain reported, when it ran.
    pub run: Option<Box<ChainRun>>,
}

impl Note {
    /// The note of `outcome`, taking what its chain reported.
    pub fn of(outcome: &mut Outcome) -> Note {
        Note {
            model: outcome.model().map(str::to_string),
            thread: outcome.thread().map(str::to_string),
            tokens: outcome.tokens(),
            pages: outcome.pages().len(),
            compaction: Some(outcome.label()),
            at_most: outcome.at_most(),
            budget: None,
            error: None,
            run: outcome.take_run(),
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

/// A request's line as the console keeps it: the line's fields, and what the chain reported
/// (the writer task turns that into the stored row, off the request path).
pub fn record(
    method: &str,
    path: &str,
    note: Note,
    status: u16,
    elapsed: Duration,
    at: SystemTime,
) -> (RequestRecord, Option<Box<ChainRun>>) {
    let mut record = RequestRecord {
        at_ms: crate::console::record::millis(at),
        server: "proxy".into(),
        route: format!("{method} {path}"),
        status,
        duration_ms: elapsed.as_millis() as u64,
        thread: note.thread,
        model: note.model,
        outcome: note.compaction.map(str::to_string),
        tokens_at_most: note.at_most,
        pages: u32::try_from(note.pages).unwrap_or(u32::MAX),
        error: note.error,
        ..RequestRecord::default()
    };
    record.set_tokens(note.tokens);
    record.set_budget(note.budget);
    (record, note.run)
}

#[cfg(test)]
mod tests {
    use std::time::UNIX_EPOCH;

    use super::*;

    #[test]
    fn a_record_keeps_the_line_s_fields() {
        let note = Note {
            model: Some("m".into()),
            thread: Some("session:a".into()),
            tokens: Some((100, 40)),
            pages: 2,
            compaction: Some("compacted"),
            budget: Some((1000, 800, 500)),
            ..Note::default()
        };
        let at = UNIX_EPOCH + Duration::from_millis(1_700_000_000_123);
        let (r, run) = record(
            "POST",
            "/v1/messages",
            note,
            200,
            Duration::from_millis(41),
            at,
        );
        assert!(run.is_none());
        assert_eq!(r.at_ms, 1_700_000_000_123);
        assert_eq!(r.route, "POST /v1/messages");
        assert_eq!((r.status, r.duration_ms, r.pages), (200, 41, 2));
        assert_eq!(r.thread.as_deref(), Some("session:a"));
        assert_eq!((r.tokens_in, r.tokens_out), (Some(100), Some(40)));
        assert_eq!(r.outcome.as_deref(), Some("compacted"));
        assert_eq!(
            (r.max_tokens, r.high_tokens, r.low_tokens),
            (Some(1000), Some(800), Some(500))
        );
    }

    #[test]
    fn a_client_s_text_is_one_printable_token() {
        assert_eq!(printable("a b\nc\u{202e}"), "a?b?c?");
        assert_eq!(printable(&"x".repeat(500)).len(), 120);
    }
}
