//! Summarizing a growing run of messages without paying again for its older part.
//!
//! A sidecar client often sends the whole history on every call, so the run a strategy
//! summarizes grows at its end between compactions. The host caches each summary by the exact
//! messages it covers ([`Host::cache_summary`]); [`plan`] asks for the longest cached leading
//! run, and the strategy then summarizes only what follows it, combining the two as its
//! config's [`Reuse`] says.
//!
//! ```ignore
//! match incremental::plan(&host, &content, config.reuse).await {
//!     Plan::Cached(text) => text,                               // no LLM call
//!     Plan::Extend { covered, summary } => match config.reuse {
//!         Reuse::Merge => summarize_with_prior(&content[covered..], &summary).await?,
//!         _ => incremental::append(&summary, &summarize(&content[covered..]).await?),
//!     },
//!     Plan::Fresh => summarize(&content).await?,
//! };
//! host.cache_summary(&content, &text).await;
//! ```

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::conversation::Message;
use crate::host::Host;

/// How a cached summary of a leading run is combined with the messages after it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(crate = "serde", rename_all = "snake_case")]
pub enum Reuse {
    /// Summarize the new messages with the cached summary as context, into one summary of
    /// the whole run (one merged text; costs the cached summary's tokens once more).
    #[default]
    Merge,
    /// Summarize the new messages alone and append that to the cached summary (cheapest; the
    /// summary grows by one part per compaction).
    Append,
    /// Do not use the cache: summarize the whole run every time.
    Off,
}

/// What is left to summarize of a run of messages.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Plan {
    /// The whole run was summarized before: this is its summary.
    Cached(String),
    /// `summary` covers the first `covered` messages (at least one, fewer than all); the rest
    /// is new.
    Extend { covered: usize, summary: String },
    /// Nothing usable is cached (or reuse is off).
    Fresh,
}

/// Looks up the longest cached leading run of `messages` (this thread, strategy and stage
/// config; the host keys it).
pub async fn plan(host: &Host, messages: &[Message], reuse: Reuse) -> Plan {
    if reuse == Reuse::Off || messages.is_empty() {
        return Plan::Fresh;
    }
    match host.cached_summary(messages).await {
        Some(hit) if hit.messages_covered as usize >= messages.len() => {
            Plan::Cached(hit.text.into_string())
        }
        Some(hit) if hit.messages_covered > 0 && !hit.text.trim().is_empty() => Plan::Extend {
            covered: hit.messages_covered as usize,
            summary: hit.text.into_string(),
        },
        _ => Plan::Fresh,
    }
}

/// A cached summary of the leading pieces of a span (a piece being what a strategy renders
/// as one unit: a message or a tool exchange).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Leading {
    /// Pieces (from the first) the summary covers.
    pub pieces: usize,
    /// Messages those pieces make up.
    pub messages: usize,
    pub summary: String,
}

/// The cached summary of the longest leading run of `messages[span]` that ends where a piece
/// ends (`piece_ranges`: each piece's messages, in order), or `None`: a summary ending inside
/// a piece cannot be combined with the pieces after it.
pub async fn leading_pieces(
    host: &Host,
    messages: &[Message],
    span: std::ops::Range<usize>,
    piece_ranges: &[std::ops::Range<usize>],
    reuse: Reuse,
) -> Option<Leading> {
    let run = &messages[span.clone()];
    let (covered, summary) = match plan(host, run, reuse).await {
        Plan::Cached(summary) => (run.len(), summary),
        Plan::Extend { covered, summary } => (covered, summary),
        Plan::Fresh => return None,
    };
    let end = span.start + covered;
    let pieces = piece_ranges.iter().position(|r| r.end == end)? + 1;
    Some(Leading {
        pieces,
        messages: covered,
        summary,
    })
}

/// The cached summary followed by the summary of what came after it ([`Reuse::Append`]).
pub fn append(cached: &str, new: &str) -> String {
    format!("{}\n\n{}", cached.trim_end(), new.trim_start())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn append_joins_with_one_blank_line() {
        assert_eq!(append("old.\n", "\nnew."), "old.\n\nnew.");
    }

    #[test]
    fn reuse_names_in_config() {
        let r: Reuse = serde_json::from_str("\"append\"").unwrap();
        assert_eq!(r, Reuse::Append);
        assert_eq!(serde_json::to_string(&Reuse::Merge).unwrap(), "\"merge\"");
        assert_eq!(Reuse::default(), Reuse::Merge);
    }
}
