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
pub mod console;
pub mod proxy;

use crate::bounded;
use crate::budget::BudgetConfig;
use crate::config_error::{ConfigError, FieldError};
use crate::deferred::config::BatchConfig;
use crate::providers::config::ProviderConfig;
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
    /// What `tamp serve` and `tamp proxy` record for their console, and its prices.
    #[serde(default)]
    pub console: console::ConsoleConfig,
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
        self.file.provider.validate().map_err(|e| {
            let path: Vec<&str> = std::iter::once("provider").chain(e.at).collect();
            self.error(key_line(&self.source, &path), e.message)
        })?;
        self.file.store.validate().map_err(at_field)?;
        self.file.batch.validate().map_err(at_field)?;
        self.file
            .proxy
            .validate(&self.file.budget)
            .map_err(at_field)?;
        self.file.http.validate().map_err(at_field)?;
        self.file.console.validate().map_err(at_field)?;
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
mod tests;
