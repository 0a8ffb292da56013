//! The strategy chain: stages run in order, each on the previous one's output.
//!
//! A stage that errors, panics, times out, or returns output that breaks an invariant is
//! rolled back: the chain goes on from the conversation that stage received, and the report
//! says what happened. The chain stops early once the conversation is under the low watermark.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures::future::Either;
use tamp_plugin_api::{Conversation, Message, StrategyBox};

use crate::budget::BudgetConfig;
use crate::config::Trigger;
use crate::config_error::ConfigError;
use crate::loader::{LoadError, LoadedPlugin};
use crate::providers::PriceConfig;
use crate::services::HostContext;
use crate::store::threads::{ThreadKey, ThreadStore, ThreadsConfig};
use crate::store::{ActivityStore, DeferredQueue, PageSearch, PageStore};
use crate::summary_mac::SummaryKey;
use crate::tokens::TokenCounter;
use crate::wire::{WireError, WireFormat};

mod builder;
mod file;
mod report;
mod run;
mod stage_config;
mod thread;

pub use builder::ChainBuilder;
pub use file::{FileOverrides, ProviderWrap};
pub use report::{
    BudgetReport, ChainReport, Compacted, OpaqueCount, StageFailure, StageFailureKind, StageRun,
    StageStatus,
};
pub use stage_config::StageConfigError;

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

impl Chain {
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
}
