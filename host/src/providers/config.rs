//! The chain file's `[provider]` (and `[provider.price]`): which LLM backend, and how it is
//! called. Checked as a whole by `config` (whose errors point at the key's line); built by
//! [`super::from_config`].

use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::bounded;
use crate::config_error::is_env_var_name;

/// The most LLM calls a chain may have in flight at once (`provider.max_concurrency`): far
/// above what any provider's rate limit allows, and well inside what a semaphore can count.
pub const MAX_LLM_CONCURRENCY: usize = 100_000;

/// The provider kinds a chain file may name: the one list the config check, the provider
/// builder and `tamp eval`'s judge read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(try_from = "String", into = "&'static str")]
pub enum ProviderKind {
    /// Offline and deterministic, the default: picks sentences, calls nothing.
    Extractive,
    /// Answers from a script file, for tests.
    Scripted,
    /// Answers recorded from a real provider with `record`.
    Replay,
    /// Anthropic's Messages API.
    Anthropic,
    /// Any Chat Completions server: OpenAI, vLLM, llama.cpp, Ollama's `/v1`.
    OpenAi,
}

impl ProviderKind {
    pub const ALL: [ProviderKind; 5] = [
        ProviderKind::Extractive,
        ProviderKind::Scripted,
        ProviderKind::Anthropic,
        ProviderKind::OpenAi,
        ProviderKind::Replay,
    ];

    /// The name a chain file writes.
    pub fn as_str(self) -> &'static str {
        match self {
            ProviderKind::Extractive => "extractive",
            ProviderKind::Scripted => "scripted",
            ProviderKind::Replay => "replay",
            ProviderKind::Anthropic => "anthropic",
            ProviderKind::OpenAi => "openai",
        }
    }

    /// The HTTP providers: called over the network, with retries and a key.
    pub fn is_http(self) -> bool {
        matches!(self, ProviderKind::Anthropic | ProviderKind::OpenAi)
    }

    /// Whether it answers what it is asked, as a model does (or a recording or script of
    /// one); the extractive summarizer only picks sentences of the material.
    pub fn answers_questions(self) -> bool {
        self != ProviderKind::Extractive
    }
}

impl TryFrom<String> for ProviderKind {
    type Error = String;
    fn try_from(name: String) -> Result<Self, String> {
        ProviderKind::ALL
            .into_iter()
            .find(|k| k.as_str() == name)
            .ok_or_else(|| {
                let names: Vec<String> = ProviderKind::ALL
                    .iter()
                    .map(|k| format!("\"{}\"", k.as_str()))
                    .collect();
                let (last, rest) = names.split_last().expect("kinds exist");
                format!(
                    "unknown provider \"{name}\"; expected {} or {last}",
                    rest.join(", ")
                )
            })
    }
}

impl From<ProviderKind> for &'static str {
    fn from(kind: ProviderKind) -> &'static str {
        kind.as_str()
    }
}

impl std::fmt::Display for ProviderKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// `[provider]`: where LLM calls go.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct ProviderConfig {
    /// Which provider ([`ProviderKind`]); `extractive` by default.
    pub kind: ProviderKind,
    /// The scripted provider's script file.
    pub script: Option<PathBuf>,
    /// Append every answer, keyed by its exact request, to this JSON Lines file (any kind but
    /// `replay`). Relative to the chain file's folder.
    pub record: Option<PathBuf>,
    /// The replay provider's file of recorded answers (`kind = "replay"`). Relative to the
    /// chain file's folder.
    pub answers: Option<PathBuf>,
    /// The model name sent to the API (`anthropic`, `openai`).
    pub model: Option<String>,
    /// The API's base URL; defaults to the provider's public endpoint.
    pub base_url: Option<String>,
    /// The environment variable that holds the API key. The key itself never goes in the file.
    pub api_key_env: Option<String>,
    /// How structured answers are asked for: `auto` (the provider's native JSON-schema output),
    /// `native`, `tool` (Anthropic: a forced tool whose input schema is the schema) or `prompt`
    /// ("reply with JSON only", then parse; for servers without schema support).
    pub structured_output: String,
    /// At most this many calls in flight at once.
    pub max_concurrency: usize,
    /// Per-call timeout, in seconds (each attempt).
    pub timeout_secs: f64,
    /// Retries after the first attempt for transient failures (408, 409, 429, 5xx, 529,
    /// connection errors).
    pub max_retries: u32,
    /// The first retry's backoff, in milliseconds; doubled per attempt, with jitter.
    pub retry_initial_ms: u64,
    /// The longest backoff between two attempts, in milliseconds.
    pub retry_max_ms: u64,
    /// Prices that turn token usage into an estimated cost in the report.
    pub price: Option<PriceConfig>,
}

