//! `map-reduce-adaptive`: summarizes however much old content a conversation holds into one
//! bounded summary, with as many rounds of summarizing as the length needs.
//!
//! 1. **Select** the messages a stage may replace (after the system prompt and the task,
//!    before the protected recent tail, up to any system message inside). Earlier summaries
//!    at its start stay in place while they fit in `keep_summaries_share` of the budget, so
//!    the prefix holds across compactions; past it they are folded in: summaries written by
//!    this strategy are then the *prior summary*. Everything else (other strategies'
//!    summaries included) is the *content*, rendered as `role: text` turns with tool
//!    exchanges compact.
//! 2. **Pick a level** by the content's tokens (the host's counter): below `none_below`
//!    nothing; below `brief_below` one call for a one-sentence brief; otherwise map-reduce.
//! 3. **Map**: cut the content into chunks (`sdk::chunk`: messages and tool exchanges kept
//!    whole where they fit, then paragraphs, sentences, lines, words, characters; overlap
//!    repeated across each cut; anchored at the start), summarize them concurrently.
//! 4. **Collapse** while the summaries together exceed `token_max`: summarize them in groups
//!    that fit `token_max`, at most `max_collapse_depth` rounds.
//! 5. **Synthesize** the final summary from the summaries and the prior summary. Content that
//!    is one chunk skips steps 3–5: with a prior summary, one *update* call rewrites the prior
//!    from the chunk itself; without one, the chunk's summary is the summary.
//! 6. **Replace**: archive the whole span (prior summary included) as one page, put the new
//!    summary, carrying the page's ref, in its place.
//!
//! Every call's answer must be non-empty, and is cut to a bound before it is used; any LLM
//! error fails the stage, which the chain rolls back. The requests depend only on the
//! material (and the prior summary), never on how much follows, so the same input and
//! answers give the same requests and output, and a conversation that grows at its end gets
//! the same map requests for its older part.

mod config;
mod plan;
mod prompts;

use tamp_plugin_api::prelude::*;
use tamp_plugin_api::sdk::chunk::{chunk_pieces, pack_by_tokens};
use tamp_plugin_api::sdk::incremental::Leading;
use tamp_plugin_api::sdk::ledger::Sharing;
use tamp_plugin_api::serde_json;

pub use config::{Config, ContentType, Reuse};
pub use plan::Level;
use plan::{Details, Selection, SummaryFigures};

/// The strategy's name: in pages, summary messages and logs.
pub const NAME: &str = "map-reduce-adaptive";

/// An answer is cut at this many times the tokens asked for. Not at exactly the number
/// asked: the model's tokenizer is not the host's, and cutting an honest answer mid-sentence
/// would lose more than the few extra tokens cost. Twice is far beyond any honest answer.
const ANSWER_SLACK: u64 = 2;

pub struct MapReduceAdaptive {
    config: Config,
}

/// What the LLM calls produced.
struct Summarized {
    text: String,
    calls: usize,
    chunks: usize,
    depth: u32,
    warnings: Vec<String>,
}

/// The new content a run summarizes.
struct Material<'a> {
    /// One rendered unit (message or tool exchange) per piece.
    pieces: &'a [String],
    tokens: u64,
    /// What the summary's ledger will say of it (`sdk::ledger::tokens_found`).
    ledger_tokens: u64,
}

impl Summarized {
    /// A summary that took one call on one chunk (none, for a cached one).
    fn single(text: String, calls: usize) -> Self {
        Summarized {
            text,
            calls,
            chunks: calls,
            depth: 0,
            warnings: Vec::new(),
        }
    }
}

impl Strategy for MapReduceAdaptive {
    type Config = Config;
    const NAME: &'static str = NAME;
    const DESCRIPTION: &'static str = "Summarizes the old part of a conversation into one bounded \
        summary: nothing, a one-sentence brief or map-reduce by length, chunked on semantic \
        boundaries, with the earlier summary carried forward.";

