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
mod summarize;

use tamp_plugin_api::prelude::*;
use tamp_plugin_api::sdk::incremental::Leading;
use tamp_plugin_api::sdk::ledger::Sharing;
use tamp_plugin_api::serde_json;

pub use config::{Config, ContentType, Reuse};
pub use plan::Level;
use plan::{Details, Selection, SummaryFigures};
use summarize::{Material, Summarized};

/// The strategy's name: in pages, summary messages and logs.
pub const NAME: &str = "map-reduce-adaptive";

/// An answer is cut at this many times the tokens asked for. Not at exactly the number
/// asked: the model's tokenizer is not the host's, and cutting an honest answer mid-sentence
/// would lose more than the few extra tokens cost. Twice is far beyond any honest answer.
const ANSWER_SLACK: u64 = 2;

pub struct MapReduceAdaptive {
    config: Config,
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
