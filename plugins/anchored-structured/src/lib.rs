//! `anchored-structured`: replaces the old part of a conversation with a typed summary whose
//! sections are anchors a model cannot skip: the session's intent, the files modified, the
//! decisions made (with their reasons), the open questions and the next steps.
//!
//! 1. **Select** the messages a stage may replace (after the system prompt, before the
//!    protected recent tail, up to any system message inside). An earlier summary written by
//!    this strategy is the *prior*: its JSON is loaded from its page's metadata and merged into
//!    the new summary instead of being summarized as prose.
//! 2. **Structured**: content of at most `chunk_tokens` tokens gets one structured call; longer
//!    content is cut into chunks (`sdk::chunk`, anchored at the start, so prefix-stable) that
//!    are summarized as prose concurrently, then consolidated by one structured call. The answer
//!    must parse, stay within the limits and be complete (intent and next steps filled).
//! 3. **Fallbacks**, each logged at WARN with the reason: a prose summary, then a summary built
//!    without the LLM from what the messages show (counts, tools called, file paths).
//! 4. **Replace**: the whole span (prior summary included) goes into one page whose metadata
//!    holds the merged JSON (`anchored_summary`), and a Markdown rendering, capped at
//!    `max_summary_chars`, takes its place.

mod config;
mod plan;
mod prompts;
mod schema;
mod summarize;

use std::ops::Range;

use tamp_plugin_api::prelude::*;
use tamp_plugin_api::sdk::ledger::Sharing;
use tamp_plugin_api::serde_json::{self, Value};
use tamp_plugin_api::tracing;

pub use config::{Config, LedgerConfig, Reuse};
pub use plan::file_paths;
use plan::{no_llm_description, select, Details, MergedOver, Produced, Selection};
pub use schema::{
    render, AnchoredSummary, Merge, SummaryPath, HEADER, LEDGER_LISTS, MAX_ENTRIES,
    MAX_ENTRIES_WITH_LEDGER, MAX_ENTRY_CHARS, MAX_INTENT_CHARS,
};

/// The strategy's name: in pages, summary messages and logs.
pub const NAME: &str = "anchored-structured";

/// The page-metadata key holding the summary's JSON.
pub const METADATA_KEY: &str = "anchored_summary";

pub struct AnchoredStructured {
    config: Config,
}

/// A cached summary of the span's leading pieces, from an earlier compaction of the same
/// thread's raw history.
struct Reused {
    /// Pieces (from the first) it covers.
    pieces: usize,
    /// Messages those pieces make up.
    messages: usize,
    summary: AnchoredSummary,
}

impl Strategy for AnchoredStructured {
    type Config = Config;
    const NAME: &'static str = NAME;
    const DESCRIPTION: &'static str = "Replaces the old part of a conversation with a typed \
        summary (intent, files modified, decisions, open questions, next steps) merged across \
        compactions, falling back to prose and then to a summary built without the LLM.";

    fn new(config: Config) -> Result<Self, PluginError> {
        config.validate()?;
        Ok(AnchoredStructured { config })
    }

