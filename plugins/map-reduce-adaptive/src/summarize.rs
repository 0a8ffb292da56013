//! The model's calls: a one-sentence brief, or map, collapse and synthesize (see the crate's
//! steps 3 to 5), each answer bounded before it is used.

use tamp_plugin_api::prelude::*;
use tamp_plugin_api::sdk::chunk::{chunk_pieces, pack_by_tokens};

use crate::{prompts, MapReduceAdaptive, ANSWER_SLACK};

/// What the LLM calls produced.
pub(crate) struct Summarized {
    pub(crate) text: String,
    pub(crate) calls: usize,
    pub(crate) chunks: usize,
    pub(crate) depth: u32,
    pub(crate) warnings: Vec<String>,
}

/// The new content a run summarizes.
pub(crate) struct Material<'a> {
    /// One rendered unit (message or tool exchange) per piece.
    pub(crate) pieces: &'a [String],
    pub(crate) tokens: u64,
    /// What the summary's ledger will say of it (`sdk::ledger::tokens_found`).
    pub(crate) ledger_tokens: u64,
}

impl Summarized {
    /// A summary that took one call on one chunk (none, for a cached one).
    pub(crate) fn single(text: String, calls: usize) -> Self {
        Summarized {
            text,
            calls,
            chunks: calls,
            depth: 0,
            warnings: Vec::new(),
        }
    }
}

impl MapReduceAdaptive {
    pub(crate) async fn brief(
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

    pub(crate) async fn map_reduce(
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
