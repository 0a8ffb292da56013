//! The strategy chain: stages run in order, each on the previous one's output.
//!
//! A stage that errors, panics, times out, or returns output that breaks an invariant is
//! rolled back: the chain goes on from the conversation that stage received, and the report
//! says what happened. The chain stops early once the conversation is under the low watermark.

use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::future::Either;
use tamp_plugin_api::sdk::{self, Unit};
use tamp_plugin_api::{
    Budget, CompactRequest, Conversation, HostServices as _, Message, Shared, StageReport,
    StrategyBox, Usage,
};
use tokio::sync::Semaphore;

use crate::budget::BudgetConfig;
use crate::config::{LoadedChainFile, Trigger};
use crate::config_error::ConfigError;
use crate::digest::config_hash;
use crate::edits;
use crate::invariants::{check_no_growth, infer_format, Violation};
use crate::loader::{load_trusted, resolve_plugin, LoadError, LoadedPlugin, PluginTrust};
use crate::providers::PriceConfig;
use crate::providers::{ExtractiveSummarizer, Provider};
use crate::services::{HostContext, ProgressFn, StageIdentity, StageServices};
use crate::stage_guard::{self, GuardedFailure};
use crate::store::threads::{
    common_prefix, continuation, prefix_hashes, remarked, ThreadKey, ThreadReport, ThreadState,
    ThreadStore, ThreadsConfig,
};
use crate::store::{
    ActivityStore, DeferredQueue, PageSearch, PageStore, SqliteStore, SummaryCache,
};
use crate::summary_mac::SummaryKey;
use crate::tokens::TokenCounter;
use crate::wire::{check_tool_pairing, WireError, WireFormat};

mod report;

use report::invariant_failure;
pub use report::{
    BudgetReport, ChainReport, Compacted, OpaqueCount, StageFailure, StageFailureKind, StageRun,
    StageStatus,
};

/// The log target of a stage rolled back: a server's log says it at warn level; a command
/// that prints the report itself (`tamp compact`) turns this target down, so the rollback is
/// not told twice.
pub const ROLLBACK_LOG_TARGET: &str = "tamp::rollback";

/// Why a chain could not be built, or a conversation not compacted at all.
///
/// The wrapped errors are not reported as a `source`: their text is already in the message,
/// and `{:#}` (anyhow's chain) would print it twice.
#[derive(Debug, thiserror::Error)]
pub enum ChainError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Load(#[from] LoadError),
    #[error("invalid conversation: {0}")]
    InvalidInput(WireError),
    /// The budget a request gave (`CompactOptions::budget`) breaks a rule: the caller's
    /// mistake.
    #[error("{0}")]
    InvalidBudget(crate::config_error::FieldError),
    /// The chain could not be built (its budget, threads or tokenizer).
    #[error("{0}")]
    Setup(String),
    /// The page store could not be opened or used where the chain file does not name it
    /// (`--store`, the built-in in-memory store): the server's fault, not the caller's.
    #[error("{0}")]
    Store(crate::store::StoreError),
}

impl From<WireError> for ChainError {
    fn from(e: WireError) -> Self {
        ChainError::InvalidInput(e)
    }
}

/// One stage: a plugin instance, its config and its trigger.
pub struct Stage {
    pub name: String,
    pub plugin: Arc<LoadedPlugin>,
    pub config: serde_json::Value,
    pub trigger: Trigger,
    pub timeout: Duration,
    /// The hash of `config` (key order ignored): part of every summary-cache key.
    pub config_hash: String,
    strategy: Arc<StrategyBox>,
}

/// A built chain, ready to compact conversations concurrently.
pub struct Chain {
    stages: Vec<Stage>,
    budget: BudgetConfig,
    price: Option<PriceConfig>,
    ctx: Arc<HostContext>,
    threads: Option<(Arc<dyn ThreadStore>, ThreadsConfig)>,
    /// The store's search index and page owners (what `recall` and `search` read).
    search: Option<Arc<dyn PageSearch>>,
    /// The store's activity record (what the servers' console reads and writes).
    activity: Option<Arc<dyn ActivityStore>>,
    /// The key whose MACs make a summary tamp's ([`crate::summary_mac`]): the store's.
    summaries: SummaryKey,
    /// What makes this chain another chain ([`crate::digest::chain_identity`]): a thread's last
    /// answer made by another is not continued.
    identity: String,
}

/// Per-call choices.
#[derive(Debug, Clone, Default)]
pub struct CompactOptions {
    /// The wire format the conversation came in (decides the tool-pairing rules checked);
    /// inferred from the messages when absent.
    pub format: Option<WireFormat>,
    /// Run over-budget stages even when the conversation is under the high watermark.
    pub force: bool,
    /// Overrides the chain file's budget for this call.
    pub budget: Option<BudgetConfig>,
    /// Continue the conversation's thread from its last compaction when the chain keeps
    /// thread states (see [`crate::store::threads`]). `tamp serve` and `tamp compact` set it unless
    /// the caller opts out.
    pub thread_continuity: bool,
}

/// Builds a [`Chain`] from parts; [`Chain::from_file`] uses it for chain files.
pub struct ChainBuilder {
    budget: BudgetConfig,
    provider: Arc<dyn Provider>,
    store: Option<Arc<dyn PageStore>>,
    /// `None`: the default (a cache in the built-in store when no store is given);
    /// `Some(None)`: no cache.
    cache: Option<Option<Arc<dyn SummaryCache>>>,
    /// `None`: the default (the built-in store's queue when no store is given);
    /// `Some(None)`: no queue.
    queue: Option<Option<Arc<dyn DeferredQueue>>>,
    price: Option<PriceConfig>,
    tokens: Option<Arc<TokenCounter>>,
    llm_concurrency: usize,
    llm_timeout: Duration,
    progress: Option<ProgressFn>,
    stages: Vec<Stage>,
    threads: Option<(Arc<dyn ThreadStore>, ThreadsConfig)>,
    search: Option<Arc<dyn PageSearch>>,
    activity: Option<Arc<dyn ActivityStore>>,
}

impl ChainBuilder {
    pub fn new(budget: BudgetConfig) -> Self {
        ChainBuilder {
            budget,
            provider: Arc::new(ExtractiveSummarizer::default()),
            store: None,
            cache: None,
            queue: None,
            price: None,
            tokens: None,
            llm_concurrency: 16,
            llm_timeout: Duration::from_secs(120),
            progress: None,
            stages: Vec::new(),
            threads: None,
            search: None,
            activity: None,
        }
    }

