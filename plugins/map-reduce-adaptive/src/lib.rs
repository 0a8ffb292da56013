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
mod prompts;

use std::ops::Range;

use tamp_plugin_api::prelude::*;
use tamp_plugin_api::sdk::chunk::{chunk_pieces, pack_by_tokens};
use tamp_plugin_api::sdk::prompt::RenderOptions;
use tamp_plugin_api::serde_json::{json, Value};

pub use config::{Config, ContentType, Reuse};
use tamp_plugin_api::sdk::incremental::Leading;

/// The strategy's name: in pages, summary messages and logs.
pub const NAME: &str = "map-reduce-adaptive";

/// An answer is cut at this many times the tokens asked for. Not at exactly the number
/// asked: the model's tokenizer is not the host's, and cutting an honest answer mid-sentence
/// would lose more than the few extra tokens cost. Twice is far beyond any honest answer.
const ANSWER_SLACK: u64 = 2;

/// How much summarizing the content gets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Level {
    /// Too little to be worth a summary.
    None,
    /// One call for a one-sentence brief.
    Brief,
    /// Map, collapse as needed, synthesize.
    MapReduce,
    /// Nothing new worth a call: the cached summary of the older part is used as it is.
    Cached,
}

impl Level {
    /// The level for content of `tokens` tokens.
    pub fn for_tokens(tokens: u64, config: &Config) -> Level {
        if tokens < config.none_below {
            Level::None
        } else if tokens < config.brief_below {
            Level::Brief
        } else {
            Level::MapReduce
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Level::None => "none",
            Level::Brief => "brief",
            Level::MapReduce => "map-reduce",
            Level::Cached => "cached",
        }
    }
}

pub struct MapReduceAdaptive {
    config: Config,
}

/// The messages the stage replaces, split into the prior summary and the content.
struct Selection {
    /// One contiguous run of messages, replaced by one summary.
    span: Range<usize>,
    /// The texts of this strategy's earlier summaries in the span, joined.
    prior: Option<String>,
    /// The rest of the span, one rendered unit (message or tool exchange) per piece.
    pieces: Vec<String>,
    /// The messages of each piece.
    piece_ranges: Vec<Range<usize>>,
}

impl Selection {
    /// Keeps the first `n` pieces and ends the span after the last one kept.
    fn truncate(&mut self, n: usize) {
        if let Some(last) = n.checked_sub(1).and_then(|i| self.piece_ranges.get(i)) {
            self.span.end = last.end;
        }
        self.pieces.truncate(n);
        self.piece_ranges.truncate(n);
    }
}

/// What the LLM calls produced.
struct Summarized {
    text: String,
    calls: usize,
    chunks: usize,
    depth: u32,
    warnings: Vec<String>,
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
        let keep_recent = budget.keep_recent as usize;
        let kept = self.summaries_kept(
            &host,
            &conversation.messages,
            keep_recent,
            budget.max_tokens,
        );
        let mut selection = self.select(&conversation.messages, keep_recent, kept);
        let reused = self
            .reusable(&host, &conversation.messages, &selection)
            .await;
        let count = |text: &str| host.count_tokens(text);
        let new_pieces = &selection.pieces[reused.as_ref().map_or(0, |r| r.pieces)..];
        let content = new_pieces.concat();
        let content_tokens = if content.is_empty() {
            0
        } else {
            count(&content)
        };
        // With a cached summary to merge into, it is the prior summary of the new content.
        let prior = match (&reused, self.config.reuse) {
            (Some(r), Reuse::Merge) => Some(self.config.ledger.shown(&r.summary)),
            _ => selection.prior.as_deref(),
        };
        let prior_tokens = prior.map_or(0, count);
        let input_tokens = content_tokens + prior_tokens;
        let mut level = Level::for_tokens(content_tokens, &self.config);
        if reused.is_some() && level == Level::None {
            // Nothing new (the whole span was cached), or too little: the cached summary
            // stands for what it covers, and any new messages stay as they are until there is
            // enough of them.
            level = Level::Cached;
        }
        let mut details = json!({
            "level": level.as_str(),
            "content_type": self.config.content_type.as_str(),
            "messages": selection.span.len(),
            "content_tokens": content_tokens,
            "prior_summary_tokens": prior_tokens,
            "input_tokens": input_tokens,
            "reused_messages": reused.as_ref().map_or(0, |r| r.messages),
            "summaries_kept": kept,
        });
        tamp_plugin_api::tracing::debug!(
            level = level.as_str(),
            content_tokens,
            prior_tokens,
            messages = selection.span.len(),
            "level chosen"
        );

