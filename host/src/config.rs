//! The chain file: budget, tokenizer, provider, store and stages, in TOML.
//!
//! Parsing rejects unknown keys; every error names the file, the line where it can, and the
//! field. Relative paths in the file are relative to the file's own directory. See
//! `docs/configuration.md` for every key.

use std::fmt;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use toml::Spanned;

use crate::bounded;
use crate::store::StoreSpec;

/// The most LLM calls a chain may have in flight at once (`provider.max_concurrency`): far
/// above what any provider's rate limit allows, and well inside what a semaphore can count.
pub const MAX_LLM_CONCURRENCY: usize = 100_000;

/// A chain file as written.
#[derive(Debug, Clone, Deserialize, Serialize, Default)]
#[serde(deny_unknown_fields)]
pub struct ChainFile {
    #[serde(default)]
    pub budget: BudgetConfig,
    #[serde(default)]
    pub tokenizer: TokenizerConfig,
    #[serde(default)]
    pub provider: ProviderConfig,
    #[serde(default)]
    pub store: StoreConfig,
    #[serde(default)]
    pub cache: CacheConfig,
    #[serde(default)]
    pub batch: BatchConfig,
    #[serde(default)]
    pub threads: crate::threads::ThreadsConfig,
    /// `tamp proxy`'s upstreams and fallback (ignored by the other commands).
    #[serde(default)]
    pub proxy: crate::proxy::config::ProxyConfig,
    /// `tamp serve`'s and `tamp proxy`'s hosts beyond loopback.
    #[serde(default)]
    pub http: HttpConfig,
    /// Directories searched for plugins given by name.
    #[serde(default)]
    pub plugin_dirs: Vec<PathBuf>,
    /// `[plugins]`: where plugin files may come from (see docs/security.md).
    #[serde(default)]
    pub plugins: PluginsConfig,
    #[serde(default, rename = "stage")]
    pub stages: Vec<Spanned<StageFile>>,
}

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

/// `[http]`: what `tamp serve` and `tamp proxy` answer beyond loopback (see
/// `serve::access`, and docs/security.md).
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct HttpConfig {
    /// Host names (or addresses) answered besides loopback and the listen address: the
    /// names clients reach the server by (`tamp.internal`, a load balancer's name). `"*"`
    /// answers any host (behind a reverse proxy that checks it).
    pub allowed_hosts: Vec<String>,
}

impl HttpConfig {
    /// Whether `host` (as [`host_name`] gives it) is listed.
    pub fn allows(&self, host: &str) -> bool {
        self.allowed_hosts
            .iter()
            .any(|h| h == "*" || host_name(h) == host)
    }

    /// Each entry a host name or address alone; the error names the entry.
    pub fn validate(&self) -> Result<(), FieldError> {
        for (i, entry) in self.allowed_hosts.iter().enumerate() {
            let ok = entry == "*"
                || (!entry.is_empty()
                    && entry
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || "-.:[]_".contains(c)));
            if !ok {
                return Err(FieldError::new(
                    "http",
                    "allowed_hosts",
                    format!(
                        "entry {i} ({entry:?}) must be a host name or address (with an \
                         optional port, ignored), or \"*\"; no scheme, path or spaces"
                    ),
                ));
            }
        }
        Ok(())
    }
}

/// The host of a Host value or authority, lowercased, without port, brackets or a final
/// dot: `[::1]:7474` → `::1`, `Example.COM.:80` → `example.com`.
pub fn host_name(authority: &str) -> String {
    let text = authority.trim();
    // Userinfo has no place in a Host, but an absolute URI may carry one.
    let text = text.rsplit_once('@').map_or(text, |(_, host)| host);
    let host = match text.strip_prefix('[') {
        Some(rest) => rest.split_once(']').map_or(rest, |(ip, _)| ip),
        None => text.rsplit_once(':').map_or(text, |(host, _)| host),
    };
    host.trim_end_matches('.').to_ascii_lowercase()
}

/// `[tokenizer]`
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct TokenizerConfig {
    /// `o200k_base`, `cl100k_base`, or `chars_per_token:N` for an estimate.
    pub encoding: String,
}

impl Default for TokenizerConfig {
    fn default() -> Self {
        TokenizerConfig {
            encoding: "o200k_base".into(),
        }
    }
}

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

    /// The same usage billed through a batch API.
    pub fn batch_cost_of(&self, usage: &tamp_plugin_api::Usage) -> f64 {
        self.cost_of(usage) * self.batch_factor
    }
}

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

/// `[cache]`: the summary cache (no summary paid for twice).
#[derive(Debug, Clone, Copy, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct CacheConfig {
    /// Answer repeated LLM requests and already-summarized message ranges from the store.
    pub enabled: bool,
}

impl Default for CacheConfig {
    fn default() -> Self {
        CacheConfig { enabled: true }
    }
}

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

/// `[store]` (or `store = { ... }`): where pages, the summary cache and the deferred queue
/// live.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct StoreConfig {
    /// `sqlite` (the embedded default: one file, no server) or `postgres` (one database
    /// shared by several hosts).
    pub kind: StoreKind,
    /// The SQLite file; default `.tamp/store.sqlite3` under the current directory.
    pub path: Option<PathBuf>,
    /// The environment variable holding the PostgreSQL URL (`kind = "postgres"`). The URL
    /// itself is never written in the file: it usually carries a password.
    pub url_env: Option<String>,
    /// Connections kept open to PostgreSQL by each host.
    pub pool_size: usize,
    /// The CA certificate(s) (PEM) that sign the PostgreSQL server's certificate, relative to
    /// the chain file's directory; the URL's `sslrootcert` says the same (one or the other).
    /// With it, the URL's `sslmode` defaults to `verify-full`.
    pub ca_file: Option<PathBuf>,
}

impl Default for StoreConfig {
    fn default() -> Self {
        StoreConfig {
            kind: StoreKind::Sqlite,
            path: None,
            url_env: None,
            pool_size: 8,
            ca_file: None,
        }
    }
}

/// The store backends.
#[derive(Debug, Clone, Copy, Deserialize, Serialize, PartialEq, Eq, Default)]
#[serde(rename_all = "snake_case")]
pub enum StoreKind {
    #[default]
    Sqlite,
    Postgres,
}

/// The store used when no chain file names one.
pub const DEFAULT_STORE_PATH: &str = ".tamp/store.sqlite3";