    /// Keeps thread states in `store` (see [`crate::store::threads`]); without this call, or with
    /// `config.enabled` false, every call is compacted from what it sends.
    pub fn threads(mut self, store: Arc<dyn ThreadStore>, config: ThreadsConfig) -> Self {
        self.threads = config.enabled.then_some((store, config));
        self
    }

    pub fn provider(mut self, provider: Arc<dyn Provider>) -> Self {
        self.provider = provider;
        self
    }

    pub fn store(mut self, store: Arc<dyn PageStore>) -> Self {
        self.store = Some(store);
        self
    }

    /// The search index and page owners of the store given to [`ChainBuilder::store`] (the
    /// built-in store's when no store is given).
    pub fn search(mut self, search: Arc<dyn PageSearch>) -> Self {
        self.search = Some(search);
        self
    }

    /// The activity record of the store given to [`ChainBuilder::store`] (the built-in
    /// store's when no store is given).
    pub fn activity(mut self, activity: Arc<dyn ActivityStore>) -> Self {
        self.activity = Some(activity);
        self
    }

    /// The summary cache (`None`: no cache). Without this call, a chain with the built-in
    /// in-memory store caches in it, and a chain given a store has no cache.
    pub fn cache(mut self, cache: Option<Arc<dyn SummaryCache>>) -> Self {
        self.cache = Some(cache);
        self
    }

    /// The deferred queue (`None`: no queue, so plugins are offered no deferred summaries).
    /// Without this call, a chain with the built-in in-memory store queues in it, and a chain
    /// given a store has no queue: the store's pages and its queue are handed over apart, as
    /// [`Store`](crate::store::Store) holds them, so that a wrapped or stand-in page store
    /// does not decide whether deferred work is possible.
    pub fn queue(mut self, queue: Option<Arc<dyn DeferredQueue>>) -> Self {
        self.queue = Some(queue);
        self
    }

    /// Prices that turn the report's token usage into an estimated cost.
    pub fn price(mut self, price: PriceConfig) -> Self {
        self.price = Some(price);
        self
    }

    pub fn tokens(mut self, tokens: Arc<TokenCounter>) -> Self {
        self.tokens = Some(tokens);
        self
    }

    /// At most `n` LLM calls in flight across every compaction on this chain.
    pub fn llm_concurrency(mut self, n: usize) -> Self {
        self.llm_concurrency = n.max(1);
        self
    }

    pub fn llm_timeout(mut self, timeout: Duration) -> Self {
        self.llm_timeout = timeout;
        self
    }

    pub fn progress(mut self, progress: ProgressFn) -> Self {
        self.progress = Some(progress);
        self
    }

    /// Adds a stage: validates `config` against the plugin's schema, then instantiates it.
    /// The error says which field is at fault.
    pub fn stage(
        self,
        name: &str,
        plugin: Arc<LoadedPlugin>,
        config: serde_json::Value,
        trigger: Trigger,
        timeout: Duration,
    ) -> Result<Self, StageConfigError> {
        self.sandboxed_stage(
            name,
            plugin,
            config,
            trigger,
            timeout,
            &crate::wasm::WasmLimits::default(),
        )
    }

    /// [`ChainBuilder::stage`], a WebAssembly component's instances held to `limits`.
    pub fn sandboxed_stage(
        mut self,
        name: &str,
        plugin: Arc<LoadedPlugin>,
        config: serde_json::Value,
        trigger: Trigger,
        timeout: Duration,
        limits: &crate::wasm::WasmLimits,
    ) -> Result<Self, StageConfigError> {
        validate_against_schema(&plugin.meta().config_schema, &config)?;
        let strategy = plugin
            .instantiate_stage(&config, limits, timeout)
            .map_err(|e| StageConfigError {
                path: Vec::new(),
                message: format!(
                    "plugin {} refused the config: {}",
                    plugin.meta().name,
                    e.message
                ),
            })?;
        self.stages.push(Stage {
            name: name.to_string(),
            config_hash: config_hash(&config),
            plugin,
            config,
            trigger,
            timeout,
            strategy: Arc::new(strategy),
        });
        Ok(self)
    }

    pub fn build(self) -> Result<Chain, ChainError> {
        self.budget
            .validate()
            .map_err(|e| ChainError::Setup(e.to_string()))?;
        if let Some((_, config)) = &self.threads {
            config
                .validate()
                .map_err(|e| ChainError::Setup(e.to_string()))?;
        }
        let mut search = self.search;
        let mut activity = self.activity;
        let (store, cache, queue) = match self.store {
            Some(store) => (store, self.cache.flatten(), self.queue.flatten()),
            None => {
                let built_in = Arc::new(SqliteStore::in_memory().map_err(ChainError::Store)?);
                search.get_or_insert_with(|| Arc::clone(&built_in) as Arc<dyn PageSearch>);
                activity.get_or_insert_with(|| Arc::clone(&built_in) as Arc<dyn ActivityStore>);
                let cache = match self.cache {
                    Some(explicit) => explicit,
                    None => Some(Arc::clone(&built_in) as Arc<dyn SummaryCache>),
                };
                let queue = match self.queue {
                    Some(explicit) => explicit,
                    None => Some(Arc::clone(&built_in) as Arc<dyn DeferredQueue>),
                };
                (built_in as Arc<dyn PageStore>, cache, queue)
            }
        };
        let tokens = match self.tokens {
            Some(t) => t,
            None => Arc::new(
                TokenCounter::new(crate::tokens::Encoding::O200kBase).map_err(ChainError::Setup)?,
            ),
        };
        // A store that keeps no key (a stand-in `PageStore`): one for this chain's life.
        let summaries = store.summary_key().unwrap_or_else(SummaryKey::random);
        let identity = crate::digest::chain_identity(self.stages.iter().map(|s| {
            let meta = s.plugin.meta();
            let trigger = match s.trigger {
                Trigger::OverBudget => "over_budget",
                Trigger::Always => "always",
            };
            (
                s.name.as_str(),
                meta.name.as_str(),
                meta.version.as_str(),
                trigger,
                s.config_hash.as_str(),
            )
        }));
        Ok(Chain {
            stages: self.stages,
            budget: self.budget,
            price: self.price,
            ctx: Arc::new(HostContext {
                provider: self.provider,
                store,
                cache,
                queue,
                tokens,
                llm_permits: Arc::new(Semaphore::new(self.llm_concurrency)),
                llm_timeout: self.llm_timeout,
                progress: self.progress,
            }),
            threads: self.threads,
            search,
            activity,
            summaries,
            identity,
        })
    }
}