        let summarized = match level {
            Level::Cached => {
                let reused = reused
                    .as_ref()
                    .expect("a cached level has a reused summary");
                selection.truncate(reused.pieces);
                Summarized {
                    text: self.config.ledger.shown(&reused.summary).to_string(),
                    calls: 0,
                    chunks: 0,
                    depth: 0,
                    warnings: Vec::new(),
                }
            }
            Level::None => {
                let reason = if selection.span.is_empty() {
                    "level none: no messages outside the system prompt and the protected recent \
                     messages"
                        .to_string()
                } else {
                    format!(
                        "level none: {content_tokens} tokens of new content, below none_below ({})",
                        self.config.none_below
                    )
                };
                let mut outcome = CompactOutcome::unchanged(reason);
                outcome.report.details_json = details.to_string().into();
                return Ok(outcome);
            }
            Level::Brief => {
                self.brief(&host, &content, content_tokens, prior, prior_tokens)
                    .await?
            }
            Level::MapReduce => {
                self.map_reduce(&host, new_pieces, content_tokens, prior, prior_tokens)
                    .await?
            }
        };
        let summarized = match (&reused, self.config.reuse) {
            (Some(r), Reuse::Append) if level != Level::Cached => Summarized {
                text: sdk::incremental::append(
                    self.config.ledger.shown(&r.summary),
                    &summarized.text,
                ),
                ..summarized
            },
            _ => summarized,
        };
        // Its own cap: the summaries kept before it fold once their ledgers pass it.
        let cap = self.config.ledger.cap_tokens(budget.max_tokens);
        let finished = sdk::ledger::finish(
            &self.config.ledger,
            &host,
            &conversation.messages,
            selection.span.clone(),
            &summarized.text,
            cap,
        );
        if self.config.reuse != Reuse::Off && selection.prior.is_none() {
            let span = &conversation.messages[selection.span.clone()];
            host.cache_summary(span, &finished.text).await;
        }

        let output_tokens = count(&finished.text);
        let ratio = output_tokens as f64 / input_tokens.max(1) as f64;
        let fields = [
            ("output_tokens", json!(output_tokens)),
            (
                "compression_ratio",
                json!((ratio * 10_000.0).round() / 10_000.0),
            ),
            ("depth", json!(summarized.depth)),
            ("calls", json!(summarized.calls)),
            ("chunks", json!(summarized.chunks)),
            ("ledger_entries", json!(finished.ledger.entries().count())),
            ("ledger_moved", json!(finished.ledger.moved)),
        ];
        if let Value::Object(map) = &mut details {
            for (key, value) in fields {
                map.insert(key.to_string(), value);
            }
        }

        let mut report = StageReport::acted(format!(
            "level {}: {} message(s), {input_tokens} tokens → a summary of {output_tokens} \
             tokens in {} LLM call(s) ({} chunk(s), collapse depth {})",
            level.as_str(),
            selection.span.len(),
            summarized.calls,
            summarized.chunks,
            summarized.depth
        ));
        for warning in summarized.warnings {
            report.warn(warning);
        }
        if ratio > 1.0 {
            report.warn(format!(
                "compression ratio {ratio:.2} > 1: the summary ({output_tokens} tokens) is longer \
                 than what it replaces ({input_tokens} tokens)"
            ));
        }

        // The host archives the span as one page only once every call has succeeded, so a
        // failed stage leaves nothing behind; its metadata keeps the figures with the messages
        // they describe.
        report.details_json = details.to_string().into();
        let edit = Edit::summarize(selection.span.clone(), finished.text).with_metadata(&details);
        Ok(CompactOutcome::with_edits([edit], report))
    }
}

impl MapReduceAdaptive {
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

    /// How many summaries at the start of the compactable range stay where they are: all of
    /// them while their narratives together fit in `keep_summaries_share` of the budget and
    /// their ledgers in the ledger's cap, else none (they are folded into the new summary).
    fn summaries_kept(
        &self,
        host: &Host,
        messages: &[Message],
        keep_recent: usize,
        max_tokens: u64,
    ) -> usize {
        let range = sdk::compactable_range(messages, keep_recent);
        let limit = (max_tokens as f64 * self.config.keep_summaries_share) as u64;
        let leading: Vec<&Message> = messages[range]
            .iter()
            .take_while(|m| m.is_summary())
            .collect();
        // Their narratives count against the share, their ledgers against the ledger's cap:
        // each kept summary's ledger holds what the ones before it do not, so together they
        // are one ledger, and past its cap a fold bounds them as one. (Counting their ledgers
        // against the share, or half the cap, folds far more often, and each fold sends the
        // prior again: +10% and +15% summarizer tokens on the planted session.)
        let (mut narratives, mut ledgers) = (0, 0);
        for m in &leading {
            let text = m.joined_text();
            let narrative = host.count_tokens(self.config.ledger.shown(&text));
            narratives += narrative;
            ledgers += host.count_tokens(&text).saturating_sub(narrative);
        }
        if narratives <= limit && ledgers <= self.config.ledger.cap_tokens(max_tokens) {
            leading.len()
        } else {
            0
        }
    }

