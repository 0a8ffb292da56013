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
mod schema;

use std::ops::Range;

use tamp_plugin_api::prelude::*;
use tamp_plugin_api::sdk::chunk::{chunk_pieces, ChunkOptions};
use tamp_plugin_api::sdk::groups::tool_activity;
use tamp_plugin_api::sdk::length;
use tamp_plugin_api::sdk::prompt::{render_messages, wrap_content, RenderOptions};
use tamp_plugin_api::serde_json::{self, json, Value};
use tamp_plugin_api::tracing;
use tamp_plugin_api::{FfiOption, HostError, LlmResponse};

pub use config::{Config, LedgerConfig, Reuse};
pub use schema::{
    render, AnchoredSummary, Merge, SummaryPath, HEADER, LEDGER_LISTS, MAX_ENTRIES,
    MAX_ENTRIES_WITH_LEDGER, MAX_ENTRY_CHARS, MAX_INTENT_CHARS,
};

/// The strategy's name: in pages, summary messages and logs.
pub const NAME: &str = "anchored-structured";

/// The page-metadata key holding the summary's JSON.
pub const METADATA_KEY: &str = "anchored_summary";

/// The shortest and longest structured answer asked for, in tokens; between them a tenth of
/// the material (`sdk::length`), as for prose. The limits allow far more, but a small model
/// asked for the lists writes until they are full: at 10 tokens a second, 2,000 tokens of JSON
/// are over three minutes a call.
const MIN_STRUCTURED_TOKENS: u32 = 200;
const MAX_STRUCTURED_TOKENS: u32 = 1_000;
/// The longest and shortest prose summary (of a chunk or of everything) asked for, in
/// tokens; between them a tenth of the material (`sdk::length`).
const PROSE_OUTPUT_TOKENS: u32 = 1_000;
const MIN_PROSE_TOKENS: u32 = 150;
/// File paths listed by the no-LLM summary.
const MAX_PATHS_SHOWN: usize = 30;

const SYSTEM: &str = "You summarize an AI agent's working session so that the agent can carry on \
    from the summary alone. Only state what the material says: never invent files, decisions, \
    questions or steps.";

pub struct AnchoredStructured {
    config: Config,
}

/// The messages the stage replaces, split into the prior summary and the content.
struct Selection {
    span: Range<usize>,
    /// Page refs of this strategy's earlier summaries in the span.
    prior_pages: Vec<String>,
    /// Texts of those summaries, used as content when their JSON cannot be read back.
    prior_texts: Vec<String>,
    /// Everything else, one rendered unit (message or tool exchange) per piece.
    pieces: Vec<String>,
    /// The messages of each piece, while no prior summary is among them.
    piece_ranges: Vec<Range<usize>>,
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

/// What the LLM steps produced.
struct Produced {
    path: SummaryPath,
    /// The summary's own JSON (structured path) or nothing.
    structured: Option<AnchoredSummary>,
    /// The prose answer (prose path) or the no-LLM description.
    prose: Option<String>,
    chunks: usize,
    warnings: Vec<String>,
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
        let mut selection = select(messages, budget.keep_recent as usize, &self.config.ledger);
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
        // The cache is keyed by the span's messages alone, so it is used only when no prior
        // summary (whose page the key does not see) is part of the span.
        let reused = if selection.prior_pages.is_empty() {
            self.reusable(&host, messages, &selection).await
        } else {
            None
        };
        let mut produced = match &reused {
            Some(r) if r.pieces == selection.pieces.len() => Produced {
                path: SummaryPath::Structured,
                structured: Some(r.summary.clone()),
                prose: None,
                chunks: 0,
                warnings: Vec::new(),
            },
            Some(r) => {
                let shown = (self.config.reuse == Reuse::Merge).then_some(&r.summary);
                self.summarize(&host, &selection.pieces[r.pieces..], shown)
                    .await
            }
            None => {
                self.summarize(&host, &selection.pieces, prior.as_ref())
                    .await
            }
        };
        if produced.path == SummaryPath::NoLlm {
            produced.prose = Some(no_llm_description(span_messages));
        }
        warnings.append(&mut produced.warnings);
        // The cached summary is the prior of what follows it.
        let prior = match &reused {
            Some(r) => Some(r.summary.clone()),
            None => prior,
        };

