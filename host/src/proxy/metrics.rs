//! `tamp proxy`'s own series, encoded after `tamp serve`'s (compactions, stages, savings,
//! reloads and requests by route come from [`crate::http::metrics::Metrics`]).

use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use crate::http::metrics::{latency_family, latency_histogram, start_at_zero, LatencyFamily};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RouteLabel {
    route: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabel {
    outcome: &'static str,
}

/// What the chain made of a compacted route's body.
const OUTCOMES: [&str; 3] = ["compacted", "unchanged", "skipped"];

/// Counters of the relay. Cheap to update from many tasks at once.
#[derive(Debug)]
pub struct ProxyMetrics {
    registry: Registry,
    /// Time from sending to the upstream's answer head, by route.
    upstream_seconds: LatencyFamily<RouteLabel>,
    /// Requests that got no answer from their upstream, by route.
    upstream_errors: Family<RouteLabel, Counter>,
    /// Body bytes relayed to clients, by route.
    relayed_bytes: Family<RouteLabel, Counter>,
    /// What the chain made of each compacted route's body: compacted, unchanged, skipped.
    outcomes: Family<OutcomeLabel, Counter>,
    /// Time a request waited for its compaction (to the timeout at most).
    compaction_wait: Histogram,
    streams_open: Gauge,
}

impl Default for ProxyMetrics {
    fn default() -> Self {
        ProxyMetrics::new()
    }
}

impl ProxyMetrics {
    pub fn new() -> Self {
        let mut m = ProxyMetrics {
            registry: Registry::default(),
            upstream_seconds: latency_family(),
            upstream_errors: Family::default(),
            relayed_bytes: Family::default(),
            outcomes: Family::default(),
            compaction_wait: latency_histogram(),
            streams_open: Gauge::default(),
        };
        start_at_zero(
            &m.outcomes,
            OUTCOMES.map(|outcome| OutcomeLabel { outcome }),
        );
        let r = &mut m.registry;
        r.register(
            "tamp_proxy_compactions",
            "Request bodies of the compacted routes, by what was forwarded: compacted (the \
             chain's answer), unchanged (the chain left it as it was), skipped (the compaction \
             failed or ran out of time: the original)",
            m.outcomes.clone(),
        );
        r.register(
            "tamp_proxy_compaction_wait_seconds",
            "Time a request waited for its compaction before it was forwarded",
            m.compaction_wait.clone(),
        );
        r.register(
            "tamp_proxy_upstream_duration_seconds",
            "Time from sending a request upstream to its answer's head (status and headers), \
             by route",
            m.upstream_seconds.clone(),
        );
        r.register(
            "tamp_proxy_upstream_errors",
            "Requests that got no answer from their upstream (answered 502), by route",
            m.upstream_errors.clone(),
        );
        r.register(
            "tamp_proxy_relayed_bytes",
            "Answer body bytes relayed from the upstreams to the clients (streams included), \
             by route",
            m.relayed_bytes.clone(),
        );
        r.register(
            "tamp_proxy_streams_open",
            "Answers being relayed now",
            m.streams_open.clone(),
        );
        m
    }

    pub fn upstream_answered(&self, route: &'static str, took: Duration) {
        self.upstream_seconds
            .get_or_create(&RouteLabel { route })
            .observe(took.as_secs_f64());
    }

    pub fn upstream_failed(&self, route: &'static str) {
        self.upstream_errors
            .get_or_create(&RouteLabel { route })
            .inc();
    }

    pub fn compaction_outcome(&self, outcome: &'static str, waited: Duration) {
        self.outcomes.get_or_create(&OutcomeLabel { outcome }).inc();
        self.compaction_wait.observe(waited.as_secs_f64());
    }

    pub fn stream_opened(&self) {
        self.streams_open.inc();
    }

    pub fn stream_closed(&self, route: &'static str, bytes: u64) {
        self.streams_open.dec();
        self.relayed_bytes
            .get_or_create(&RouteLabel { route })
            .inc_by(bytes);
    }

    /// Answers being relayed now.
    pub fn streams_open(&self) -> u64 {
        u64::try_from(self.streams_open.get()).unwrap_or(0)
    }

    /// These series, for [`Metrics::render`](crate::http::metrics::Metrics::render).
    pub fn registry(&self) -> &Registry {
        &self.registry
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::metrics::Metrics;

    #[test]
    fn the_relay_series_follow_the_servers_and_count_by_route() {
        let proxy = ProxyMetrics::default();
        proxy.stream_opened();
        proxy.stream_opened();
        proxy.stream_closed("POST /v1/messages", 10);
        proxy.stream_closed("POST /v1/messages", 5);
        proxy.upstream_answered("POST /v1/messages", Duration::from_millis(20));
        proxy.upstream_failed("openai (passed through)");
        proxy.compaction_outcome("unchanged", Duration::from_millis(1));
        assert_eq!(proxy.streams_open(), 0);
        let text = Metrics::default().render("h", 1.0, 0, &[proxy.registry()]);
        for line in [
            "tamp_proxy_compactions_total{outcome=\"unchanged\"} 1\n",
            "tamp_proxy_compactions_total{outcome=\"skipped\"} 0\n",
            "tamp_proxy_relayed_bytes_total{route=\"POST /v1/messages\"} 15\n",
            "tamp_proxy_upstream_errors_total{route=\"openai (passed through)\"} 1\n",
            "tamp_proxy_upstream_duration_seconds_count{route=\"POST /v1/messages\"} 1\n",
            "tamp_proxy_compaction_wait_seconds_count 1\n",
            "tamp_proxy_streams_open 0\n",
        ] {
            assert!(text.contains(line), "{line} in {text}");
        }
        assert!(text.find("tamp_proxy_").unwrap() > text.find("tamp_chain_info").unwrap());
        assert!(text.ends_with("# EOF\n"));
    }
}
