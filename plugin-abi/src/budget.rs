//! The token budget a chain works within, as absolute token counts.

use abi_stable::StableAbi;
use serde::{Deserialize, Serialize};

/// What a stage must aim for. The host resolves the chain file's watermarks to token counts.
#[repr(C)]
#[derive(StableAbi, Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Budget {
    /// The target model's context window, in tokens.
    pub max_tokens: u64,
    /// Compaction starts when the conversation is above this many tokens.
    pub high_watermark: u64,
    /// Compaction aims to bring the conversation below this many tokens.
    pub low_watermark: u64,
    /// The newest messages no stage may touch.
    pub keep_recent: u32,
    /// The conversation's size in tokens as this stage receives it.
    pub current_tokens: u64,
}

impl Budget {
    /// Tokens to remove to get under the low watermark (0 when already under).
    pub fn excess_tokens(&self) -> u64 {
        self.current_tokens.saturating_sub(self.low_watermark)
    }
}
