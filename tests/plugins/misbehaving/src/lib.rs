//! A plugin that misbehaves on purpose, so the host's containment can be tested against a
//! real loaded library. `mode` picks the misbehaviour; `ok` is a well-behaved strategy that
//! archives the oldest compactable unit.
//!
//! `panic_per_mille` and `hang_per_mille` make it misbehave now and then instead (the soak
//! bench's injected faults): on that share of calls it panics as `panic_in_compact` does or
//! hangs as `hang` does, and otherwise behaves as `mode`. Which calls is decided by a hash of
//! the two rates, the call's number on this instance and the conversation's size, so a given
//! sequence of calls misbehaves the same way in every run, and a conversation sent again is
//! not always treated alike. Each injected fault is logged as a warning first
//! (`misbehaving: injected panic (call N)`). Both default to 0: then only `mode` counts, as
//! before.

use std::hash::{DefaultHasher, Hash as _, Hasher as _};
use std::sync::atomic::{AtomicU64, Ordering};

use tamp_plugin_api::prelude::*;
use tamp_plugin_api::tracing;

#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, JsonSchema, PartialEq)]
#[serde(crate = "tamp_plugin_api::serde", rename_all = "snake_case")]
#[schemars(crate = "tamp_plugin_api::schemars")]
pub enum Mode {
    /// Archive the oldest compactable unit behind a summary (correct behaviour).
    #[default]
    Ok,
    PanicInNew,
    /// Panic inside the future, after awaiting a host call.
    PanicInCompact,
    /// Never finish.
    Hang,
    /// Return an error.
    Error,
    /// Remove a message without archiving it.
    DropMessage,
    /// Replace a message by a summary naming the right page (its content's id), without ever
    /// archiving it: only the store can tell the page is missing.
    ReplaceUnarchived,
    /// Replace a tool result without its call.
    SplitExchange,
    /// Change a message inside the protected recent tail.
    TouchRecent,
    /// Emit log events at every level, then behave like `ok`.
    Log,
    /// Only wait: three LLM calls at once through the host, then return the conversation
    /// unchanged (measures the async plumbing, with no work of its own).
    AwaitLlm,
    /// Return no edits, having read no more than its compactable range (the benches' native
    /// stage that does nothing, beside a WebAssembly one).
    Nothing,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(crate = "tamp_plugin_api::serde", deny_unknown_fields, default)]
#[schemars(crate = "tamp_plugin_api::schemars")]
pub struct Config {
    pub mode: Mode,
    /// Panic on about this many calls in 1,000 (0 to 1,000).
    #[schemars(range(max = 1000))]
    pub panic_per_mille: u32,
    /// Never finish on about this many calls in 1,000 (0 to 1,000, with `panic_per_mille`
    /// at most 1,000 in all).
    #[schemars(range(max = 1000))]
    pub hang_per_mille: u32,
}

pub struct Misbehaving {
    mode: Mode,
    panic_per_mille: u32,
    hang_per_mille: u32,
    /// Calls so far on this instance (a reload makes a new one).
    calls: AtomicU64,
}

impl Misbehaving {
    /// The mode of this call: `mode`, or now and then a panic or a hang.
    fn mode_for(&self, messages: usize, tokens: u64) -> Mode {
        if self.panic_per_mille == 0 && self.hang_per_mille == 0 {
            return self.mode;
        }
        let call = self.calls.fetch_add(1, Ordering::Relaxed);
        let mut hasher = DefaultHasher::new();
        // The rates are in the hash too: two stages of this plugin given the same calls must
        // not draw the same numbers (then every hang would come with a panic).
        (
            self.panic_per_mille,
            self.hang_per_mille,
            call,
            messages,
            tokens,
        )
            .hash(&mut hasher);
        let draw = (hasher.finish() % 1000) as u32;
        // Said in the host's log, so a soak can tell every injected fault from a real one.
        if draw < self.panic_per_mille {
            tracing::warn!("misbehaving: injected panic (call {call})");
            Mode::PanicInCompact
        } else if draw < self.panic_per_mille + self.hang_per_mille {
            tracing::warn!("misbehaving: injected hang (call {call})");
            Mode::Hang
        } else {
            self.mode
        }
    }
}

impl Strategy for Misbehaving {
    type Config = Config;
    const NAME: &'static str = "misbehaving";
    const DESCRIPTION: &'static str = "Test fixture that misbehaves as configured.";

    fn new(config: Config) -> Result<Self, PluginError> {
        if config.mode == Mode::PanicInNew {
            panic!("misbehaving: panic in constructor");
        }
        if config.panic_per_mille.saturating_add(config.hang_per_mille) > 1000 {
            return Err(PluginError::invalid_config(
                "panic_per_mille + hang_per_mille must be at most 1000",
            ));
        }
        Ok(Misbehaving {
            mode: config.mode,
            panic_per_mille: config.panic_per_mille,
            hang_per_mille: config.hang_per_mille,
            calls: AtomicU64::new(0),
        })
    }