/// How many of the newest messages no stage may touch: `keep_recent`, or, with
/// `keep_recent_tokens`, the newest whole units (a tool exchange with its results, or one
/// message) that fit in that many tokens, whichever is fewer. The newest unit is always
/// protected, so an agent's latest tool result is never summarized away.
fn protected_tail(units: &[Unit], counts: &[u64], budget: &BudgetConfig) -> u32 {
    let Some(limit) = budget.tail_token_limit() else {
        return budget.keep_recent;
    };
    let keep = budget.keep_recent as usize;
    let mut kept = 0usize;
    let mut kept_tokens = 0u64;
    for unit in units.iter().rev() {
        if kept >= keep {
            break;
        }
        let unit_tokens: u64 = counts[unit.range.clone()].iter().sum();
        if kept > 0 && kept_tokens + unit_tokens > limit {
            break;
        }
        kept += unit.range.len();
        kept_tokens += unit_tokens;
    }
    u32::try_from(kept.min(keep)).unwrap_or(budget.keep_recent)
}

/// What the chain reads of its input before any stage runs: each message's tokens and the
/// protected head and tail. Computed once per compaction: hashing every message for the token
/// memo and grouping it into units are a compaction's largest fixed costs. No stage may touch
/// the head or the tail, so their sizes hold for the chain's output too.
struct InputShape {
    tokens: u64,
    /// Messages in the protected tail (`Budget::keep_recent`).
    keep_recent: u32,
    head_tokens: u64,
    tail_tokens: u64,
    tail_messages: usize,
}

impl InputShape {
    fn of(messages: &[Message], budget: &BudgetConfig, tokens: &TokenCounter) -> Self {
        let counts: Vec<u64> = messages.iter().map(|m| tokens.count_message(m)).collect();
        let units = sdk::units(messages);
        let keep_recent = protected_tail(&units, &counts, budget);
        let head = sdk::protected_head(messages);
        let tail_start = sdk::compactable_range_of(messages, &units, keep_recent as usize).end;
        InputShape {
            tokens: counts.iter().sum(),
            keep_recent,
            head_tokens: counts[..head].iter().sum(),
            tail_tokens: counts[tail_start..].iter().sum(),
            tail_messages: messages.len() - tail_start,
        }
    }
}

/// A stage config that does not fit its plugin's schema.
#[derive(Debug, Clone)]
pub struct StageConfigError {
    /// The keys (and array indexes) from the config's root to the field at fault, from the
    /// validator's instance path; for a key the schema does not allow, the key itself. Empty
    /// when no field is known (the plugin refused the config as a whole).
    pub path: Vec<String>,
    pub message: String,
}

impl std::fmt::Display for StageConfigError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

fn validate_against_schema(
    schema: &serde_json::Value,
    config: &serde_json::Value,
) -> Result<(), StageConfigError> {
    let validator = jsonschema::validator_for(schema).map_err(|e| StageConfigError {
        path: Vec::new(),
        message: format!("the plugin's config schema is not valid JSON Schema: {e}"),
    })?;
    if let Some(error) = validator.iter_errors(config).next() {
        let pointer = error.instance_path().to_string();
        let message = if pointer.is_empty() {
            format!("config: {error}")
        } else {
            format!("config{}: {error}", pointer.replace('/', "."))
        };
        let mut path: Vec<String> = error
            .instance_path()
            .iter()
            .map(|segment| segment.to_string())
            .collect();
        let mut message = message;
        // An unknown key is reported at the object that holds it; the key is what to point at,
        // and the keys the object takes are what the author needs next (usually a typo).
        if let jsonschema::error::ValidationErrorKind::AdditionalProperties { unexpected } =
            error.kind()
        {
            path.extend(unexpected.first().cloned());
            let keys = allowed_keys(schema, &error.schema_path().to_string());
            if !keys.is_empty() {
                message.push_str(&format!("; the keys it takes: {}", keys.join(", ")));
            }
        }
        return Err(StageConfigError { path, message });
    }
    Ok(())
}

/// The property names of the schema object holding the `additionalProperties` rule at
/// `schema_path` (a JSON pointer into the schema, ending in `/additionalProperties`), with a
/// `$ref` to the schema's definitions followed once. Empty when it cannot be found.
fn allowed_keys(schema: &serde_json::Value, schema_path: &str) -> Vec<String> {
    let holder = schema_path
        .strip_suffix("/additionalProperties")
        .and_then(|parent| schema.pointer(parent));
    // The validator's path may run through the `$ref` keyword itself (then it names the
    // reference's text) or stop at the object holding it.
    let reference = holder.and_then(|h| h.as_str().or_else(|| h.get("$ref")?.as_str()));
    let holder = match reference {
        Some(reference) => reference
            .strip_prefix('#')
            .and_then(|pointer| schema.pointer(pointer)),
        None => holder,
    };
    let mut keys: Vec<String> = holder
        .and_then(|h| h.get("properties"))
        .and_then(|p| p.as_object())
        .map(|p| p.keys().cloned().collect())
        .unwrap_or_default();
    keys.sort();
    keys
}

/// A plugin path that names no file, said as the chain file wrote it and as it resolved (a
/// relative path is read from the chain file's directory, not the working directory, which is
/// what a user who ran tamp from elsewhere needs to hear). Other errors as they are.
fn missing_plugin(error: LoadError, written: &str, base: &Path) -> String {
    match error {
        LoadError::NotFound { path } if crate::loader::is_path_spec(written) => {
            let resolved = std::path::absolute(&path).unwrap_or(path);
            format!(
                "plugin \"{written}\": no such file {} (a plugin path is relative to the \
                 chain file's directory, {})",
                resolved.display(),
                std::path::absolute(base)
                    .unwrap_or_else(|_| base.to_path_buf())
                    .display()
            )
        }
        other => other.to_string(),
    }
}

/// Settings a caller may impose on a chain built from a file.
#[derive(Clone, Default)]
pub struct FileOverrides {
    /// Use this store file instead of the chain file's.
    pub store_path: Option<PathBuf>,
    pub progress: Option<ProgressFn>,
    /// Refuse a stage without a `sha256` pin (`tamp serve --require-pins`).
    pub require_pins: bool,
    /// Check the chain without creating anything (`tamp check-config`): a SQLite store file
    /// that does not exist yet is not created (see [`crate::store::open_without_creating`]).
    pub check_only: bool,
    /// Wraps the chain file's provider: `tamp eval` hears of each call as it is answered,
    /// for its progress bar.
    pub wrap_provider: Option<ProviderWrap>,
}