        // The JSON kept with the page: the new answer merged over the prior, or on the
        // fallback paths the prior alone, so its sections are never lost to a failed call.
        let (merged, merge) = match (&produced.structured, &prior) {
            (Some(new), Some(prior)) => new.clone().merged_over(prior),
            (Some(new), None) => (new.clone(), Merge::default()),
            (None, Some(prior)) => (prior.clone(), Merge::default()),
            (None, None) => (AnchoredSummary::default(), Merge::default()),
        };
        // With the ledger on, questions and steps are the short-term lists: the newest few.
        let mut merged = merged;
        let stale_dropped = if self.config.ledger.enabled {
            merged.keep_newest_steps(MAX_ENTRIES_WITH_LEDGER)
        } else {
            0
        };
        if merge.dropped > 0 {
            warnings.push(format!(
                "{} oldest list entr(ies) dropped to stay within {MAX_ENTRIES} per list, even \
                 packed",
                merge.dropped
            ));
        }
        if produced.path == SummaryPath::Structured
            && self.config.reuse != Reuse::Off
            && selection.prior_pages.is_empty()
        {
            // Only a structured summary is cached: it is all the next compaction needs to
            // merge into, where a fallback's prose is not in the JSON.
            match serde_json::to_string(&merged) {
                Ok(json) => host.cache_summary(span_messages, &json).await,
                Err(e) => tracing::warn!("anchored summary not cached: {e}"),
            }
        }
        let mut body = String::new();
        if let Some(prose) = &produced.prose {
            let title = match produced.path {
                SummaryPath::NoLlm => "What the messages show",
                _ => "Summary",
            };
            body.push_str(&format!("\n## {title}\n{}\n", prose.trim()));
        }
        body.push_str(&merged.markdown_sections());

        let span_tokens = host.count_message_tokens(span_messages);
        let metadata = json!({
            METADATA_KEY: (!merged.is_empty()).then_some(&merged),
            "path": produced.path.as_str(),
            "messages": span_messages.len(),
            "span_tokens": span_tokens,
        });
        let text = self.with_ledger(
            &host,
            messages,
            selection.span.clone(),
            budget.max_tokens,
            |max_chars| render(produced.path, span_messages.len(), &body, max_chars),
        );
        let summary = sdk::summary_message(&text, "", NAME, SummaryStatus::Final);
        let summary_tokens = host.count_message_tokens(std::slice::from_ref(&summary));
        let details = json!({
            "path": produced.path.as_str(),
            "chunks": produced.chunks,
            "messages": span_messages.len(),
            "span_tokens": span_tokens,
            "summary_tokens": summary_tokens,
            "summary_chars": text.chars().count(),
            "prior_merged": prior.is_some() && reused.is_none(),
            "stale_steps_dropped": stale_dropped,
            "reused_messages": reused.as_ref().map_or(0, |r| r.messages),
        })
        .to_string();
        if summary_tokens >= span_tokens {
            // The conversation must not grow.
            let reason = format!(
                "the summary ({summary_tokens} tokens) would not be smaller than the {} \
                 message(s) it replaces ({span_tokens} tokens)",
                span_messages.len()
            );
            let mut outcome = CompactOutcome::unchanged(reason);
            for warning in warnings {
                outcome.report.warn(warning);
            }
            outcome.report.details_json = details.into();
            return Ok(outcome);
        }