impl StoreConfig {
    /// The checks of `[store]` on its own; each error names the field. Whether the URL's
    /// variable is set is checked when the store is opened ([`LoadedChainFile::store_spec`]).
    pub fn validate(&self) -> Result<(), FieldError> {
        let error = |key, message: &str| Err(FieldError::new("store", key, message));
        match self.kind {
            StoreKind::Sqlite => {
                for (key, set) in [
                    ("url_env", self.url_env.is_some()),
                    ("ca_file", self.ca_file.is_some()),
                ] {
                    if set {
                        return error(key, "only for kind = \"postgres\"");
                    }
                }
            }
            StoreKind::Postgres => {
                if self.path.is_some() {
                    return error(
                        "path",
                        "only for kind = \"sqlite\"; a PostgreSQL store is named by url_env",
                    );
                }
                let Some(var) = &self.url_env else {
                    return error("url_env", "required when kind = \"postgres\": the name of the environment variable that holds the database URL, e.g. \"TAMP_DATABASE_URL\"");
                };
                if !is_env_var_name(var) {
                    return error("url_env", "must be the name of an environment variable (letters, digits and _), not the URL itself");
                }
            }
        }
        if self.pool_size == 0 || self.pool_size > 1_000 {
            return error(
                "pool_size",
                &format!("must be between 1 and 1000, got {}", self.pool_size),
            );
        }
        Ok(())
    }
}

/// Whether `var` can name an environment variable. Config keys ending in `_env` take names,
/// never secrets: an error about one never echoes its value.
fn is_env_var_name(var: &str) -> bool {
    !var.is_empty()
        && !var.starts_with(|c: char| c.is_ascii_digit())
        && var.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// `[plugins]`: which plugin files a chain may load.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq, Default)]
#[serde(deny_unknown_fields, default)]
pub struct PluginsConfig {
    /// When set, a plugin file outside these directories (once symlinks are resolved) is
    /// refused before it is loaded. Relative to the chain file's directory.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub allow_dirs: Option<Vec<PathBuf>>,
    /// `[plugins.wasm]`: the sandbox's limits for every WebAssembly stage.
    #[serde(skip_serializing_if = "crate::wasm::WasmLimits::is_unset")]
    pub wasm: crate::wasm::WasmLimits,
}

/// Whether `pin` is a SHA-256 as `tamp plugins hash` prints it: 64 hex digits.
fn is_sha256_hex(pin: &str) -> bool {
    pin.len() == 64 && pin.bytes().all(|b| b.is_ascii_hexdigit())
}

/// When a stage runs.
#[derive(Debug, Clone, Copy, Deserialize, Serialize, PartialEq, Eq, Default)]
#[serde(rename_all = "snake_case")]
pub enum Trigger {
    /// When the chain started above the high watermark and the conversation is still above
    /// the low watermark.
    #[default]
    OverBudget,
    /// On every compaction (for stages that must see every call, e.g. to finalize pending
    /// summaries).
    Always,
}

/// One `[[stage]]`.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct StageFile {
    /// A name for reports and logs, unique in the chain.
    pub name: String,
    /// A plugin path, or a name looked up as `lib<name>.so` (see `plugin_dirs`).
    pub plugin: String,
    /// The SHA-256 the plugin file must have (`tamp plugins hash <file>` prints it): a file
    /// with other bytes is refused, at start and at every reload.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
    #[serde(default)]
    pub trigger: Trigger,
    /// The stage's time limit, in seconds; a stage that takes longer is rolled back.
    #[serde(default = "default_stage_timeout")]
    pub timeout_secs: f64,
    /// The plugin's config, validated against the plugin's JSON Schema.
    #[serde(default)]
    pub config: Option<Spanned<toml::Table>>,
    /// The sandbox's limits for this stage's WebAssembly component, over `[plugins.wasm]`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wasm: Option<crate::wasm::WasmLimits>,
}

fn default_stage_timeout() -> f64 {
    60.0
}

impl StageFile {
    /// A stage's time limit when the chain file sets none.
    pub fn default_timeout() -> Duration {
        bounded::saturating_seconds(default_stage_timeout())
    }

    /// The stage's time limit (`timeout_secs`, checked when the file was read).
    pub fn timeout(&self) -> Duration {
        bounded::saturating_seconds(self.timeout_secs)
    }

    /// The stage config as JSON (an empty object when absent).
    pub fn config_json(&self) -> serde_json::Value {
        match &self.config {
            Some(table) => serde_json::to_value(table.get_ref()).unwrap_or_default(),
            None => serde_json::Value::Object(Default::default()),
        }
    }
}

/// A broken rule of one key of a chain-file table, found by the table's own checks: the
/// table and key say where it is (so its line can be found), the message what is wrong.
/// Shown as `budget.max_tokens: must be greater than 0`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldError {
    /// The table (`budget`).
    pub table: &'static str,
    /// The key inside it (`max_tokens`).
    pub key: &'static str,
    pub message: String,
}

impl FieldError {
    pub fn new(table: &'static str, key: &'static str, message: impl Into<String>) -> Self {
        FieldError {
            table,
            key,
            message: message.into(),
        }
    }
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}: {}", self.table, self.key, self.message)
    }
}

impl std::error::Error for FieldError {}

/// A config error: the file, the line where known, and what is wrong (naming the field).
#[derive(Debug, Clone, PartialEq)]
pub struct ConfigError {
    pub file: PathBuf,
    pub line: Option<usize>,
    pub message: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.line {
            Some(line) => write!(f, "{}:{}: {}", self.file.display(), line, self.message),
            None => write!(f, "{}: {}", self.file.display(), self.message),
        }
    }
}

impl std::error::Error for ConfigError {}

/// A parsed chain file with what is needed to point errors at its lines.
#[derive(Debug, Clone)]
pub struct LoadedChainFile {
    pub file: ChainFile,
    pub path: PathBuf,
    pub source: String,
}

impl LoadedChainFile {
    /// Reads and parses `path`, checking everything that needs no plugin.
    pub fn read(path: &Path) -> Result<Self, ConfigError> {
        let source = std::fs::read_to_string(path).map_err(|e| ConfigError {
            file: path.to_path_buf(),
            line: None,
            message: format!("cannot read: {e}"),
        })?;
        Self::parse(path, source)
    }

