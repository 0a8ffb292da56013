//! `tamp proxy`'s own series, written after `tamp serve`'s (compactions, stages, savings,
//! reloads and requests by route come from [`crate::serve::metrics::Metrics`]).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Mutex;
use std::time::Duration;

use crate::serve::metrics::{escape, family, Histogram};

#[derive(Debug, Default)]
struct Inner {
    /// Time from sending to the upstream's answer head, by route.
    upstream_seconds: BTreeMap<&'static str, Histogram>,
    /// Requests that got no answer from their upstream, by route.
    upstream_errors: BTreeMap<&'static str, u64>,
    /// Body bytes relayed to clients, by route.
    relayed_bytes: BTreeMap<&'static str, u64>,
    /// What the chain made of each compacted route's body: compacted, unchanged, skipped.
    outcomes: BTreeMap<&'static str, u64>,
    /// Time a request waited for its compaction (to the timeout at most).
    compaction_wait: Histogram,
    streams_open: u64,
}

/// Counters of the relay. Cheap to update from many tasks at once.
#[derive(Debug, Default)]
pub struct ProxyMetrics {
    inner: Mutex<Inner>,
}

impl ProxyMetrics {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn upstream_answered(&self, route: &'static str, took: Duration) {
        self.lock()
            .upstream_seconds
            .entry(route)
            .or_default()
            .observe(took.as_secs_f64());
    }

    pub fn upstream_failed(&self, route: &'static str) {
        *self.lock().upstream_errors.entry(route).or_default() += 1;
    }

    pub fn compaction_outcome(&self, outcome: &'static str, waited: Duration) {
        let mut m = self.lock();
        *m.outcomes.entry(outcome).or_default() += 1;
        m.compaction_wait.observe(waited.as_secs_f64());
    }

    pub fn stream_opened(&self) {
        self.lock().streams_open += 1;
    }

    pub fn stream_closed(&self, route: &'static str, bytes: u64) {
        let mut m = self.lock();
        m.streams_open = m.streams_open.saturating_sub(1);
        *m.relayed_bytes.entry(route).or_default() += bytes;
    }

    /// Answers being relayed now.
    pub fn streams_open(&self) -> u64 {
        self.lock().streams_open
    }

    /// The exposition text of these series.
    pub fn render(&self) -> String {
        let m = self.lock();
        let mut out = String::with_capacity(2048);
        family(
            &mut out,
            "tamp_proxy_compactions_total",
            "counter",
            "Request bodies of the compacted routes, by what was forwarded: compacted (the \
             chain's answer), unchanged (the chain left it as it was), skipped (the compaction \
             failed or ran out of time: the original).",
        );
        for outcome in ["compacted", "unchanged", "skipped"] {
            let n = m.outcomes.get(outcome).copied().unwrap_or(0);
            let _ = writeln!(
                out,
                "tamp_proxy_compactions_total{{outcome=\"{outcome}\"}} {n}"
            );
        }
        family(
            &mut out,
            "tamp_proxy_compaction_wait_seconds",
            "histogram",
            "Time a request waited for its compaction before it was forwarded.",
        );
        m.compaction_wait
            .write(&mut out, "tamp_proxy_compaction_wait_seconds", "");
        family(
            &mut out,
            "tamp_proxy_upstream_duration_seconds",
            "histogram",
            "Time from sending a request upstream to its answer's head (status and headers), \
             by route.",
        );
        for (route, h) in &m.upstream_seconds {
            h.write(
                &mut out,
                "tamp_proxy_upstream_duration_seconds",
                &format!("route=\"{}\"", escape(route)),
            );
        }
        family(
            &mut out,
            "tamp_proxy_upstream_errors_total",
            "counter",
            "Requests that got no answer from their upstream (answered 502), by route.",
        );
        for (route, n) in &m.upstream_errors {
            let _ = writeln!(
                out,
                "tamp_proxy_upstream_errors_total{{route=\"{}\"}} {n}",
                escape(route)
            );
        }
        family(
            &mut out,
            "tamp_proxy_relayed_bytes_total",
            "counter",
            "Answer body bytes relayed from the upstreams to the clients (streams included), \
             by route.",
        );
        for (route, n) in &m.relayed_bytes {
            let _ = writeln!(
                out,
                "tamp_proxy_relayed_bytes_total{{route=\"{}\"}} {n}",
                escape(route)
            );
        }
        family(
            &mut out,
            "tamp_proxy_streams_open",
            "gauge",
            "Answers being relayed now.",
        );
        let _ = writeln!(out, "tamp_proxy_streams_open {}", m.streams_open);
        out
    }
}