        let mut report = StageReport::acted(format!(
            "{} message(s) of {span_tokens} tokens → an anchored summary of {summary_tokens} \
             tokens ({} path, {} chunk(s){})",
            span_messages.len(),
            produced.path.as_str(),
            produced.chunks,
            match (&reused, &prior) {
                (Some(_), _) => ", cached summary of its leading part merged",
                (None, Some(_)) => ", prior summary merged",
                (None, None) => "",
            }
        ));
        for warning in warnings {
            report.warn(warning);
        }
        report.details_json = details.into();
        // One page for everything removed, prior summary included, archived by the host only
        // now that the summary exists: an error above leaves nothing behind.
        let edit = Edit::summarize(selection.span.clone(), text).with_metadata(&metadata);
        Ok(CompactOutcome::with_edits([edit], report))
    }
}

/// The span to replace: from the start of the compactable range to its end or to the first
/// system message inside it (one contiguous run, so one page and one summary). A prior's text
/// is kept without its ledger (which `sdk::ledger::finish` carries), in case it must be
/// summarized as content.
fn select(messages: &[Message], keep_recent: usize, ledger: &LedgerConfig) -> Selection {
    let range = sdk::compactable_range(messages, keep_recent);
    let render_options = RenderOptions::default();
    let selected = sdk::span::select_span(messages, range, NAME, &render_options);
    let (prior_pages, prior_texts) = selected
        .priors
        .iter()
        .map(|&i| {
            let page = messages[i]
                .summary_info()
                .map(|info| info.page_ref.to_string())
                .unwrap_or_default();
            let mut shown = messages[i].clone();
            shown.content = vec![ContentBlock::text(ledger.shown(&shown.joined_text()))].into();
            (page, render_messages(&[shown], &render_options))
        })
        .unzip();
    let (piece_ranges, pieces) = selected
        .pieces
        .into_iter()
        .map(|p| (p.range, p.text))
        .unzip();
    Selection {
        span: selected.span,
        prior_pages,
        prior_texts,
        pieces,
        piece_ranges,
    }
}

