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

use std::borrow::Cow;
use std::ops::Range;

use tamp_plugin_api::deferred::page_transcript_prompt;
use tamp_plugin_api::prelude::*;
use tamp_plugin_api::sdk::ledger::{self, Sharing};
use tamp_plugin_api::sdk::{cap_chars, summary_message};
use tamp_plugin_api::DeferredStatus;

pub mod config;
pub mod plan;

pub use config::{CompactWhen, Config};
use plan::{finalizable, label_of, pending_text, shown_run};
pub use plan::{fold_span, plan_pages, FINAL_HEADER, PENDING_HEADER};

/// The strategy's name: in pages, summary messages and logs.
pub const NAME: &str = "batch-deferred";

/// A page to defer, once its placeholder is known to be worth it.
struct Planned<'a> {
    range: Range<usize>,
    label: String,
    /// The pending summary's text.
    text: String,
    /// The run as its request shows it ([`shown_run`]).
    shown: Cow<'a, [Message]>,
    /// The run is summaries (a fold): its request is written whole, never from the page.
    folds: bool,
}

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
                    let text = self.final_text(host, &messages[index], state.text.as_str());
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

    /// Archives each planned page, defers its summary and returns the pending summaries to
    /// put in place. A page the host will not archive or defer is left as it was.
    async fn defer(
        &self,
        host: &Host,
        messages: &[Message],
        pages: Vec<Range<usize>>,
        max_tokens: u64,
        warnings: &mut Vec<String>,
    ) -> Vec<Edit> {
        // The ledgers of the pages placed by this compaction, so far: the later pages share
        // the cap with them as with the summaries already in `messages`.
        let mut placed_ledgers = 0;
        // A placeholder that would not be smaller than its messages is not worth it.
        let planned: Vec<Planned> = pages
            .into_iter()
            .filter_map(|range| {
                let run = &messages[range.clone()];
                let label = label_of(run);
                // A fold's run is summaries: its request and preview show their narratives.
                let folds = run.iter().any(Message::is_summary);
                let shown = shown_run(run, &self.config.ledger);
                // The ledger goes with the placeholder: the facts are there before the batch
                // answers. The ledgers of all these summaries share the cap (a fold bounds
                // those it carries as one), and each page's has at most its share of the page.
                let cap = self.config.ledger.cap(
                    host,
                    messages,
                    &range,
                    max_tokens,
                    Sharing::WithEarlierAndPlaced {
                        placed: placed_ledgers,
                    },
                );
                let preview = self.config.preview_chars;
                let mut finished = ledger::finish(
                    &self.config.ledger,
                    host,
                    messages,
                    range.clone(),
                    &pending_text(&shown, &label, preview, 0),
                    cap,
                );
                if finished.unlisted > 0 {
                    // No room left for even a note line: the header says how many entries
                    // the page holds, so none is dropped silently.
                    finished.text = pending_text(&shown, &label, preview, finished.unlisted);
                }
                let placeholder = Message::text(sdk::SUMMARY_ROLE, finished.text.as_str());
                let smaller = host.count_message_tokens(std::slice::from_ref(&placeholder))
                    < host.count_message_tokens(run);
                // A fold carries ledgers the later pages' caps already count (they are in
                // the messages before those pages).
                if smaller && !folds {
                    placed_ledgers += host.count_tokens(&finished.ledger.render());
                }
                smaller.then_some(Planned {
                    range,
                    label,
                    text: finished.text,
                    shown,
                    folds,
                })
            })
            .collect();
        if planned.is_empty() {
            return Vec::new();
        }
        let drafts = planned
            .iter()
            .map(|p| {
                let meta = tamp_plugin_api::serde_json::json!({"deferred": true, "label": p.label});
                (messages[p.range.clone()].to_vec(), Some(meta))
            })
            .collect();
        let ids = host.archive_pages(drafts).await;
        // The host fills the transcript in from the page when it sends the request, so the
        // page's text is stored once rather than again inside the queued prompt.
        let transcript_from_page = host.renders_page_transcripts();
        let mut ready = Vec::new();
        for (p, id) in planned.into_iter().zip(ids) {
            let page_id = match id {
                Ok(id) => id,
                Err(e) => {
                    warnings.push(format!("cannot archive messages {:?}: {e}", p.range));
                    continue;
                }
            };
            // The page of a fold holds the summaries with their ledgers: its request is
            // written whole, from their narratives.
            let from_page = (transcript_from_page && !p.folds).then_some(page_id.as_str());
            match self.request_for(&p.shown, &p.label, from_page) {
                Ok(request) => ready.push((p.range, p.text, page_id, request)),
                Err(e) => warnings.push(format!("cannot build the request of {page_id}: {e}")),
            }
        }
        if ready.is_empty() {
            return Vec::new();
        }
        let (placed, requests): (Vec<_>, Vec<_>) = ready
            .into_iter()
            .map(|(range, text, page_id, request)| {
                ((range, text, page_id.clone()), (page_id, request))
            })
            .unzip();
        if let Err(e) = host.defer_summaries(requests).await {
            warnings.push(format!(
                "cannot defer {} summary request(s): {e}; messages left as they were",
                placed.len()
            ));
            return Vec::new();
        }
        // The pages are archived (the deferred requests name them): each pending summary
        // replaces exactly its page's messages, which the host checks.
        placed
            .into_iter()
            .map(|(range, text, page_id)| {
                let pending = summary_message(&text, &page_id, NAME, SummaryStatus::Pending);
                Edit::replace(range, pending)
            })
            .collect()
    }

    /// The summary request of `run`. Given the id of the page holding it, the prompt is a
    /// page-transcript prompt the host fills in from that page when it sends the request
    /// (the same text, see `tamp_plugin_api::deferred`); otherwise, or when the prompt cannot
    /// be written so, the whole prompt.
    fn request_for(
        &self,
        run: &[Message],
        label: &str,
        page_id: Option<&str>,
    ) -> Result<LlmRequest, PluginError> {
        let opts = sdk::RenderOptions::cut_at(self.config.max_block_chars);
        let count = run.len().to_string();
        let vars = [("count", count.as_str()), ("label", label)];
        let templated = match page_id {
            Some(id) => {
                page_transcript_prompt(self.prompt_template.as_str(), "messages", &vars, id, &opts)?
            }
            None => None,
        };
        let prompt = match templated {
            Some(prompt) => prompt,
            None => {
                let rendered = sdk::render_messages(run, &opts);
                self.prompt_template
                    .render(&[("messages", rendered.as_str()), vars[0], vars[1]])
            }
        };
        Ok(LlmRequest::new(
            self.config.system_prompt.as_str(),
            prompt,
            self.config.summary_max_tokens,
        )
        .with_label(format!("deferred summary of {} messages", run.len())))
    }
}

export_plugin!(BatchDeferred);
