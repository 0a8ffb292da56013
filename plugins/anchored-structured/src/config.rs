//! The stage config (`[stage.config]` in a chain file) and the rules its schema cannot express.

use tamp_plugin_api::prelude::*;
pub use tamp_plugin_api::sdk::incremental::Reuse;
pub use tamp_plugin_api::sdk::ledger::LedgerConfig;

/// The stage config. Every key is optional; see `docs/plugins/anchored-structured.md`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(crate = "tamp_plugin_api::serde", deny_unknown_fields, default)]
#[schemars(crate = "tamp_plugin_api::schemars")]
pub struct Config {
    /// Ask for the typed summary first (`false`: start at the prose fallback).
    pub structured: bool,
    /// Content above this many tokens is cut into chunks of at most this many, summarized as
    /// prose concurrently, then consolidated by one structured call.
    #[schemars(range(min = 256))]
    pub chunk_tokens: u64,
    /// At most this many of this stage's LLM calls at once.
    #[schemars(range(min = 1, max = 1024))]
    pub max_concurrency: usize,
    /// The summary is cut to this many characters, on every path (its sections are cut, the
    /// ledger is kept whole).
    #[schemars(range(min = 500))]
    pub max_summary_chars: usize,
    /// Each tool call's input and each tool result is shown to the model cut to about this
    /// many characters, its head and its tail (0: whole, up to 4,000). The page keeps them
    /// whole, and the ledger takes the files written and the errors from the messages
    /// themselves; what the model reads is most of a small local model's time.
    pub max_tool_chars: usize,
    /// Each text the assistant wrote is shown to the model cut to about this many characters,
    /// its head and its tail (0: whole, up to 4,000). The user's words are shown whole, and
    /// the ledger takes the decisions from the messages themselves.
    pub max_assistant_chars: usize,
    /// An extra instruction added to every prompt, e.g. "keep every error message verbatim".
    pub extra_instruction: Option<String>,
    /// When the host has cached the summary of a leading part of the span (a client that
    /// resends its whole history): `merge` summarizes only the new messages with that summary
    /// shown to the model, `append` summarizes them without it, and either way the cached
    /// sections are merged under the new ones; `off` summarizes the whole span every time.
    pub reuse: Reuse,
    /// The ledger appended to every summary: the user's words, the decisions stated, the
    /// files written and the open errors, verbatim (`sdk::ledger`). While it is on, the model
    /// is not asked for `files_modified` and `decisions_made`: the ledger holds them.
    /// `enabled = false` turns it off, `max_share` caps it as a share of the budget.
    pub ledger: LedgerConfig,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            structured: true,
            chunk_tokens: 6_144,
            max_concurrency: 4,
            max_summary_chars: 16_000,
            max_tool_chars: 200,
            max_assistant_chars: 1_000,
            extra_instruction: None,
            reuse: Reuse::Merge,
            ledger: LedgerConfig::default(),
        }
    }
}

impl Config {
    /// Checks what the schema cannot (or what a caller building a `Config` in Rust skipped);
    /// the error names the field.
    pub fn validate(&self) -> Result<(), PluginError> {
        if self.chunk_tokens < 256 {
            return Err(PluginError::invalid_config(
                "chunk_tokens: must be at least 256",
            ));
        }
        if self.max_concurrency == 0 {
            return Err(PluginError::invalid_config(
                "max_concurrency: must be at least 1",
            ));
        }
        self.ledger.validate()?;
        // Below this the head and tail say nothing of what a call did.
        for (field, value) in [
            ("max_tool_chars", self.max_tool_chars),
            ("max_assistant_chars", self.max_assistant_chars),
        ] {
            if value != 0 && value < 100 {
                return Err(PluginError::invalid_config(format!(
                    "{field}: must be 0 (whole) or at least 100"
                )));
            }
        }
        // Room for the header, the line naming the page and a little content.
        if self.max_summary_chars < 500 {
            return Err(PluginError::invalid_config(
                "max_summary_chars: must be at least 500",
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid_and_as_documented() {
        let c = Config::default();
        c.validate().unwrap();
        assert!(c.structured);
        assert_eq!((c.chunk_tokens, c.max_concurrency), (6_144, 4));
        assert_eq!(c.max_summary_chars, 16_000);
        assert_eq!((c.max_tool_chars, c.max_assistant_chars), (200, 1_000));
        assert!(c.extra_instruction.is_none());
        assert_eq!(c.reuse, Reuse::Merge);
    }

    #[test]
    fn parses_and_rejects_unknown_keys_and_bad_values() {
        let c: Config = tamp_plugin_api::parse_config(
            r#"{"structured": false, "extra_instruction": "keep every error message"}"#,
        )
        .unwrap();
        assert!(!c.structured);
        assert!(tamp_plugin_api::parse_config::<Config>(r#"{"chunk_token": 1}"#).is_err());
        let bad = Config {
            max_concurrency: 0,
            ..Config::default()
        };
        assert!(bad
            .validate()
            .unwrap_err()
            .message
            .starts_with("max_concurrency"));
        let tiny = Config {
            max_tool_chars: 99,
            ..Config::default()
        };
        assert!(tiny
            .validate()
            .unwrap_err()
            .message
            .starts_with("max_tool_chars"));
        let whole = Config {
            max_tool_chars: 0,
            ..Config::default()
        };
        whole.validate().unwrap();
    }
}
