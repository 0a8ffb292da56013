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

use std::collections::BTreeMap;
use std::ops::Range;

use tamp_plugin_api::deferred::page_transcript_prompt;
use tamp_plugin_api::prelude::*;
use tamp_plugin_api::sdk::{cap_chars, ledger, render_template, summary_message};
use tamp_plugin_api::{DeferredStatus, LlmRequest};

pub mod config;

pub use config::{CompactWhen, Config};

/// The first line of every pending summary starts with this.
pub const PENDING_HEADER: &str = "[Pending summary: ";
/// The first line of a finalized summary starts with this.
pub const FINAL_HEADER: &str = "[Summary: ";

pub struct BatchDeferred {
    config: Config,
}

impl Strategy for BatchDeferred {
    type Config = Config;
    const NAME: &'static str = "batch-deferred";
    const DESCRIPTION: &'static str = "Replaces old messages by a pending summary at once and \
        lets the host summarize them later through a batch API at half price; a later run \
        swaps in the final summary at the same place.";

    fn new(config: Config) -> Result<Self, PluginError> {
        config.validate()?;
        Ok(BatchDeferred { config })
    }

    async fn compact(&self, input: Compaction) -> Result<CompactOutcome, PluginError> {
        let host = &input.host;
        let messages = input.conversation.messages.as_slice();
        let mut report = StageReport::acted("");

        // Finalized summaries replace one message each, pages a run of plain messages: the
        // edits never overlap.
        let keep_recent = input.budget.keep_recent as usize;
        let mut edits = self
            .finalize(host, messages, keep_recent, &mut report)
            .await;
        let finalized = edits.len();

        let compact = match self.config.compact_when {
            CompactWhen::Always => true,
            CompactWhen::OverBudget => input.budget.current_tokens > input.budget.high_watermark,
        };
        let pages = if compact {
            plan_pages(
                messages,
                keep_recent,
                self.config.min_messages,
                self.config.max_page_messages,
            )
        } else {
            Vec::new()
        };
        let placed = self
            .defer(host, messages, pages, input.budget.max_tokens, &mut report)
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
            let mut outcome = CompactOutcome::unchanged(why);
            outcome.report.warnings = report.warnings;
            return Ok(outcome);
        }
        report.reason = format!(
            "deferred {deferred} page(s) ({removed} messages) behind pending summaries; \
             finalized {finalized} pending summary(ies)"
        )
        .into();
        report.details_json =
            format!(r#"{{"deferred":{deferred},"finalized":{finalized}}}"#).into();
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
        report: &mut StageReport,
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
                DeferredStatus::Failed => report.warn(format!(
                    "the deferred summary of {page_ref} failed ({}); it stays pending, the \
                     messages are in the page",
                    state.reason
                )),
                DeferredStatus::Queued | DeferredStatus::Submitted => {}
                // `Unknown`, or a state a later host added that this plugin cannot act on.
                status => report.warn(format!(
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
        report: &mut StageReport,
    ) -> Vec<Edit> {
        // The ledgers of the pages placed by this compaction, so far: the later pages share
        // the cap with them as with the summaries already in `messages`.
        let mut placed_ledgers = 0;
        // A placeholder that would not be smaller than its messages is not worth it.
        let planned: Vec<(Range<usize>, String, String)> = pages
            .into_iter()
            .filter_map(|range| {
                let run = &messages[range.clone()];
                let label = label_of(run);
                // The ledger goes with the placeholder: the facts are there before the batch
                // answers. These summaries never fold into one, so the ledgers of all of them
                // share the cap, and each page's has at most its share of the page.
                let cap = self
                    .config
                    .ledger
                    .cap_before(host, messages, range.start, max_tokens)
                    .saturating_sub(placed_ledgers)
                    .min(
                        self.config
                            .ledger
                            .cap_tokens(host.count_message_tokens(run)),
                    );
                let finished = ledger::finish(
                    &self.config.ledger,
                    host,
                    messages,
                    range.clone(),
                    &self.pending_text(run, &label),
                    cap,
                );
                let placeholder = Message::text(sdk::SUMMARY_ROLE, finished.text.as_str());
                let smaller = host.count_message_tokens(std::slice::from_ref(&placeholder))
                    < host.count_message_tokens(run);
                if smaller {
                    placed_ledgers += host.count_tokens(&finished.ledger.render());
                }
                smaller.then_some((range, label, finished.text))
            })
            .collect();
        if planned.is_empty() {
            return Vec::new();
        }
        let drafts = planned
            .iter()
            .map(|(range, label, _)| {
                let meta = tamp_plugin_api::serde_json::json!({"deferred": true, "label": label});
                (messages[range.clone()].to_vec(), Some(meta))
            })
            .collect();
        let ids = host.archive_pages(drafts).await;
        // The host fills the transcript in from the page when it sends the request, so the
        // page's text is stored once rather than again inside the queued prompt.
        let transcript_from_page = host.renders_page_transcripts();
        let mut ready = Vec::new();
        for ((range, label, text), id) in planned.into_iter().zip(ids) {
            let page_id = match id {
                Ok(id) => id,
                Err(e) => {
                    report.warn(format!("cannot archive messages {range:?}: {e}"));
                    continue;
                }
            };
            let from_page = transcript_from_page.then_some(page_id.as_str());
            match self.request_for(&messages[range.clone()], &label, from_page) {
                Ok(request) => ready.push((range, text, page_id, request)),
                Err(e) => report.warn(format!("cannot build the request of {page_id}: {e}")),
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
            report.warn(format!(
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
                let pending =
                    summary_message(&text, &page_id, BatchDeferred::NAME, SummaryStatus::Pending);
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
        let opts = sdk::RenderOptions {
            max_block_chars: self.config.max_block_chars,
        };
        let count = run.len().to_string();
        let vars = [("count", count.as_str()), ("label", label)];
        let templated = match page_id {
            Some(id) => {
                page_transcript_prompt(&self.config.prompt_template, "messages", &vars, id, &opts)?
            }
            None => None,
        };
        let prompt = match templated {
            Some(prompt) => prompt,
            None => {
                let rendered = sdk::render_messages(run, &opts);
                render_template(
                    &self.config.prompt_template,
                    &[("messages", rendered.as_str()), vars[0], vars[1]],
                )?
            }
        };
        Ok(LlmRequest::new(
            self.config.system_prompt.as_str(),
            prompt,
            self.config.summary_max_tokens,
        )
        .with_label(format!("deferred summary of {} messages", run.len())))
    }

    /// `[Pending summary: N messages, <label>]` and the first and last messages' openings.
    fn pending_text(&self, run: &[Message], label: &str) -> String {
        let mut text = format!("{PENDING_HEADER}{} messages, {label}]", run.len());
        let limit = self.config.preview_chars;
        if limit > 0 {
            if let Some(first) = run.first() {
                text.push_str(&format!(
                    "\nFirst ({}): {}",
                    first.role.as_str(),
                    snippet(first, limit)
                ));
            }
            if let Some(last) = run.last().filter(|_| run.len() > 1) {
                text.push_str(&format!(
                    "\nLast ({}): {}",
                    last.role.as_str(),
                    snippet(last, limit)
                ));
            }
        }
        text
    }
}

/// The message's words on one line, cut to `limit` characters: its text, or (a tool call
/// or result without text) its rendering.
fn snippet(message: &Message, limit: usize) -> String {
    let text = message.joined_text();
    let source = if text.trim().is_empty() {
        sdk::render_messages(
            std::slice::from_ref(message),
            &sdk::RenderOptions {
                max_block_chars: limit,
            },
        )
    } else {
        text
    };
    let one_line = source.split_whitespace().collect::<Vec<_>>().join(" ");
    cap_chars(&one_line, limit)
}

/// What a run holds, in a few words: its tool calls by name, or its turns.
fn label_of(run: &[Message]) -> String {
    let mut tools: BTreeMap<&str, usize> = BTreeMap::new();
    for message in run {
        for block in message.content.iter() {
            if let ContentBlock::ToolUse { name, .. } = block {
                *tools.entry(name.as_str()).or_default() += 1;
            }
        }
    }
    if tools.is_empty() {
        let users = run.iter().filter(|m| m.role == Role::User).count();
        return format!("{users} user and {} other turns", run.len() - users);
    }
    let calls: usize = tools.values().sum();
    let mut by_count: Vec<(&str, usize)> = tools.into_iter().collect();
    by_count.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
    let names: Vec<String> = by_count
        .iter()
        .take(4)
        .map(|(name, n)| match n {
            1 => name.to_string(),
            n => format!("{name} ×{n}"),
        })
        .collect();
    let more = if by_count.len() > 4 { ", …" } else { "" };
    format!("{calls} tool calls: {}{more}", names.join(", "))
}

/// Our pending summaries (index, page ref) that a run may finalize: those before the
/// protected recent tail. A tail bounded in tokens can reach further back on one request than
/// on the one before (when the newest messages are short), over a pending summary placed
/// earlier; that one is finalized once it has left the tail again, since the tail is not
/// changed.
fn finalizable(messages: &[Message], keep_recent: usize) -> Vec<(usize, String)> {
    let tail_start = sdk::compactable_range(messages, keep_recent).end;
    messages[..tail_start]
        .iter()
        .enumerate()
        .filter_map(|(i, m)| {
            let info = m.summary_info()?;
            (info.status == SummaryStatus::Pending && info.strategy.as_str() == BatchDeferred::NAME)
                .then(|| (i, info.page_ref.to_string()))
        })
        .collect()
}

/// The pages to defer: runs of plain messages and tool exchanges (no system message, no
/// summary) inside the compactable range, each cut at unit boundaries into pages of at most
/// `max_page` messages (a single larger unit is a page of its own); pages shorter than
/// `min_messages` are left alone.
pub fn plan_pages(
    messages: &[Message],
    keep_recent: usize,
    min_messages: usize,
    max_page: usize,
) -> Vec<Range<usize>> {
    let range = sdk::compactable_range(messages, keep_recent);
    let mut pages = Vec::new();
    let mut current: Option<Range<usize>> = None;
    let close = |current: &mut Option<Range<usize>>, pages: &mut Vec<Range<usize>>| {
        if let Some(page) = current.take() {
            if page.len() >= min_messages {
                pages.push(page);
            }
        }
    };
    for unit in sdk::units(messages) {
        if unit.range.start < range.start || unit.range.end > range.end {
            continue;
        }
        match unit.kind {
            UnitKind::System | UnitKind::Summary => close(&mut current, &mut pages),
            UnitKind::Message | UnitKind::ToolExchange => match current.as_mut() {
                Some(page)
                    if page.end == unit.range.start && page.len() + unit.len() <= max_page =>
                {
                    page.end = unit.range.end;
                }
                _ => {
                    close(&mut current, &mut pages);
                    current = Some(unit.range.clone());
                }
            },
        }
    }
    close(&mut current, &mut pages);
    pages
}

export_plugin!(BatchDeferred);

#[cfg(test)]
mod tests {
    use super::*;

    fn call(id: &str, name: &str) -> Message {
        Message::new(
            Role::Assistant,
            vec![ContentBlock::ToolUse {
                id: id.into(),
                name: name.into(),
                input_json: "{}".into(),
                extra_json: Default::default(),
            }],
        )
    }

    fn result(id: &str) -> Message {
        Message::new(
            Role::User,
            vec![ContentBlock::ToolResult {
                tool_use_id: id.into(),
                content: vec![ToolResultPart::Text { text: "ok".into() }].into(),
                is_error: false,
                extra_json: Default::default(),
            }],
        )
    }

    #[test]
    fn pages_keep_exchanges_whole_skip_summaries_and_respect_sizes() {
        let mut m = vec![Message::text(Role::System, "sys")];
        // An assistant first: no task message is pinned, so the runs start right after the
        // system prompt.
        for i in 0..6 {
            let role = if i == 0 { Role::Assistant } else { Role::User };
            m.push(Message::text(role, format!("u{i}")));
        }
        m.push(summary_message(
            "s",
            "pg_x",
            "batch-deferred",
            SummaryStatus::Pending,
        ));
        m.push(call("a", "bash"));
        m.push(result("a"));
        for i in 0..5 {
            m.push(Message::text(Role::Assistant, format!("a{i}")));
        }
        m.push(Message::text(Role::User, "recent"));
        // keep_recent 1: the last message is protected; the summary splits two runs.
        assert_eq!(plan_pages(&m, 1, 2, 100), vec![1..7, 8..15]);
        // Pages of at most 4 messages, never splitting the exchange at 8..10.
        assert_eq!(plan_pages(&m, 1, 2, 4), vec![1..5, 5..7, 8..12, 12..15]);
        // Too short runs are left alone.
        assert_eq!(plan_pages(&m, 1, 7, 100), vec![8..15]);
    }

    #[test]
    fn pending_summaries_inside_the_protected_tail_wait() {
        let pending =
            |page: &str| summary_message("s", page, "batch-deferred", SummaryStatus::Pending);
        let m = vec![
            Message::text(Role::System, "sys"),
            Message::text(Role::User, "task"),
            pending("pg_old"),
            summary_message("s", "pg_other", "someone-else", SummaryStatus::Pending),
            Message::text(Role::Assistant, "a"),
            pending("pg_new"),
            Message::text(Role::User, "recent"),
        ];
        // A tail of 2 covers pg_new: only pg_old may be finalized.
        assert_eq!(finalizable(&m, 2), vec![(2, "pg_old".to_string())]);
        // Once the tail no longer covers it, pg_new is finalized too.
        assert_eq!(
            finalizable(&m, 1),
            vec![(2, "pg_old".to_string()), (5, "pg_new".to_string())]
        );
    }

    #[test]
    fn labels_name_tools_by_frequency() {
        let run = vec![
            call("a", "bash"),
            result("a"),
            call("b", "bash"),
            result("b"),
            call("c", "read"),
            result("c"),
        ];
        assert_eq!(label_of(&run), "3 tool calls: bash ×2, read");
        let turns = vec![
            Message::text(Role::User, "q"),
            Message::text(Role::Assistant, "a"),
        ];
        assert_eq!(label_of(&turns), "1 user and 1 other turns");
    }

    #[test]
    fn pending_text_has_header_and_both_ends() {
        let s = BatchDeferred::new(Config {
            preview_chars: 10,
            ..Config::default()
        })
        .unwrap();
        let run = vec![
            Message::text(Role::User, "first message here and more"),
            Message::text(Role::Assistant, "middle"),
            Message::text(Role::Assistant, "the last one\nwith lines"),
        ];
        let text = s.pending_text(&run, "x");
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "[Pending summary: 3 messages, x]");
        assert!(lines[1].starts_with("First (user): "), "{text}");
        assert!(
            lines[1].chars().count() <= "First (user): ".len() + 10,
            "{text}"
        );
        assert!(lines[2].starts_with("Last (assistant): "), "{text}");
        assert!(!text.contains("middle"));
    }
}