    /// Parses chain-file text; `path` is used for errors and relative paths.
    pub fn parse(path: &Path, source: String) -> Result<Self, ConfigError> {
        let file: ChainFile = toml::from_str(&source).map_err(|e| ConfigError {
            file: path.to_path_buf(),
            line: e.span().map(|s| line_of(&source, s.start)),
            message: toml_error_message(&source, &e),
        })?;
        let loaded = LoadedChainFile {
            file,
            path: path.to_path_buf(),
            source,
        };
        loaded.check()?;
        Ok(loaded)
    }

    fn check(&self) -> Result<(), ConfigError> {
        let at_field = |e| self.at_field(e);
        self.file.budget.validate().map_err(at_field)?;
        self.check_provider()?;
        self.file.store.validate().map_err(at_field)?;
        self.file.batch.validate().map_err(at_field)?;
        self.file.proxy.validate().map_err(at_field)?;
        self.file.http.validate().map_err(at_field)?;
        if self
            .file
            .tokenizer
            .encoding
            .parse::<crate::tokens::Encoding>()
            .is_err()
        {
            return Err(self.error_at_key(
                "tokenizer",
                "encoding",
                format!(
                    "tokenizer.encoding: unknown encoding \"{}\"; expected o200k_base, cl100k_base or chars_per_token:N",
                    self.file.tokenizer.encoding
                ),
            ));
        }
        let mut names = std::collections::HashSet::new();
        for (i, stage) in self.file.stages.iter().enumerate() {
            let line = Some(line_of(&self.source, stage.span().start));
            let s = stage.get_ref();
            if !names.insert(s.name.as_str()) {
                return Err(self.error(
                    line,
                    format!(
                        "stage[{i}].name: \"{}\" is used by an earlier stage",
                        s.name
                    ),
                ));
            }
            if let Err(message) = bounded::positive_seconds(s.timeout_secs) {
                return Err(self.error(
                    line,
                    format!("stage \"{}\": timeout_secs: {message}", s.name),
                ));
            }
            if let Some(limits) = &s.wasm {
                let index = i.to_string();
                let at = |key: &str| {
                    let path = ["stage", index.as_str(), "wasm", key];
                    let path = if key.is_empty() {
                        &path[..3]
                    } else {
                        &path[..]
                    };
                    key_line(&self.source, path).or(line)
                };
                if let Err(e) = limits.validate("wasm") {
                    return Err(self.error(at(e.key), format!("stage \"{}\": {e}", s.name)));
                }
                if !crate::wasm::is_component_path(Path::new(&s.plugin)) {
                    return Err(self.error(
                        at(""),
                        format!(
                            "stage \"{}\": wasm: limits for a WebAssembly component, and this \
                             stage's plugin is not one (a `.wasm` file)",
                            s.name
                        ),
                    ));
                }
            }
            if let Some(pin) = s.sha256.as_deref().filter(|p| !is_sha256_hex(p)) {
                return Err(self.error(
                    line,
                    format!(
                        "stage \"{}\": sha256: expected 64 hex digits as `tamp plugins hash \
                         <file>` prints them, got \"{pin}\"",
                        s.name
                    ),
                ));
            }
        }
        self.file
            .plugins
            .wasm
            .validate("plugins.wasm")
            .map_err(|e| {
                self.error(
                    key_line(&self.source, &["plugins", "wasm", e.key]),
                    e.to_string(),
                )
            })?;
        if self
            .file
            .plugins
            .allow_dirs
            .as_ref()
            .is_some_and(Vec::is_empty)
        {
            return Err(self.error_at_key(
                "plugins",
                "allow_dirs",
                "plugins.allow_dirs: empty, so no plugin could load; list the directories \
                 plugins may come from, or remove the key to allow any"
                    .into(),
            ));
        }
        Ok(())
    }