    fn new(config: Config) -> Result<Self, PluginError> {
        config.validate()?;
        Ok(MapReduceAdaptive { config })
    }

    async fn compact(&self, input: Compaction) -> Result<CompactOutcome, PluginError> {
        let Compaction {
            conversation,
            budget,
            host,
            ..
        } = input;
        let messages = &conversation.messages[..];
        let config = &self.config;
        let count = |text: &str| host.count_tokens(text);
        let keep_recent = budget.keep_recent as usize;
        let kept = plan::summaries_kept(messages, keep_recent, budget.max_tokens, config, &count);
        let mut selection = plan::select(messages, keep_recent, kept, config);
        let reused = self.reusable(&host, messages, &selection).await;
        let new_pieces = &selection.pieces[reused.as_ref().map_or(0, |r| r.pieces)..];
        let content = new_pieces.concat();
        let content_tokens = if content.is_empty() {
            0
        } else {
            count(&content)
        };
        // With a cached summary to merge into, it is the prior summary of the new content.
        let prior = match (&reused, config.reuse) {
            (Some(r), Reuse::Merge) => Some(config.ledger.shown(&r.summary)),
            _ => selection.prior.as_deref(),
        };
        let prior_tokens = prior.map_or(0, count);
        let input_tokens = content_tokens + prior_tokens;
        // What the summary's ledger will say of the new content word for word: the narrative
        // is asked for that much less.
        let new_start = selection
            .piece_ranges
            .get(reused.as_ref().map_or(0, |r| r.pieces))
            .map_or(selection.span.end, |r| r.start);
        let ledger_tokens = if config.ledger.enabled {
            sdk::ledger::tokens_found(&messages[new_start..selection.span.end], &count)
        } else {
            0
        };
        let level = match Level::for_tokens(content_tokens, config) {
            // Nothing new (the whole span was cached), or too little: the cached summary
            // stands for what it covers, and any new messages stay as they are until there is
            // enough of them.
            Level::None if reused.is_some() => Level::Cached,
            level => level,
        };
        let details = Details {
            level: level.as_str(),
            content_type: config.content_type.as_str(),
            messages: selection.span.len(),
            content_tokens,
            prior_summary_tokens: prior_tokens,
            input_tokens,
            reused_messages: reused.as_ref().map_or(0, |r| r.messages),
            summaries_kept: kept,
            summary: None,
        };
        tamp_plugin_api::tracing::debug!(
            level = level.as_str(),
            content_tokens,
            prior_tokens,
            messages = selection.span.len(),
            "level chosen"
        );

        let summarized = match level {
            Level::None => {
                let reason = plan::level_none_reason(&selection, content_tokens, config);
                let report = StageReport::skipped(reason).with_details(&details);
                return Ok(CompactOutcome::with_edits([], report));
            }
            Level::Cached => {
                let reused = reused
                    .as_ref()
                    .expect("a cached level has a reused summary");
                selection.truncate(reused.pieces);
                Summarized::single(config.ledger.shown(&reused.summary).to_string(), 0)
            }
            Level::Brief => {
                let target = config.final_target(prior_tokens, content_tokens);
                let target = config.ledger.narrative_target(target, ledger_tokens);
                self.brief(&host, &content, prior, target).await?
            }
            Level::MapReduce => {
                let material = Material {
                    pieces: new_pieces,
                    tokens: content_tokens,
                    ledger_tokens,
                };
                self.map_reduce(&host, material, prior, prior_tokens)
                    .await?
            }
        };
        let summarized = match (&reused, config.reuse) {
            (Some(r), Reuse::Append) if level != Level::Cached => Summarized {
                text: sdk::incremental::append(config.ledger.shown(&r.summary), &summarized.text),
                ..summarized
            },
            _ => summarized,
        };
        self.replace(
            &host,
            messages,
            budget.max_tokens,
            &selection,
            summarized,
            details,
        )
        .await
    }
}

