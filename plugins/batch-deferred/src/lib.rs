//! `batch-deferred`: compacts at once and lets the host finish the summaries later.
//!
//! A run archives the old messages (beyond the protected tail, tool exchanges whole) as a
//! page, asks the host to defer a summary request for that page (the host sends it in a
//! Message Batch, at half price), and puts a **pending** summary in the page's place: a
//! header (`[Pending summary: 42 messages, <label>]`) and a preview made of the first and
//! last messages' opening words. It never waits on an LLM. The request's prompt is a
//! page-transcript prompt when the host fills those in (`tamp_plugin_api::deferred`): the
//! transcript is rendered from the page when the request is sent, so a compaction does not
//! store the page's text a second time inside the queued request.
//!
//! Every run also asks the host where its pending summaries stand and replaces each one whose
//! result has arrived by the **final** summary: same position, same page ref, status `final`,
//! text cut to `max_summary_chars` and never longer (in tokens) than the placeholder it
//! replaces, so finalizing never grows the conversation. Nothing else changes.
//!
//! Its summaries stay in place while they take at most `keep_summaries_share` of the budget;
//! past it, the leading run of its final summaries is folded: archived as one page behind a
//! pending summary that carries their ledgers, its request made from their narratives.

//!
//! What a run defers and finalizes is decided in [`plan`], the config is in [`config`]; this
//! file runs the plan through the host.

use tamp_plugin_api::prelude::*;
use tamp_plugin_api::sdk::cap_chars;
use tamp_plugin_api::sdk::ledger;
use tamp_plugin_api::DeferredStatus;

pub mod config;
mod defer;
pub mod plan;

pub use config::{CompactWhen, Config};
use plan::finalizable;
pub use plan::{fold_span, plan_pages, FINAL_HEADER, PENDING_HEADER};

/// The strategy's name: in pages, summary messages and logs.
pub const NAME: &str = "batch-deferred";

pub struct BatchDeferred {
    config: Config,
    prompt_template: Template,
}

/// The report's details: how many pages went behind pending summaries and how many pending
/// summaries were finalized.
#[derive(Serialize)]
#[serde(crate = "tamp_plugin_api::serde")]
struct Details {
    deferred: usize,
    finalized: usize,
}

impl Strategy for BatchDeferred {
    type Config = Config;
    const NAME: &'static str = NAME;
    const DESCRIPTION: &'static str = "Replaces old messages by a pending summary at once and \
        lets the host summarize them later through a batch API at half price; a later run \
        swaps in the final summary at the same place.";

    fn new(config: Config) -> Result<Self, PluginError> {
        config.validate()?;
        let prompt_template = config.prompt_template()?;
        Ok(BatchDeferred {
            config,
            prompt_template,
        })
    }

    async fn compact(&self, input: Compaction) -> Result<CompactOutcome, PluginError> {
        let host = &input.host;
        let messages = input.conversation.messages.as_slice();
        let mut warnings = Vec::new();

        // Finalized summaries replace one message each, pages a run of plain messages: the
        // edits never overlap.
        let keep_recent = input.budget.keep_recent as usize;
        let mut edits = self
            .finalize(host, messages, keep_recent, &mut warnings)
            .await;
        let finalized = edits.len();

        let compact = match self.config.compact_when {
            CompactWhen::Always => true,
            CompactWhen::OverBudget => input.budget.current_tokens > input.budget.high_watermark,
        };
        let mut pages = Vec::new();
        if compact {
            // Our earlier summaries fold into one once they take their share: otherwise a
            // long session's summaries pile up past the budget.
            let max_tokens = input.budget.max_tokens;
            let limit = (max_tokens as f64 * self.config.keep_summaries_share) as u64;
            let count = |text: &str| host.count_tokens(text);
            let fit = |summaries: &[&Message]| {
                self.config
                    .ledger
                    .kept_summaries_fit(summaries, limit, max_tokens, &count)
            };
            pages.extend(fold_span(messages, keep_recent, fit));
            pages.extend(plan_pages(
                messages,
                keep_recent,
                self.config.min_messages,
                self.config.max_page_messages,
            ));
        }
        let placed = self
            .defer(
                host,
                messages,
                pages,
                input.budget.max_tokens,
                &mut warnings,
            )
            .await;

        let deferred = placed.len();
        let removed: usize = placed.iter().map(|e| e.span().len()).sum();
        edits.extend(placed);
        if finalized == 0 && deferred == 0 {
            let why = if compact {
                format!(
                    "no run of at least {} old messages to defer, and no pending summary finished",
                    self.config.min_messages
                )
            } else {
                "under the high watermark, and no pending summary finished".to_string()
            };
            let report = StageReport::skipped(why).with_warnings(warnings);
            return Ok(CompactOutcome::with_edits([], report));
        }
        let report = StageReport::acted(format!(
            "deferred {deferred} page(s) ({removed} messages) behind pending summaries; \
             finalized {finalized} pending summary(ies)"
        ))
        .with_warnings(warnings)
        .with_details(&Details {
            deferred,
            finalized,
        });
        Ok(CompactOutcome::with_edits(edits, report))
    }
}