    /// The `[provider]` rules; each error names the field (`provider.model: ...`).
    fn check_provider(&self) -> Result<(), ConfigError> {
        let provider = &self.file.provider;
        let fail =
            |key, message: String| Err(self.at_field(FieldError::new("provider", key, message)));
        // An unknown kind never gets here: reading the file refuses it (`ProviderKind`).
        let kind = provider.kind;
        let http = kind.is_http();
        match (kind, &provider.answers) {
            (ProviderKind::Replay, None) => {
                return Err(self.error_at_key(
                    "provider",
                    "kind",
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
        if kind == ProviderKind::Replay && provider.record.is_some() {
            return fail(
                "record",
                "not with kind = \"replay\": a replay makes no new answers to record".into(),
            );
        }
        for (key, path) in [("record", &provider.record), ("answers", &provider.answers)] {
            if path.as_ref().is_some_and(|p| p.as_os_str().is_empty()) {
                return fail(key, "must not be empty".into());
            }
        }
        match (kind, &provider.script) {
            (ProviderKind::Scripted, None) => {
                return Err(self.error_at_key(
                    "provider",
                    "kind",
                    "provider.script: required when kind = \"scripted\"".into(),
                ))
            }
            (k, Some(_)) if k != ProviderKind::Scripted => {
                return fail("script", "only for kind = \"scripted\"".into())
            }
            _ => {}
        }
        for (key, set) in [
            ("model", provider.model.is_some()),
            ("base_url", provider.base_url.is_some()),
            ("api_key_env", provider.api_key_env.is_some()),
        ] {
            if set && !http {
                return fail(key, "only for kind = \"anthropic\" or \"openai\"".into());
            }
        }
        if http {
            match &provider.model {
                None => return fail("model", format!("required when kind = \"{kind}\"")),
                Some(m) if m.trim().is_empty() => return fail("model", "must not be empty".into()),
                Some(_) => {}
            }
            if kind == ProviderKind::Anthropic && provider.api_key_env.is_none() {
                return fail(
                    "api_key_env",
                    "required when kind = \"anthropic\": the name of the environment variable that holds the key, e.g. \"ANTHROPIC_API_KEY\"".into(),
                );
            }
        }
        if let Some(var) = &provider.api_key_env {
            // Never echo the value: someone may have pasted the key itself here.
            if !is_env_var_name(var) {
                return fail(
                    "api_key_env",
                    "must be the name of an environment variable (letters, digits and _), not the key itself".into(),
                );
            }
        }
        if let Some(url) = &provider.base_url {
            if !(url.starts_with("http://") || url.starts_with("https://")) {
                return fail(
                    "base_url",
                    format!("must be an http:// or https:// URL, got \"{url}\""),
                );
            }
        }
        match provider.structured_output.as_str() {
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
        if provider.max_concurrency == 0 || provider.max_concurrency > MAX_LLM_CONCURRENCY {
            return fail(
                "max_concurrency",
                format!(
                    "must be between 1 and {MAX_LLM_CONCURRENCY}, got {}",
                    provider.max_concurrency
                ),
            );
        }
        if let Err(message) = bounded::positive_seconds(provider.timeout_secs) {
            return fail("timeout_secs", message);
        }
        if provider.retry_max_ms < provider.retry_initial_ms {
            return fail(
                "retry_max_ms",
                format!(
                    "must be at least retry_initial_ms ({} < {})",
                    provider.retry_max_ms, provider.retry_initial_ms
                ),
            );
        }
        Ok(())
    }

    /// The provider `[provider]` describes (see [`crate::providers::from_config`]), an
    /// error located at its key.
    pub fn provider(&self) -> Result<std::sync::Arc<dyn crate::providers::Provider>, ConfigError> {
        crate::providers::from_config(&self.file.provider, &self.base_dir())
            .map_err(|e| self.at_field(e))
    }

    /// `e`, at the line of its key.
    pub(crate) fn at_field(&self, e: FieldError) -> ConfigError {
        self.error_at_key(e.table, e.key, e.to_string())
    }

    pub fn error(&self, line: Option<usize>, message: String) -> ConfigError {
        ConfigError {
            file: self.path.clone(),
            line,
            message,
        }
    }

    /// An error pointing at `key = ...` inside `[table]`, or at the table, when found.
    pub(crate) fn error_at_key(&self, table: &str, key: &str, message: String) -> ConfigError {
        self.error(key_line(&self.source, &[table, key]), message)
    }

    /// The line of the field at `path` inside stage `index`'s config table (keys, and array
    /// indexes in decimal), or of the nearest table on the way to it that the file writes
    /// (the config table, else the stage).
    pub fn stage_config_line(&self, index: usize, path: &[impl AsRef<str>]) -> Option<usize> {
        let element = index.to_string();
        let mut full = vec!["stage", element.as_str(), "config"];
        full.extend(path.iter().map(AsRef::as_ref));
        key_line(&self.source, &full).or_else(|| self.stage_line(index))
    }

    /// The line where stage `index` starts.
    pub fn stage_line(&self, index: usize) -> Option<usize> {
        self.file
            .stages
            .get(index)
            .map(|s| line_of(&self.source, s.span().start))
    }

    /// The store this file names, ready to open. `path_override` (a `--store` flag) replaces
    /// it with that SQLite file. A PostgreSQL URL is read from its environment variable now;
    /// no error echoes it (it usually carries a password).
    pub fn store_spec(&self, path_override: Option<&Path>) -> Result<StoreSpec, ConfigError> {
        store_spec(Some(self), path_override)
    }

    /// What is valid but probably not meant (`tamp check-config` prints these): a chain
    /// with no stages compacts nothing.
    pub fn warnings(&self) -> Vec<String> {
        let mut warnings = Vec::new();
        if self.file.stages.is_empty() {
            warnings.push(format!(
                "{}: the chain has no [[stage]], so it compacts nothing (a running tamp serve \
                 refuses to reload to it)",
                self.path.display()
            ));
        }
        warnings
    }

    /// An error about the store this file names, pointing at the line that names it
    /// (`chain.toml:7: store.path: page store ...`); without a `[store]`, the file alone.
    pub fn store_error(&self, message: String) -> ConfigError {
        let key = match self.file.store.kind {
            StoreKind::Sqlite => "path",
            // The CA file's own errors (unreadable, not the server's CA) point at it.
            StoreKind::Postgres
                if self.file.store.ca_file.is_some() && message.contains("store.ca_file") =>
            {
                "ca_file"
            }
            StoreKind::Postgres => "url_env",
        };
        let named = key_line(&self.source, &["store"]).is_some();
        if named {
            self.at_field(FieldError::new("store", key, message))
        } else {
            self.error(None, message)
        }
    }

    /// Resolves a path written in the file (relative to the file's directory).
    pub fn resolve_path(&self, p: &Path) -> PathBuf {
        self.base_dir().join(p)
    }

    /// `[plugins] allow_dirs`, canonical (relative ones from the file's directory); `None`
    /// when unset. A directory that does not exist is an error naming it (a typo there would
    /// otherwise refuse every plugin with a puzzling message).
    pub fn allow_dirs(&self) -> Result<Option<Vec<PathBuf>>, ConfigError> {
        let Some(dirs) = &self.file.plugins.allow_dirs else {
            return Ok(None);
        };
        let base = self.base_dir();
        dirs.iter()
            .enumerate()
            .map(|(i, dir)| {
                base.join(dir).canonicalize().map_err(|e| {
                    self.error_at_key(
                        "plugins",
                        "allow_dirs",
                        format!("plugins.allow_dirs[{i}]: {}: {e}", dir.display()),
                    )
                })
            })
            .collect::<Result<Vec<_>, _>>()
            .map(Some)
    }

    pub fn base_dir(&self) -> PathBuf {
        self.path
            .parent()
            .map(Path::to_path_buf)
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or_else(|| PathBuf::from("."))
    }
}

/// The store `file` names (the default SQLite file without one); see
/// [`LoadedChainFile::store_spec`].
pub fn store_spec(
    file: Option<&LoadedChainFile>,
    path_override: Option<&Path>,
) -> Result<StoreSpec, ConfigError> {
    if let Some(path) = path_override {
        return Ok(StoreSpec::Sqlite {
            path: path.to_path_buf(),
        });
    }
    let Some(file) = file else {
        return Ok(StoreSpec::Sqlite {
            path: DEFAULT_STORE_PATH.into(),
        });
    };
    let store = &file.file.store;
    match store.kind {
        StoreKind::Sqlite => Ok(StoreSpec::Sqlite {
            path: store
                .path
                .as_ref()
                .map(|p| file.resolve_path(p))
                .unwrap_or_else(|| DEFAULT_STORE_PATH.into()),
        }),
        StoreKind::Postgres => {
            // `validate` made sure the variable's name is there.
            let var = store.url_env.as_deref().unwrap_or_default();
            let url = std::env::var(var).unwrap_or_default();
            if url.trim().is_empty() {
                return Err(file.error_at_key(
                    "store",
                    "url_env",
                    format!(
                        "store.url_env: the environment variable {var} is not set or empty; it \
                         must hold the PostgreSQL URL, e.g. postgres://tamp:secret@db:5432/tamp"
                    ),
                ));
            }
            let ca_file = match &store.ca_file {
                None => None,
                Some(path) => {
                    let resolved = file.resolve_path(path);
                    // Read when the store opens; a typo is named here, with its line.
                    if let Err(e) = std::fs::File::open(&resolved) {
                        return Err(file.error_at_key(
                            "store",
                            "ca_file",
                            format!("store.ca_file: {}: {e}", resolved.display()),
                        ));
                    }
                    Some(resolved)
                }
            };
            Ok(StoreSpec::Postgres {
                url,
                pool_size: store.pool_size,
                ca_file,
            })
        }
    }
}

/// A TOML error's message, led by the field it is about when the parser knows it
/// (`budget.max_tokens: invalid type: string "lots", expected u64`). An error inside the
/// `n`th `[[stage]]` names it `stage[n]`.
fn toml_error_message(source: &str, error: &toml::de::Error) -> String {
    let message = error.message().trim().to_string();
    // The parser keeps the path of keys it was in, but shows it only in its `Display` of an
    // error without the input (`in `budget.max_tokens``).
    let mut bare = error.clone();
    bare.set_input(None);
    let shown = bare.to_string();
    let Some(keys) = shown
        .lines()
        .rev()
        .find_map(|l| l.strip_prefix("in `")?.strip_suffix('`'))
        .filter(|k| !k.is_empty())
    else {
        return message;
    };
    let field = match (keys.split_once('.'), keys) {
        (Some(("stage", rest)), _) => format!("{}.{rest}", stage_at(source, error.span())),
        (None, "stage") => stage_at(source, error.span()),
        _ => keys.to_string(),
    };
    format!("{field}: {message}")
}

/// `stage[n]`: the `[[stage]]` the byte span falls in (counted from 0), or `stage` when it
/// falls in none.
fn stage_at(source: &str, span: Option<Range<usize>>) -> String {
    let (Some(span), Ok(root)) = (span, toml::de::DeTable::parse(source)) else {
        return "stage".into();
    };
    let stages = root
        .get_ref()
        .iter()
        .find(|(k, _)| k.get_ref() == "stage")
        .and_then(|(_, v)| v.get_ref().as_array());
    // An element's span is its `[[stage]]` header: the last header at or before the span.
    let n = stages.map_or(0, |stages| {
        stages
            .iter()
            .take_while(|stage| stage.span().start <= span.start)
            .count()
    });
    match n.checked_sub(1) {
        Some(n) => format!("stage[{n}]"),
        None => "stage".into(),
    }
}

/// The line of the key at `path` (a table's keys by name, an array's elements by decimal
/// index) in the TOML `source`, or of the deepest one found on the way to it; `None` when
/// not even the first is written. A table written as a header (`[store]`) is found at it; one
/// written inline (`store = { ... }`) at its key.
fn key_line(source: &str, path: &[&str]) -> Option<usize> {
    use toml::de::{DeTable, DeValue};
    let root = DeValue::Table(DeTable::parse(source).ok()?.into_inner());
    let mut value = &root;
    let mut line = None;
    for segment in path {
        let found = match value {
            DeValue::Table(table) => table
                .iter()
                .find(|(k, _)| k.get_ref() == segment)
                .map(|(k, v)| (k.span().start, v)),
            DeValue::Array(array) => segment
                .parse::<usize>()
                .ok()
                .and_then(|i| array.get(i))
                .map(|v| (v.span().start, v)),
            _ => None,
        };
        let Some((at, next)) = found else {
            break;
        };
        line = Some(line_of(source, at));
        value = next.get_ref();
    }
    line
}

/// 1-based line of a byte offset.
pub fn line_of(source: &str, offset: usize) -> usize {
    source[..offset.min(source.len())].matches('\n').count() + 1
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<LoadedChainFile, ConfigError> {
        LoadedChainFile::parse(Path::new("chain.toml"), text.to_string())
    }

    #[test]
    fn batch_section_defaults_and_errors_name_the_field_and_line() {
        let loaded = parse("").unwrap();
        assert_eq!(loaded.file.batch, BatchConfig::default());
        assert_eq!(loaded.file.batch.max_batch_requests, 100);
        let ok = parse("[batch]\nmax_batch_requests = 5\npoll_interval_secs = 0.05\n").unwrap();
        assert_eq!(ok.file.batch.max_batch_requests, 5);
        for (text, field, line) in [
            (
                "[batch]\nmax_batch_requests = 0\n",
                "batch.max_batch_requests",
                2,
            ),
            ("[batch]\n\nmax_attempts = 0\n", "batch.max_attempts", 3),
            (
                "[batch]\npoll_interval_secs = -1\n",
                "batch.poll_interval_secs",
                2,
            ),
            (
                "[batch]\napi_key_env = \"sk-ant-123\"\n",
                "batch.api_key_env",
                2,
            ),
            ("[batch]\nbase_url = \"ftp://x\"\n", "batch.base_url", 2),
        ] {
            let e = parse(text).unwrap_err();
            assert!(e.message.starts_with(field), "{text}: {e}");
            assert_eq!(e.line, Some(line), "{text}: {e}");
            assert!(!e.to_string().contains("sk-ant-123"), "{e}");
        }
        let unknown = parse("[batch]\nmax_batch = 3\n").unwrap_err();
        assert!(unknown.message.contains("max_batch"), "{unknown}");
    }

    #[test]
    fn store_section_kinds_and_errors_name_the_field_and_line() {
        let default = parse("").unwrap();
        assert_eq!(default.file.store, StoreConfig::default());
        assert_eq!(
            default.store_spec(None).unwrap(),
            StoreSpec::Sqlite {
                path: DEFAULT_STORE_PATH.into()
            }
        );
        let sqlite = parse("[store]\npath = \"pages.sqlite3\"\n").unwrap();
        assert_eq!(
            sqlite.store_spec(None).unwrap(),
            StoreSpec::Sqlite {
                path: Path::new(".").join("pages.sqlite3")
            }
        );

        let var = "TAMP_CONFIG_TEST_DATABASE_URL";
        // The form: an inline table (before any `[table]` header, as TOML requires).
        let inline = format!(
            "store = {{ kind = \"postgres\", url_env = \"{var}\", pool_size = 3 }}\n[budget]\nmax_tokens = 1000\n"
        );
        let pg = parse(&inline).unwrap();
        assert_eq!(pg.file.store.kind, StoreKind::Postgres);
        let missing = pg.store_spec(None).unwrap_err();
        assert!(missing.message.starts_with("store.url_env"), "{missing}");
        assert!(missing.message.contains(var), "{missing}");
        assert_eq!(missing.line, Some(1), "{missing}");
        std::env::set_var(var, "postgres://tamp:s3cret@127.0.0.1:5432/tamp");
        assert_eq!(
            pg.store_spec(None).unwrap(),
            StoreSpec::Postgres {
                url: "postgres://tamp:s3cret@127.0.0.1:5432/tamp".into(),
                pool_size: 3,
                ca_file: None,
            }
        );
        // `--store` names a file: it wins over the chain file's database.
        assert_eq!(
            pg.store_spec(Some(Path::new("x.sqlite3"))).unwrap(),
            StoreSpec::Sqlite {
                path: PathBuf::from("x.sqlite3")
            }
        );
        // ca_file: relative to the chain file's directory, and a missing one named with its
        // line before any connection is tried.
        let dir = std::env::temp_dir().join(format!("tamp-config-ca-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("db-ca.pem"), "").unwrap();
        let with_ca = |ca: &str| {
            LoadedChainFile::parse(
                &dir.join("chain.toml"),
                format!("[store]\nkind = \"postgres\"\nurl_env = \"{var}\"\nca_file = \"{ca}\"\n"),
            )
            .unwrap()
        };
        match with_ca("db-ca.pem").store_spec(None).unwrap() {
            StoreSpec::Postgres { ca_file, .. } => {
                assert_eq!(ca_file, Some(dir.join("db-ca.pem")))
            }
            other => panic!("{other:?}"),
        }
        let missing = with_ca("nope.pem").store_spec(None).unwrap_err();
        assert!(
            missing.message.starts_with(&format!(
                "store.ca_file: {}: ",
                dir.join("nope.pem").display()
            )),
            "{missing}"
        );
        assert_eq!(missing.line, Some(4), "{missing}");
        std::fs::remove_dir_all(&dir).unwrap();
        std::env::remove_var(var);

        for (text, field, line) in [
            ("[store]\nkind = \"postgres\"\n", "store.url_env", 1),
            (
                "[store]\nkind = \"postgres\"\nurl_env = \"X\"\npath = \"a\"\n",
                "store.path",
                4,
            ),
            ("[store]\nurl_env = \"X\"\n", "store.url_env", 2),
            (
                "[store]\nkind = \"postgres\"\nurl_env = \"postgres://u:pw@h/db\"\n",
                "store.url_env",
                3,
            ),
            (
                "[store]\nkind = \"postgres\"\nurl_env = \"X\"\npool_size = 0\n",
                "store.pool_size",
                4,
            ),
            ("[store]\nca_file = \"ca.pem\"\n", "store.ca_file", 2),
        ] {
            let e = parse(text).unwrap_err();
            assert!(e.message.starts_with(field), "{text}: {e}");
            assert_eq!(e.line, Some(line), "{text}: {e}");
            assert!(!e.to_string().contains("pw@"), "{e}");
        }
        let unknown = parse("[store]\nkind = \"mysql\"\n").unwrap_err();
        assert!(unknown.message.contains("mysql"), "{unknown}");
    }

    #[test]
    fn defaults_apply_to_an_empty_file() {
        let f = parse("").unwrap();
        assert_eq!(f.file.budget, BudgetConfig::default());
        assert_eq!(f.file.provider.kind, ProviderKind::Extractive);
        assert!(f.file.stages.is_empty());
        let warnings = f.warnings();
        assert_eq!(warnings.len(), 1);
        assert!(warnings[0].starts_with("chain.toml: the chain has no [[stage]]"));
        let one = parse("[[stage]]\nname = \"a\"\nplugin = \"x\"\n").unwrap();
        assert!(one.warnings().is_empty());
    }

    #[test]
    fn unknown_key_is_named_with_its_line() {
        let err = parse("[budget]\nmax_tokens = 100\nmax_tokenz = 5\n").unwrap_err();
        assert_eq!(err.line, Some(3));
        assert!(err.message.contains("max_tokenz"), "{err}");
        assert!(err.to_string().starts_with("chain.toml:3:"), "{err}");
    }

    #[test]
    fn type_and_range_errors_name_the_field() {
        let err = parse("[budget]\n\n\nmax_tokens = \"lots\"\n").unwrap_err();
        assert_eq!(err.line, Some(4), "{err}");
        assert_eq!(
            err.message,
            "budget.max_tokens: invalid type: string \"lots\", expected u64"
        );
        let err = parse("[budget]\nkeep_recent = -3\n").unwrap_err();
        assert!(err.message.starts_with("budget.keep_recent: "), "{err}");
        assert_eq!(err.line, Some(2), "{err}");
        let err = parse("store = { kind = \"sqlite\", pool_size = \"8\" }\n").unwrap_err();
        assert!(err.message.starts_with("store.pool_size: "), "{err}");
        let stages = "[[stage]]\nname = \"a\"\nplugin = \"x\"\n\n[[stage]]\nname = \"b\"\nplugin = \"y\"\ntimeout_secs = \"soon\"\n";
        let err = parse(stages).unwrap_err();
        assert!(err.message.starts_with("stage[1].timeout_secs: "), "{err}");
        assert_eq!(err.line, Some(8), "{err}");
        let err = parse("[[stage]]\nname = \"a\"\n").unwrap_err();
        assert!(
            err.message.starts_with("stage[0]: missing field `plugin`"),
            "{err}"
        );
        // A syntax error has no field: the message stays the parser's.
        let err = parse("[budget\n").unwrap_err();
        assert!(!err.message.contains(": invalid"), "{err}");
    }

    #[test]
    fn a_store_that_cannot_be_opened_is_located_at_its_setting() {
        // A directory cannot be created under /proc, even by root.
        let text = "[budget]\nmax_tokens = 100\n\n[store]\npath = \"/proc/no-such/s.sqlite3\"\n";
        let file = parse(text).unwrap();
        let err = match crate::chain::Chain::from_loaded(&file, Default::default()) {
            Err(crate::chain::ChainError::Config(e)) => e,
            Err(other) => panic!("not a config error: {other}"),
            Ok(_) => panic!("the store opened"),
        };
        assert_eq!(err.line, Some(5), "{err}");
        assert!(
            err.message
                .starts_with("store.path: page store /proc/no-such/s.sqlite3: cannot"),
            "{err}"
        );
    }

    #[test]
    fn validation_errors_carry_their_table_and_key() {
        let budget = BudgetConfig {
            high_watermark: 0.4,
            low_watermark: 0.6,
            ..BudgetConfig::default()
        };
        let e = budget.validate().unwrap_err();
        assert_eq!((e.table, e.key), ("budget", "low_watermark"));
        assert_eq!(
            e.to_string(),
            "budget.low_watermark: must be below high_watermark (0.6 >= 0.4)"
        );
        let store = StoreConfig {
            pool_size: 0,
            ..StoreConfig::default()
        };
        let e = store.validate().unwrap_err();
        assert_eq!((e.table, e.key), ("store", "pool_size"));
        let batch = BatchConfig {
            lease_secs: 0.0,
            ..BatchConfig::default()
        };
        let e = batch.validate().unwrap_err();
        assert_eq!((e.table, e.key), ("batch", "lease_secs"));
        assert!(e.message.starts_with("must be a positive number"), "{e}");
    }

    #[test]
    fn watermark_order_is_checked_and_located() {
        let err = parse("[budget]\nmax_tokens = 100\nhigh_watermark = 0.4\nlow_watermark = 0.6\n")
            .unwrap_err();
        assert!(err.message.starts_with("budget.low_watermark"), "{err}");
        assert_eq!(err.line, Some(4));
    }

    #[test]
    fn stage_config_lines_are_found() {
        let text =
            "[[stage]]\nname = \"a\"\nplugin = \"x\"\n[stage.config]\nfoo = 1\nbar = \"z\"\n";
        let f = parse(text).unwrap();
        assert_eq!(f.stage_config_line(0, &["bar"]), Some(6));
        assert_eq!(f.stage_line(0), Some(1));
        assert_eq!(
            f.file.stages[0].get_ref().config_json(),
            serde_json::json!({"foo": 1, "bar": "z"})
        );
    }

    #[test]
    fn lines_come_from_the_parsers_spans_wherever_a_key_is_written() {
        let text = "[budget]\n# max_tokens = 5 in a comment is no key\nmax_tokens = 10\n\n\
                    [[stage]]\nname = \"a\"\nplugin = \"x\"\n\n\
                    [[stage]]\nname = \"b\"\nplugin = \"y\"\n\
                    config = { prompt = { style = \"terse\" }, labels = [\n  \"p\",\n  \"q\",\n] }\n";
        let f = parse(text).unwrap();
        assert_eq!(key_line(&f.source, &["budget", "max_tokens"]), Some(3));
        // A key not written: the table's header.
        assert_eq!(key_line(&f.source, &["budget", "keep_recent"]), Some(1));
        assert_eq!(key_line(&f.source, &["provider", "kind"]), None);
        // A field nested in an inline config, and an element of a multi-line array.
        assert_eq!(f.stage_config_line(1, &["prompt", "style"]), Some(12));
        assert_eq!(f.stage_config_line(1, &["labels", "1"]), Some(14));
        // No such field: the config's line; no config at all: the stage's header.
        assert_eq!(f.stage_config_line(1, &["nope"]), Some(12));
        assert_eq!(f.stage_config_line(0, &["nope"]), Some(5));
        // A table given as dotted keys at the top is found at them.
        let dotted = parse("budget.max_tokens = 100\nbudget.low_watermark = 0.9\n").unwrap_err();
        assert!(
            dotted.message.starts_with("budget.low_watermark: "),
            "{dotted}"
        );
        assert_eq!(dotted.line, Some(2), "{dotted}");
    }

    #[test]
    fn duplicate_stage_names_and_bad_provider_are_rejected() {
        let err = parse(
            "[[stage]]\nname = \"a\"\nplugin = \"x\"\n[[stage]]\nname = \"a\"\nplugin = \"y\"\n",
        )
        .unwrap_err();
        assert!(err.message.contains("used by an earlier stage"), "{err}");
        assert_eq!(err.line, Some(4));
        let err = parse("[provider]\nkind = \"magic\"\n").unwrap_err();
        assert!(err.message.contains("unknown provider \"magic\""), "{err}");
        assert!(err.message.starts_with("provider.kind: "), "{err}");
        assert_eq!(err.line, Some(2));
        // Every kind a file may name reads back as itself.
        for kind in ProviderKind::ALL {
            let text = format!("[provider]\nkind = \"{kind}\"\n");
            let read: Result<ChainFile, _> = toml::from_str(&text);
            assert_eq!(read.unwrap().provider.kind, kind);
        }
        let err = parse("[provider]\nkind = \"scripted\"\n").unwrap_err();
        assert!(err.message.contains("provider.script"), "{err}");
    }

    #[test]
    fn http_providers_are_accepted_with_their_fields() {
        let f = parse(
            "[provider]\nkind = \"anthropic\"\nmodel = \"claude-x\"\napi_key_env = \"ANTHROPIC_API_KEY\"\nstructured_output = \"tool\"\n",
        )
        .unwrap();
        assert_eq!(f.file.provider.model.as_deref(), Some("claude-x"));
        assert_eq!(f.file.provider.max_retries, 4);
        parse("[provider]\nkind = \"openai\"\nmodel = \"llama\"\nbase_url = \"http://127.0.0.1:8080/v1\"\n")
            .unwrap();
    }

    #[test]
    fn allowed_hosts_compare_without_port_case_brackets_or_final_dot() {
        assert_eq!(host_name("Example.COM.:8080"), "example.com");
        assert_eq!(host_name("[::1]:7474"), "::1");
        assert_eq!(host_name("[::1]"), "::1");
        assert_eq!(host_name("127.0.0.1"), "127.0.0.1");
        assert_eq!(host_name("user@tamp.internal:1"), "tamp.internal");
        let http = HttpConfig {
            allowed_hosts: vec!["Tamp.Internal".into(), "10.0.0.5:7474".into()],
        };
        assert!(http.allows("tamp.internal") && http.allows("10.0.0.5"));
        assert!(!http.allows("evil.example.com"));
        let any = HttpConfig {
            allowed_hosts: vec!["*".into()],
        };
        assert!(any.allows("evil.example.com"));
        assert!(http.validate().is_ok());
        let err = parse("[http]\nallowed_hosts = [\"ok.example\", \"http://x\"]\n").unwrap_err();
        assert!(
            err.message
                .starts_with("http.allowed_hosts: entry 1 (\"http://x\")"),
            "{err}"
        );
        assert_eq!(err.line, Some(2), "{err}");
        for bad in ["", "a b", "x/y"] {
            let http = HttpConfig {
                allowed_hosts: vec![bad.into()],
            };
            assert!(http.validate().is_err(), "{bad}");
        }
    }

    #[test]
    fn provider_errors_name_the_field_and_line() {
        let cases = [
            (
                "kind = \"anthropic\"\napi_key_env = \"K\"\n",
                "provider.model: required when kind = \"anthropic\"",
                1,
            ),
            (
                "kind = \"openai\"\nmodel = \"  \"\n",
                "provider.model: must not be empty",
                3,
            ),
            (
                "kind = \"anthropic\"\nmodel = \"m\"\n",
                "provider.api_key_env: required when kind = \"anthropic\"",
                1,
            ),
            (
                "kind = \"openai\"\nmodel = \"m\"\nstructured_output = \"json\"\n",
                "provider.structured_output: unknown mode \"json\"",
                4,
            ),
            (
                "kind = \"openai\"\nmodel = \"m\"\nstructured_output = \"tool\"\n",
                "provider.structured_output: \"tool\" is for kind = \"anthropic\"",
                4,
            ),
            (
                "kind = \"openai\"\nmodel = \"m\"\nbase_url = \"127.0.0.1:8080\"\n",
                "provider.base_url: must be an http:// or https:// URL",
                4,
            ),
            (
                "kind = \"extractive\"\nmodel = \"m\"\n",
                "provider.model: only for kind = \"anthropic\" or \"openai\"",
                3,
            ),
            (
                "retry_initial_ms = 100\nretry_max_ms = 50\n",
                "provider.retry_max_ms: must be at least retry_initial_ms (50 < 100)",
                3,
            ),
            (
                "timeout_secs = 0\n",
                "provider.timeout_secs: must be a positive number of seconds",
                2,
            ),
            (
                "timeout_secs = inf\n",
                "provider.timeout_secs: must be a positive number of seconds (at least 1 ns), \
                 at most 2592000 (30 days), got inf",
                2,
            ),
            (
                "max_concurrency = 0\n",
                "provider.max_concurrency: must be between 1 and 100000, got 0",
                2,
            ),
            (
                "max_concurrency = 9223372036854775807\n",
                "provider.max_concurrency: must be between 1 and 100000",
                2,
            ),
            (
                "kind = \"replay\"\n",
                "provider.answers: required when kind = \"replay\"",
                2,
            ),
            (
                "kind = \"openai\"\nmodel = \"m\"\nanswers = \"a.jsonl\"\n",
                "provider.answers: only for kind = \"replay\"; to write answers to a file, use `record`",
                4,
            ),
            (
                "kind = \"replay\"\nanswers = \"a.jsonl\"\nrecord = \"b.jsonl\"\n",
                "provider.record: not with kind = \"replay\"",
                4,
            ),
            (
                "kind = \"replay\"\nanswers = \"a.jsonl\"\nmodel = \"m\"\n",
                "provider.model: only for kind = \"anthropic\" or \"openai\"",
                4,
            ),
            (
                "kind = \"openai\"\nmodel = \"m\"\nrecord = \"\"\n",
                "provider.record: must not be empty",
                4,
            ),
        ];
        for (body, want, line) in cases {
            let err = parse(&format!("[provider]\n{body}")).unwrap_err();
            assert!(err.message.starts_with(want), "{body}: {err}");
            assert_eq!(err.line, Some(line), "{body}: {err}");
        }
    }

    #[test]
    fn a_provider_is_built_from_its_own_table_and_its_errors_are_located_by_the_file() {
        let file =
            parse("[provider]\nkind = \"scripted\"\n\nscript = \"no-such-script.json\"\n").unwrap();
        let dir = std::env::temp_dir().join(format!("tamp-no-such-dir-{}", std::process::id()));
        // The builder knows no file: the error names the key, and the path from `base_dir`.
        match crate::providers::from_config(&file.file.provider, &dir) {
            Ok(_) => panic!("a missing script builds no provider"),
            Err(e) => {
                assert_eq!((e.table, e.key), ("provider", "script"), "{e}");
                let script = dir.join("no-such-script.json").display().to_string();
                assert!(e.message.contains(&script), "{e}");
            }
        }
        // The chain file puts it at the key's line.
        match file.provider() {
            Ok(_) => panic!("a missing script builds no provider"),
            Err(e) => {
                assert_eq!(e.line, Some(4), "{e}");
                assert!(e.message.starts_with("provider.script: "), "{e}");
            }
        }
    }

    #[test]
    fn record_and_replay_are_accepted_on_their_kinds() {
        let f = parse("[provider]\nkind = \"openai\"\nmodel = \"m\"\nrecord = \"answers.jsonl\"\n")
            .unwrap();
        assert_eq!(
            f.file.provider.record.as_deref(),
            Some(Path::new("answers.jsonl"))
        );
        parse("[provider]\nkind = \"scripted\"\nscript = \"s.json\"\nrecord = \"r.jsonl\"\n")
            .unwrap();
        let f = parse("[provider]\nkind = \"replay\"\nanswers = \"answers.jsonl\"\n").unwrap();
        assert!(!f.file.provider.retries());
        assert!(parse("[provider]\nkind = \"magic\"\n")
            .unwrap_err()
            .message
            .contains("\"openai\" or \"replay\""));
    }

    #[test]
    fn a_key_pasted_into_api_key_env_is_not_echoed() {
        let err = parse(
            "[provider]\nkind = \"anthropic\"\nmodel = \"m\"\napi_key_env = \"sk-ant-api03-secret\"\n",
        )
        .unwrap_err();
        assert!(
            err.message
                .starts_with("provider.api_key_env: must be the name of an environment variable"),
            "{err}"
        );
        assert!(!err.to_string().contains("secret"), "{err}");
    }
}
