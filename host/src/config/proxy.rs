//! The chain file's `[proxy]` table: where `tamp proxy` forwards, and what it does when a
//! compaction cannot be had. Reloaded with the chain (a request takes both at once).
//!
//! It lives here rather than beside the proxy because the proxy reads the assembled chain
//! file (through the reloadable chain slot): a table the assembler takes from the module that
//! reads the assembler would close a circle.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::budget::BudgetConfig;
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
    /// Budgets by the model a request names: an agent that switches model mid-session gets
    /// the window of the model it talks to now.
    #[serde(skip_serializing_if = "ModelBudgets::is_empty")]
    pub models: ModelBudgets,
}

/// `[proxy.models]`: model-name patterns (`*` matches any run of characters) mapped to a
/// budget for the requests that name a matching model. Each budget takes the chain's
/// `[budget]` and changes the keys it gives; the longest matching pattern wins.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(transparent)]
pub struct ModelBudgets(BTreeMap<String, ModelBudget>);

/// One model's budget in `[proxy.models]`: the keys of `[budget]` it changes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ModelBudget {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub high_watermark: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub low_watermark: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub keep_recent: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub keep_recent_tokens: Option<u64>,
}

impl ModelBudget {
    /// `base` with the keys this budget gives.
    fn over(&self, base: &BudgetConfig) -> BudgetConfig {
        BudgetConfig {
            max_tokens: self.max_tokens.unwrap_or(base.max_tokens),
            high_watermark: self.high_watermark.unwrap_or(base.high_watermark),
            low_watermark: self.low_watermark.unwrap_or(base.low_watermark),
            keep_recent: self.keep_recent.unwrap_or(base.keep_recent),
            keep_recent_tokens: self.keep_recent_tokens.or(base.keep_recent_tokens),
            ledgers_outside: base.ledgers_outside,
        }
    }
}

impl ModelBudgets {
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The budget of a request naming `model`: the longest matching pattern's over `base`;
    /// `None` when no pattern matches (or the request names no model): the chain's own.
    pub fn for_model(&self, model: Option<&str>, base: &BudgetConfig) -> Option<BudgetConfig> {
        longest_match(&self.0, model?).map(|budget| budget.over(base))
    }

    /// Every pattern's budget over `base`: what a request whose model is not known yet may be
    /// compacted with, besides `base` itself.
    pub fn all<'a>(&'a self, base: &'a BudgetConfig) -> impl Iterator<Item = BudgetConfig> + 'a {
        self.0.values().map(|budget| budget.over(base))
    }

    /// Checks each pattern's budget over `base` as `[budget]` is checked; the error names the
    /// pattern and the key.
    pub fn validate(&self, base: &BudgetConfig) -> Result<(), FieldError> {
        for (pattern, budget) in &self.0 {
            if pattern.is_empty() {
                return Err(FieldError::new(
                    "proxy",
                    "models",
                    "a model pattern cannot be empty (\"*\" matches every model)",
                ));
            }
            budget.over(base).validate().map_err(|e| {
                FieldError::new(
                    "proxy",
                    "models",
                    format!("\"{pattern}\": {}: {}", e.key, e.message),
                )
            })?;
        }
        Ok(())
    }
}

/// The value of the longest pattern of `patterns` that `model` matches ([`glob_matches`]):
/// how `[proxy.models]` and `[console.prices]` pick a model's entry.
pub(crate) fn longest_match<'a, V>(
    patterns: &'a BTreeMap<String, V>,
    model: &str,
) -> Option<&'a V> {
    patterns
        .iter()
        .filter(|(pattern, _)| glob_matches(pattern, model))
        .max_by_key(|(pattern, _)| pattern.len())
        .map(|(_, value)| value)
}

/// Whether `text` matches `pattern`, where `*` matches any run of characters (none included)
/// and every other character itself.
fn glob_matches(pattern: &str, text: &str) -> bool {
    let mut parts = pattern.split('*');
    let first = parts.next().unwrap_or("");
    let Some(mut rest) = text.strip_prefix(first) else {
        return false;
    };
    let parts: Vec<&str> = parts.collect();
    let Some((last, middle)) = parts.split_last() else {
        // No `*`: the whole text.
        return rest.is_empty();
    };
    for part in middle {
        match rest.find(part) {
            Some(at) => rest = &rest[at + part.len()..],
            None => return false,
        }
    }
    rest.len() >= last.len() && rest.ends_with(last)
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
            models: ModelBudgets::default(),
        }
    }
}