    /// The span to replace: from the start of the compactable range (after the `skip`
    /// summaries kept in place) to its end or to the first system message inside it,
    /// whichever comes first (one contiguous run, so one page and one summary; the older
    /// part first, so what is summarized does not depend on what comes later).
    fn select(&self, messages: &[Message], keep_recent: usize, skip: usize) -> Selection {
        let compactable = sdk::compactable_range(messages, keep_recent);
        let range = (compactable.start + skip).min(compactable.end)..compactable.end;
        let render = RenderOptions {
            max_block_chars: self.config.max_block_chars,
        };
        let selected = sdk::span::select_span(messages, range, NAME, &render);
        // The model sees a prior summary's narrative: its ledger is carried by `finish`.
        let prior: Vec<String> = selected
            .priors
            .iter()
            .map(|&i| {
                self.config
                    .ledger
                    .shown(&messages[i].joined_text())
                    .to_string()
            })
            .filter(|p| !p.trim().is_empty())
            .collect();
        let (piece_ranges, pieces) = selected
            .pieces
            .into_iter()
            .map(|p| (p.range, p.text))
            .unzip();
        Selection {
            span: selected.span,
            prior: (!prior.is_empty()).then(|| prior.join("\n\n")),
            pieces,
            piece_ranges,
        }
    }

    async fn brief(
        &self,
        host: &Host,
        content: &str,
        content_tokens: u64,
        prior: Option<&str>,
        prior_tokens: u64,
    ) -> Result<Summarized, PluginError> {
        let target = self.config.final_target(prior_tokens, content_tokens);
        let request = prompts::brief_request(self.config.content_type, content, prior, target);
        let text = self.run_batch(host, vec![request]).await?.remove(0);
        Ok(Summarized {
            text,
            calls: 1,
            chunks: 1,
            depth: 0,
            warnings: Vec::new(),
        })
    }

    async fn map_reduce(
        &self,
        host: &Host,
        pieces: &[String],
        content_tokens: u64,
        prior: Option<&str>,
        prior_tokens: u64,
    ) -> Result<Summarized, PluginError> {
        let config = &self.config;
        let count = |text: &str| host.count_tokens(text);
        let chunks = chunk_pieces(pieces, &config.chunk_options(), &count);
        if let ([chunk], Some(prior)) = (chunks.as_slice(), prior) {
            let target = config.final_target(prior_tokens, content_tokens);
            let request = prompts::update_request(config.content_type, &chunk.text, prior, target);
            let text = self.run_batch(host, vec![request]).await?.remove(0);
            return Ok(Summarized {
                text,
                calls: 1,
                chunks: 1,
                depth: 0,
                warnings: Vec::new(),
            });
        }
        let requests: Vec<LlmRequest> = chunks
            .iter()
            .enumerate()
            .map(|(i, chunk)| {
                // The prior summary goes to the synthesis only: every map request then
                // depends on its chunk alone, and is the same request (a cache hit) however
                // the prior changes.
                prompts::map_request(
                    config.content_type,
                    i + 1,
                    &chunk.text,
                    chunk.has_overlap(),
                    config.summary_target(chunk.tokens),
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
            let target = config.final_target(prior_tokens, content_tokens);
            let request =
                prompts::synthesis_request(config.content_type, &summaries, prior, target);
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
    use tamp_plugin_api::sdk::summary_message;

    #[test]
    fn levels_at_the_thresholds() {
        let c = Config::default();
        assert_eq!(Level::for_tokens(0, &c), Level::None);
        assert_eq!(Level::for_tokens(99, &c), Level::None);
        assert_eq!(Level::for_tokens(100, &c), Level::Brief);
        assert_eq!(Level::for_tokens(499, &c), Level::Brief);
        assert_eq!(Level::for_tokens(500, &c), Level::MapReduce);
    }

    fn strategy() -> MapReduceAdaptive {
        MapReduceAdaptive::new(Config::default()).unwrap()
    }

    #[test]
    fn selection_takes_the_prior_summary_apart_and_stops_at_a_system_message() {
        let msgs = vec![
            Message::text(Role::System, "sys"),
            summary_message("PRIOR", "pg_1", NAME, SummaryStatus::Final),
            Message::text(Role::User, "hello"),
            summary_message("OTHER", "pg_2", "buffered-tool-call", SummaryStatus::Final),
            Message::text(Role::Assistant, "hi"),
            Message::text(Role::System, "mid-conversation instructions"),
            Message::text(Role::User, "later"),
            Message::text(Role::User, "recent"),
        ];
        // Folding: the prior summary is taken apart from the content.
        let s = strategy().select(&msgs, 1, 0);
        assert_eq!(s.span, 1..5);
        assert_eq!(s.prior.as_deref(), Some("PRIOR"));
        assert_eq!(s.pieces.len(), 3);
        assert_eq!(s.pieces[0], "user: hello\n");
        assert!(s.pieces[1].contains("OTHER") && s.pieces[1].contains("pg_2"));
        // Keeping it in place: the span starts after it.
        let s = strategy().select(&msgs, 1, 1);
        assert_eq!(s.span, 2..5);
        assert_eq!(s.prior, None);
        assert_eq!(s.pieces.len(), 3);
    }

    #[test]
    fn nothing_to_select_outside_the_protected_tail() {
        let msgs = vec![
            Message::text(Role::System, "sys"),
            Message::text(Role::User, "a"),
        ];
        let s = strategy().select(&msgs, 5, 0);
        assert!(s.span.is_empty());
        assert!(s.prior.is_none() && s.pieces.is_empty());
    }

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