impl BatchDeferred {
    /// The final summaries of every pending summary of ours whose deferred result is done,
    /// each to put in its place.
    async fn finalize(
        &self,
        host: &Host,
        messages: &[Message],
        keep_recent: usize,
        warnings: &mut Vec<String>,
    ) -> Vec<Edit> {
        let pending = finalizable(messages, keep_recent);
        if pending.is_empty() {
            return Vec::new();
        }
        let ids: Vec<String> = pending.iter().map(|(_, id)| id.clone()).collect();
        let states = host.deferred_results(&ids).await;
        let mut finalized = Vec::new();
        for ((index, page_ref), state) in pending.into_iter().zip(states) {
            match state.status {
                DeferredStatus::Done => {
                    let text = self.final_text(host, &messages[index], state.answer());
                    finalized.push(Edit::finalize(index, text));
                }
                DeferredStatus::Failed => warnings.push(format!(
                    "the deferred summary of {page_ref} failed ({}); it stays pending, the \
                     messages are in the page",
                    state.reason
                )),
                DeferredStatus::Queued | DeferredStatus::Submitted => {}
                // `Unknown`, or a state a later host added that this plugin cannot act on.
                status => warnings.push(format!(
                    "the host reports {} for the deferred request of {page_ref} (another \
                     store, or a host without the deferred service); it stays pending",
                    status.as_str()
                )),
            }
        }
        finalized
    }

    /// The final summary's text: the pending header turned final, then the answer, cut to
    /// `max_summary_chars` and to the placeholder's size in tokens, then the ledger the
    /// pending summary carried, as it was.
    fn final_text(&self, host: &Host, pending: &Message, answer: &str) -> String {
        let pending_text = pending.joined_text();
        let header = pending_text
            .lines()
            .next()
            .and_then(|l| l.strip_prefix(PENDING_HEADER))
            .map(|rest| format!("{FINAL_HEADER}{rest}\n"))
            .unwrap_or_default();
        let ledger = ledger::split(&pending_text).1.unwrap_or_default();
        let answer = answer.trim();
        let mut chars = self.config.max_summary_chars;
        let room = host.count_message_tokens(std::slice::from_ref(pending));
        loop {
            let text = ledger::attach(&format!("{header}{}", cap_chars(answer, chars)), &ledger);
            let probe = Message::text(sdk::SUMMARY_ROLE, text.as_str());
            let tokens = host.count_message_tokens(std::slice::from_ref(&probe));
            if tokens <= room || chars == 0 {
                return text;
            }
            // Shrink in proportion to the overshoot, with a margin, until it fits.
            let next = (chars as u128 * u128::from(room) / u128::from(tokens.max(1))) as usize;
            chars = next.saturating_sub(8).min(chars - 1);
        }
    }
}

export_plugin!(BatchDeferred);