    async fn compact(&self, input: Compaction) -> Result<CompactOutcome, PluginError> {
        let Compaction {
            conversation,
            budget,
            host,
            ..
        } = input;
        let messages = &conversation.messages;
        let mut selection = select(messages, budget.keep_recent as usize, &self.config);
        if selection.span.is_empty() {
            return Ok(CompactOutcome::unchanged(
                "no messages outside the system prompt and the protected recent messages",
            ));
        }
        let mut warnings = Vec::new();
        let prior = load_prior(&host, &mut selection, &mut warnings).await;
        if selection.pieces.iter().all(|p| p.trim().is_empty()) {
            return Ok(CompactOutcome::unchanged(
                "nothing new since the last anchored summary",
            ));
        }
        let span_messages = &messages[selection.span.clone()];
        let reused = if selection.cache_keyed() {
            self.reusable(&host, messages, &selection).await
        } else {
            None
        };
        let mut produced = self
            .produce(&host, messages, &selection, reused.as_ref(), prior.as_ref())
            .await;
        if produced.path == SummaryPath::NoLlm {
            produced.prose = Some(no_llm_description(span_messages));
        }
        warnings.append(&mut produced.warnings);
        let over = MergedOver::of(reused.is_some(), prior.is_some());
        // The cached summary is the prior of what follows it.
        let prior = reused.as_ref().map(|r| r.summary.clone()).or(prior);

        let merged = plan::merge(
            produced.structured.as_ref(),
            prior.as_ref(),
            self.config.ledger.enabled,
        );
        warnings.extend(merged.warning());
        if plan::caches(&produced, self.config.reuse, &selection) {
            match serde_json::to_string(&merged.summary) {
                Ok(json) => host.cache_summary(span_messages, &json).await,
                Err(e) => tracing::warn!("anchored summary not cached: {e}"),
            }
        }
        let body = plan::body(produced.path, produced.prose.as_deref(), &merged.summary);

        // What the summary replaces: the span less the pinned messages the host keeps.
        let kept_tokens: u64 = selection
            .kept
            .iter()
            .map(|kept| host.count_message_tokens(&messages[kept.clone()]))
            .sum();
        let span_tokens = host
            .count_message_tokens(span_messages)
            .saturating_sub(kept_tokens);
        let metadata =
            plan::page_metadata(&merged.summary, produced.path, span_messages, span_tokens);
        let text = self.with_ledger(
            &host,
            messages,
            selection.span.clone(),
            budget.max_tokens,
            |max_chars| render(produced.path, span_messages.len(), &body, max_chars),
        );
        let summary = sdk::summary_message(&text, "", NAME, SummaryStatus::Final);
        let details = Details {
            path: produced.path.as_str(),
            chunks: produced.chunks,
            messages: span_messages.len(),
            span_tokens,
            summary_tokens: host.count_message_tokens(std::slice::from_ref(&summary)),
            summary_chars: text.chars().count(),
            prior_merged: over == MergedOver::Prior,
            stale_steps_dropped: merged.stale_dropped,
            reused_messages: reused.as_ref().map_or(0, |r| r.messages),
        };
        let report = plan::report(&details, over, warnings);
        // One page for everything removed, prior summary included, archived by the host only
        // now that the summary exists (and is smaller): an error above leaves nothing behind.
        let edit = report
            .acted
            .then(|| Edit::summarize(selection.span.clone(), text).with_metadata(&metadata));
        Ok(CompactOutcome::with_edits(edit, report))
    }
}

/// The prior summaries' JSON, merged in order, read back from their pages. A prior whose JSON
/// cannot be read is summarized like any other content (with a warning), and so is the prose
/// of a prior made on a fallback path (its prose is not in its JSON): nothing it said is lost.
async fn load_prior(
    host: &Host,
    selection: &mut Selection,
    warnings: &mut Vec<String>,
) -> Option<AnchoredSummary> {
    let mut merged: Option<AnchoredSummary> = None;
    let mut as_content = Vec::new();
    for (page_ref, text) in selection.prior_pages.iter().zip(&selection.prior_texts) {
        let metadata = match host.load_page(page_ref).await {
            Ok(page) => serde_json::from_str::<Value>(page.metadata())
                .map_err(|e| format!("page metadata is not JSON: {e}")),
            Err(e) => Err(e.message.to_string()),
        };
        let found = metadata.and_then(|m| {
            let structured =
                m.get("path").and_then(Value::as_str) == Some(SummaryPath::Structured.as_str());
            let json = m.get(METADATA_KEY).cloned().unwrap_or(Value::Null);
            let prior = if json.is_null() {
                AnchoredSummary::default()
            } else {
                serde_json::from_value::<AnchoredSummary>(json).map_err(|e| e.to_string())?
            };
            // Stored JSON is checked like an answer: the limits hold on every path.
            prior.validate()?;
            Ok((prior, structured))
        });
        match found {
            Ok((prior, structured)) => {
                if !structured {
                    as_content.push(plan::without_sections(text, &prior));
                }
                merged = Some(match merged {
                    Some(earlier) => prior.merged_over(&earlier).0,
                    None => prior,
                });
            }
            Err(reason) => {
                let warning = format!(
                    "prior anchored summary (page {page_ref}) unreadable ({reason}); \
                     summarizing its text instead"
                );
                tracing::warn!("{warning}");
                warnings.push(warning);
                as_content.push(text.clone());
            }
        }
    }
    // Priors are the oldest material: they go first.
    as_content.append(&mut selection.pieces);
    selection.pieces = as_content;
    merged.filter(|m| !m.is_empty())
}

