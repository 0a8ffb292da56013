//! The model's calls, in the fallback order (the crate's steps 2 and 3): one structured call,
//! or prose summaries of chunks consolidated by one; then a prose summary; then a summary
//! built without the model.

use tamp_plugin_api::prelude::*;
use tamp_plugin_api::sdk::chunk::{chunk_pieces, ChunkOptions};
use tamp_plugin_api::sdk::length;
use tamp_plugin_api::tracing;

use crate::plan::{prose_answer, structured_answer, Produced};
use crate::{prompts, AnchoredStructured, AnchoredSummary};

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

impl AnchoredStructured {
    /// Runs the fallback order; never fails, the last step needing no LLM. The model is
    /// shown `prior`; its answer is merged over `merged_over`, and judged complete as merged.
    /// The last call's length target leaves out `ledger_tokens`, what the summary's ledger
    /// will say of the pieces word for word (see `LedgerConfig::narrative_target`).
    pub(crate) async fn summarize(
        &self,
        host: &Host,
        pieces: &[String],
        prior: Option<&AnchoredSummary>,
        merged_over: Option<&AnchoredSummary>,
        ledger_tokens: u64,
    ) -> Produced {
        let ledger = &self.config.ledger;
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
                    prompts::chunk_request(&self.config, &chunk.text, i + 1, total, target)
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
                        return Produced::no_llm(chunks, warnings);
                    }
                }
            }
            material = Some(summaries.join("\n\n"));
        }
        let material = material.unwrap_or(content);

        if self.config.structured {
            // Never under the floor: a JSON object needs room for its keys whatever it says.
            let target = ledger
                .narrative_target(
                    length::target(
                        count(&material),
                        MIN_STRUCTURED_TOKENS,
                        MAX_STRUCTURED_TOKENS,
                    ),
                    ledger_tokens,
                )
                .max(MIN_STRUCTURED_TOKENS);
            let request =
                prompts::structured_request(&self.config, &material, chunked, prior, target);
            match structured_answer(host.complete(request).await, merged_over) {
                Ok(summary) => return Produced::structured(summary, chunks, warnings),
                Err(reason) => fall_back(
                    &mut warnings,
                    format!("structured summary unusable: {reason}"),
                    "a prose summary",
                ),
            }
        }
        let target = ledger.narrative_target(
            length::target(count(&material), MIN_PROSE_TOKENS, PROSE_OUTPUT_TOKENS),
            ledger_tokens,
        );
        match prose_answer(
            host.complete(prompts::prose_request(
                &self.config,
                &material,
                chunked,
                target,
            ))
            .await,
        ) {
            Ok(text) => Produced::prose(
                sdk::cap_chars(&text, self.config.max_summary_chars),
                chunks,
                warnings,
            ),
            Err(reason) => {
                fall_back(
                    &mut warnings,
                    format!("prose summary failed: {reason}"),
                    "the summary built without the LLM",
                );
                Produced::no_llm(chunks, warnings)
            }
        }
    }
}

/// Logs a step of the fallback order at WARN and records it for the report.
pub(crate) fn fall_back(warnings: &mut Vec<String>, reason: String, next: &str) {
    let warning = format!("{reason}; falling back to {next}");
    tracing::warn!("{warning}");
    warnings.push(warning);
}

export_plugin!(AnchoredStructured);
