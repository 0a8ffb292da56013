//! Breaks the rules a config cannot reach: TAMP-META-01 (its name and description are empty)
//! and TAMP-CFG-01 (its default config does not satisfy its own schema: `group_size` must be
//! at least 2, the default is 0). It never changes a conversation.

use tamp_plugin_api::prelude::*;

#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(crate = "tamp_plugin_api::serde", deny_unknown_fields, default)]
#[schemars(crate = "tamp_plugin_api::schemars")]
pub struct Config {
    #[schemars(range(min = 2))]
    pub group_size: u32,
}

pub struct BadMetadata;

impl Strategy for BadMetadata {
    type Config = Config;
    const NAME: &'static str = "";
    const DESCRIPTION: &'static str = " ";

    fn new(_config: Config) -> Result<Self, PluginError> {
        Ok(BadMetadata)
    }

    async fn compact(&self, _input: Compaction) -> Result<CompactOutcome, PluginError> {
        Ok(CompactOutcome::unchanged("does nothing"))
    }
}

export_plugin!(BadMetadata);
