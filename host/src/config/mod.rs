//! The chain file: budget, tokenizer, provider, store and stages, in TOML.
//!
//! Parsing rejects unknown keys; every error names the file, the line where it can, and the
//! field. Relative paths in the file are relative to the file's own directory. See
//! `docs/configuration.md` for every key.

use std::ops::Range;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use toml::Spanned;

#[cfg(feature = "deferred")]
mod batch_check;
pub mod proxy;

use crate::bounded;
use crate::budget::BudgetConfig;
use crate::config_error::{is_env_var_name, ConfigError, FieldError};
use crate::deferred::config::BatchConfig;
use crate::providers::config::{ProviderConfig, ProviderKind, MAX_LLM_CONCURRENCY};
use crate::store::config::{CacheConfig, StoreConfig, StoreKind, DEFAULT_STORE_PATH};
use crate::store::StoreSpec;
use proxy::ProxyConfig;

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
    pub threads: crate::store::threads::ThreadsConfig,
    /// `tamp proxy`'s upstreams and fallback (ignored by the other commands).
    #[serde(default)]
    pub proxy: ProxyConfig,
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

/// `[http]`: what `tamp serve` and `tamp proxy` answer beyond loopback (see
/// `http::access`, and docs/security.md).
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
    crate::loader::DEFAULT_STAGE_TIMEOUT_SECS
}

impl StageFile {
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

/// A parsed chain file with what is needed to point errors at its lines.
#[derive(Debug, Clone)]
pub struct LoadedChainFile {
    pub file: ChainFile,
    pub path: PathBuf,
    pub source: String,
}

impl LoadedChainFile {
    /// Reads and parses `path`, checking everything that needs no plugin. Only a regular file
    /// is read, within [`crate::input_file::Limit::CHAIN_FILE`] (see [`crate::input_file`]).
    pub fn read(path: &Path) -> Result<Self, ConfigError> {
        let source = crate::input_file::read_to_string(path, crate::input_file::Limit::CHAIN_FILE)
            .map_err(|e| ConfigError {
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
        self.file
            .proxy
            .validate(&self.file.budget)
            .map_err(at_field)?;
        self.file.http.validate().map_err(at_field)?;
        self.file.threads.validate().map_err(at_field)?;
        if let Err(e) = self
            .file
            .tokenizer
            .encoding
            .parse::<crate::tokens::Encoding>()
        {
            return Err(self.error_at_key(
                "tokenizer",
                "encoding",
                format!("tokenizer.encoding: {e}"),
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
                    format!(
                        "must be an http:// or https:// URL, got \"{}\"",
                        crate::redact::url(url)
                    ),
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
        if let Some(price) = &provider.price {
            if let Err(e) = price.validate() {
                return Err(self.error(
                    key_line(&self.source, &["provider", "price", e.key]),
                    e.to_string(),
                ));
            }
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

    /// The deferred-summary worker `[batch]` (and `[provider]`) describe, over `queue`
    /// (see [`crate::deferred::worker::batches_client`]); the sync fallback is the chain's
    /// provider, when `batch.sync_fallback`.
    /// Checks what [`batch_worker`](Self::batch_worker) takes from the chain file (the
    /// Batches client's model and key and, with `batch.sync_fallback`, the provider) without
    /// a queue, so that a command reports a config error before it opens the store and
    /// creates no store file for a chain it cannot run.
    #[cfg(feature = "deferred")]
    pub fn check_batch_worker(&self) -> Result<(), ConfigError> {
        batch_check::check(self)
    }

    #[cfg(feature = "deferred")]
    pub fn batch_worker(
        &self,
        queue: std::sync::Arc<dyn crate::store::queue::DeferredQueue>,
    ) -> Result<crate::deferred::Worker, ConfigError> {
        let batch = &self.file.batch;
        let provider = &self.file.provider;
        let client = crate::deferred::worker::batches_client(batch, provider)
            .map_err(|e| self.at_field(e))?;
        let fallback = if batch.sync_fallback {
            Some((self.provider()?, provider.overall_timeout()))
        } else {
            None
        };
        Ok(crate::deferred::Worker::new(
            queue,
            client,
            fallback,
            batch.clone(),
        ))
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

    /// The line of `key = ...` in stage `index` (e.g. `plugin`), else where the stage starts.
    pub fn stage_key_line(&self, index: usize, key: &str) -> Option<usize> {
        let element = index.to_string();
        key_line(&self.source, &["stage", element.as_str(), key]).or_else(|| self.stage_line(index))
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
    fn threads_section_errors_name_the_field_and_line() {
        assert!(parse("[threads]\nttl_secs = 3600\nmax_threads = 10\n").is_ok());
        for (text, field, line) in [
            ("[threads]\nttl_secs = 0\n", "threads.ttl_secs", 2),
            ("[threads]\n\nttl_secs = 99999999\n", "threads.ttl_secs", 3),
            ("[threads]\nmax_threads = 0\n", "threads.max_threads", 2),
        ] {
            let err = parse(text).unwrap_err();
            assert!(err.message.starts_with(&format!("{field}: ")), "{err}");
            assert_eq!(err.line, Some(line), "{err}");
        }
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
        // The issue's form: an inline table (before any `[table]` header, as TOML requires).
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

    #[tokio::test]
    async fn the_recording_paths_are_relative_to_the_chain_files_folder() {
        let dir = std::env::temp_dir().join(format!("tamp-config-record-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let answers = dir.join("answers.jsonl");
        let chain = dir.join("chain.toml");
        let script = dir.join("script.json");
        std::fs::write(&script, r#"{"default": {"text": "recorded"}}"#).unwrap();
        let recorder = LoadedChainFile::parse(
            &chain,
            "[provider]\nkind = \"scripted\"\nscript = \"script.json\"\nrecord = \"answers.jsonl\"\n"
                .into(),
        )
        .unwrap();
        let provider = recorder.provider().unwrap();
        assert!(!provider.cacheable());
        let request = tamp_plugin_api::LlmRequest::new("", "hello", 10);
        provider.complete(&request).await.unwrap();

        let replayer = LoadedChainFile::parse(
            &chain,
            "[provider]\nkind = \"replay\"\nanswers = \"answers.jsonl\"\n".into(),
        )
        .unwrap();
        let replay = replayer.provider().unwrap();
        assert_eq!(replay.name(), "replay");
        assert_eq!(
            replay.complete(&request).await.unwrap().text.as_str(),
            "recorded"
        );

        std::fs::write(&answers, "{}\n").unwrap();
        let err = match replayer.provider() {
            Ok(_) => panic!("a malformed recording is refused"),
            Err(e) => e,
        };
        assert_eq!(err.line, Some(3), "{err}");
        assert!(
            err.message.starts_with(&format!(
                "provider.answers: {}:1: not a recorded answer",
                answers.display()
            )),
            "{err}"
        );
    }
}
