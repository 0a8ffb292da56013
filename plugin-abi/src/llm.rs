//! LLM requests a plugin asks the host to make, and their answers.

use abi_stable::std_types::{ROption, RString};
use abi_stable::StableAbi;
use serde::{Deserialize, Serialize};

/// A single-turn LLM request. The host picks the provider and model from its config.
#[repr(C)]
#[derive(StableAbi, Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LlmRequest {
    /// System instructions (may be empty).
    pub system: RString,
    /// The user turn: instructions and the material to work on.
    pub prompt: RString,
    /// Upper bound on the answer's length, in tokens.
    pub max_output_tokens: u32,
    /// Sampling temperature; `RNone` leaves the provider's default.
    pub temperature: ROption<f32>,
    /// A JSON Schema the answer must satisfy (structured output), or `RNone` for free text.
    pub response_schema_json: ROption<RString>,
    /// A short label for logs and progress events ("group 3/12").
    pub label: RString,
}

impl LlmRequest {
    pub fn new(
        system: impl Into<RString>,
        prompt: impl Into<RString>,
        max_output_tokens: u32,
    ) -> Self {
        LlmRequest {
            system: system.into(),
            prompt: prompt.into(),
            max_output_tokens,
            temperature: ROption::RNone,
            response_schema_json: ROption::RNone,
            label: RString::new(),
        }
    }

    pub fn with_label(mut self, label: impl Into<RString>) -> Self {
        self.label = label.into();
        self
    }
}

/// Token usage of one call. Fields a provider does not report are 0.
#[repr(C)]
#[derive(StableAbi, Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub cache_read_tokens: u64,
    pub cache_write_tokens: u64,
}

impl Usage {
    /// Adds `other`'s counts, saturating: they come from providers' answers, which may say
    /// anything a `u64` holds.
    pub fn add(&mut self, other: &Usage) {
        self.input_tokens = self.input_tokens.saturating_add(other.input_tokens);
        self.output_tokens = self.output_tokens.saturating_add(other.output_tokens);
        self.cache_read_tokens = self
            .cache_read_tokens
            .saturating_add(other.cache_read_tokens);
        self.cache_write_tokens = self
            .cache_write_tokens
            .saturating_add(other.cache_write_tokens);
    }
}

/// The answer to an [`LlmRequest`].
#[repr(C)]
#[derive(StableAbi, Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LlmResponse {
    pub text: RString,
    /// The validated JSON answer when the request had a schema.
    pub structured_json: ROption<RString>,
    pub usage: Usage,
    /// The provider and model that answered, e.g. `extractive` or `anthropic/claude-...`.
    pub model: RString,
    /// Why generation stopped, as the provider said it (an open set: `end_turn`, `max_tokens`...).
    pub stop_reason: RString,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn usage_from_an_answer_that_claims_the_most_tokens_saturates() {
        let huge = Usage {
            input_tokens: u64::MAX,
            output_tokens: 1,
            cache_read_tokens: 0,
            cache_write_tokens: u64::MAX,
        };
        let mut total = Usage::default();
        total.add(&huge);
        total.add(&huge);
        assert_eq!(total.input_tokens, u64::MAX);
        assert_eq!(total.output_tokens, 2);
        assert_eq!(total.cache_write_tokens, u64::MAX);
    }
}
