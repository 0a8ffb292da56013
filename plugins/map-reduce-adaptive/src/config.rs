//! The stage config (`[stage.config]` in a chain file) and the rules its schema cannot express.

use tamp_plugin_api::prelude::*;
use tamp_plugin_api::sdk::chunk::ChunkOptions;
pub use tamp_plugin_api::sdk::incremental::Reuse;
pub use tamp_plugin_api::sdk::ledger::LedgerConfig;
use tamp_plugin_api::sdk::length;

/// What the material is, which decides what the prompts ask to keep.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(crate = "tamp_plugin_api::serde", rename_all = "snake_case")]
#[schemars(crate = "tamp_plugin_api::schemars")]
pub enum ContentType {
    /// An agent's conversation with a user and its tools: keeps preferences, decisions,
    /// action items and the facts the work depends on.
    #[default]
    Conversation,
    /// A document: keeps its points in order, definitions, figures and names.
    Document,
    /// Journal entries or logs: keeps what happened when, in time order, and follow-ups.
    Journal,
    /// Anything else: keeps the main points and the specific facts.
    General,
}

impl ContentType {
    pub fn as_str(self) -> &'static str {
        match self {
            ContentType::Conversation => "conversation",
            ContentType::Document => "document",
            ContentType::Journal => "journal",
            ContentType::General => "general",
        }
    }
}

/// The stage config. Every key is optional; see `docs/plugins/map-reduce-adaptive.md`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(crate = "tamp_plugin_api::serde", deny_unknown_fields, default)]
#[schemars(crate = "tamp_plugin_api::schemars")]
pub struct Config {
    /// Content of fewer tokens than this is left alone (level `none`).
    pub none_below: u64,
    /// Content of fewer tokens than this (and at least `none_below`) gets one call for a
    /// one-sentence brief (level `brief`); more gets map-reduce.
    pub brief_below: u64,
    /// The most tokens in one chunk of the map step, overlap included.
    #[schemars(range(min = 1))]
    pub chunk_size: u64,
    /// Tokens each chunk repeats from the end of the one before (at most half of
    /// `chunk_size`).
    pub chunk_overlap: u64,
    /// At most this many of this stage's LLM calls at once.
    #[schemars(range(min = 1, max = 1024))]
    pub max_concurrency: usize,
    /// Summaries are collapsed (summarized in groups of at most this many tokens) until
    /// together they fit in this many tokens; then the final synthesis runs.
    #[schemars(range(min = 1))]
    pub token_max: u64,
    /// The most collapse rounds; past it a warning is logged and the synthesis runs anyway.
    pub max_collapse_depth: u32,
    /// What the material is: `conversation`, `document`, `journal` or `general`.
    pub content_type: ContentType,
    /// The shortest length asked of any summary, in tokens.
    #[schemars(range(min = 1))]
    pub min_summary_tokens: u32,
    /// The longest length asked of any summary, in tokens (the final summary included).
    #[schemars(range(min = 1))]
    pub max_summary_tokens: u32,
    /// Cut each text, tool input and tool result to this many characters before summarizing
    /// (0: summarize everything).
    pub max_block_chars: usize,
    /// When the host has cached the summary of a leading part of the content (a client that
    /// resends its whole history): `merge` summarizes only the new messages with that
    /// summary as context, `append` summarizes them alone and appends, `off` summarizes
    /// everything again.
    pub reuse: Reuse,
    /// Earlier summaries at the start of the span stay in place, byte for byte, while
    /// together they take at most this share of the budget's `max_tokens`: the new summary
    /// goes after them, so the conversation's prefix (and the provider's prompt cache) holds
    /// across compactions. Past it they are folded into the new summary. 0 always folds.
    #[schemars(range(min = 0.0, max = 1.0))]
    pub keep_summaries_share: f64,
    /// The ledger appended to every summary: the user's words, the decisions stated, the
    /// files written and the open errors, verbatim (`sdk::ledger`); `enabled = false` turns
    /// it off, `max_share` caps it as a share of the budget.
    pub ledger: LedgerConfig,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            none_below: 100,
            brief_below: 500,
            chunk_size: 6_144,
            chunk_overlap: 200,
            max_concurrency: 5,
            token_max: 3_000,
            max_collapse_depth: 10,
            content_type: ContentType::Conversation,
            min_summary_tokens: 50,
            max_summary_tokens: 500,
            max_block_chars: 0,
            reuse: Reuse::Merge,
            keep_summaries_share: 0.2,
            ledger: LedgerConfig::default(),
        }
    }
}

