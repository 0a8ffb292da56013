//! A small but real tamp strategy, meant to be copied: it archives the oldest tool exchanges
//! beyond a count into pages and puts a short note in their place that names the tools called
//! and carries the page ref. Optionally the note also carries a one-paragraph LLM summary.
//!
//! Everything it needs comes from `tamp-plugin-api`: the conversation model, the SDK's
//! tool-exchange grouping and protected range, and the host's LLM and page services.

//!
//! Like the plugins in `plugins/`, it is three files: [`config`] (the stage config),
//! [`plan`] (what to archive, pure and unit-tested without a host) and this one, a thin
//! [`Strategy`] that runs the plan through the host.

pub mod config;
pub mod plan;

use tamp_plugin_api::prelude::*;
use tamp_plugin_api::sdk::groups::Group;

pub use config::Config;

pub struct ArchiveOldToolCalls {
    config: Config,
}

impl Strategy for ArchiveOldToolCalls {
    type Config = Config;
    const NAME: &'static str = "custom-strategy";
    const DESCRIPTION: &'static str =
        "Archives the oldest tool exchanges into pages and leaves a note naming the tools called.";

    fn new(config: Config) -> Result<Self, PluginError> {
        config.validate()?;
        Ok(ArchiveOldToolCalls { config })
    }

    async fn compact(&self, input: Compaction) -> Result<CompactOutcome, PluginError> {
        let runs = plan::runs_to_archive(
            &input.conversation.messages,
            input.compactable(),
            self.config.keep_exchanges,
        );
        let Compaction {
            conversation, host, ..
        } = input;
        let messages = &conversation.messages;
        let exchanges: usize = runs.iter().map(|r| r.units.len()).sum();
        if exchanges < self.config.min_exchanges {
            let reason = format!(
                "{exchanges} tool exchange(s) old enough to archive, {} needed",
                self.config.min_exchanges
            );
            return Ok(CompactOutcome::unchanged(reason));
        }

        let llm_texts = if self.config.summarize {
            self.summarize_runs(&host, messages, &runs).await
        } else {
            vec![None; runs.len()]
        };

        // Each run becomes one edit: the host archives its messages as a page and puts the
        // note, with the page's ref, in their place.
        let mut warnings = Vec::new();
        let mut edits = Vec::with_capacity(runs.len());
        let mut archived = 0;
        for (run, llm_text) in runs.iter().zip(llm_texts) {
            // The SDK names the tools (in first-call order) and counts the calls.
            let activity = sdk::groups::tool_activity(&messages[run.range.clone()]);
            let mut note = format!(
                "Archived {} tool call(s): {}.",
                activity.calls(),
                activity.tool_list()
            );
            let originals = &messages[run.range.clone()];
            let at = format!("messages {}..{}", run.range.start, run.range.end);
            match llm_text {
                Some(Ok(text)) => {
                    let summarized = format!(
                        "{note}\n{}",
                        sdk::cap_chars(text.trim(), self.config.max_summary_chars)
                    );
                    // A summary must not outweigh what it replaces (an LLM may answer far more
                    // than it was asked for): then the plain note stands alone.
                    if host.summary_is_smaller(&summarized, originals) {
                        note = summarized;
                    } else {
                        warnings.push(format!(
                            "summary of {at} is longer than the exchanges it replaces; kept \
                             the plain note"
                        ));
                    }
                }
                Some(Err(e)) => warnings.push(format!("summary of {at} failed: {e}")),
                None => {}
            }
            if !host.summary_is_smaller(&note, originals) {
                // Even the plain note outweighs these exchanges: leave them as they are.
                continue;
            }
            edits.push(Edit::summarize(run.range.clone(), note));
            archived += run.units.len();
        }
        let report = if edits.is_empty() {
            StageReport::skipped("no run of tool exchanges outweighs its summary")
        } else {
            StageReport::acted(format!(
                "archived {archived} tool exchange(s) in {} run(s)",
                edits.len()
            ))
        };
        Ok(CompactOutcome::with_edits(
            edits,
            report.with_warnings(warnings),
        ))
    }
}

impl ArchiveOldToolCalls {
    /// One LLM request per run, made concurrently through the host.
    async fn summarize_runs(
        &self,
        host: &Host,
        messages: &[Message],
        runs: &[Group],
    ) -> Vec<Option<Result<String, PluginError>>> {
        let total = runs.len();
        let requests = runs
            .iter()
            .enumerate()
            .map(|(i, run)| {
                let prompt = plan::summary_prompt(&messages[run.range.clone()]);
                LlmRequest::new("", prompt, self.config.summary_tokens)
                    .with_label(format!("run {}/{total}", i + 1))
            })
            .collect();
        host.complete_all(requests, self.config.max_concurrency)
            .await
            .into_iter()
            .map(|answer| Some(answer.map(|r| r.text.to_string())))
            .collect()
    }
}

export_plugin!(ArchiveOldToolCalls);
