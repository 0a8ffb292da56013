//! The stage config (`[stage.config]` in a chain file) and its checks.

use tamp_plugin_api::prelude::*;

/// The placeholders a prompt template may use, with what each stands for.
pub const PLACEHOLDERS: [(&str, &str); 3] = [
    (
        "calls",
        "the group's tool calls: each tool, its input and its result",
    ),
    ("tools", "the tools called, e.g. `bash ×2, read_file`"),
    ("exchanges", "how many tool exchanges the group holds"),
];

/// The default system text of every summary request.
pub const DEFAULT_SYSTEM_PROMPT: &str = "You condense an AI agent's tool calls into brief, \
factual notes that the agent will read instead of the calls themselves.";

/// The default prompt. The material sits inside `<content>` tags, tamp's convention, so that
/// providers that do not follow instructions (the offline extractive summarizer) know what to
/// work on.
pub const DEFAULT_PROMPT_TEMPLATE: &str = "\
Below are {exchanges} tool exchange(s) from an AI agent's working session (tools: {tools}). \
Each shows the tool called, its input, and the result it returned or the error it raised.

Write a short summary the agent can rely on later in place of these calls: what was learned, \
what matters for its task (findings, the decisions they support, errors and their causes), \
and the exact identifiers it may need again (file paths, names, ids, numbers, commands). \
Leave out raw output that is no longer needed. Answer with the summary only.

<content>
{calls}</content>";

/// How the strategy buffers tool exchanges and summarizes them.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(crate = "tamp_plugin_api::serde", deny_unknown_fields, default)]
#[schemars(crate = "tamp_plugin_api::schemars")]
pub struct Config {
    /// A tool exchange becomes eligible for summarizing once at least this many messages
    /// follow it.
    #[schemars(range(min = 0, max = 1000000))]
    pub messages_old_threshold: usize,
    /// Size trigger: summarize once at least this many tool exchanges are eligible.
    #[schemars(range(min = 1, max = 1000000))]
    pub min_tool_calls_to_summarize: usize,
    /// Age trigger: summarize once any eligible tool exchange has at least this many messages
    /// after it, however few are eligible.
    #[schemars(range(min = 0, max = 1000000))]
    pub max_tool_call_distance: usize,
    /// Tool exchanges smaller than this many tokens are never buffered: their summary would
    /// hardly be smaller than they are. Like a user turn, such an exchange ends a run of
    /// adjacent exchanges.
    #[schemars(range(min = 0, max = 1000000))]
    pub min_exchange_tokens: u64,
    /// Adjacent tool exchanges summarized together in one LLM call.
    #[schemars(range(min = 1, max = 1000))]
    pub group_size: usize,
    /// At most this many group summaries are requested at once.
    #[schemars(range(min = 1, max = 1024))]
    pub max_concurrency: usize,
    /// When any group fails, replace nothing (instead of leaving only the failed groups as
    /// they were).
    pub all_or_nothing: bool,
    /// Each LLM summary is cut to this many characters before it enters the conversation.
    #[schemars(range(min = 16, max = 1000000))]
    pub max_summary_chars: usize,
    /// Upper bound on each summary's length asked of the LLM, in tokens; never more than half
    /// the tokens of the group it summarizes.
    #[schemars(range(min = 16, max = 32000))]
    pub summary_max_tokens: u32,
    /// Each text, tool input and tool result is cut to this many characters in the prompt
    /// (0: no cut).
    #[schemars(range(min = 0, max = 10000000))]
    pub max_block_chars: usize,
    /// The system text of every summary request.
    pub system_prompt: String,
    /// The user prompt of every summary request. Placeholders: `{calls}` (required),
    /// `{tools}`, `{exchanges}`; write `{{` and `}}` for literal braces.
    pub prompt_template: String,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            messages_old_threshold: 20,
            min_tool_calls_to_summarize: 10,
            max_tool_call_distance: 40,
            min_exchange_tokens: 100,
            group_size: 1,
            max_concurrency: 8,
            all_or_nothing: false,
            max_summary_chars: 1_500,
            summary_max_tokens: 400,
            max_block_chars: 4_000,
            system_prompt: DEFAULT_SYSTEM_PROMPT.to_string(),
            prompt_template: DEFAULT_PROMPT_TEMPLATE.to_string(),
        }
    }
}

impl Config {
    /// Checks what the schema cannot express. Done when the stage is built, so a bad config
    /// stops the chain from loading instead of failing at the first compaction.
    pub fn validate(&self) -> Result<(), PluginError> {
        // The schema bounds these too, but a config built in Rust skips the schema.
        for (field, value) in [
            (
                "min_tool_calls_to_summarize",
                self.min_tool_calls_to_summarize,
            ),
            ("group_size", self.group_size),
            ("max_concurrency", self.max_concurrency),
            ("max_summary_chars", self.max_summary_chars),
        ] {
            if value == 0 {
                return Err(PluginError::invalid_config(format!(
                    "{field}: must be at least 1"
                )));
            }
        }
        self.prompt_template().map(drop)
    }

    /// The prompt template, its placeholders checked (`sdk::prompt::Template`): `{calls}` is
    /// required, since a template that drops the calls would summarize nothing.
    pub fn prompt_template(&self) -> Result<Template, PluginError> {
        Template::new(
            "prompt_template",
            &self.prompt_template,
            &PLACEHOLDERS.map(|(name, _)| name),
        )?
        .require("calls")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid() {
        Config::default().validate().unwrap();
    }

    #[test]
    fn template_errors_name_the_field_and_the_fault() {
        let with = |template: &str| Config {
            prompt_template: template.into(),
            ..Config::default()
        };
        let err = with("{calls} {tool}").validate().unwrap_err();
        assert_eq!(err.kind, ErrorKind::InvalidConfig);
        assert!(
            err.message
                .starts_with("prompt_template: unknown placeholder {tool}"),
            "{}",
            err.message
        );
        assert!(err.message.contains("{tools}"), "{}", err.message);
        let err = with("summarize {tools}").validate().unwrap_err();
        assert!(
            err.message.contains("must contain {calls}"),
            "{}",
            err.message
        );
        assert!(with("{calls").validate().is_err());
        with("{{json}} {calls} {exchanges} {tools}")
            .validate()
            .unwrap();
    }

    #[test]
    fn zero_sizes_are_refused() {
        let err = Config {
            group_size: 0,
            ..Config::default()
        }
        .validate()
        .unwrap_err();
        assert!(err.message.starts_with("group_size:"), "{}", err.message);
    }
}
