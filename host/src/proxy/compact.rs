//! A request body through the chain, never in the way: whatever goes wrong (a body tamp
//! cannot read, a chain error, a panic, a compaction slower than
//! `[proxy] compaction_timeout_secs`), the original body is what is forwarded, and
//! `x-tamp-compaction` says why.

use std::sync::Arc;

use axum::body::Bytes;

use super::last_read::LastReads;
use super::outcome::{nothing_to_compact, Outcome};
use super::precount;
use super::session::{RequestFields, ThreadHint};
use crate::chain::{ChainError, ChainReport, CompactOptions, StageStatus};
use crate::console::ChainRun;
use crate::http::active::ActiveChain;
use crate::http::limits::InFlight;
use crate::http::metrics::Metrics;
use crate::wire::{self, WireFormat};

/// Who sent a request, as its headers say: what names its thread, and whose the pages its
/// compaction writes are (see [`super::owner`]).
pub struct Origin {
    pub thread: ThreadHint,
    pub owner: Option<String>,
}

/// The answer header that says what the chain did to the request.
pub const COMPACTION_HEADER: &str = "x-tamp-compaction";

/// Runs `body` (a request in `format`) through `active`'s chain, continuing its thread: the
/// client's `x-tamp-thread-id`, else the agent session its body or headers name, else the one
/// derived from its leading messages.
///
/// A body the chain would certainly leave as it is (see [`precount`]) is not read: the
/// outcome is `Unchanged`, and the caller forwards the original bytes. Not in `[proxy]
/// strict` mode, where every body is read so that one tamp cannot read is refused. A body
/// read and left as it is, in a named thread, is kept in `last` as that thread's last read
/// request, to bound the next one.
///
/// The pages it writes are recorded as the origin's owner's.
///
/// The compaction runs on a task of its own: a client that hangs up, or a request that stops
/// waiting after `[proxy] compaction_timeout_secs`, does not cancel it half-way (the pages it
/// archives stay whole and the thread state it leaves is a valid start for the next
/// request), and a panic outside the plugins' containment is caught here rather than taking
/// the request down.
pub async fn compact(
    active: Arc<ActiveChain>,
    metrics: Arc<Metrics>,
    in_flight: &Arc<InFlight>,
    format: WireFormat,
    body: Bytes,
    origin: Origin,
    last: Arc<LastReads>,
) -> Outcome {
    let Origin { thread, owner } = origin;
    let timeout = active.proxy().compaction_timeout();
    if !active.proxy().strict {
        // The same wait as the compaction's: a thread store that hangs is not waited on longer.
        let decided = tokio::time::timeout(
            timeout,
            precount::decide(
                &active.chain,
                format,
                &body,
                &thread,
                &last,
                &active.config_hash,
                &active.proxy().models,
            ),
        );
        if let Ok(Some(outcome)) = decided.await {
            return outcome;
        }
    }
    let guard = in_flight.enter();
    let task = tokio::spawn({
        let metrics = Arc::clone(&metrics);
        let body = body.clone();
        async move {
            let _guard = guard;
            run(&active, &metrics, format, &body, thread, owner, &last).await
        }
    });
    match tokio::time::timeout(timeout, task).await {
        Ok(Ok(outcome)) => outcome,
        Ok(Err(e)) => {
            metrics.compaction_failed("error");
            let what = if e.is_panic() {
                "panicked"
            } else {
                "was cancelled"
            };
            Outcome::Skipped {
                reason: format!("the compaction {what}"),
                invalid: false,
            }
        }
        Err(_) => {
            metrics.compaction_failed("error");
            Outcome::Skipped {
                reason: format!(
                    "the compaction took longer than {} s ([proxy] compaction_timeout_secs); it \
                     goes on in the background",
                    timeout.as_secs_f64()
                ),
                invalid: false,
            }
        }
    }
}