/// The prior summaries' JSON, merged in order, read back from their pages. A prior whose JSON
/// cannot be read is summarized like any other content (with a warning), and so is the text
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
            Ok(page) => serde_json::from_str::<Value>(page.metadata_json.as_str())
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
                    as_content.push(text.clone());
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
            .cap_before(host, messages, span.start, max_tokens);
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

    /// Runs the fallback order; never fails, the last step needing no LLM.
    async fn summarize(
        &self,
        host: &Host,
        pieces: &[String],
        prior: Option<&AnchoredSummary>,
    ) -> Produced {
        let mut warnings = Vec::new();
        let count = |text: &str| host.count_tokens(text);
        let content = pieces.concat();
        let chunked = count(&content) > self.config.chunk_tokens;
        let mut chunks = 1;
        // The material of the last call: the content itself, or its chunks' prose summaries.
        let mut material = None;
        if chunked {
            let options = ChunkOptions {
                chunk_size: self.config.chunk_tokens,
                chunk_overlap: 0,
            };
            let cut = chunk_pieces(pieces, &options, &count);
            chunks = cut.len();
            let total = cut.len();
            let requests = cut
                .iter()
                .enumerate()
                .map(|(i, chunk)| {
                    let target =
                        length::target(chunk.tokens, MIN_PROSE_TOKENS, PROSE_OUTPUT_TOKENS);
                    self.chunk_request(&chunk.text, i + 1, total, target)
                })
                .collect();
            let answers = host
                .complete_all(requests, self.config.max_concurrency)
                .await;
            let mut summaries = Vec::new();
            for (i, answer) in answers.into_iter().enumerate() {
                match prose_answer(answer) {
                    Ok(text) => summaries.push(format!("Part {}:\n{text}", i + 1)),
                    Err(reason) => {
                        fall_back(
                            &mut warnings,
                            format!("chunk {}/{total} summary failed: {reason}", i + 1),
                            "the summary built without the LLM",
                        );
                        return Produced {
                            path: SummaryPath::NoLlm,
                            structured: None,
                            prose: None,
                            chunks,
                            warnings,
                        };
                    }
                }
            }
            material = Some(summaries.join("\n\n"));
        }
        let material = material.unwrap_or(content);

        if self.config.structured {
            let target = length::target(
                count(&material),
                MIN_STRUCTURED_TOKENS,
                MAX_STRUCTURED_TOKENS,
            );
            let request = self.structured_request(&material, chunked, prior, target);
            match structured_answer(host.complete(request).await) {
                Ok(summary) => {
                    return Produced {
                        path: SummaryPath::Structured,
                        structured: Some(summary),
                        prose: None,
                        chunks,
                        warnings,
                    }
                }
                Err(reason) => fall_back(
                    &mut warnings,
                    format!("structured summary unusable: {reason}"),
                    "a prose summary",
                ),
            }
        }
        let target = length::target(count(&material), MIN_PROSE_TOKENS, PROSE_OUTPUT_TOKENS);
        match prose_answer(
            host.complete(self.prose_request(&material, chunked, target))
                .await,
        ) {
            Ok(text) => Produced {
                path: SummaryPath::Prose,
                structured: None,
                prose: Some(sdk::cap_chars(&text, self.config.max_summary_chars)),
                chunks,
                warnings,
            },
            Err(reason) => {
                fall_back(
                    &mut warnings,
                    format!("prose summary failed: {reason}"),
                    "the summary built without the LLM",
                );
                Produced {
                    path: SummaryPath::NoLlm,
                    structured: None,
                    prose: None,
                    chunks,
                    warnings,
                }
            }
        }
    }

    fn extra(&self) -> String {
        match self.config.extra_instruction.as_deref().map(str::trim) {
            Some(extra) if !extra.is_empty() => format!("\nAlso: {extra}\n"),
            _ => String::new(),
        }
    }

    fn chunk_request(&self, chunk: &str, index: usize, total: usize, target: u32) -> LlmRequest {
        let prompt = format!(
            "Summarize part {index} of {total} of an agent session in prose, in {}. Keep every \
             file path touched, every decision with its reason, every open question and every \
             next step it states, word for word where short.{}\n{}",
            length::phrase(target),
            self.extra(),
            wrap_content(chunk)
        );
        LlmRequest::new(SYSTEM, prompt, length::output_cap(target))
            .with_label(format!("chunk {index}/{total}"))
    }

    /// The structured call, asking for about `target` tokens in all (`sdk::length`) and
    /// capping the answer at half as much again: an answer cut there does not parse and falls
    /// back to prose, so the prompt says the length. While the ledger is on, the lists it
    /// holds are neither asked for nor shown from the prior.
    fn structured_request(
        &self,
        material: &str,
        chunked: bool,
        prior: Option<&AnchoredSummary>,
        target: u32,
    ) -> LlmRequest {
        let ledger = self.config.ledger.enabled;
        let what = if chunked {
            "summaries of consecutive parts of an agent session"
        } else {
            "an agent session"
        };
        let prior_text = match prior {
            Some(prior) => {
                let mut shown = prior.clone();
                if ledger {
                    shown.files_modified.clear();
                    shown.decisions_made.clear();
                }
                let mut json = serde_json::to_value(&shown).unwrap_or_default();
                if let (true, Some(map)) = (ledger, json.as_object_mut()) {
                    for key in LEDGER_LISTS {
                        map.remove(key);
                    }
                }
                format!(
                    "\nAn earlier anchored summary of the session before this material (its \
                     lists are carried forward by the host, so list only what the material \
                     adds):\n{}\n",
                    serde_json::to_string_pretty(&json).unwrap_or_default()
                )
            }
            None => String::new(),
        };
        let max_entries = if ledger {
            MAX_ENTRIES_WITH_LEDGER
        } else {
            MAX_ENTRIES
        };
        let lists = if ledger {
            ""
        } else {
            "- files_modified: each file path created, modified or deleted;\n\
             - decisions_made: each decision, as \"Decision: X — Reason: Y\";\n"
        };
        let prompt = format!(
            "Write the anchored summary of the {what} below, filling every field of the schema:\n\
             - session_intent: what the session is trying to achieve (at most \
             {MAX_INTENT_CHARS} characters);\n\
             {lists}\
             - open_questions: what is still unanswered;\n\
             - next_steps: what is to be done next, in order.\n\
             An empty list is the right answer when the material has nothing of that kind. \
             Never invent anything the material does not say. Each entry at most \
             {MAX_ENTRY_CHARS} characters, at most {max_entries} entries per list, and the \
             whole answer {}.{}{prior_text}\
             \n{}",
            length::phrase(target),
            self.extra(),
            wrap_content(material)
        );
        let mut request = LlmRequest::new(SYSTEM, prompt, length::output_cap(target))
            .with_label("anchored summary");
        request.response_schema_json =
            FfiOption::RSome(AnchoredSummary::request_schema(ledger).to_string().into());
        request
    }

    fn prose_request(&self, material: &str, chunked: bool, target: u32) -> LlmRequest {
        let what = if chunked {
            "these summaries of consecutive parts of an agent session"
        } else {
            "this agent session"
        };
        let prompt = format!(
            "Summarize {what} so the agent can carry on from the summary alone: its intent, the \
             files it modified, the decisions it made and why, what is still open and the next \
             steps, in {}. Say nothing the material does not say.{}\n{}",
            length::phrase(target),
            self.extra(),
            wrap_content(material)
        );
        LlmRequest::new(SYSTEM, prompt, length::output_cap(target)).with_label("prose summary")
    }
}

