//! The chain file's `[proxy]` table: where `tamp proxy` forwards, and what it does when a
//! compaction cannot be had. Reloaded with the chain (a request takes both at once).
//!
//! It lives here rather than beside the proxy because the proxy reads the assembled chain
//! file (through the reloadable chain slot): a table the assembler takes from the module that
//! reads the assembler would close a circle.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::config_error::FieldError;

/// `[proxy]`.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct ProxyConfig {
    /// The Anthropic API's base URL, as `ANTHROPIC_BASE_URL` spells it (no `/v1`): the
    /// request's path is appended whole.
    pub anthropic: String,
    /// The OpenAI-compatible API's base URL, as `OPENAI_BASE_URL` spells it (with its `/v1`):
    /// the request's path is appended less its leading `/v1`.
    pub openai: String,
    /// A compaction that fails or runs out of time answers 502 with tamp's error, instead of
    /// forwarding the original body.
    pub strict: bool,
    /// How long a request waits for its compaction before the original body is forwarded
    /// (seconds). The compaction goes on in the background: its pages are still archived.
    pub compaction_timeout_secs: f64,
    /// Who answers OpenAI's server-side compaction (`POST /v1/responses/compact`, and a
    /// Responses request ending in a `compaction_trigger` item): the upstream, as OpenAI
    /// does, or tamp's own chain, for an upstream that lacks it (vLLM, llama.cpp, Ollama).
    pub openai_compaction: CompactionBy,
}

/// `[proxy] openai_compaction`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum CompactionBy {
    /// Forwarded: the upstream compacts (OpenAI).
    Upstream,
    /// Answered by the proxy with its chain.
    Tamp,
}

impl Default for ProxyConfig {
    fn default() -> Self {
        ProxyConfig {
            anthropic: "https://api.anthropic.com".into(),
            openai: "https://api.openai.com/v1".into(),
            strict: false,
            compaction_timeout_secs: 10.0,
            openai_compaction: CompactionBy::Upstream,
        }
    }
}

impl ProxyConfig {
    pub fn compaction_timeout(&self) -> Duration {
        crate::bounded::saturating_seconds(self.compaction_timeout_secs)
    }

    /// Checks the table's own rules; the error names the field (`proxy.openai: ...`).
    pub fn validate(&self) -> Result<(), FieldError> {
        for (key, url) in [("anthropic", &self.anthropic), ("openai", &self.openai)] {
            let rest = url
                .strip_prefix("http://")
                .or_else(|| url.strip_prefix("https://"));
            match rest {
                Some(rest) if !rest.is_empty() && !rest.starts_with('/') => {}
                _ => {
                    return Err(FieldError::new(
                        "proxy",
                        key,
                        format!(
                            "must be an http:// or https:// URL with a host, got \"{}\"",
                            crate::redact::url(url)
                        ),
                    ))
                }
            }
            if url.contains(['?', '#']) {
                return Err(FieldError::new(
                    "proxy",
                    key,
                    format!(
                        "a base URL takes no query or fragment, got \"{}\"",
                        crate::redact::url(url)
                    ),
                ));
            }
        }
        crate::bounded::positive_seconds(self.compaction_timeout_secs)
            .map_err(|message| FieldError::new("proxy", "compaction_timeout_secs", message))?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_name_the_field() {
        assert!(ProxyConfig::default().validate().is_ok());
        let bad = |change: fn(&mut ProxyConfig)| {
            let mut c = ProxyConfig::default();
            change(&mut c);
            c.validate().unwrap_err().to_string()
        };
        assert!(bad(|c| c.openai = "api.openai.com/v1".into()).starts_with("proxy.openai: "));
        assert!(bad(|c| c.anthropic = "https://".into()).starts_with("proxy.anthropic: "));
        assert!(bad(|c| c.anthropic = "http://h/?x=1".into()).contains("no query"));
        assert!(
            bad(|c| c.compaction_timeout_secs = 0.0).starts_with("proxy.compaction_timeout_secs: ")
        );
        assert!(bad(|c| c.compaction_timeout_secs = f64::NAN).contains("positive"));
        let no_host = ProxyConfig {
            openai: "https://".into(),
            ..ProxyConfig::default()
        };
        let e = no_host.validate().unwrap_err();
        assert_eq!((e.table, e.key), ("proxy", "openai"), "{e}");
    }
}
