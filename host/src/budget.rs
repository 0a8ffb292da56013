//! The chain file's `[budget]`: how many tokens a conversation may hold, and the watermarks
//! between which a compaction brings it.

use serde::{Deserialize, Serialize};
use tamp_plugin_api::sdk::ledger;
use tamp_plugin_api::Message;

use crate::config_error::FieldError;
use crate::tokens::TokenCounter;

/// `[budget]`: watermarks are fractions of `max_tokens`.
#[derive(Debug, Clone, Copy, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct BudgetConfig {
    pub max_tokens: u64,
    pub high_watermark: f64,
    pub low_watermark: f64,
    pub keep_recent: u32,
    /// Bounds the protected tail in tokens too: of the last `keep_recent` messages, only the
    /// newest whole tool exchanges that fit in this many tokens are protected (the newest
    /// exchange always is). Unset: an eighth of `max_tokens` ([`Self::tail_token_limit`]);
    /// 0: the tail is bounded by `keep_recent` alone.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub keep_recent_tokens: Option<u64>,
    /// Leave the summaries' ledgers out of what the watermarks measure, up to the room between
    /// the high watermark and `max_tokens` (so a context still never passes `max_tokens`): a
    /// compaction then frees as much room for new turns as one without a ledger, and the
    /// ledger's verbatim facts do not make compactions come sooner.
    pub ledgers_outside: bool,
}

impl Default for BudgetConfig {
    fn default() -> Self {
        BudgetConfig {
            max_tokens: 128_000,
            high_watermark: 0.75,
            low_watermark: 0.5,
            keep_recent: 10,
            keep_recent_tokens: None,
            ledgers_outside: false,
        }
    }
}

impl BudgetConfig {
    pub fn high_tokens(&self) -> u64 {
        (self.max_tokens as f64 * self.high_watermark) as u64
    }

    pub fn low_tokens(&self) -> u64 {
        (self.max_tokens as f64 * self.low_watermark) as u64
    }

    /// The most tokens the protected recent tail may hold, if bounded: `keep_recent_tokens`,
    /// by default an eighth of `max_tokens`. A compaction brings the context down to the low
    /// watermark; a tail of 16 long tool results can fill that alone, and then every request
    /// compacts again. An eighth leaves the low watermark's other three quarters (at the
    /// default 0.5) for the system prompt, the task and the summaries.
    pub fn tail_token_limit(&self) -> Option<u64> {
        match self.keep_recent_tokens {
            Some(0) => None,
            Some(limit) => Some(limit),
            None => Some((self.max_tokens / 8).max(1)),
        }
    }

    /// The tokens the watermarks leave out of `messages`: the ledgers of its summaries, as
    /// far as [`Self::ledgers_outside`] leaves them out ([`Self::ledger_room_for`]).
    pub fn ledger_room(&self, messages: &[Message], tokens: &TokenCounter) -> u64 {
        if !self.ledgers_outside {
            return 0;
        }
        let ledgers = ledger::tokens_in_by(messages, &|text| tokens.count_text(text));
        self.ledger_room_for(ledgers)
    }

    /// The tokens the watermarks leave out of a conversation whose summaries' ledgers take
    /// `ledger_tokens`: none unless [`Self::ledgers_outside`], and at most the room between
    /// the high watermark and `max_tokens`.
    pub fn ledger_room_for(&self, ledger_tokens: u64) -> u64 {
        if !self.ledgers_outside {
            return 0;
        }
        ledger_tokens.min(self.max_tokens.saturating_sub(self.high_tokens()))
    }

    /// Checks the budget's own rules; the error names the field.
    pub fn validate(&self) -> Result<(), FieldError> {
        let error = |key, message| Err(FieldError::new("budget", key, message));
        if self.max_tokens == 0 {
            return error("max_tokens", "must be greater than 0".into());
        }
        for (key, v) in [
            ("high_watermark", self.high_watermark),
            ("low_watermark", self.low_watermark),
        ] {
            if v.is_nan() || v <= 0.0 || v > 1.0 {
                return error(
                    key,
                    format!("must be a fraction of max_tokens in (0, 1], got {v}"),
                );
            }
        }
        if self.low_watermark >= self.high_watermark {
            return error(
                "low_watermark",
                format!(
                    "must be below high_watermark ({} >= {})",
                    self.low_watermark, self.high_watermark
                ),
            );
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ledgers_left_out_of_the_watermarks_never_let_a_context_pass_max_tokens() {
        let off = BudgetConfig {
            max_tokens: 8_000,
            ..BudgetConfig::default()
        };
        assert_eq!(off.ledger_room_for(1_500), 0, "off by default");
        let on = BudgetConfig {
            ledgers_outside: true,
            ..off
        };
        assert_eq!(on.ledger_room_for(1_500), 1_500);
        // The high watermark (6,000) plus what is left out stays within max_tokens.
        assert_eq!(on.ledger_room_for(2_500), 2_000);
        let full = BudgetConfig {
            high_watermark: 1.0,
            low_watermark: 0.5,
            ..on
        };
        assert_eq!(full.ledger_room_for(1_500), 0);
    }
}
