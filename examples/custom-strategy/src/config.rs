//! The stage config (`[stage.config]` in a chain file) and the checks its schema cannot
//! express.

use tamp_plugin_api::prelude::*;

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

impl Config {
    /// Checks what the schema cannot (or what a caller building a `Config` in Rust skipped);
    /// the error names the field.
    pub fn validate(&self) -> Result<(), PluginError> {
        if self.min_exchanges == 0 {
            return Err(PluginError::invalid_config(
                "min_exchanges: must be at least 1",
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid_and_zero_minimums_are_refused() {
        Config::default().validate().unwrap();
        let err = Config {
            min_exchanges: 0,
            ..Config::default()
        }
        .validate()
        .unwrap_err();
        assert!(err.message.starts_with("min_exchanges"), "{err}");
    }
}