impl MapReduceAdaptive {
    /// The summary's text (with the span's ledger) in the span's place, cached for the next
    /// compaction of the same history, and the report of it all.
    async fn replace(
        &self,
        host: &Host,
        messages: &[Message],
        max_tokens: u64,
        selection: &Selection,
        summarized: Summarized,
        mut details: Details,
    ) -> Result<CompactOutcome, PluginError> {
        // Its own cap: the summaries kept before it fold once their ledgers pass it.
        let cap =
            self.config
                .ledger
                .cap(host, messages, &selection.span, max_tokens, Sharing::Folds);
        let finished = sdk::ledger::finish(
            &self.config.ledger,
            host,
            messages,
            selection.span.clone(),
            &summarized.text,
            cap,
        );
        if self.config.reuse != Reuse::Off && selection.prior.is_none() {
            host.cache_summary(&messages[selection.span.clone()], &finished.text)
                .await;
        }

        let input_tokens = details.input_tokens;
        let output_tokens = host.count_tokens(&finished.text);
        details.summary = Some(SummaryFigures {
            output_tokens,
            compression_ratio: plan::compression_ratio(output_tokens, input_tokens),
            depth: summarized.depth,
            calls: summarized.calls,
            chunks: summarized.chunks,
            ledger_entries: finished.ledger.entries().count(),
            ledger_moved: finished.ledger.moved,
        });
        let mut report = StageReport::acted(format!(
            "level {}: {} message(s), {input_tokens} tokens → a summary of {output_tokens} \
                 tokens in {} LLM call(s) ({} chunk(s), collapse depth {})",
            details.level,
            selection.span.len(),
            summarized.calls,
            summarized.chunks,
            summarized.depth
        ))
        .with_warnings(summarized.warnings)
        .with_details(&details);
        if output_tokens > input_tokens.max(1) {
            let ratio = output_tokens as f64 / input_tokens.max(1) as f64;
            report.warn(format!(
                "compression ratio {ratio:.2} > 1: the summary ({output_tokens} tokens) is longer \
                     than what it replaces ({input_tokens} tokens)"
            ));
        }

        // The host archives the span as one page only once every call has succeeded, so a
        // failed stage leaves nothing behind; its metadata keeps the figures with the messages
        // they describe.
        let metadata = serde_json::to_value(&details)?;
        let edit = Edit::summarize(selection.span.clone(), finished.text).with_metadata(&metadata);
        Ok(CompactOutcome::with_edits([edit], report))
    }

    /// The cached summary of the longest leading part of the span, when the span is plain
    /// content (no earlier summary of this strategy to merge, which the cache does not key)
    /// and the part ends on a piece boundary.
    async fn reusable(
        &self,
        host: &Host,
        messages: &[Message],
        selection: &Selection,
    ) -> Option<Leading> {
        if self.config.reuse == Reuse::Off || selection.prior.is_some() {
            return None;
        }
        sdk::incremental::leading_pieces(
            host,
            messages,
            selection.span.clone(),
            &selection.piece_ranges,
            self.config.reuse,
        )
        .await
    }

    async fn brief(
        &self,
        host: &Host,
        content: &str,
        prior: Option<&str>,
        target: u32,
    ) -> Result<Summarized, PluginError> {
        let request = prompts::brief_request(self.config.content_type, content, prior, target);
        let text = self.run_batch(host, vec![request]).await?.remove(0);
        Ok(Summarized::single(text, 1))
    }

