//! A small but real tamp strategy, meant to be copied: it archives the oldest tool exchanges
//! beyond a count into pages and puts a short note in their place that names the tools called
//! and carries the page ref. Optionally the note also carries a one-paragraph LLM summary.
//!
//! Everything it needs comes from `tamp-plugin-api`: the conversation model, the SDK's
//! tool-exchange grouping and protected range, and the host's LLM and page services.

use tamp_plugin_api::prelude::*;
use tamp_plugin_api::sdk::groups::Group;
use tamp_plugin_api::sdk::prompt::{render_messages, RenderOptions};

/// The stage config (`[stage.config]` in a chain file). Its JSON Schema is derived, so the
/// host validates a chain file against it before anything runs. The two `crate = ...`
/// attributes point the derives at plugin-api's re-exports, so this crate needs no direct
/// serde or schemars dependency (and always agrees with the versions plugin-api uses).
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(crate = "tamp_plugin_api::serde", deny_unknown_fields, default)]
#[schemars(crate = "tamp_plugin_api::schemars")]
pub struct Config {
    /// The newest tool exchanges (outside the protected recent messages) left as they are.
    #[schemars(range(min = 0, max = 100000))]
    pub keep_exchanges: usize,
    /// Archive only when at least this many exchanges would go.
    #[schemars(range(min = 1))]
    pub min_exchanges: usize,
    /// Ask the host's LLM for a short summary of each archived run, not just the tool names.
    pub summarize: bool,
    /// Upper bound on each summary, in tokens (asked of the LLM).
    #[schemars(range(min = 16, max = 4096))]
    pub summary_tokens: u32,
    /// Hard cap on each summary's length, in characters: an LLM answer is cut here before it
    /// enters the conversation, whatever it says its length is.
    #[schemars(range(min = 1))]
    pub max_summary_chars: usize,
    /// At most this many summary requests run at once.
    #[schemars(range(min = 1, max = 256))]
    pub max_concurrency: usize,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            keep_exchanges: 3,
            min_exchanges: 1,
            summarize: true,
            summary_tokens: 200,
            max_summary_chars: 2_000,
            max_concurrency: 8,
        }
    }
}

pub struct ArchiveOldToolCalls {
    config: Config,
}

impl Strategy for ArchiveOldToolCalls {
    type Config = Config;
    const NAME: &'static str = "custom-strategy";
    const DESCRIPTION: &'static str =
        "Archives the oldest tool exchanges into pages and leaves a note naming the tools called.";

    fn new(config: Config) -> Result<Self, PluginError> {
        if config.min_exchanges == 0 {
            return Err(PluginError::invalid_config(
                "min_exchanges: must be at least 1",
            ));
        }
        Ok(ArchiveOldToolCalls { config })
    }

    async fn compact(&self, input: Compaction) -> Result<CompactOutcome, PluginError> {
        let Compaction {
            conversation,
            budget,
            host,
            ..
        } = input;
        let messages = &conversation.messages;
        let runs = self.runs_to_archive(messages, budget.keep_recent as usize);
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
        let mut report = StageReport::acted(String::new());
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
                        report.warn(format!(
                            "summary of {at} is longer than the exchanges it replaces; kept \
                             the plain note"
                        ));
                    }
                }
                Some(Err(e)) => report.warn(format!("summary of {at} failed: {e}")),
                None => {}
            }
            if !host.summary_is_smaller(&note, originals) {
                // Even the plain note outweighs these exchanges: leave them as they are.
                continue;
            }
            edits.push(Edit::summarize(run.range.clone(), note));
            archived += run.units.len();
        }
        if edits.is_empty() {
            let mut outcome =
                CompactOutcome::unchanged("no run of tool exchanges outweighs its summary");
            outcome.report.warnings = report.warnings;
            return Ok(outcome);
        }
        report.reason = format!(
            "archived {archived} tool exchange(s) in {} run(s)",
            edits.len()
        )
        .into();
        Ok(CompactOutcome::with_edits(edits, report))
    }
}

impl ArchiveOldToolCalls {
    /// The oldest tool exchanges in the compactable range, beyond the newest
    /// `keep_exchanges`, grouped into runs of adjacent exchanges (the SDK's grouping).
    fn runs_to_archive(&self, messages: &[Message], keep_recent: usize) -> Vec<Group> {
        let range = sdk::compactable_range(messages, keep_recent);
        let units = sdk::units(messages);
        let exchanges: Vec<Unit> = sdk::groups::units_within(&units, &range)
            .filter(|u| u.kind == UnitKind::ToolExchange)
            .cloned()
            .collect();
        let archive = exchanges.len().saturating_sub(self.config.keep_exchanges);
        sdk::groups::adjacent_runs(&exchanges[..archive])
    }

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
                let material = render_messages(&messages[run.range.clone()], &RenderOptions::default());
                let prompt = format!(
                    "Summarize what these tool calls found out, in a few sentences. Keep file paths, \
                     identifiers, numbers and errors.\n<content>\n{material}</content>"
                );
                LlmRequest::new("", prompt, self.config.summary_tokens)
                    .with_label(format!("run {}/{total}", i + 1))
            })
            .collect();
        host.complete_all(requests, self.config.max_concurrency)
            .await
            .into_iter()
            .map(|answer| Some(answer.map(|r| r.text.into())))
            .collect()
    }
}

export_plugin!(ArchiveOldToolCalls);

#[cfg(test)]
mod tests {
    use super::*;

    fn exchange(id: &str, tool: &str) -> [Message; 2] {
        [
            Message::new(
                Role::Assistant,
                vec![ContentBlock::ToolUse {
                    id: id.into(),
                    name: tool.into(),
                    input_json: "{}".into(),
                    extra_json: Default::default(),
                }],
            ),
            Message::new(
                Role::Tool,
                vec![ContentBlock::ToolResult {
                    tool_use_id: id.into(),
                    content: vec![ToolResultPart::Text { text: "out".into() }].into(),
                    is_error: false,
                    extra_json: Default::default(),
                }],
            ),
        ]
    }

    #[test]
    fn runs_split_at_user_messages_and_keep_the_newest() {
        let mut msgs = vec![
            Message::text(Role::System, "s"),
            Message::text(Role::User, "go"),
        ];
        msgs.extend(exchange("a", "bash"));
        msgs.extend(exchange("b", "bash"));
        msgs.push(Message::text(Role::User, "more"));
        msgs.extend(exchange("c", "edit"));
        msgs.extend(exchange("d", "edit"));
        msgs.push(Message::text(Role::Assistant, "done"));
        let s = ArchiveOldToolCalls::new(Config {
            keep_exchanges: 1,
            ..Config::default()
        })
        .unwrap();
        let runs = s.runs_to_archive(&msgs, 1);
        assert_eq!(runs.len(), 2);
        assert_eq!(runs[0].range, 2..6);
        assert_eq!(runs[0].units.len(), 2);
        assert_eq!(runs[1].range, 7..9);
        let activity = sdk::groups::tool_activity(&msgs[runs[0].range.clone()]);
        assert_eq!(activity.tool_list(), "bash ×2");
    }
}