impl ProxyConfig {
    pub fn compaction_timeout(&self) -> Duration {
        crate::bounded::saturating_seconds(self.compaction_timeout_secs)
    }

    /// Checks the table's own rules, the models' budgets over the chain's `budget`; the error
    /// names the field (`proxy.openai: ...`).
    pub fn validate(&self, budget: &BudgetConfig) -> Result<(), FieldError> {
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
        self.models.validate(budget)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_name_the_field() {
        let budget = BudgetConfig::default();
        assert!(ProxyConfig::default().validate(&budget).is_ok());
        let bad = |change: fn(&mut ProxyConfig)| {
            let mut c = ProxyConfig::default();
            change(&mut c);
            c.validate(&BudgetConfig::default())
                .unwrap_err()
                .to_string()
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
        let e = no_host.validate(&budget).unwrap_err();
        assert_eq!((e.table, e.key), ("proxy", "openai"), "{e}");
    }

    fn models(toml_text: &str) -> ModelBudgets {
        #[derive(Deserialize)]
        struct File {
            proxy: ProxyConfig,
        }
        toml::from_str::<File>(toml_text).unwrap().proxy.models
    }

    #[test]
    fn a_request_takes_the_budget_of_the_longest_pattern_its_model_matches() {
        let table = models(
            "[proxy.models]\n\"claude-*\" = { max_tokens = 200000 }\n\
             \"claude-*-haiku-*\" = { max_tokens = 100000, high_watermark = 0.6 }\n\
             \"gpt-5*\" = { max_tokens = 272000 }\n",
        );
        let base = BudgetConfig::default();
        let of = |model: Option<&str>| table.for_model(model, &base);
        assert_eq!(of(Some("claude-sonnet-4-5")).unwrap().max_tokens, 200_000);
        let haiku = of(Some("claude-3-5-haiku-20241022")).unwrap();
        assert_eq!((haiku.max_tokens, haiku.high_watermark), (100_000, 0.6));
        assert_eq!(haiku.low_watermark, base.low_watermark);
        assert_eq!(of(Some("gpt-5.5-codex")).unwrap().max_tokens, 272_000);
        assert_eq!(of(Some("o3")), None);
        assert_eq!(of(None), None);
        assert!(table.validate(&base).is_ok());
    }

    #[test]
    fn a_model_s_budget_is_checked_as_the_chain_s_is_and_named_by_its_pattern() {
        let base = BudgetConfig::default();
        let e = models("[proxy.models]\n\"gpt-*\" = { max_tokens = 0 }\n")
            .validate(&base)
            .unwrap_err();
        assert_eq!(
            e.to_string(),
            "proxy.models: \"gpt-*\": max_tokens: must be greater than 0"
        );
        let e = models("[proxy.models]\n\"m\" = { low_watermark = 0.9 }\n")
            .validate(&base)
            .unwrap_err();
        assert!(
            e.to_string()
                .contains("\"m\": low_watermark: must be below"),
            "{e}"
        );
        let e = models("[proxy.models]\n\"\" = { max_tokens = 10 }\n")
            .validate(&base)
            .unwrap_err();
        assert!(e.to_string().contains("cannot be empty"), "{e}");
    }

    #[test]
    fn a_star_matches_any_run_of_characters() {
        for (pattern, text, expected) in [
            ("*", "", true),
            ("*", "anything", true),
            ("claude-*", "claude-", true),
            ("claude-*", "claude-opus", true),
            ("claude-*", "xclaude-opus", false),
            ("*-mini", "gpt-5-mini", true),
            ("*-mini", "gpt-5-mini-2", false),
            ("gpt-*-codex", "gpt-5.5-codex", true),
            ("gpt-*-codex", "gpt-codex", false),
            ("a*b*c", "abc", true),
            ("a*b*c", "axxbyyc", true),
            ("a*b*c", "acb", false),
            ("exact", "exact", true),
            ("exact", "exactly", false),
        ] {
            assert_eq!(glob_matches(pattern, text), expected, "{pattern} {text}");
        }
    }
}