/// A provider around a provider (see [`FileOverrides::wrap_provider`]).
pub type ProviderWrap = Arc<dyn Fn(Arc<dyn Provider>) -> Arc<dyn Provider> + Send + Sync>;

impl Chain {
    /// Reads a chain file, loads its plugins, validates every stage config against its
    /// plugin's schema and builds the chain. Errors name the file, line and field.
    pub fn from_file(path: &Path, overrides: FileOverrides) -> Result<Chain, ChainError> {
        let file = LoadedChainFile::read(path)?;
        Self::from_loaded(&file, overrides)
    }

    pub fn from_loaded(
        file: &LoadedChainFile,
        overrides: FileOverrides,
    ) -> Result<Chain, ChainError> {
        let cfg = &file.file;
        let mut provider = file.provider()?;
        if let Some(wrap) = &overrides.wrap_provider {
            provider = wrap(provider);
        }
        let encoding = cfg
            .tokenizer
            .encoding
            .parse()
            .map_err(|e| file.error(None, format!("tokenizer.encoding: {e}")))?;
        let tokens =
            TokenCounter::new(encoding).map_err(|e| file.error(None, format!("tokenizer: {e}")))?;
        let spec = file.store_spec(overrides.store_path.as_deref())?;
        let opened = if overrides.check_only {
            crate::store::open_without_creating(&spec)
        } else {
            crate::store::open(&spec)
        };
        let store = opened.map_err(|e| match &overrides.store_path {
            // `--store`: nothing in the file to point at.
            Some(_) => ChainError::Store(e),
            None => file.store_error(e.to_string()).into(),
        })?;
        let cache = cfg.cache.enabled.then(|| Arc::clone(&store.cache));
        let mut builder = ChainBuilder::new(cfg.budget)
            .provider(provider)
            .threads(store.threads, cfg.threads)
            .store(store.pages)
            .search(store.search)
            .activity(store.activity)
            .cache(cache)
            .queue(Some(store.queue))
            .tokens(Arc::new(tokens))
            .llm_concurrency(cfg.provider.max_concurrency)
            .llm_timeout(cfg.provider.overall_timeout());
        if let Some(price) = cfg.provider.price {
            builder = builder.price(price);
        }
        if let Some(p) = overrides.progress {
            builder = builder.progress(p);
        }
        let base = file.base_dir();
        let allow_dirs = file.allow_dirs()?;
        for (i, spanned) in cfg.stages.iter().enumerate() {
            let stage = spanned.get_ref();
            // Each error on the line of the key at fault (`plugin =`, `sha256 =`).
            let stage_error = |key: &str, e: &dyn std::fmt::Display| {
                file.error(
                    file.stage_key_line(i, key),
                    format!("stage \"{}\": {e}", stage.name),
                )
            };
            let path = resolve_plugin(&stage.plugin, &base, &cfg.plugin_dirs)
                .map_err(|e| stage_error("plugin", &missing_plugin(e, &stage.plugin, &base)))?;
            if overrides.require_pins && stage.sha256.is_none() {
                return Err(stage_error(
                    "plugin",
                    &format_args!(
                        "sha256: required (--require-pins), and this stage has no pin; \
                         `tamp plugins hash {}` prints the line to add",
                        path.display()
                    ),
                )
                .into());
            }
            let trust = PluginTrust {
                sha256: stage.sha256.clone(),
                allow_dirs: allow_dirs.clone(),
            };
            let plugin = load_trusted(&path, &trust).map_err(|e| {
                let key = match e {
                    LoadError::PinMismatch { .. } => "sha256",
                    _ => "plugin",
                };
                stage_error(key, &e)
            })?;
            let limits = stage.wasm.unwrap_or_default().over(cfg.plugins.wasm);
            builder = builder
                .sandboxed_stage(
                    &stage.name,
                    plugin,
                    stage.config_json(),
                    stage.trigger,
                    stage.timeout(),
                    &limits,
                )
                .map_err(|e| {
                    file.error(
                        file.stage_config_line(i, &e.path),
                        format!("stage \"{}\": {}", stage.name, e.message),
                    )
                })?;
        }
        builder.build()
    }

    pub fn stages(&self) -> &[Stage] {
        &self.stages
    }

    pub fn budget(&self) -> &BudgetConfig {
        &self.budget
    }

    pub fn tokens(&self) -> &TokenCounter {
        &self.ctx.tokens
    }

    pub fn store(&self) -> &Arc<dyn PageStore> {
        &self.ctx.store
    }

    /// What makes this chain another chain, for thread continuity (a hex digest of its
    /// stages).
    pub fn identity(&self) -> &str {
        &self.identity
    }

    /// The store's search index and page owners, when the chain was given them (a chain
    /// built from a file always is).
    pub fn search(&self) -> Option<&Arc<dyn PageSearch>> {
        self.search.as_ref()
    }

    /// The store's activity record, when the chain was given it (a chain built from a file
    /// always is).
    pub fn activity(&self) -> Option<&Arc<dyn ActivityStore>> {
        self.activity.as_ref()
    }

    /// Gives every summary in `messages` this chain's MAC, so that [`Chain::compact`] reads
    /// them as tamp's own: for a program embedding the chain that keeps summaries it made (or
    /// builds them itself). Without it, a summary that no chain of this store wrote is read as
    /// text ([`crate::summary_mac`]).
    pub fn seal_summaries(&self, messages: &mut [Message]) {
        self.summaries.seal(messages);
    }

    /// The deferred queue this chain's stages queue into, when it has one.
    pub fn queue(&self) -> Option<&Arc<dyn DeferredQueue>> {
        self.ctx.queue.as_ref()
    }

    /// The most tokens a conversation may have and certainly be left as it is by an unforced
    /// [`Chain::compact`] with the chain's own budget, thread continuity aside: any number
    /// for a chain with no stages, the high watermark when every stage triggers over budget,
    /// `None` when a stage runs on every call.
    pub fn unchanged_up_to(&self) -> Option<u64> {
        self.unchanged_up_to_with(&self.budget)
    }

    /// [`Chain::unchanged_up_to`] with `budget`.
    pub fn unchanged_up_to_with(&self, budget: &BudgetConfig) -> Option<u64> {
        let mut limit = u64::MAX;
        for stage in &self.stages {
            match stage.trigger {
                Trigger::OverBudget => limit = limit.min(budget.high_tokens()),
                Trigger::Always => return None,
            }
        }
        Some(limit)
    }

