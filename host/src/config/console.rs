//! The chain file's `[console]` table: what `tamp serve` and `tamp proxy` record of each
//! request for their console (and `/tamp/v1/threads`), how long it is kept, and the main
//! model's prices its savings are reckoned at. Reloaded with the chain.
//!
//! It lives beside the assembler for the reason `[proxy]` does: the console reads the
//! assembled file through the reloadable chain slot.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::proxy::longest_match;
use crate::config_error::FieldError;
use crate::prices::CachePrices;

/// `[console]`.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct ConsoleConfig {
    /// Record each request (its thread, model, tokens, what the chain did, the upstream's
    /// answer) in the store, where every replica's console reads it.
    pub record: bool,
    /// Requests, compactions and threads not seen for this long are deleted (days).
    pub retention_days: f64,
    /// At most this many requests are kept; the oldest go first.
    pub max_requests: u64,
    /// The main model's prices by model-name pattern (`*` matches any run of characters; the
    /// longest matching pattern wins): what the savings view reckons money at.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub prices: BTreeMap<String, ModelPrice>,
}

/// One model pattern's prices in `[console.prices]`.
#[derive(Debug, Clone, Copy, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ModelPrice {
    /// US dollars per million input tokens.
    pub input_per_mtok: f64,
    /// A cache read and a cache write as multiples of the input price (`tamp eval
    /// --cache-prices`); Anthropic's (`"0.1,1.25"`) when not given.
    #[serde(default)]
    pub cache: CachePrices,
}

impl Default for ConsoleConfig {
    fn default() -> Self {
        ConsoleConfig {
            record: true,
            retention_days: 7.0,
            max_requests: 200_000,
            prices: BTreeMap::new(),
        }
    }
}

impl ConsoleConfig {
    /// How long a request is kept, in milliseconds.
    pub fn retention_ms(&self) -> u64 {
        (self.retention_days * 86_400_000.0) as u64
    }

    /// The prices of `model`: the longest pattern it matches, if any.
    pub fn price_of(&self, model: Option<&str>) -> Option<ModelPrice> {
        longest_match(&self.prices, model?).copied()
    }

    /// Checks the table's rules; the error names the key (and the pattern).
    pub fn validate(&self) -> Result<(), FieldError> {
        let days = crate::bounded::scale(self.retention_days, 0.0..=3650.0)
            .map_err(|e| FieldError::new("console", "retention_days", e))?;
        if days <= 0.0 {
            return Err(FieldError::new(
                "console",
                "retention_days",
                "must be greater than 0 (to record nothing, set record = false)",
            ));
        }
        if self.max_requests == 0 {
            return Err(FieldError::new(
                "console",
                "max_requests",
                "must be greater than 0 (to record nothing, set record = false)",
            ));
        }
        for (pattern, price) in &self.prices {
            if pattern.is_empty() {
                return Err(FieldError::new(
                    "console",
                    "prices",
                    "a model pattern cannot be empty (\"*\" matches every model)",
                ));
            }
            crate::bounded::scale(price.input_per_mtok, 0.0..=10_000.0).map_err(|e| {
                FieldError::new(
                    "console",
                    "prices",
                    format!("\"{pattern}\": input_per_mtok {e}"),
                )
            })?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn console(text: &str) -> Result<ConsoleConfig, String> {
        toml::from_str::<ConsoleConfig>(text).map_err(|e| e.to_string())
    }

    #[test]
    fn a_model_takes_the_price_of_the_longest_pattern_it_matches() {
        let c = console(
            "[prices]\n\"claude-*\" = { input_per_mtok = 3.0 }\n\
             \"claude-opus-*\" = { input_per_mtok = 15.0, cache = \"0.1,2\" }\n",
        )
        .unwrap();
        c.validate().unwrap();
        let opus = c.price_of(Some("claude-opus-5-5")).unwrap();
        assert_eq!(opus.input_per_mtok, 15.0);
        assert_eq!(
            opus.cache,
            CachePrices {
                read: 0.1,
                write: 2.0
            }
        );
        let sonnet = c.price_of(Some("claude-sonnet-5")).unwrap();
        assert_eq!(
            (sonnet.input_per_mtok, sonnet.cache),
            (3.0, CachePrices::ANTHROPIC)
        );
        assert_eq!(c.price_of(Some("gpt-5")), None);
        assert_eq!(c.price_of(None), None);
    }

    #[test]
    fn bad_values_are_refused_naming_the_key() {
        let c = console("retention_days = 0").unwrap();
        assert!(c
            .validate()
            .unwrap_err()
            .to_string()
            .starts_with("console.retention_days:"));
        let c = console("max_requests = 0").unwrap();
        assert!(c
            .validate()
            .unwrap_err()
            .to_string()
            .starts_with("console.max_requests:"));
        let c = console("[prices]\n\"gpt-*\" = { input_per_mtok = -1 }").unwrap();
        let e = c.validate().unwrap_err().to_string();
        assert!(
            e.starts_with("console.prices: \"gpt-*\": input_per_mtok"),
            "{e}"
        );
        let e =
            console("[prices]\n\"gpt-*\" = { input_per_mtok = 1, cache = \"0.1\" }").unwrap_err();
        assert!(e.contains("separated by a comma"), "{e}");
        assert!(console("retention = 3")
            .unwrap_err()
            .contains("unknown field"));
    }
}
