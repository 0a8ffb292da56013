//! The chain file's `[batch]`: the deferred-summary worker's pace and the Message Batches
//! account it uses. Built without the `deferred` feature too, so every build reads and checks
//! the table.

use serde::{Deserialize, Serialize};

use crate::bounded;
use crate::config_error::{is_env_var_name, FieldError};

/// `[batch]`: the deferred-summary worker and the Message Batches API it uses (see
/// `crate::deferred`). Model, base URL and key come from `[provider]` when it is
/// `anthropic`; set them here to batch through another account or endpoint.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct BatchConfig {
    /// At most this many requests per batch (the API allows 100,000).
    pub max_batch_requests: usize,
    /// How often queued requests are sent, in seconds (fractions allowed).
    pub submit_interval_secs: f64,
    /// How often open batches are polled, in seconds (fractions allowed).
    pub poll_interval_secs: f64,
    /// Attempts per request: an errored result (of a transient type) or a failed
    /// submission is retried in a later batch until this many attempts were made.
    pub max_attempts: u32,
    /// A request whose batch result was canceled or expired twice is answered by a
    /// synchronous call through `[provider]` instead of failing.
    pub sync_fallback: bool,
    /// A batch still running after this many seconds is canceled; its requests are handled
    /// as expired.
    pub batch_timeout_secs: f64,
    /// The model; default `provider.model` when `provider.kind = "anthropic"`.
    pub model: Option<String>,
    /// The API's base URL; default `provider.base_url`, else the public endpoint.
    pub base_url: Option<String>,
    /// The environment variable holding the key; default `provider.api_key_env`.
    pub api_key_env: Option<String>,
    /// How long a worker holds the items it claimed (to submit them, or to poll their batch)
    /// before another host's worker may take them over: the time after which the queue
    /// work of a replica that died is picked up. Renewed on every pass; must exceed the
    /// longest batch-creation call (provider timeout × attempts).
    pub lease_secs: f64,
}

impl Default for BatchConfig {
    fn default() -> Self {
        BatchConfig {
            max_batch_requests: 100,
            submit_interval_secs: 60.0,
            poll_interval_secs: 60.0,
            max_attempts: 3,
            sync_fallback: true,
            batch_timeout_secs: 86_400.0,
            model: None,
            base_url: None,
            api_key_env: None,
            lease_secs: 300.0,
        }
    }
}

impl BatchConfig {
    /// The checks of `[batch]` on its own; each error names the field (`batch.max_attempts:
    /// ...`). Whether a model and key can be found is checked when a worker is built.
    pub fn validate(&self) -> Result<(), FieldError> {
        let error = |key, message| Err(FieldError::new("batch", key, message));
        if self.max_batch_requests == 0 || self.max_batch_requests > 100_000 {
            return error(
                "max_batch_requests",
                format!(
                    "must be between 1 and 100000 (the API's limit), got {}",
                    self.max_batch_requests
                ),
            );
        }
        for (key, v) in [
            ("submit_interval_secs", self.submit_interval_secs),
            ("poll_interval_secs", self.poll_interval_secs),
            ("batch_timeout_secs", self.batch_timeout_secs),
            ("lease_secs", self.lease_secs),
        ] {
            if let Err(message) = bounded::positive_seconds(v) {
                return error(key, message);
            }
        }
        if self.max_attempts == 0 {
            return error("max_attempts", "must be at least 1".into());
        }
        if let Some(m) = &self.model {
            if m.trim().is_empty() {
                return error("model", "must not be empty".into());
            }
        }
        if let Some(url) = &self.base_url {
            if !(url.starts_with("http://") || url.starts_with("https://")) {
                return error(
                    "base_url",
                    format!("must be an http:// or https:// URL, got \"{url}\""),
                );
            }
        }
        if let Some(var) = &self.api_key_env {
            if !is_env_var_name(var) {
                return error("api_key_env", "must be the name of an environment variable (letters, digits and _), not the key itself".into());
            }
        }
        Ok(())
    }
}
