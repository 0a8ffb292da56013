//! The stage config (`[stage.config]` in a chain file) and its checks.

use tamp_plugin_api::prelude::*;
pub use tamp_plugin_api::sdk::ledger::LedgerConfig;

/// The default system text of every deferred summary request.
pub const DEFAULT_SYSTEM_PROMPT: &str = "You condense part of an AI agent's conversation into \
brief, factual notes that the agent will read instead of the messages themselves.";

/// The default prompt. The material sits inside `<content>` tags, tamp's convention, so that
/// a provider that does not follow instructions (the extractive summarizer, used by the sync
/// fallback offline) knows what to work on.
pub const DEFAULT_PROMPT_TEMPLATE: &str = "\
Below are {count} messages from an AI agent's conversation ({label}).

Write a short summary the agent can rely on later in place of these messages: the requests \
made, what was done and found, decisions and their reasons, open questions, and the exact \
identifiers it may need again (file paths, names, ids, numbers, commands). Answer with the \
summary only.

<content>
{messages}</content>";

/// When new messages are compacted (pending summaries are finalized on every run).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(crate = "tamp_plugin_api::serde", rename_all = "snake_case")]
#[schemars(crate = "tamp_plugin_api::schemars")]
pub enum CompactWhen {
    /// Only while the conversation is above the high watermark.
    OverBudget,
    /// On every run (as long as `min_messages` are eligible).
    Always,
}

/// How the strategy defers summaries.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(crate = "tamp_plugin_api::serde", deny_unknown_fields, default)]
#[schemars(crate = "tamp_plugin_api::schemars")]
pub struct Config {
    /// When new messages are archived behind a pending summary. Finalizing pending summaries
    /// whose result arrived happens on every run, so run the stage with `trigger = "always"`.
    pub compact_when: CompactWhen,
    /// Archive only a run of at least this many eligible messages.
    #[schemars(range(min = 1, max = 1000000))]
    pub min_messages: usize,
    /// A longer run is split into pages of at most this many messages (each one deferred
    /// request), cut at tool-exchange boundaries.
    #[schemars(range(min = 1, max = 1000000))]
    pub max_page_messages: usize,
    /// Upper bound on each summary's length asked of the LLM, in tokens.
    #[schemars(range(min = 16, max = 32000))]
    pub summary_max_tokens: u32,
    /// The final summary is cut to this many characters before it enters the conversation.
    #[schemars(range(min = 16, max = 1000000))]
    pub max_summary_chars: usize,
    /// Each of the two snippets (first and last message) in a pending summary's preview is
    /// cut to this many characters.
    #[schemars(range(min = 0, max = 100000))]
    pub preview_chars: usize,
    /// Each text, tool input and tool result is cut to this many characters in the prompt
    /// (0: no cut).
    #[schemars(range(min = 0, max = 10000000))]
    pub max_block_chars: usize,
    /// The system text of every summary request.
    pub system_prompt: String,
    /// The user prompt of every summary request. Placeholders: `{messages}` (required),
    /// `{count}`, `{label}`; write `{{` and `}}` for literal braces.
    pub prompt_template: String,
    /// This stage's final summaries at the start of the compactable range stay in place,
    /// byte for byte, while their narratives together take at most this share of the
    /// budget's `max_tokens` (so the prefix, and the provider's prompt cache, holds across
    /// compactions); past it, when the conversation is to be compacted, they are folded into
    /// one: archived as a page behind a pending summary whose request is deferred like any
    /// other. `1` folds only summaries that alone take the whole budget.
    #[schemars(range(min = 0.0, max = 1.0))]
    pub keep_summaries_share: f64,
    /// The ledger each pending summary carries from the start, and its final summary after
    /// the answer: the user's words, the decisions stated, the files written and the open
    /// errors, verbatim (`sdk::ledger`). `enabled = false` turns it off, `max_share` caps it
    /// as a share of the budget.
    pub ledger: LedgerConfig,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            compact_when: CompactWhen::OverBudget,
            min_messages: 8,
            max_page_messages: 200,
            summary_max_tokens: 400,
            max_summary_chars: 2_000,
            preview_chars: 400,
            max_block_chars: 4_000,
            system_prompt: DEFAULT_SYSTEM_PROMPT.into(),
            prompt_template: DEFAULT_PROMPT_TEMPLATE.into(),
            keep_summaries_share: 0.2,
            ledger: LedgerConfig::default(),
        }
    }
}

impl Config {
    /// The checks the schema cannot express; errors name the field.
    pub fn validate(&self) -> Result<(), PluginError> {
        self.prompt_template()?;
        self.ledger.validate()?;
        sdk::config::check_share("keep_summaries_share", self.keep_summaries_share)?;
        if self.max_page_messages < self.min_messages {
            return Err(PluginError::invalid_config(format!(
                "max_page_messages: must be at least min_messages ({} < {})",
                self.max_page_messages, self.min_messages
            )));
        }
        Ok(())
    }

    /// The prompt template, its placeholders checked (`sdk::prompt::Template`): `{messages}`
    /// is required, since a template that drops the messages would summarize nothing.
    pub fn prompt_template(&self) -> Result<Template, PluginError> {
        Template::new(
            "prompt_template",
            &self.prompt_template,
            &["messages", "count", "label"],
        )?
        .require("messages")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid_and_bad_templates_are_named() {
        Config::default().validate().unwrap();
        let missing = Config {
            prompt_template: "no material".into(),
            ..Config::default()
        };
        let e = missing.validate().unwrap_err();
        assert!(e.message.contains("prompt_template"), "{e}");
        let typo = Config {
            prompt_template: "{messages} {cuont}".into(),
            ..Config::default()
        };
        assert!(typo.validate().unwrap_err().message.contains("cuont"));
        let pages = Config {
            max_page_messages: 2,
            ..Config::default()
        };
        assert!(pages
            .validate()
            .unwrap_err()
            .message
            .contains("max_page_messages"));
        let share = Config {
            keep_summaries_share: 1.5,
            ..Config::default()
        };
        assert!(share
            .validate()
            .unwrap_err()
            .message
            .contains("keep_summaries_share"));
    }
}
