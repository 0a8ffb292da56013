//! The stage config (`[stage.config]` in a chain file) and its checks. The parameters are
//! those of Anthropic's server-side context editing (`clear_tool_uses_20250919`), with its
//! defaults where they fit a chain; when to act at all is the stage's `trigger` in the chain.

use tamp_plugin_api::prelude::*;

/// The placeholders the note template may use, with what each stands for.
pub const PLACEHOLDERS: [(&str, &str); 3] = [
    ("tool", "the name of the tool whose output was cleared"),
    ("tokens", "the cleared output's size in tokens"),
    ("page", "the id of the page that keeps the original message"),
];

/// The default note inside each placeholder: short, since every cleared result carries it.
pub const DEFAULT_PLACEHOLDER: &str =
    "Output of {tool} ({tokens} tokens) cleared; recall this page to read it.";

/// How the strategy chooses what to clear.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(crate = "tamp_plugin_api::serde", deny_unknown_fields, default)]
#[schemars(crate = "tamp_plugin_api::schemars")]
pub struct Config {
    /// The most recent tool uses whose results (and inputs) are left alone, counted over the
    /// whole conversation. (The chain's protected tail is never touched in any case.)
    #[schemars(range(min = 0, max = 1000000))]
    pub keep: usize,
    /// Clear nothing unless at least this many tokens would go at once: the prompt prefix
    /// then changes rarely, in larger steps, and the main model's prompt cache is broken
    /// less often. 0: clear whatever is eligible.
    #[schemars(range(min = 0, max = 100000000))]
    pub clear_at_least: u64,
    /// Tools whose results are never cleared (e.g. a memory or a plan tool).
    pub exclude_tools: Vec<String>,
    /// Also replace the input of each cleared call by a placeholder (for tools whose inputs
    /// are bulky: file writes, patches).
    pub clear_tool_inputs: bool,
    /// Results smaller than this many tokens are left alone: a placeholder would hardly be
    /// smaller, and clearing them would change the prefix for nothing.
    #[schemars(range(min = 0, max = 100000000))]
    pub min_result_tokens: u64,
    /// The note inside each placeholder. Placeholders: `{tool}`, `{tokens}`, `{page}`; write
    /// `{{` and `}}` for literal braces. The placeholder around it always names the page.
    pub placeholder: String,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            keep: 3,
            clear_at_least: 2_000,
            exclude_tools: Vec::new(),
            clear_tool_inputs: false,
            min_result_tokens: 100,
            placeholder: DEFAULT_PLACEHOLDER.to_string(),
        }
    }
}

impl Config {
    /// Checks what the schema cannot express, when the stage is built, so a bad template
    /// stops the chain from loading instead of failing at the first compaction.
    pub fn validate(&self) -> Result<(), PluginError> {
        self.note_template().map(drop)
    }

    /// The note template, its placeholders checked (`sdk::prompt::Template`).
    pub fn note_template(&self) -> Result<Template, PluginError> {
        Template::new(
            "placeholder",
            &self.placeholder,
            &PLACEHOLDERS.map(|(name, _)| name),
        )
    }
}

/// The note inside the placeholder of a cleared output of `tool`, `tokens` long, kept in
/// `page`: `template` (the config's [`Config::note_template`]) with its [`PLACEHOLDERS`]
/// filled.
pub fn note(template: &Template, tool: &str, tokens: u64, page: &str) -> String {
    template.render(&[
        ("tool", tool),
        ("tokens", &tokens.to_string()),
        ("page", page),
    ])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_note_renders() {
        let config = Config::default();
        config.validate().unwrap();
        assert_eq!(
            note(&config.note_template().unwrap(), "bash", 1234, "pg_1"),
            "Output of bash (1234 tokens) cleared; recall this page to read it."
        );
    }

    #[test]
    fn template_errors_name_the_field() {
        let with = |t: &str| Config {
            placeholder: t.into(),
            ..Config::default()
        };
        let err = with("cleared {tool} {size}").validate().unwrap_err();
        assert_eq!(err.kind, ErrorKind::InvalidConfig);
        assert!(
            err.message
                .starts_with("placeholder: unknown placeholder {size}"),
            "{}",
            err.message
        );
        assert!(with("cleared {").validate().is_err());
        let braces = with("{{{page}}}").note_template().unwrap();
        assert_eq!(note(&braces, "t", 1, "pg_9"), "{pg_9}");
    }
}
