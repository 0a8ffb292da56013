//! Deferred summarization: summaries a strategy asked for are made later, through the
//! Anthropic Message Batches API (half price), while the compaction returns at once with a
//! pending summary.
//!
//! - The queue lives in the store (`store::queue`): `queued → submitted(batch, custom id) →
//!   done(text, usage) | failed(reason, attempts)`, every transition persisted with its time.
//! - Plugins reach it through the `defer_summaries` and `deferred_results` host services
//!   (`services.rs`); `plugins/batch-deferred` is the strategy that uses them. A queued
//!   prompt may be a page-transcript prompt, filled in from its page when it is sent
//!   ([`render`]), so a compaction stores the page's text once.
//! - [`Worker`] sends queued items as batches and applies the results
//!   (`providers::batches` is the API client); `tamp batch run-once|status|work` is in
//!   tamp-cli.
//!   `tamp serve` runs it as a task: `LoadedChainFile::batch_worker(..).with_pages(..).spawn(shutdown)`.

pub mod config;
#[cfg(feature = "deferred")]
pub mod metrics;
#[cfg(feature = "deferred")]
pub mod render;
#[cfg(feature = "deferred")]
pub mod worker;

/// The name of the shipped plugin that defers its summaries; `tamp serve` starts a worker
/// when its chain has a stage of it.
#[cfg(feature = "deferred")]
pub const PLUGIN_NAME: &str = "batch-deferred";
#[cfg(feature = "deferred")]
pub use metrics::{DeferredMetrics, MetricsSnapshot};
#[cfg(feature = "deferred")]
pub use worker::{Pass, PassReport, Worker, WorkerError, WorkerHandle};