impl Default for ProviderConfig {
    fn default() -> Self {
        ProviderConfig {
            kind: ProviderKind::Extractive,
            script: None,
            record: None,
            answers: None,
            model: None,
            base_url: None,
            api_key_env: None,
            structured_output: "auto".into(),
            max_concurrency: 16,
            timeout_secs: 120.0,
            max_retries: 4,
            retry_initial_ms: 500,
            retry_max_ms: 30_000,
            price: None,
        }
    }
}

impl ProviderConfig {
    /// The `[provider]` rules; each error names the field (`provider.model: ...`) and the
    /// key whose line it points at.
    pub fn validate(&self) -> Result<(), ProviderConfigError> {
        let fail = |key, message: String| Err(ProviderConfigError::field(key, message));
        // An unknown kind never gets here: reading the file refuses it (`ProviderKind`).
        let kind = self.kind;
        let http = kind.is_http();
        match (kind, &self.answers) {
            (ProviderKind::Replay, None) => {
                return Err(ProviderConfigError::at_kind(
                    "provider.answers: required when kind = \"replay\": the file of answers recorded with `record`".into(),
                ))
            }
            (k, Some(_)) if k != ProviderKind::Replay => {
                return fail(
                    "answers",
                    "only for kind = \"replay\"; to write answers to a file, use `record`".into(),
                )
            }
            _ => {}
        }
        if kind == ProviderKind::Replay && self.record.is_some() {
            return fail(
                "record",
                "not with kind = \"replay\": a replay makes no new answers to record".into(),
            );
        }
        for (key, path) in [("record", &self.record), ("answers", &self.answers)] {
            if path.as_ref().is_some_and(|p| p.as_os_str().is_empty()) {
                return fail(key, "must not be empty".into());
            }
        }
        match (kind, &self.script) {
            (ProviderKind::Scripted, None) => {
                return Err(ProviderConfigError::at_kind(
                    "provider.script: required when kind = \"scripted\"".into(),
                ))
            }
            (k, Some(_)) if k != ProviderKind::Scripted => {
                return fail("script", "only for kind = \"scripted\"".into())
            }
            _ => {}
        }
        for (key, set) in [
            ("model", self.model.is_some()),
            ("base_url", self.base_url.is_some()),
            ("api_key_env", self.api_key_env.is_some()),
        ] {
            if set && !http {
                return fail(key, "only for kind = \"anthropic\" or \"openai\"".into());
            }
        }
        if http {
            match &self.model {
                None => return fail("model", format!("required when kind = \"{kind}\"")),
                Some(m) if m.trim().is_empty() => return fail("model", "must not be empty".into()),
                Some(_) => {}
            }
            if kind == ProviderKind::Anthropic && self.api_key_env.is_none() {
                return fail(
                    "api_key_env",
                    "required when kind = \"anthropic\": the name of the environment variable that holds the key, e.g. \"ANTHROPIC_API_KEY\"".into(),
                );
            }
        }
        if let Some(var) = &self.api_key_env {
            // Never echo the value: someone may have pasted the key itself here.
            if !is_env_var_name(var) {
                return fail(
                    "api_key_env",
                    "must be the name of an environment variable (letters, digits and _), not the key itself".into(),
                );
            }
        }
        if let Some(url) = &self.base_url {
            if !(url.starts_with("http://") || url.starts_with("https://")) {
                return fail(
                    "base_url",
                    format!(
                        "must be an http:// or https:// URL, got \"{}\"",
                        crate::redact::url(url)
                    ),
                );
            }
        }
        match self.structured_output.as_str() {
            "auto" | "native" | "prompt" => {}
            "tool" if kind == ProviderKind::Anthropic || !http => {}
            "tool" => {
                return fail(
                    "structured_output",
                    "\"tool\" is for kind = \"anthropic\"; use \"auto\", \"native\" or \"prompt\"".into(),
                )
            }
            other => {
                return fail(
                    "structured_output",
                    format!("unknown mode \"{other}\"; expected \"auto\", \"native\", \"tool\" or \"prompt\""),
                )
            }
        }
        if self.max_concurrency == 0 || self.max_concurrency > MAX_LLM_CONCURRENCY {
            return fail(
                "max_concurrency",
                format!(
                    "must be between 1 and {MAX_LLM_CONCURRENCY}, got {}",
                    self.max_concurrency
                ),
            );
        }
        if let Err(message) = bounded::positive_seconds(self.timeout_secs) {
            return fail("timeout_secs", message);
        }
        if let Some(price) = &self.price {
            if let Err(e) = price.validate() {
                return Err(ProviderConfigError {
                    at: vec!["price", e.key],
                    message: e.to_string(),
                });
            }
        }
        if self.retry_max_ms < self.retry_initial_ms {
            return fail(
                "retry_max_ms",
                format!(
                    "must be at least retry_initial_ms ({} < {})",
                    self.retry_max_ms, self.retry_initial_ms
                ),
            );
        }
        Ok(())
    }

    /// Whether calls to this provider are retried (the HTTP providers are).
    pub fn retries(&self) -> bool {
        self.kind.is_http()
    }