/// Logs a step of the fallback order at WARN and records it for the report.
fn fall_back(warnings: &mut Vec<String>, reason: String, next: &str) {
    let warning = format!("{reason}; falling back to {next}");
    tracing::warn!("{warning}");
    warnings.push(warning);
}

/// The structured answer, parsed, within the limits and complete; or why not.
fn structured_answer(answer: Result<LlmResponse, HostError>) -> Result<AnchoredSummary, String> {
    let response = answer.map_err(|e| format!("the call failed: {}", e.message))?;
    let json = match &response.structured_json {
        FfiOption::RSome(json) => json.as_str(),
        FfiOption::RNone => return Err("the answer has no structured JSON".to_string()),
    };
    let mut value: Value = serde_json::from_str(json).map_err(|e| format!("invalid JSON: {e}"))?;
    // Asked without the lists the ledger holds, an answer leaves them out.
    if let Some(map) = value.as_object_mut() {
        for key in LEDGER_LISTS {
            map.entry(key).or_insert_with(|| json!([]));
        }
    }
    let summary: AnchoredSummary =
        serde_json::from_value(value).map_err(|e| format!("invalid JSON: {e}"))?;
    summary.validate()?;
    let missing = summary.missing_anchors();
    if !missing.is_empty() {
        return Err(format!(
            "incomplete answer: {} empty",
            missing.join(" and ")
        ));
    }
    Ok(summary)
}

/// The prose answer, trimmed; an empty answer is a failure (an empty summary would silently
/// lose what it replaces).
fn prose_answer(answer: Result<LlmResponse, HostError>) -> Result<String, String> {
    let response = answer.map_err(|e| format!("the call failed: {}", e.message))?;
    let text = response.text.trim();
    if text.is_empty() {
        return Err(format!(
            "the LLM answered nothing (stop reason `{}`)",
            response.stop_reason
        ));
    }
    Ok(text.to_string())
}

/// What the messages themselves show, without an LLM: counts by role, the tools called (and
/// failed), and the file paths mentioned.
fn no_llm_description(messages: &[Message]) -> String {
    let by_role = |role: Role| messages.iter().filter(|m| m.role == role).count();
    let mut lines = vec![format!(
        "- {} message(s): {} user, {} assistant, {} tool",
        messages.len(),
        by_role(Role::User),
        by_role(Role::Assistant),
        by_role(Role::Tool)
    )];
    let activity = tool_activity(messages);
    if activity.calls() > 0 {
        lines.push(format!(
            "- {} tool call(s): {}",
            activity.calls(),
            activity.tool_list()
        ));
    }
    if activity.errors() > 0 {
        lines.push(format!(
            "- {} failed: {}",
            activity.errors(),
            activity.failed_list()
        ));
    }
    let rendered = render_messages(messages, &RenderOptions::default());
    let paths = file_paths(&rendered);
    if !paths.is_empty() {
        let shown: Vec<&str> = paths
            .iter()
            .take(MAX_PATHS_SHOWN)
            .map(String::as_str)
            .collect();
        let more = paths.len().saturating_sub(MAX_PATHS_SHOWN);
        lines.push(format!(
            "- file paths mentioned: {}{}",
            shown.join(", "),
            if more > 0 {
                format!(" (and {more} more)")
            } else {
                String::new()
            }
        ));
    }
    lines.join("\n")
}