    /// Whether a stage could act on `messages` in a call with `options` (counting them, which
    /// the call does anyway: the count is remembered).
    fn may_act(&self, messages: &[Message], options: &CompactOptions) -> bool {
        if options.force {
            return true;
        }
        match self.unchanged_up_to_with(&options.budget.unwrap_or(self.budget)) {
            None => true,
            Some(u64::MAX) => false,
            Some(limit) => self.ctx.tokens.count_messages(messages) > limit,
        }
    }

    /// How the chain names threads when it keeps thread states (see [`crate::store::threads`]);
    /// `None` when it keeps none.
    pub fn thread_config(&self) -> Option<&ThreadsConfig> {
        self.threads.as_ref().map(|(_, config)| config)
    }

    /// Whether the thread of `thread_id` has a stored answer that [`Chain::compact`] with
    /// thread continuity would continue from. A store that cannot be read counts as having
    /// one: the caller then takes the path that reports its error.
    pub async fn has_thread_state(&self, thread_id: &str) -> bool {
        let Some((store, config)) = &self.threads else {
            return false;
        };
        let Some(key) = ThreadKey::of(Some(thread_id), &[], false) else {
            return false;
        };
        !matches!(store.get_thread(&key.key, config.ttl_secs).await, Ok(None))
    }

