//! Building a chain from parts: a provider, a store, stages; what a chain file names or a
//! program embedding tamp gives.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Semaphore;

use super::stage_config::{validate_against_schema, StageConfigError};
use super::{Chain, ChainError, Stage};
use crate::budget::BudgetConfig;
use crate::config::Trigger;
use crate::digest::config_hash;
use crate::loader::LoadedPlugin;
use crate::providers::{ExtractiveSummarizer, PriceConfig, Provider};
use crate::services::{HostContext, ProgressFn};
use crate::store::threads::{ThreadStore, ThreadsConfig};
use crate::store::{
    ActivityStore, DeferredQueue, PageSearch, PageStore, SqliteStore, SummaryCache,
};
use crate::summary_mac::SummaryKey;
use crate::tokens::TokenCounter;

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::services::{StageIdentity, StageServices};
    use tamp_plugin_api::{capability, HostServices};

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
}