impl Config {
    pub fn chunk_options(&self) -> ChunkOptions {
        ChunkOptions {
            chunk_size: self.chunk_size,
            chunk_overlap: self.chunk_overlap,
        }
    }

    /// Checks what the schema cannot; the error names the field.
    pub fn validate(&self) -> Result<(), PluginError> {
        self.chunk_options()
            .validate()
            .map_err(PluginError::invalid_config)?;
        if self.none_below > self.brief_below {
            return Err(PluginError::invalid_config(format!(
                "brief_below: must be at least none_below ({} < {})",
                self.brief_below, self.none_below
            )));
        }
        sdk::config::check_share("keep_summaries_share", self.keep_summaries_share)?;
        if self.max_concurrency == 0 {
            return Err(PluginError::invalid_config(
                "max_concurrency: must be at least 1",
            ));
        }
        self.ledger.validate()?;
        if self.min_summary_tokens == 0 || self.min_summary_tokens > self.max_summary_tokens {
            return Err(PluginError::invalid_config(format!(
                "min_summary_tokens: must be between 1 and max_summary_tokens ({} > {})",
                self.min_summary_tokens, self.max_summary_tokens
            )));
        }
        // Each collapse group must hold at least two summaries of the longest asked length,
        // or collapsing would not shrink the list.
        if self.token_max < 2 * u64::from(self.max_summary_tokens) {
            return Err(PluginError::invalid_config(format!(
                "token_max: must be at least twice max_summary_tokens ({} < 2 × {})",
                self.token_max, self.max_summary_tokens
            )));
        }
        Ok(())
    }

    /// The length asked of a summary of `input_tokens` tokens: a tenth, within
    /// `min_summary_tokens..=max_summary_tokens`.
    pub fn summary_target(&self, input_tokens: u64) -> u32 {
        length::target(
            input_tokens,
            self.min_summary_tokens,
            self.max_summary_tokens,
        )
    }

    /// The length asked of the final summary: the prior summary's length plus a tenth of the
    /// new content, within the same bounds, so a summary that has accumulated facts over many
    /// compactions is not squeezed by a small addition.
    pub fn final_target(&self, prior_tokens: u64, content_tokens: u64) -> u32 {
        let wanted = prior_tokens.saturating_add(content_tokens / 10);
        let wanted = u32::try_from(wanted).unwrap_or(u32::MAX);
        wanted.clamp(self.min_summary_tokens, self.max_summary_tokens)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid_and_as_documented() {
        let c = Config::default();
        c.validate().unwrap();
        assert_eq!(
            (c.none_below, c.brief_below, c.chunk_size, c.chunk_overlap),
            (100, 500, 6144, 200)
        );
        assert_eq!(
            (c.max_concurrency, c.token_max, c.max_collapse_depth),
            (5, 3000, 10)
        );
        assert_eq!(c.content_type, ContentType::Conversation);
    }

    #[test]
    fn invalid_combinations_name_the_field() {
        let bad = |c: Config| c.validate().unwrap_err().message.to_string();
        assert!(bad(Config {
            chunk_overlap: 3500,
            ..Config::default()
        })
        .starts_with("chunk_overlap"));
        assert!(bad(Config {
            none_below: 600,
            ..Config::default()
        })
        .starts_with("brief_below"));
        assert!(bad(Config {
            min_summary_tokens: 600,
            ..Config::default()
        })
        .starts_with("min_summary_tokens"));
        assert!(bad(Config {
            token_max: 900,
            ..Config::default()
        })
        .starts_with("token_max"));
    }

    #[test]
    fn summary_target_is_a_tenth_clamped() {
        let c = Config::default();
        assert_eq!(c.summary_target(100), 50);
        assert_eq!(c.summary_target(2048), 204);
        assert_eq!(c.summary_target(100_000), 500);
        assert_eq!(c.final_target(0, 100_000), 500);
        assert_eq!(c.final_target(300, 1_000), 400);
        assert_eq!(c.final_target(0, 600), 60);
    }

    #[test]
    fn config_parses_from_json_and_rejects_unknown_keys() {
        let c: Config = tamp_plugin_api::parse_config(
            r#"{"content_type": "journal", "chunk_size": 1000, "chunk_overlap": 100}"#,
        )
        .unwrap();
        assert_eq!(c.content_type, ContentType::Journal);
        assert_eq!(c.chunk_size, 1000);
        let e = tamp_plugin_api::parse_config::<Config>(r#"{"chunk_sizes": 1}"#).unwrap_err();
        assert!(e.message.contains("chunk_sizes"), "{}", e.message);
    }
}