    /// How long the host waits for one call, retries and their backoff included: every
    /// attempt may take `timeout_secs`, and every retry may wait up to `retry_max_ms`.
    /// Providers that make one attempt (extractive, scripted) get `timeout_secs` alone.
    pub fn overall_timeout(&self) -> Duration {
        if !self.retries() {
            return bounded::saturating_seconds(self.timeout_secs);
        }
        let attempts = f64::from(self.max_retries) + 1.0;
        let backoff = self.retry_max_ms as f64 / 1000.0 * f64::from(self.max_retries);
        bounded::saturating_seconds((self.timeout_secs.max(0.0) * attempts + backoff).min(86_400.0))
    }
}

/// A `[provider]` setting that breaks a rule: the keys under `[provider]` whose line the
/// error points at, and the message, which names the field at fault (that may be another key
/// than the one pointed at: a key that is missing is told at the `kind` that requires it).
#[derive(Debug, Clone, PartialEq)]
pub struct ProviderConfigError {
    pub at: Vec<&'static str>,
    pub message: String,
}

impl ProviderConfigError {
    /// At `key`, said as `provider.<key>: <message>`.
    fn field(key: &'static str, message: String) -> Self {
        ProviderConfigError {
            at: vec![key],
            message: crate::config_error::FieldError::new("provider", key, message).to_string(),
        }
    }

    /// At `kind`, with the whole message as given.
    fn at_kind(message: String) -> Self {
        ProviderConfigError {
            at: vec!["kind"],
            message,
        }
    }
}

impl PriceConfig {
    /// The estimated cost of `usage`, in US dollars, at the synchronous rate.
    pub fn cost_of(&self, usage: &tamp_plugin_api::Usage) -> f64 {
        let per_token = |per_mtok: f64| per_mtok / 1_000_000.0;
        usage.input_tokens as f64 * per_token(self.input_per_mtok)
            + usage.output_tokens as f64 * per_token(self.output_per_mtok)
            + usage.cache_read_tokens as f64
                * per_token(
                    self.cache_read_per_mtok
                        .unwrap_or(self.input_per_mtok * 0.1),
                )
            + usage.cache_write_tokens as f64
                * per_token(
                    self.cache_write_per_mtok
                        .unwrap_or(self.input_per_mtok * 1.25),
                )
    }

    /// Checks every price against [`MAX_PRICE_PER_MTOK`] and the batch factor against
    /// [`BATCH_FACTOR`]; the error names the field (`provider.price.input_per_mtok: ...`).
    pub fn validate(&self) -> Result<(), crate::config_error::FieldError> {
        let prices = [
            ("input_per_mtok", Some(self.input_per_mtok)),
            ("output_per_mtok", Some(self.output_per_mtok)),
            ("cache_read_per_mtok", self.cache_read_per_mtok),
            ("cache_write_per_mtok", self.cache_write_per_mtok),
        ];
        let checks = prices
            .into_iter()
            .filter_map(|(key, price)| Some((key, price?, 0.0..=MAX_PRICE_PER_MTOK)))
            .chain([("batch_factor", self.batch_factor, BATCH_FACTOR)]);
        for (key, value, range) in checks {
            bounded::scale(value, range).map_err(|message| {
                crate::config_error::FieldError::new("provider.price", key, message)
            })?;
        }
        Ok(())
    }

    /// The same usage billed through a batch API.
    pub fn batch_cost_of(&self, usage: &tamp_plugin_api::Usage) -> f64 {
        self.cost_of(usage) * self.batch_factor
    }
}

/// The highest price per million tokens `[provider.price]` takes, in US dollars: a hundred
/// times the dearest model's. A price past it is a typo (or `inf`, NaN), and a cost
/// multiplied from it would be nonsense in every report.
pub const MAX_PRICE_PER_MTOK: f64 = 100_000.0;

/// The factors `batch_factor` may be: a batch is billed at a share of the synchronous price,
/// or at most a few times it.
pub const BATCH_FACTOR: std::ops::RangeInclusive<f64> = 0.0..=10.0;

/// `[provider.price]`: US dollars per million tokens.
#[derive(Debug, Clone, Copy, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct PriceConfig {
    pub input_per_mtok: f64,
    pub output_per_mtok: f64,
    /// Prompt-cache reads; defaults to a tenth of the input price.
    pub cache_read_per_mtok: Option<f64>,
    /// Prompt-cache writes; defaults to 1.25 × the input price.
    pub cache_write_per_mtok: Option<f64>,
    /// The factor batch calls are billed at (0.5: half price).
    pub batch_factor: f64,
}

impl Default for PriceConfig {
    fn default() -> Self {
        PriceConfig {
            input_per_mtok: 0.0,
            output_per_mtok: 0.0,
            cache_read_per_mtok: None,
            cache_write_per_mtok: None,
            batch_factor: 0.5,
        }
    }
}