/// Distinct file paths in `text`, in order of first appearance: tokens with a `/` that end in a
/// file extension or have at least two slashes (URLs left out).
pub fn file_paths(text: &str) -> Vec<String> {
    let mut seen = std::collections::HashSet::new();
    let mut out = Vec::new();
    for raw in text.split(|c: char| c.is_whitespace() || "\"'`()[]{}<>,;".contains(c)) {
        let token = raw.trim_end_matches(|c: char| ".:!?".contains(c));
        if !token.contains('/') || token.contains("://") || !token.chars().any(char::is_alphabetic)
        {
            continue;
        }
        if !token
            .chars()
            .all(|c| c.is_alphanumeric() || "/._-~@+".contains(c))
        {
            continue;
        }
        let name = token.rsplit('/').next().unwrap_or("");
        let has_extension = name
            .rsplit_once('.')
            .is_some_and(|(stem, ext)| !stem.is_empty() && (1..=5).contains(&ext.len()));
        if (has_extension || token.matches('/').count() >= 2) && seen.insert(token.to_string()) {
            out.push(token.to_string());
        }
    }
    out
}

export_plugin!(AnchoredStructured);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_paths_are_found_once_in_order() {
        let text = "edited src/config/loader.py and ./Cargo.toml; see https://x.org/a/b.html, \
                    then src/config/loader.py:12 again and /etc/hosts. and 3/4 of it";
        assert_eq!(
            file_paths(text),
            ["src/config/loader.py", "./Cargo.toml", "/etc/hosts"]
        );
    }

    #[test]
    fn structured_answers_are_checked() {
        let ok = |json: &str| {
            Ok(LlmResponse {
                text: json.into(),
                structured_json: FfiOption::RSome(json.into()),
                usage: Default::default(),
                model: "m".into(),
                stop_reason: "end_turn".into(),
            })
        };
        let full = r#"{"session_intent":"x","files_modified":[],"decisions_made":[],
            "open_questions":[],"next_steps":["y"]}"#;
        structured_answer(ok(full)).unwrap();
        let incomplete = full.replace("[\"y\"]", "[]");
        assert!(structured_answer(ok(&incomplete))
            .unwrap_err()
            .contains("next_steps"));
        assert!(structured_answer(ok("{not json"))
            .unwrap_err()
            .starts_with("invalid JSON"));
        let long = full.replace("\"x\"", &format!("\"{}\"", "x".repeat(2_001)));
        assert!(structured_answer(ok(&long))
            .unwrap_err()
            .starts_with("session_intent"));
    }

    #[test]
    fn selection_separates_the_prior_and_stops_at_a_system_message() {
        let msgs = vec![
            Message::text(Role::System, "sys"),
            sdk::summary_message("PRIOR", "pg_1", NAME, SummaryStatus::Final),
            Message::text(Role::User, "hello"),
            sdk::summary_message("OTHER", "pg_2", "map-reduce-adaptive", SummaryStatus::Final),
            Message::text(Role::System, "mid"),
            Message::text(Role::User, "recent"),
        ];
        let s = select(&msgs, 1, &LedgerConfig::default());
        assert_eq!(s.span, 1..4);
        assert_eq!(s.prior_pages, ["pg_1"]);
        assert_eq!(s.pieces.len(), 2);
        assert!(s.pieces[1].contains("OTHER"));
    }
}
