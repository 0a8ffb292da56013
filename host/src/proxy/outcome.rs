//! What the proxy made of a request body ([`Outcome`], and the headers that say so): shared by
//! the full read (`proxy::compact`) and the pre-count that skips it (`proxy::precount`).

use axum::body::Bytes;
use axum::http::HeaderValue;

use crate::console::ChainRun;

/// What the chain made of a body.
#[derive(Debug)]
pub enum Outcome {
    /// The chain changed the conversation, or continued its thread from the last answer:
    /// forward `body`. `tokens_before` counts what the client sent.
    Compacted {
        body: Bytes,
        tokens_before: u64,
        tokens_after: u64,
        pages: Vec<String>,
        thread: Option<String>,
        /// The model the request names.
        model: Option<String>,
        /// What the chain reported, for the console.
        run: Option<Box<ChainRun>>,
    },
    /// The chain ran and left the conversation as it was (under the watermark, or every
    /// stage that ran was rolled back), or would have (forwarded unread): the original bytes
    /// are forwarded.
    Unchanged {
        reason: String,
        thread: Option<String>,
        model: Option<String>,
        /// The conversation's tokens, when it was read and counted.
        tokens: Option<u64>,
        /// When it was forwarded unread: the most tokens it can hold.
        at_most: Option<u64>,
        /// What the chain reported, when it ran, for the console.
        run: Option<Box<ChainRun>>,
    },
    /// The request has nothing to compact: its history is the upstream's (a Responses
    /// request continuing `previous_response_id` or a `conversation`). The original bytes are
    /// forwarded, in strict mode too.
    NothingToCompact { reason: String },
    /// No compaction could be had: the original bytes are forwarded (or, in strict mode,
    /// 502). `invalid` when the body itself is at fault, so the same request fails again.
    Skipped { reason: String, invalid: bool },
}

impl Outcome {
    /// The `x-tamp-compaction` value: `12034->4410; pages=pg_1,pg_2`, `unchanged (...)` or
    /// `skipped (...)`. ASCII only (RFC 9110 §5.5 leaves other bytes to each client).
    pub fn header(&self) -> HeaderValue {
        let text = match self {
            Outcome::Compacted {
                tokens_before,
                tokens_after,
                pages,
                ..
            } if pages.is_empty() => format!("{tokens_before}->{tokens_after}"),
            Outcome::Compacted {
                tokens_before,
                tokens_after,
                pages,
                ..
            } => format!("{tokens_before}->{tokens_after}; pages={}", pages.join(",")),
            Outcome::Unchanged { reason, .. } => format!("unchanged ({})", header_text(reason)),
            Outcome::Skipped { reason, .. } | Outcome::NothingToCompact { reason } => {
                format!("skipped ({})", header_text(reason))
            }
        };
        HeaderValue::from_str(&text).unwrap_or_else(|_| HeaderValue::from_static("skipped"))
    }

    /// The `x-tamp-thread` value: the thread the request was counted under (the client's
    /// thread id, `session:<id>` for an agent's session, or `derived` from its leading
    /// messages), and `; continued` when it continued that thread's last answer. None when no
    /// thread applied.
    pub fn thread_header(&self) -> Option<HeaderValue> {
        let thread = match self {
            Outcome::Compacted { thread, .. } | Outcome::Unchanged { thread, .. } => thread,
            Outcome::Skipped { .. } | Outcome::NothingToCompact { .. } => &None,
        };
        HeaderValue::from_str(&header_text(thread.as_deref()?)).ok()
    }

    /// The model the request names, when the proxy read it.
    pub fn model(&self) -> Option<&str> {
        match self {
            Outcome::Compacted { model, .. } | Outcome::Unchanged { model, .. } => model.as_deref(),
            Outcome::Skipped { .. } | Outcome::NothingToCompact { .. } => None,
        }
    }

    /// The thread the request counts under (as `x-tamp-thread` names it, without
    /// `; continued`), when one applied.
    pub fn thread(&self) -> Option<&str> {
        match self {
            Outcome::Compacted { thread, .. } | Outcome::Unchanged { thread, .. } => {
                thread.as_deref().map(|t| t.trim_end_matches("; continued"))
            }
            Outcome::Skipped { .. } | Outcome::NothingToCompact { .. } => None,
        }
    }

    /// The tokens the client sent and the tokens forwarded, when they were counted.
    pub fn tokens(&self) -> Option<(u64, u64)> {
        match self {
            Outcome::Compacted {
                tokens_before,
                tokens_after,
                ..
            } => Some((*tokens_before, *tokens_after)),
            Outcome::Unchanged { tokens, .. } => tokens.map(|t| (t, t)),
            Outcome::Skipped { .. } | Outcome::NothingToCompact { .. } => None,
        }
    }

    /// When the body was forwarded unread: the most tokens it can hold.
    pub fn at_most(&self) -> Option<u64> {
        match self {
            Outcome::Unchanged { at_most, .. } => *at_most,
            _ => None,
        }
    }

    /// What the chain reported, taken out (for the console's record).
    pub fn take_run(&mut self) -> Option<Box<ChainRun>> {
        match self {
            Outcome::Compacted { run, .. } | Outcome::Unchanged { run, .. } => run.take(),
            _ => None,
        }
    }

    /// The pages the request's compaction wrote.
    pub fn pages(&self) -> &[String] {
        match self {
            Outcome::Compacted { pages, .. } => pages,
            _ => &[],
        }
    }

    /// The label of `tamp_proxy_compactions_total`.
    pub fn label(&self) -> &'static str {
        match self {
            Outcome::Compacted { .. } => "compacted",
            Outcome::Unchanged { .. } => "unchanged",
            Outcome::Skipped { .. } | Outcome::NothingToCompact { .. } => "skipped",
        }
    }
}

/// A reason as a header can carry it: printable ASCII, one line, at most 300 characters.
fn header_text(reason: &str) -> String {
    let mut text: String = reason
        .chars()
        .map(|c| {
            if c.is_ascii_graphic() || c == ' ' {
                c
            } else {
                ' '
            }
        })
        .collect();
    if text.len() > 300 {
        text.truncate(297);
        text.push_str("...");
    }
    text
}

/// The outcome of a request that continues server-side state through `field`.
pub(super) fn nothing_to_compact(field: &str) -> Outcome {
    Outcome::NothingToCompact {
        reason: format!(
            "the request continues server-side state ({field}): its history is the \
             upstream's, not in the body"
        ),
    }
}
