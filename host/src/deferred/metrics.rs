//! Counters of the deferred worker, for `/metrics` and `tamp batch run-once`.

use std::sync::atomic::{AtomicU64, Ordering};

use serde::Serialize;
use tamp_plugin_api::Usage;

use crate::providers::PriceConfig;

/// A `tamp_batch_*` counter: name (without `_total`, which the encoder adds), help, and
/// where its value is in a snapshot.
#[cfg(feature = "serve")]
type Series = (&'static str, &'static str, fn(&MetricsSnapshot) -> u64);

#[cfg(feature = "serve")]
const SERIES: [Series; 8] = [
    (
        "tamp_batch_batches_created",
        "Message batches created.",
        |s| s.batches_created,
    ),
    (
        "tamp_batch_requests_submitted",
        "Deferred requests sent in batches.",
        |s| s.submitted,
    ),
    (
        "tamp_batch_requests_succeeded",
        "Batch results applied as final summaries.",
        |s| s.succeeded,
    ),
    (
        "tamp_batch_requests_failed",
        "Deferred requests given up.",
        |s| s.failed,
    ),
    (
        "tamp_batch_fallbacks",
        "Deferred requests answered by a synchronous call.",
        |s| s.fallbacks,
    ),
    (
        "tamp_batch_requests_requeued",
        "Deferred requests put back in the queue.",
        |s| s.requeued,
    ),
    (
        "tamp_batch_billed_input_tokens",
        "Input tokens billed at the batch discount.",
        |s| s.batch_usage.input_tokens,
    ),
    (
        "tamp_batch_billed_output_tokens",
        "Output tokens billed at the batch discount.",
        |s| s.batch_usage.output_tokens,
    ),
];

/// Counts since the worker started. Shared (`Arc`) between the worker and whoever renders it.
#[derive(Debug, Default)]
pub struct DeferredMetrics {
    batches_created: AtomicU64,
    submitted: AtomicU64,
    succeeded: AtomicU64,
    failed: AtomicU64,
    fallbacks: AtomicU64,
    requeued: AtomicU64,
    batch_input_tokens: AtomicU64,
    batch_output_tokens: AtomicU64,
    batch_cache_read_tokens: AtomicU64,
    batch_cache_write_tokens: AtomicU64,
}

/// A copy of [`DeferredMetrics`] at one moment.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct MetricsSnapshot {
    pub batches_created: u64,
    /// Requests sent in batches.
    pub submitted: u64,
    /// Results that came back `succeeded` and were applied.
    pub succeeded: u64,
    /// Requests given up.
    pub failed: u64,
    /// Requests answered by the synchronous fallback.
    pub fallbacks: u64,
    /// Requests put back in the queue (retried errors, canceled or expired results).
    pub requeued: u64,
    /// Tokens billed at the batch discount.
    pub batch_usage: Usage,
}

impl MetricsSnapshot {
    /// The estimated cost of the batch-billed tokens (the price's `batch_factor` applied).
    pub fn batch_cost(&self, price: &PriceConfig) -> f64 {
        price.batch_cost_of(&self.batch_usage)
    }

    /// What the same tokens would have cost synchronously.
    pub fn sync_cost_of_batch_tokens(&self, price: &PriceConfig) -> f64 {
        price.cost_of(&self.batch_usage)
    }
}

/// `/metrics` reads the worker's counters when it is scraped: they are the worker's own
/// atomics (also read by `tamp batch run-once`), so they are collected, not mirrored.
#[cfg(feature = "serve")]
impl prometheus_client::collector::Collector for DeferredMetrics {
    fn encode(
        &self,
        mut encoder: prometheus_client::encoding::DescriptorEncoder,
    ) -> Result<(), std::fmt::Error> {
        use prometheus_client::encoding::EncodeMetric;
        use prometheus_client::metrics::counter::ConstCounter;
        let snapshot = self.snapshot();
        for (name, help, value) in SERIES {
            let counter = ConstCounter::new(value(&snapshot));
            let metric = encoder.encode_descriptor(name, help, None, counter.metric_type())?;
            counter.encode(metric)?;
        }
        Ok(())
    }
}

impl DeferredMetrics {
    pub fn snapshot(&self) -> MetricsSnapshot {
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        MetricsSnapshot {
            batches_created: get(&self.batches_created),
            submitted: get(&self.submitted),
            succeeded: get(&self.succeeded),
            failed: get(&self.failed),
            fallbacks: get(&self.fallbacks),
            requeued: get(&self.requeued),
            batch_usage: Usage {
                input_tokens: get(&self.batch_input_tokens),
                output_tokens: get(&self.batch_output_tokens),
                cache_read_tokens: get(&self.batch_cache_read_tokens),
                cache_write_tokens: get(&self.batch_cache_write_tokens),
            },
        }
    }

    pub(super) fn batch_created(&self, requests: u64) {
        self.batches_created.fetch_add(1, Ordering::Relaxed);
        self.submitted.fetch_add(requests, Ordering::Relaxed);
    }

    pub(super) fn succeeded(&self, usage: &Usage) {
        self.succeeded.fetch_add(1, Ordering::Relaxed);
        let add = |a: &AtomicU64, n: u64| a.fetch_add(n, Ordering::Relaxed);
        add(&self.batch_input_tokens, usage.input_tokens);
        add(&self.batch_output_tokens, usage.output_tokens);
        add(&self.batch_cache_read_tokens, usage.cache_read_tokens);
        add(&self.batch_cache_write_tokens, usage.cache_write_tokens);
    }

    pub(super) fn failed(&self) {
        self.failed.fetch_add(1, Ordering::Relaxed);
    }

    pub(super) fn fallback(&self) {
        self.fallbacks.fetch_add(1, Ordering::Relaxed);
    }

    pub(super) fn requeued(&self) {
        self.requeued.fetch_add(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batch_cost_is_the_discounted_sync_cost() {
        let metrics = DeferredMetrics::default();
        metrics.succeeded(&Usage {
            input_tokens: 1_000_000,
            output_tokens: 100_000,
            ..Usage::default()
        });
        let price = PriceConfig {
            input_per_mtok: 3.0,
            output_per_mtok: 15.0,
            ..PriceConfig::default()
        };
        let snap = metrics.snapshot();
        assert!((snap.sync_cost_of_batch_tokens(&price) - 4.5).abs() < 1e-9);
        assert!((snap.batch_cost(&price) - 2.25).abs() < 1e-9);
    }

    #[cfg(feature = "serve")]
    #[test]
    fn the_counters_are_collected_at_each_scrape() {
        let metrics = std::sync::Arc::new(DeferredMetrics::default());
        let mut registry = prometheus_client::registry::Registry::default();
        registry.register_collector(Box::new(std::sync::Arc::clone(&metrics)));
        let scrape = || {
            let mut text = String::new();
            prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
            text
        };
        assert!(scrape().contains("tamp_batch_batches_created_total 0\n"));
        metrics.batch_created(3);
        metrics.succeeded(&Usage {
            input_tokens: 1_000_000,
            ..Usage::default()
        });
        let text = scrape();
        assert!(
            text.contains("# TYPE tamp_batch_batches_created counter\n"),
            "{text}"
        );
        assert!(
            text.contains("tamp_batch_batches_created_total 1\n"),
            "{text}"
        );
        assert!(
            text.contains("tamp_batch_requests_submitted_total 3\n"),
            "{text}"
        );
        assert!(
            text.contains("tamp_batch_billed_input_tokens_total 1000000\n"),
            "{text}"
        );
    }
}