    async fn map_reduce(
        &self,
        host: &Host,
        material: Material<'_>,
        prior: Option<&str>,
        prior_tokens: u64,
    ) -> Result<Summarized, PluginError> {
        let config = &self.config;
        let count = |text: &str| host.count_tokens(text);
        let chunks = chunk_pieces(material.pieces, &config.chunk_options(), &count);
        // The final summary's length: the narrative leaves to the ledger what it says.
        let final_target = config.ledger.narrative_target(
            config.final_target(prior_tokens, material.tokens),
            material.ledger_tokens,
        );
        if let ([chunk], Some(prior)) = (chunks.as_slice(), prior) {
            let request =
                prompts::update_request(config.content_type, &chunk.text, prior, final_target);
            let text = self.run_batch(host, vec![request]).await?.remove(0);
            return Ok(Summarized::single(text, 1));
        }
        let requests: Vec<LlmRequest> = chunks
            .iter()
            .enumerate()
            .map(|(i, chunk)| {
                // The prior summary goes to the synthesis only: every map request then
                // depends on its chunk alone, and is the same request (a cache hit) however
                // the prior changes.
                // A lone chunk's summary is the final one (no synthesis follows).
                let target = match (chunks.len(), prior) {
                    (1, None) => config.ledger.narrative_target(
                        config.summary_target(chunk.tokens),
                        material.ledger_tokens,
                    ),
                    _ => config.summary_target(chunk.tokens),
                };
                prompts::map_request(
                    config.content_type,
                    i + 1,
                    &chunk.text,
                    chunk.has_overlap(),
                    target,
                )
            })
            .collect();
        let mut calls = requests.len();
        let mut summaries = self.run_batch(host, requests).await?;

        let mut depth = 0;
        let mut warnings = Vec::new();
        loop {
            let tokens: Vec<u64> = summaries.iter().map(|s| count(s)).collect();
            let total: u64 = tokens.iter().sum();
            if total <= config.token_max {
                break;
            }
            if depth >= config.max_collapse_depth {
                let warning = format!(
                    "collapse depth limit ({}) reached with {} summaries of {total} tokens \
                     together, above token_max ({}); synthesizing from them anyway",
                    config.max_collapse_depth,
                    summaries.len(),
                    config.token_max
                );
                tamp_plugin_api::tracing::warn!("{warning}");
                warnings.push(warning);
                break;
            }
            depth += 1;
            let requests: Vec<LlmRequest> = pack_by_tokens(&tokens, config.token_max)
                .into_iter()
                .enumerate()
                .map(|(g, group)| {
                    let group_tokens: u64 = tokens[group.clone()].iter().sum();
                    prompts::collapse_request(
                        config.content_type,
                        depth,
                        g + 1,
                        &summaries[group],
                        config.summary_target(group_tokens),
                    )
                })
                .collect();
            calls += requests.len();
            summaries = self.run_batch(host, requests).await?;
        }

        // One chunk's summary, with nothing earlier to merge it with, already is the summary
        // of the whole at the same length: a synthesis would only restate it.
        let text = if summaries.len() == 1 && prior.is_none() {
            summaries.remove(0)
        } else {
            let request =
                prompts::synthesis_request(config.content_type, &summaries, prior, final_target);
            calls += 1;
            self.run_batch(host, vec![request]).await?.remove(0)
        };
        Ok(Summarized {
            text,
            calls,
            chunks: chunks.len(),
            depth,
            warnings,
        })
    }

    /// Runs `requests` concurrently (answers in request order) and returns their bounded
    /// texts, or the first failure in request order. `complete_all` waits for the whole
    /// batch, so a failure stops the stage at the end of its batch: no later call is made.
    async fn run_batch(
        &self,
        host: &Host,
        requests: Vec<LlmRequest>,
    ) -> Result<Vec<String>, PluginError> {
        let asked: Vec<(String, u32)> = requests
            .iter()
            .map(|r| (r.label.to_string(), r.max_output_tokens))
            .collect();
        let answers = host
            .complete_all(requests, self.config.max_concurrency)
            .await;
        answers
            .into_iter()
            .zip(asked)
            .map(|(answer, (label, max_tokens))| {
                let limit = u64::from(max_tokens).saturating_mul(ANSWER_SLACK);
                sdk::summary::bounded_answer(host, answer, &label, limit)
            })
            .collect()
    }
}

export_plugin!(MapReduceAdaptive);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn invalid_config_is_refused() {
        let err = MapReduceAdaptive::new(Config {
            chunk_overlap: 3_500,
            ..Config::default()
        })
        .err()
        .unwrap();
        assert_eq!(err.kind, ErrorKind::InvalidConfig);
    }
}