async fn run(
    active: &ActiveChain,
    metrics: &Metrics,
    format: WireFormat,
    body: &Bytes,
    thread: ThreadHint,
    owner: Option<String>,
    last: &LastReads,
) -> Outcome {
    let invalid = |reason: String| {
        metrics.compaction_failed("invalid");
        Outcome::Skipped {
            reason,
            invalid: true,
        }
    };
    let text = match std::str::from_utf8(body) {
        Ok(text) => text,
        Err(e) => {
            return invalid(format!(
                "request body: invalid UTF-8 at byte offset {}",
                e.valid_up_to()
            ))
        }
    };
    let mut conversation = match wire::parse_str(text, Some(format)) {
        Ok((conversation, _)) => conversation,
        Err(e) if e.path.is_empty() => return invalid(format!("request body: {}", e.message)),
        Err(e) => return invalid(format!("request body: {e}")),
    };
    // The body's top-level fields, as the wire reader kept them. Fields of other types than
    // the proxy reads (a `metadata` that is not an object, ...) name nothing here: the
    // upstream refuses them.
    let fields = RequestFields::read(conversation.metadata_json.as_str()).unwrap_or_default();
    if format == WireFormat::Responses {
        if let Some(field) = fields.server_side() {
            return nothing_to_compact(field);
        }
    }
    let named = fields.thread(&thread);
    let model = fields.model.as_deref().map(str::to_string);
    let budget = active
        .proxy()
        .models
        .for_model(fields.model.as_deref(), active.chain.budget());
    drop(fields);
    if let Some(id) = &named {
        conversation.set_thread_id(id);
    }
    let options = CompactOptions {
        format: Some(format),
        force: false,
        budget,
        thread_continuity: true,
    };
    // Kept to count what the client sent when the chain continues the thread (its report
    // then counts the thread's last answer plus what is new), and to measure the prefix a
    // compaction keeps (`ChainRun::of`): a copy is cheaper than a count made on every request.
    let sent = conversation.messages.clone();
    let compacted = match active.chain.compact(conversation, &options).await {
        Ok(compacted) => compacted,
        Err(ChainError::InvalidInput(e)) => return invalid(format!("request body: {e}")),
        Err(e) => {
            metrics.compaction_failed("error");
            return Outcome::Skipped {
                reason: e.to_string(),
                invalid: false,
            };
        }
    };
    metrics.compaction(&compacted.report);
    let report = &compacted.report;
    if let Some(owner) = &owner {
        super::owner::record(active, owner, report, named.as_deref()).await;
    }
    let continued = report.thread.as_ref().is_some_and(|t| t.continued);
    // A compaction item of tamp's was read as the items it stands for: the body must be
    // written anew, for the upstream cannot read that item.
    let expanded = format == WireFormat::Responses && wire::carries_own_compaction(text);
    let thread = report.thread.as_ref().map(|t| {
        let name = match (&named, t.key) {
            (Some(id), "given") => id.as_str(),
            _ => "derived",
        };
        if t.continued {
            format!("{name}; continued")
        } else {
            name.to_string()
        }
    });
    if let Some(thread) = &thread {
        tracing::debug!("the request counts under thread {thread}");
    }
    if !acted(report) && !continued && !expanded {
        // Counted as sent (the thread was not continued): the next request of the thread
        // that repeats this one is bounded from this count.
        if let Some(id) = &named {
            last.record(id, &active.config_hash, format, body, report.tokens_before);
        }
        let reason = unchanged_reason(report);
        let tokens = report.tokens_before;
        let (_, run) = ChainRun::of(&active.chain, &sent, compacted);
        return Outcome::Unchanged {
            reason,
            thread,
            model,
            tokens: Some(tokens),
            at_most: None,
            run: Some(Box::new(run)),
        };
    }
    // Written by the wire writer: every field tamp does not interpret (`model`, `stream`,
    // `tools`, unknown ones) is the exact text the client sent.
    let body = wire::write(&compacted.conversation, format).compact();
    let tokens_after = report.tokens_after;
    let pages = report
        .stages
        .iter()
        .flat_map(|s| s.pages.iter().cloned())
        .collect();
    let (tokens_before, run) = ChainRun::of(&active.chain, &sent, compacted);
    Outcome::Compacted {
        body: Bytes::from(body),
        tokens_before,
        tokens_after,
        pages,
        thread,
        model,
        run: Some(Box::new(run)),
    }
}

fn acted(report: &ChainReport) -> bool {
    report.stages.iter().any(|s| s.status == StageStatus::Acted)
}

/// Why nothing changed: the stages rolled back, if any were, else the chain's reason.
fn unchanged_reason(report: &ChainReport) -> String {
    let rolled_back: Vec<String> = report
        .stages
        .iter()
        .filter(|s| s.status == StageStatus::RolledBack)
        .map(|s| format!("stage \"{}\" {}", s.stage, s.reason))
        .collect();
    if rolled_back.is_empty() {
        report.reason.clone()
    } else {
        rolled_back.join("; ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_header_is_ascii_on_one_line() {
        let outcome = Outcome::Skipped {
            reason: "messages[3]: bad\nline → é".into(),
            invalid: true,
        };
        assert_eq!(outcome.header(), "skipped (messages[3]: bad line    )");
        let long = Outcome::Unchanged {
            reason: "x".repeat(1000),
            thread: None,
            model: None,
            tokens: None,
            at_most: None,
            run: None,
        };
        assert!(long.header().len() < 320);
        assert_eq!(long.thread_header(), None);
        let compacted = Outcome::Compacted {
            body: Bytes::new(),
            tokens_before: 12034,
            tokens_after: 4410,
            pages: vec!["pg_1".into(), "pg_2".into()],
            thread: Some("session:0de6b6e7; continued".into()),
            model: Some("claude-opus-5-5".into()),
            run: None,
        };
        assert_eq!(compacted.thread(), Some("session:0de6b6e7"));
        assert_eq!(compacted.tokens(), Some((12034, 4410)));
        assert_eq!(compacted.header(), "12034->4410; pages=pg_1,pg_2");
        assert_eq!(
            compacted.thread_header().unwrap(),
            "session:0de6b6e7; continued"
        );
    }
}