    async fn compact(&self, input: Compaction) -> Result<CompactOutcome, PluginError> {
        let Compaction {
            conversation,
            budget,
            host,
            ..
        } = input;
        let messages = &conversation.messages;
        let range = sdk::compactable_range(messages, budget.keep_recent as usize);
        match self.mode_for(messages.len(), budget.current_tokens) {
            Mode::PanicInCompact => {
                let _ = host.count_tokens("x");
                tokio_free_yield().await;
                panic!("misbehaving: panic inside the future");
            }
            Mode::Hang => {
                std::future::pending::<()>().await;
                unreachable!()
            }
            Mode::Error => return Err(PluginError::internal("misbehaving: asked to fail")),
            Mode::Nothing => {
                return Ok(CompactOutcome::unchanged(format!(
                    "{} of {} messages compactable; nothing done",
                    range.len(),
                    messages.len()
                )))
            }
            Mode::DropMessage => {
                // A summary of a page that does not hold the message it stands for.
                if range.is_empty() {
                    return Ok(CompactOutcome::unchanged("nothing to drop"));
                }
                let summary = sdk::summary_message(
                    "dropped",
                    "pg_00000000000000000000000000000000",
                    Self::NAME,
                    SummaryStatus::Final,
                );
                let span = first_unit_within(messages, &range)
                    .map_or(range.start..range.start + 1, |u| u.range);
                return Ok(acted([Edit::replace(span, summary)]));
            }
            Mode::ReplaceUnarchived => {
                let Some(unit) = first_unit_within(messages, &range) else {
                    return Ok(CompactOutcome::unchanged("nothing to replace"));
                };
                let page = tamp_plugin_api::page::page_id(&messages[unit.range.clone()]);
                let summary =
                    sdk::summary_message("never archived", &page, Self::NAME, SummaryStatus::Final);
                return Ok(acted([Edit::replace(unit.range, summary)]));
            }
            Mode::SplitExchange => {
                let exchange = sdk::units(messages)
                    .into_iter()
                    .find(|u| u.kind == UnitKind::ToolExchange && u.range.end <= range.end);
                let Some(unit) = exchange else {
                    return Ok(CompactOutcome::unchanged("no exchange"));
                };
                // Summarize only the call, leaving its result orphaned.
                let call = unit.range.start..unit.range.start + 1;
                return Ok(acted([Edit::summarize(call, "call archived")]));
            }
            Mode::TouchRecent => {
                // A summary over the last (protected) message.
                let n = messages.len();
                return Ok(acted([Edit::summarize(n - 1..n, "tampered")]));
            }
            Mode::AwaitLlm => {
                let requests = (0..3)
                    .map(|i| LlmRequest::new("", format!("call {i}"), 16))
                    .collect();
                let answers = host.complete_all(requests, 3).await;
                let ok = answers.iter().filter(|a| a.is_ok()).count();
                return Ok(CompactOutcome::unchanged(format!(
                    "{ok}/3 LLM calls answered"
                )));
            }
            Mode::Log => {
                tracing::error!(mode = "log", "misbehaving error event");
                tracing::warn!("misbehaving warn event");
                tracing::info!(count = 3, "misbehaving info event");
                tracing::debug!("misbehaving debug event");
            }
            Mode::Ok | Mode::PanicInNew => {}
        }
        // Ok: archive the oldest compactable unit that is not a system message or summary.
        let unit = sdk::units(messages).into_iter().find(|u| {
            range.start <= u.range.start
                && u.range.end <= range.end
                && matches!(u.kind, UnitKind::Message | UnitKind::ToolExchange)
        });
        let Some(unit) = unit else {
            return Ok(CompactOutcome::unchanged("nothing compactable"));
        };
        let text = format!("{} message(s) archived", unit.range.len());
        Ok(acted([Edit::summarize(unit.range, text)]))
    }
}

/// The first unit wholly inside `range` (the compactable range).
fn first_unit_within(messages: &[Message], range: &std::ops::Range<usize>) -> Option<sdk::Unit> {
    sdk::units(messages)
        .into_iter()
        .find(|u| range.start <= u.range.start && u.range.end <= range.end)
}

fn acted(edits: impl IntoIterator<Item = Edit>) -> CompactOutcome {
    CompactOutcome::with_edits(edits, StageReport::acted("misbehaving acted"))
}

/// Yields once to the executor without needing a runtime inside the plugin.
async fn tokio_free_yield() {
    let mut yielded = false;
    std::future::poll_fn(|cx| {
        if yielded {
            std::task::Poll::Ready(())
        } else {
            yielded = true;
            cx.waker().wake_by_ref();
            std::task::Poll::Pending
        }
    })
    .await
}

export_plugin!(Misbehaving);
