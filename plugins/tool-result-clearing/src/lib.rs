//! `tool-result-clearing`: old tool outputs cleared in place, no LLM.
//!
//! The cheapest compaction the field uses is not summarization: Anthropic's context editing
//! (`clear_tool_uses_20250919`), LangChain's `ClearToolUsesEdit` and OpenHands' observation
//! masking all replace old tool outputs by a placeholder and keep everything else, so the model
//! still sees which tools it called, with what, and in which order. This stage does the same
//! through clearings (TAMP-INV-10): each cleared output's placeholder names the page that keeps
//! the original message, so unlike the peers' nothing is lost for good.
//!
//! What is cleared is decided in [`plan`], the parameters are in [`config`]. The stage is
//! prefix-stable: a message is always cleared the same way, byte for byte, and only outputs
//! that have aged out of the `keep` most recent tool uses are added to what is cleared.

pub mod config;
pub mod plan;

use tamp_plugin_api::prelude::*;
use tamp_plugin_api::serde_json::json;

pub use config::Config;
use plan::{Decision, Tokens};

pub struct ToolResultClearing {
    config: Config,
    note_template: Template,
}

/// The host's tokenizer, as the decision counts.
struct HostTokens<'a>(&'a Host);

impl Tokens for HostTokens<'_> {
    fn message(&self, message: &Message) -> u64 {
        self.0.count_message_tokens(std::slice::from_ref(message))
    }

    fn text(&self, text: &str) -> u64 {
        self.0.count_tokens(text)
    }
}

impl Strategy for ToolResultClearing {
    type Config = Config;
    const NAME: &'static str = "tool-result-clearing";
    const DESCRIPTION: &'static str = "Clears old tool outputs in place, no LLM: each replaced \
        by a short placeholder naming the page that keeps it, the calls and their order kept.";

    fn new(config: Config) -> Result<Self, PluginError> {
        let note_template = config.note_template()?;
        Ok(ToolResultClearing {
            config,
            note_template,
        })
    }

    async fn compact(&self, input: Compaction) -> Result<CompactOutcome, PluginError> {
        let Compaction {
            conversation,
            budget,
            host,
            ..
        } = input;
        let messages = &conversation.messages[..];
        let range = sdk::compactable_range(messages, budget.keep_recent as usize);
        let (clearings, freed, results, inputs) = match plan::decide(
            messages,
            range,
            &self.config,
            &self.note_template,
            &HostTokens(&host),
        ) {
            Decision::Leave(why) => return Ok(CompactOutcome::unchanged(why)),
            Decision::Clear {
                clearings,
                freed,
                results,
                inputs,
            } => (clearings, freed, results, inputs),
        };
        let messages_cleared = clearings.len();
        let edits: Vec<Edit> = clearings
            .into_iter()
            .filter_map(|c| c.into_edit())
            .collect();
        let inputs_note = match inputs {
            0 => String::new(),
            n => format!(" and {n} tool input(s)"),
        };
        let report = StageReport::acted(format!(
            "cleared {results} tool result(s){inputs_note} in {messages_cleared} message(s), \
             about {freed} tokens; the {} most recent tool uses kept",
            self.config.keep
        ))
        .with_details(&json!({
            "results_cleared": results,
            "inputs_cleared": inputs,
            "messages_cleared": messages_cleared,
            "tokens_freed": freed,
        }));
        Ok(CompactOutcome::with_edits(edits, report))
    }
}

export_plugin!(ToolResultClearing);
