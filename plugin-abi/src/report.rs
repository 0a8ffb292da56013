//! What a stage reports about its run.

use abi_stable::std_types::{RString, RVec};
use abi_stable::StableAbi;
use serde::{Deserialize, Serialize};

/// A plugin's account of one compaction: what it decided and why. The host counts the LLM
/// calls and tokens itself, from the calls it served, and the pages, removed messages and
/// summaries from the edits it applied.
#[repr(C)]
#[derive(StableAbi, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct StageReport {
    /// Whether the stage changed the conversation.
    pub acted: bool,
    /// What it did and why, or why it did nothing (e.g. "3 exchanges eligible, 10 needed").
    pub reason: RString,
    /// Things that went partly wrong without failing the stage (one group's failed call...).
    pub warnings: RVec<RString>,
    /// Plugin-specific details as a JSON object, or empty.
    pub details_json: RString,
}

impl StageReport {
    pub fn skipped(reason: impl Into<String>) -> Self {
        StageReport {
            acted: false,
            reason: RString::from(reason.into()),
            ..Default::default()
        }
    }

    pub fn acted(reason: impl Into<String>) -> Self {
        StageReport {
            acted: true,
            reason: RString::from(reason.into()),
            ..Default::default()
        }
    }

    pub fn warn(&mut self, warning: impl Into<String>) {
        self.warnings.push(RString::from(warning.into()));
    }
}
