//! The chain file's `[budget]`: how many tokens a conversation may hold, and the watermarks
//! between which a compaction brings it.

use serde::{Deserialize, Serialize};

use crate::config_error::FieldError;

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
}

impl Default for BudgetConfig {
    fn default() -> Self {
        BudgetConfig {
            max_tokens: 128_000,
            high_watermark: 0.75,
            low_watermark: 0.5,
            keep_recent: 10,
            keep_recent_tokens: None,
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