    /// Runs the chain on `conversation`, or, with `options.thread_continuity`, on the
    /// thread's last answer plus what is new since (see [`crate::store::threads`]). An invalid
    /// conversation is an error; a stage that fails is rolled back and reported, never an
    /// error of the whole call.
    ///
    /// A function returning the future rather than an `async fn`: the choice of path is made
    /// before the future exists, so the future holds the conversation once, in the path
    /// taken (an `async fn` keeps its arguments beside the futures it awaits).
    pub fn compact<'a>(
        &'a self,
        mut conversation: Conversation,
        options: &'a CompactOptions,
    ) -> impl Future<Output = Result<Compacted, ChainError>> + Send + 'a {
        // Before anything reads it (the thread's key included): what only looks like one of
        // tamp's summaries is the text it is from here on.
        let unrecognized = self
            .summaries
            .recognize(conversation.messages.as_mut_slice());
        let unrecognized = u32::try_from(unrecognized).unwrap_or(u32::MAX);
        let thread = self
            .threads
            .as_ref()
            .filter(|_| options.thread_continuity)
            .and_then(|(store, config)| {
                let key = ThreadKey::of(
                    conversation.thread_id(),
                    &conversation.messages,
                    config.derive_key,
                )?;
                Some((store.as_ref(), config, key))
            });
        match thread {
            None => Either::Left(self.run_chain(conversation, options, unrecognized)),
            // Boxed: the thread's state is then not part of every compaction's in-flight
            // state.
            Some((store, config, key)) => Either::Right(Box::pin(self.continue_thread(
                conversation,
                options,
                (store, config, key),
                unrecognized,
            ))),
        }
    }

    /// [`Chain::compact`] with thread continuity, for the thread of `key`.
    async fn continue_thread(
        &self,
        conversation: Conversation,
        options: &CompactOptions,
        (store, config, key): (&dyn ThreadStore, &ThreadsConfig, ThreadKey),
        unrecognized: u32,
    ) -> Result<Compacted, ChainError> {
        // Checked before anything is read or stored for it.
        let format = options
            .format
            .unwrap_or_else(|| infer_format(&conversation.messages));
        check_tool_pairing(&conversation.messages, format)?;
        let mut error = None;
        let mut refused = false;
        let previous = match store.get_thread(&key.key, config.ttl_secs).await {
            Ok(state) => state,
            // Altered in the store: not a word of it is used, and this call's answer, stored
            // below, replaces it.
            Err(e) if e.is_damaged() => {
                tracing::warn!(
                    "thread state refused, the thread starts again from the request's raw \
                     history: {e}"
                );
                error = Some(e.to_string());
                refused = true;
                None
            }
            Err(e) => {
                tracing::warn!("thread state not read, compacting from the request: {e}");
                error = Some(e.to_string());
                None
            }
        };
        // A last answer another chain made (the chain file edited, or another chain file on
        // the same store) is not continued: the request starts from its raw history.
        let started_over = previous
            .as_ref()
            .filter(|state| state.chain != self.identity)
            .map(|_| "its last answer was made by another chain".to_string());
        let previous = previous.filter(|state| state.chain == self.identity);
        // The request's prefix hashes (every message serialized and hashed): to continue from
        // a stored answer, or to store this call's. Not made for a request with no stored
        // answer that no stage can act on, as most of an agent's requests are.
        let hashes = (previous.is_some() || self.may_act(&conversation.messages, options))
            .then(|| prefix_hashes(&conversation.messages));
        let resumed = previous
            .as_ref()
            .zip(hashes.as_ref())
            .and_then(|(s, hashes)| continuation(s, hashes));
        let raw_len = conversation.messages.len();
        let covered = previous.as_ref().map_or(0, |s| s.covered as usize);
        let input = match resumed {
            Some(output) => {
                // The answer with the request's own marks (see `threads::remarked`).
                let mut messages = remarked(output, &conversation.messages[..covered]);
                // The request's new messages are moved, not copied: the rest of it is dropped.
                let raw: Vec<Message> = conversation.messages.into();
                messages.extend(raw.into_iter().skip(covered));
                Conversation {
                    thread_id: conversation.thread_id,
                    messages: messages.into(),
                    metadata_json: conversation.metadata_json,
                }
            }
            None => conversation,
        };
        let mut compacted = self.run_chain(input, options, unrecognized).await?;
        let acted = compacted
            .report
            .stages
            .iter()
            .any(|r| r.status == StageStatus::Acted);
        let mut stored = false;
        // `hashes` is there whenever a stage could act (`may_act`).
        if let (true, Some(hashes)) = (acted, &hashes) {
            let state = ThreadState {
                covered: raw_len as u64,
                prefix_hash: hashes[raw_len].clone(),
                output: compacted.conversation.messages.to_vec(),
                chain: self.identity.clone(),
            };
            match store.put_thread(&key.key, &state, config.limits()).await {
                Ok(()) => stored = true,
                Err(e) => {
                    tracing::warn!("thread state not stored: {e}");
                    error.get_or_insert(e.to_string());
                }
            }
        }
        let kept = previous.as_ref().map_or(0, |p| {
            common_prefix(&p.output, &compacted.conversation.messages)
        });
        let prefix_kept_tokens = self
            .ctx
            .tokens
            .count_messages(&compacted.conversation.messages[..kept]);
        if resumed.is_some() {
            compacted.report.reason = format!(
                "thread continued from its last answer ({covered} message(s) of the request \
                 stand behind it); {}",
                compacted.report.reason
            );
        } else if let Some(why) = &started_over {
            compacted.report.reason = format!(
                "thread started over from the request's raw history ({why}); {}",
                compacted.report.reason
            );
        }
        compacted.report.thread = Some(ThreadReport {
            key: if key.derived { "derived" } else { "given" },
            continued: resumed.is_some(),
            messages_covered: if resumed.is_some() { covered as u64 } else { 0 },
            prefix_kept_tokens,
            stored,
            state_refused: refused,
            started_over,
            error,
        });
        Ok(compacted)
    }

    /// Runs the stages on `conversation` (whose summaries [`Chain::compact`] has checked,
    /// `unrecognized` of them read as text), and gives the summaries of what it returns
    /// their MACs.
    async fn run_chain(
        &self,
        conversation: Conversation,
        options: &CompactOptions,
        unrecognized: u32,
    ) -> Result<Compacted, ChainError> {
        let started = Instant::now();
        let mut conversation = conversation;
        // Believed already (or stored by this chain): the stages, and the pages they archive,
        // see summaries without their MACs, so that nothing they make depends on the key.
        crate::summary_mac::strip(conversation.messages.as_mut_slice());
        let format = options
            .format
            .unwrap_or_else(|| infer_format(&conversation.messages));
        check_tool_pairing(&conversation.messages, format)?;
        let budget_cfg = options.budget.unwrap_or(self.budget);
        budget_cfg.validate().map_err(ChainError::InvalidBudget)?;
        let (high, low) = (budget_cfg.high_tokens(), budget_cfg.low_tokens());

        let shape = InputShape::of(&conversation.messages, &budget_cfg, &self.ctx.tokens);
        let tokens_before = shape.tokens;
        let messages_before = conversation.messages.len();
        // The summaries' ledgers are left out of what the watermarks measure (up to the room
        // between the high watermark and `max_tokens`): see `BudgetConfig::ledgers_outside`.
        let ledger_room = if tokens_before > high {
            budget_cfg.ledger_room(&conversation.messages, &self.ctx.tokens)
        } else {
            0
        };
        let over_budget = options.force || tokens_before.saturating_sub(ledger_room) > high;
        let left_out = if ledger_room > 0 {
            format!(" ({ledger_room} of them the summaries' ledgers, left out)")
        } else {
            String::new()
        };
        let reason = if options.force {
            "forced".to_string()
        } else if over_budget {
            format!("{tokens_before} tokens{left_out}, above the high watermark of {high}")
        } else {
            format!("{tokens_before} tokens{left_out}, not above the high watermark of {high}")
        };

        let keep_recent = shape.keep_recent;
        let mut current = conversation;
        let mut tokens = tokens_before;
        let mut runs = Vec::with_capacity(self.stages.len());
        for stage in &self.stages {
            let not_run = |why: String| StageRun::not_run(stage, why, tokens);
            let run = match stage.trigger {
                Trigger::OverBudget if !over_budget => {
                    not_run("the chain is not over budget".into())
                }
                Trigger::OverBudget
                    if tokens.saturating_sub(ledger_room) <= low && !options.force =>
                {
                    not_run(format!(
                        "already under the low watermark ({tokens}{left_out} <= {low})"
                    ))
                }
                _ => {
                    let budget = Budget {
                        max_tokens: budget_cfg.max_tokens,
                        high_watermark: high,
                        low_watermark: low,
                        keep_recent,
                        current_tokens: tokens,
                    };
                    let (next, changed, run) = self.run_stage(stage, current, budget, format).await;
                    current = next;
                    if changed {
                        tokens = run.tokens_after;
                    }
                    run
                }
            };
            runs.push(run);
        }

        let mut usage = Usage::default();
        for r in &runs {
            usage.add(&r.usage);
        }
        let acted = runs.iter().any(|r| r.status == StageStatus::Acted);
        // Every summary of the answer, the input's and the stages' new ones, gets its MAC: the
        // next request (or the thread's stored state) reads them as tamp's.
        self.summaries.seal(current.messages.as_mut_slice());
        let low_watermark_missed = (over_budget && tokens > low).then(|| {
            let (head_tokens, tail_tokens) = (shape.head_tokens, shape.tail_tokens);
            let protected = head_tokens + tail_tokens;
            let parts = format!(
                "system prompt and task {head_tokens}, recent tail {tail_tokens} in {} message(s)",
                shape.tail_messages
            );
            if protected >= low {
                format!(
                    "{tokens} tokens after compaction, above the low watermark of {low}: the \
                     protected messages alone are {protected} tokens ({parts}); lower \
                     keep_recent or set keep_recent_tokens"
                )
            } else if !acted {
                format!(
                    "{tokens} tokens after compaction, above the low watermark of {low}: no \
                     stage acted (see each stage's reason); protected: {parts}"
                )
            } else {
                format!(
                    "{tokens} tokens after compaction, above the low watermark of {low}: the \
                     stages left {} compactable tokens (see each stage's reason); protected: \
                     {parts}",
                    tokens.saturating_sub(protected)
                )
            }
        });
        let report = ChainReport {
            tokens_before,
            tokens_after: tokens,
            messages_before,
            messages_after: current.messages.len(),
            budget: BudgetReport {
                max_tokens: budget_cfg.max_tokens,
                high_watermark: high,
                low_watermark: low,
                keep_recent: budget_cfg.keep_recent,
                protected_tail: keep_recent,
            },
            reason,
            llm_calls: runs.iter().map(|r| r.llm_calls).sum(),
            cache_hits: runs.iter().map(|r| r.cache_hits).sum(),
            cost_usd: self.price.map(|p| p.cost_of(&usage)),
            usage,
            stages: runs,
            duration_ms: started.elapsed().as_secs_f64() * 1e3,
            thread: None,
            low_watermark_missed,
            opaque: OpaqueCount::of(&current.messages),
            unrecognized_summaries: unrecognized,
        };
        Ok(Compacted {
            conversation: current,
            report,
        })
    }

    /// Runs one stage on `input` and applies its edits; returns the conversation (the input
    /// itself when the stage was rolled back or asked for nothing), whether it changed, and
    /// the stage's report.
    async fn run_stage(
        &self,
        stage: &Stage,
        input: Conversation,
        budget: Budget,
        format: WireFormat,
    ) -> (Conversation, bool, StageRun) {
        let started = Instant::now();
        let deadline = tokio::time::Instant::now() + stage.timeout;
        let services = StageServices::new(
            Arc::clone(&self.ctx),
            StageIdentity {
                stage: stage.name.clone(),
                strategy: stage.plugin.meta().name.clone(),
                config_hash: stage.config_hash.clone(),
            },
            input.thread_id().map(str::to_string),
            Some(format),
        )
        .until(deadline);
        // The stage reads the conversation shared: nothing is copied for it, and the input
        // comes back unchanged whatever the stage does.
        let shared = Shared::new(input);
        let request = CompactRequest {
            conversation: Shared::clone(&shared),
            budget,
            host: services.to_ffi(),
            stage: stage.name.as_str().into(),
        };
        // Under the guard (`stage_guard`): a panic is caught at this frame instead of
        // unwinding through the chain, and a stage that never finishes is cut off at the
        // deadline and dropped.
        let outcome = stage_guard::call_stage(stage.strategy.compact(request), deadline)
            .await
            .map_err(|failure| StageFailure {
                kind: match &failure {
                    GuardedFailure::Timeout => StageFailureKind::Timeout,
                    failure if failure.is_panic() => StageFailureKind::Panicked,
                    _ => StageFailureKind::Error,
                },
                message: match failure {
                    GuardedFailure::Timeout => {
                        format!("no result within {:.1}s", stage.timeout.as_secs_f64())
                    }
                    GuardedFailure::Unwound(message) => message,
                    GuardedFailure::Error(e) => e.to_string(),
                },
                rule: None,
            });
        // A stage that kept a handle on the conversation (a task it left running) makes
        // this a copy; otherwise the input is taken back as it was.
        let input =
            Shared::try_unwrap(shared).unwrap_or_else(|still_shared| (*still_shared).clone());
        // Boxed: what settling a stage holds (its report, the check of its edits, the page
        // writes) is then not part of the state every compaction carries while it waits on
        // its stage, thousands at once.
        Box::pin(self.settle_stage(stage, input, outcome, &services, budget, started)).await
    }

    /// Checks and applies what a stage answered, once its pages are written, or rolls it
    /// back; fills the stage's report. See [`Chain::run_stage`].
    async fn settle_stage(
        &self,
        stage: &Stage,
        input: Conversation,
        outcome: Result<tamp_plugin_api::CompactOutcome, StageFailure>,
        services: &StageServices,
        budget: Budget,
        started: Instant,
    ) -> (Conversation, bool, StageRun) {
        let mut run = StageRun::not_run(stage, String::new(), budget.current_tokens);

        let result = match outcome {
            Ok(outcome) => self.apply(&input, outcome, services, stage, budget).await,
            Err(failure) => Err(failure),
        };
        // The stage's pages may still be staged: its output is accepted only once they are
        // written, so every summary's page is durable when the caller gets it.
        let result = match (result, services.pages_written().await) {
            (Err(failure), written) => {
                if let Err(e) = written {
                    tracing::warn!(stage = %stage.name, "the pages of a failed stage were not written: {e}");
                }
                Err(failure)
            }
            (Ok(_), Err(e)) => Err(StageFailure::error(format!(
                "its pages could not be written: {e}"
            ))),
            (Ok(applied), Ok(())) => Ok(applied),
        };
        let used = services.usage();
        run.llm_calls = used.llm_calls;
        run.failed_llm_calls = used.failed_llm_calls;
        run.cache_hits = used.cache_hits;
        run.usage = used.usage;
        run.cost_usd = self.price.map(|p| p.cost_of(&used.usage));
        run.llm_errors = used.errors;
        run.duration_ms = started.elapsed().as_secs_f64() * 1e3;
        match result {
            Err(failure) => {
                tracing::warn!(target: ROLLBACK_LOG_TARGET, stage = %stage.name, kind = %failure.kind, "stage rolled back: {}", failure.message);
                run.status = StageStatus::RolledBack;
                run.reason = format!("rolled back ({}): {}", failure.kind, failure.message);
                run.error = Some(failure);
                (input, false, run)
            }
            Ok((report, None)) => {
                run.apply_report(report);
                (input, false, run)
            }
            Ok((report, Some((plan, tokens_after)))) => {
                let applied = edits::splice(input, plan);
                run.apply_report(report);
                run.pages = applied.pages;
                run.messages_removed = applied.messages_removed;
                run.summaries_added = applied.summaries_added;
                run.messages_cleared = applied.messages_cleared;
                run.tokens_after = tokens_after;
                (applied.conversation, true, run)
            }
        }
    }

    /// Checks a stage's edits against its input, counts their growth and archives the pages
    /// of its `Summarize` and `Clear` edits; returns the report and what to splice (None: no edits).
    async fn apply(
        &self,
        input: &Conversation,
        outcome: tamp_plugin_api::CompactOutcome,
        services: &StageServices,
        stage: &Stage,
        budget: Budget,
    ) -> Result<(StageReport, Option<(Vec<edits::Ready>, u64)>), StageFailure> {
        let tamp_plugin_api::CompactOutcome {
            edits: asked,
            report,
        } = outcome;
        if asked.is_empty() {
            return Ok((report, None));
        }
        let strategy = stage.plugin.meta().name.as_str();
        let messages = &input.messages;
        let checked = edits::check(messages, asked, budget.keep_recent as usize, strategy)
            .map_err(invariant_failure)?;
        let tokens_after = edits::count_after(
            messages,
            &checked,
            budget.current_tokens,
            &self.ctx.tokens,
            strategy,
        );
        check_no_growth(budget.current_tokens, tokens_after).map_err(invariant_failure)?;
        // A replaced span's page must exist: archived by this stage, or by an earlier one.
        // A store that cannot be read is the host's failure, not the plugin's: only a page
        // the store answers it does not hold breaks TAMP-INV-01.
        for page in edits::replaced_pages(&checked) {
            if services.has_archived(&page) {
                continue;
            }
            match self.ctx.store.get_page(&page).await {
                Ok(_) => {}
                Err(e) if e.is_not_found() => {
                    return Err(invariant_failure(Violation::new(
                        crate::invariants::Rule::NothingLost,
                        format!("a summary refers to page {page}, which the store does not hold"),
                    )))
                }
                Err(e) => {
                    return Err(StageFailure::error(format!(
                        "page {page}, which a summary refers to, could not be read to check \
                             it: {e}"
                    )))
                }
            }
        }
        // All at once, as `Host::archive_pages` does: a store that commits in groups writes
        // them together.
        let archiving = edits::drafts(messages, &checked, strategy)
            .into_iter()
            .map(|draft| services.archive_page(draft));
        let pages = futures::future::join_all(archiving)
            .await
            .into_iter()
            .map(|archived| {
                archived.into_result().map(String::from).map_err(|e| {
                    StageFailure::error(format!("a page could not be archived: {}", e.message))
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        let ready = edits::ready(messages, checked, pages.into_iter(), strategy)
            .map_err(StageFailure::error)?;
        Ok((report, Some((ready, tokens_after))))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use tamp_plugin_api::{capability, HostServices};

    fn schema() -> serde_json::Value {
        json!({
            "type": "object",
            "additionalProperties": false,
            "properties": {
                "group_size": {"type": "integer", "minimum": 1},
                "prompt": {
                    "type": "object",
                    "additionalProperties": false,
                    "properties": {"style": {"type": "string"}}
                },
                "labels": {"type": "array", "items": {"type": "string"}}
            }
        })
    }

    fn error_for(config: serde_json::Value) -> StageConfigError {
        validate_against_schema(&schema(), &config).unwrap_err()
    }

    #[test]
    fn a_schema_error_names_the_path_of_the_field_from_the_validator() {
        let e = error_for(json!({"group_size": 0}));
        assert_eq!(e.path, ["group_size"]);
        assert!(e.message.starts_with("config.group_size: "), "{e}");
        let e = error_for(json!({"labels": ["a", 3]}));
        assert_eq!(e.path, ["labels", "1"]);
        assert!(e.message.starts_with("config.labels.1: "), "{e}");
    }

    #[test]
    fn an_unknown_key_is_named_by_the_key_not_its_parent() {
        let e = error_for(json!({"grup_size": 2}));
        assert_eq!(e.path, ["grup_size"]);
        assert!(e.message.starts_with("config: "), "{e}");
        // Nested: the unknown key's own name, under the object holding it. The message text
        // quotes the key, but the path does not come from it: a key with a quote in it is
        // still named whole.
        let e = error_for(json!({"prompt": {"it's": "x"}}));
        assert_eq!(e.path, ["prompt", "it's"]);
        assert!(e.message.starts_with("config.prompt: "), "{e}");
        assert!(validate_against_schema(&schema(), &json!({"group_size": 3})).is_ok());
    }

    #[test]
    fn an_unknown_key_lists_the_keys_its_object_takes() {
        let e = error_for(json!({"grup_size": 2}));
        assert!(
            e.message
                .ends_with("; the keys it takes: group_size, labels, prompt"),
            "{e}"
        );
        let e = error_for(json!({"prompt": {"stile": "x"}}));
        assert!(e.message.ends_with("; the keys it takes: style"), "{e}");
        // Through a reference to the schema's definitions, as schemars writes nested structs.
        let referenced = json!({
            "type": "object",
            "additionalProperties": false,
            "properties": {"prompt": {"$ref": "#/$defs/Prompt"}},
            "$defs": {"Prompt": {
                "type": "object",
                "additionalProperties": false,
                "properties": {"style": {"type": "string"}, "words": {"type": "integer"}}
            }}
        });
        let e = validate_against_schema(&referenced, &json!({"prompt": {"wrds": 3}})).unwrap_err();
        assert!(
            e.message.ends_with("; the keys it takes: style, words"),
            "{e}"
        );
    }

    #[test]
    fn a_failure_kind_is_written_as_its_name() {
        for kind in StageFailureKind::ALL {
            assert_eq!(serde_json::to_value(kind).unwrap(), json!(kind.as_str()));
        }
        let failure = StageFailure {
            kind: StageFailureKind::Panicked,
            message: "boom".into(),
            rule: None,
        };
        assert_eq!(
            serde_json::to_value(&failure).unwrap(),
            json!({"kind": "panicked", "message": "boom"})
        );
    }

    #[test]
    fn a_store_given_outside_the_file_that_cannot_open_is_a_store_error() {
        let file = LoadedChainFile::parse(
            Path::new("chain.toml"),
            "[budget]\nmax_tokens = 100\n".into(),
        )
        .unwrap();
        // A directory cannot be created under /proc, even by root.
        let overrides = FileOverrides {
            store_path: Some("/proc/no-such/s.sqlite3".into()),
            ..FileOverrides::default()
        };
        match Chain::from_loaded(&file, overrides) {
            Err(ChainError::Store(e @ crate::store::StoreError::Backend { .. })) => {
                // The text is the store's own, as it was when this was a setup error.
                assert!(
                    e.to_string()
                        .starts_with("page store /proc/no-such/s.sqlite3: cannot"),
                    "{e}"
                );
            }
            Err(other) => panic!("not a store error: {other:?}"),
            Ok(_) => panic!("the store opened"),
        }
    }

    fn offers_deferred_summaries(chain: &Chain) -> bool {
        let services =
            StageServices::new(Arc::clone(&chain.ctx), StageIdentity::default(), None, None);
        services
            .capabilities()
            .iter()
            .any(|c| c.as_str() == capability::DEFERRED_SUMMARIES)
    }

    #[test]
    fn the_queue_is_the_built_in_stores_or_the_one_given_and_decides_the_capability() {
        let built_in = ChainBuilder::new(BudgetConfig::default()).build().unwrap();
        assert!(built_in.queue().is_some());
        assert!(offers_deferred_summaries(&built_in));

        let store = Arc::new(SqliteStore::in_memory().unwrap());
        // A store without a queue: its pages only, as a stand-in store or a test gives it.
        let pages_only = ChainBuilder::new(BudgetConfig::default())
            .store(Arc::clone(&store) as Arc<dyn PageStore>)
            .build()
            .unwrap();
        assert!(pages_only.queue().is_none());
        assert!(!offers_deferred_summaries(&pages_only));

        let with_queue = ChainBuilder::new(BudgetConfig::default())
            .store(Arc::clone(&store) as Arc<dyn PageStore>)
            .queue(Some(store as Arc<dyn DeferredQueue>))
            .build()
            .unwrap();
        assert!(with_queue.queue().is_some());
        assert!(offers_deferred_summaries(&with_queue));

        let refused = ChainBuilder::new(BudgetConfig::default())
            .queue(None)
            .build()
            .unwrap();
        assert!(refused.queue().is_none());
        assert!(!offers_deferred_summaries(&refused));
    }

    #[test]
    fn a_store_that_cannot_be_opened_is_located_at_its_setting() {
        // A directory cannot be created under /proc, even by root.
        let text = "[budget]\nmax_tokens = 100\n\n[store]\npath = \"/proc/no-such/s.sqlite3\"\n";
        let file = LoadedChainFile::parse(Path::new("chain.toml"), text.into()).unwrap();
        let err = match Chain::from_loaded(&file, Default::default()) {
            Err(ChainError::Config(e)) => e,
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
}