impl AnchoredStructured {
    /// The summary's text: the rendering `render(max_chars)` gives, then the span's ledger
    /// (`sdk::ledger::finish`), the whole within `max_summary_chars`: the rendering is cut
    /// to leave the ledger whole.
    fn with_ledger(
        &self,
        host: &Host,
        messages: &[Message],
        span: Range<usize>,
        max_tokens: u64,
        render: impl Fn(usize) -> String,
    ) -> String {
        let max_chars = self.config.max_summary_chars;
        let rendered = render(max_chars);
        let cap = self
            .config
            .ledger
            .cap(host, messages, &span, max_tokens, Sharing::WithEarlier);
        let finished =
            sdk::ledger::finish(&self.config.ledger, host, messages, span, &rendered, cap);
        let total = finished.text.chars().count();
        if total <= max_chars {
            return finished.text;
        }
        let section = total - rendered.chars().count();
        let rendered = render(max_chars.saturating_sub(section));
        sdk::ledger::attach(&rendered, &finished.ledger)
    }

    /// The cached structured summary of the span's longest leading run of pieces, when there
    /// is one that still parses and holds the limits.
    async fn reusable(
        &self,
        host: &Host,
        messages: &[Message],
        selection: &Selection,
    ) -> Option<Reused> {
        let leading = sdk::incremental::leading_pieces(
            host,
            messages,
            selection.span.clone(),
            &selection.piece_ranges,
            self.config.reuse,
        )
        .await?;
        let summary = match serde_json::from_str::<AnchoredSummary>(&leading.summary) {
            Ok(summary) if summary.validate().is_ok() => summary,
            // Another version's entry, or not ours: summarize from scratch.
            _ => return None,
        };
        Some(Reused {
            pieces: leading.pieces,
            messages: leading.messages,
            summary,
        })
    }

    /// The summary of the pieces a cached summary does not cover (shown that summary when
    /// `reuse = "merge"`; with no cached one, shown the prior): no call when it covers them
    /// all.
    async fn produce(
        &self,
        host: &Host,
        messages: &[Message],
        selection: &Selection,
        reused: Option<&Reused>,
        prior: Option<&AnchoredSummary>,
    ) -> Produced {
        match reused {
            Some(r) if r.pieces == selection.pieces.len() => Produced::cached(r.summary.clone()),
            Some(r) => {
                let shown = (self.config.reuse == Reuse::Merge).then_some(&r.summary);
                let new_start = selection
                    .piece_ranges
                    .get(r.pieces)
                    .map_or(selection.span.end, |range| range.start);
                let ledger_tokens = self.ledger_tokens(host, messages, new_start, selection);
                let pieces = &selection.pieces[r.pieces..];
                self.summarize(host, pieces, shown, Some(&r.summary), ledger_tokens)
                    .await
            }
            None => {
                let ledger_tokens =
                    self.ledger_tokens(host, messages, selection.span.start, selection);
                self.summarize(host, &selection.pieces, prior, prior, ledger_tokens)
                    .await
            }
        }
    }

    /// What the summary's ledger will say word for word of the new content, the span's
    /// messages from `new_start`: the summary is asked for that much less, as the ledger
    /// carries the lists that made the JSON long. Nothing when the ledger is off.
    fn ledger_tokens(
        &self,
        host: &Host,
        messages: &[Message],
        new_start: usize,
        selection: &Selection,
    ) -> u64 {
        if !self.config.ledger.enabled {
            return 0;
        }
        let count = |text: &str| host.count_tokens(text);
        sdk::ledger::tokens_found(&messages[new_start..selection.span.end], &count)
    }
}
