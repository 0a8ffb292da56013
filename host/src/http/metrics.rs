//! The server's counters and histograms, exposed for `GET /metrics` in the OpenMetrics text
//! format through `prometheus-client`.
//!
//! The series live in a [`Registry`] as the crate's atomic metrics, updated once per
//! compaction. What describes the active chain (its hash, when it was loaded, the compactions
//! running) is known only when a scrape asks, so it is encoded then, as constant metrics
//! ([`Metrics::render`]). `tamp proxy` and the deferred worker add their own registries to the
//! same exposition, which ends with one `# EOF`.

use prometheus_client::encoding::text::{encode_eof, encode_registry};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::metrics::info::Info;
use prometheus_client::registry::Registry;

use crate::chain::{ChainReport, StageStatus};

/// The content type of the exposition: OpenMetrics, which Prometheus scrapes (and asks for
/// first), and what `prometheus-client` writes (counters' `_total` on samples only, `info`
/// metrics, `# EOF`).
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Upper bounds of the latency histograms' buckets, in seconds.
const LATENCY_BUCKETS: &[f64] = &[
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
];

/// A latency histogram with [`LATENCY_BUCKETS`] (and `+Inf`).
pub(crate) fn latency_histogram() -> Histogram {
    Histogram::new(LATENCY_BUCKETS.iter().copied())
}

/// A family of latency histograms, one per label set.
pub(crate) type LatencyFamily<L> = Family<L, Histogram, fn() -> Histogram>;

pub(crate) fn latency_family<L: Clone + std::hash::Hash + Eq>() -> LatencyFamily<L> {
    Family::new_with_constructor(latency_histogram)
}

/// Creates the series of `labels` at zero, so that they are written before anything is
/// counted (a dashboard sees `error 0` before the first error).
pub(crate) fn start_at_zero<L: Clone + std::hash::Hash + Eq>(
    family: &Family<L, Counter>,
    labels: impl IntoIterator<Item = L>,
) {
    for label in labels {
        let _ = family.get_or_create(&label);
    }
}

/// How a reload attempt ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum ReloadOutcome {
    /// A new chain was built and swapped in.
    Applied,
    /// The new config was invalid; the old chain stays.
    Rejected,
    /// The config and plugin files hash as the active chain's: nothing to swap.
    Unchanged,
}

impl ReloadOutcome {
    const ALL: [ReloadOutcome; 3] = [
        ReloadOutcome::Applied,
        ReloadOutcome::Rejected,
        ReloadOutcome::Unchanged,
    ];

    fn label(self) -> ResultLabel {
        ResultLabel {
            result: match self {
                ReloadOutcome::Applied => "applied",
                ReloadOutcome::Rejected => "rejected",
                ReloadOutcome::Unchanged => "unchanged",
            },
        }
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabel {
    outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResultLabel {
    result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DirectionLabel {
    direction: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StageLabel {
    stage: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StageRunLabels {
    stage: String,
    status: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct HttpLabels {
    route: String,
    status: u16,
}

/// Outcomes of a whole compaction request.
const COMPACTION_OUTCOMES: [&str; 3] = ["ok", "invalid", "error"];

/// The server's metrics. Cheap to update from many tasks at once.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    /// By outcome: `ok`, `invalid` (the request was refused), `error`.
    compactions: Family<OutcomeLabel, Counter>,
    compaction_seconds: Histogram,
    stage_seconds: LatencyFamily<StageLabel>,
    stage_runs: Family<StageRunLabels, Counter>,
    stage_rollbacks: Family<StageLabel, Counter>,
    llm_calls: Counter,
    llm_failed_calls: Counter,
    llm_tokens: Family<DirectionLabel, Counter>,
    cache_hits: Counter,
    conversation_tokens: Family<DirectionLabel, Counter>,
    threads_continued: Counter,
    thread_states_refused: Counter,
    prefix_kept_tokens: Counter,
    reloads: Family<ResultLabel, Counter>,
    http_requests: Family<HttpLabels, Counter>,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

fn status_label(status: StageStatus) -> &'static str {
    match status {
        StageStatus::Acted => "acted",
        StageStatus::Skipped => "skipped",
        StageStatus::NotRun => "not_run",
        StageStatus::RolledBack => "rolled_back",
    }
}

const IN: DirectionLabel = DirectionLabel { direction: "in" };
const OUT: DirectionLabel = DirectionLabel { direction: "out" };
const INPUT: DirectionLabel = DirectionLabel { direction: "input" };
const OUTPUT: DirectionLabel = DirectionLabel {
    direction: "output",
};

impl Metrics {
    /// Every series registered; those with a fixed set of labels start at zero.
    pub fn new() -> Self {
        let mut m = Metrics {
            registry: Registry::default(),
            compactions: Family::default(),
            compaction_seconds: latency_histogram(),
            stage_seconds: latency_family(),
            stage_runs: Family::default(),
            stage_rollbacks: Family::default(),
            llm_calls: Counter::default(),
            llm_failed_calls: Counter::default(),
            llm_tokens: Family::default(),
            cache_hits: Counter::default(),
            conversation_tokens: Family::default(),
            threads_continued: Counter::default(),
            thread_states_refused: Counter::default(),
            prefix_kept_tokens: Counter::default(),
            reloads: Family::default(),
            http_requests: Family::default(),
        };
        start_at_zero(
            &m.compactions,
            COMPACTION_OUTCOMES.map(|outcome| OutcomeLabel { outcome }),
        );
        start_at_zero(&m.llm_tokens, [INPUT, OUTPUT]);
        start_at_zero(&m.conversation_tokens, [IN, OUT]);
        start_at_zero(&m.reloads, ReloadOutcome::ALL.map(ReloadOutcome::label));
        let r = &mut m.registry;
        // Counters are named without `_total`: the OpenMetrics encoder adds it to samples.
        r.register(
            "tamp_compactions",
            "Compaction requests, by outcome (ok; invalid: refused request; error)",
            m.compactions.clone(),
        );
        r.register(
            "tamp_compaction_duration_seconds",
            "Time the chain took per successful compaction",
            m.compaction_seconds.clone(),
        );
        r.register(
            "tamp_stage_duration_seconds",
            "Time each stage took when it ran, by stage name",
            m.stage_seconds.clone(),
        );
        r.register(
            "tamp_stage_runs",
            "Stage outcomes, by stage and status (acted, skipped, not_run, rolled_back)",
            m.stage_runs.clone(),
        );
        r.register(
            "tamp_stage_rollbacks",
            "Stages rolled back (error, panic, timeout or broken invariant), by stage",
            m.stage_rollbacks.clone(),
        );
        r.register(
            "tamp_llm_calls",
            "LLM calls made by stages (cache hits excluded)",
            m.llm_calls.clone(),
        );
        r.register(
            "tamp_llm_failed_calls",
            "LLM calls that failed",
            m.llm_failed_calls.clone(),
        );
        r.register(
            "tamp_llm_tokens",
            "Tokens sent to (input) and received from (output) the LLM provider",
            m.llm_tokens.clone(),
        );
        r.register(
            "tamp_summary_cache_hits",
            "LLM requests answered from the summary cache",
            m.cache_hits.clone(),
        );
        r.register(
            "tamp_conversation_tokens",
            "Conversation tokens before (in) and after (out) compaction",
            m.conversation_tokens.clone(),
        );
        r.register(
            "tamp_threads_continued",
            "Compactions that started from their thread's last answer (thread continuity)",
            m.threads_continued.clone(),
        );
        r.register(
            "tamp_thread_states_refused",
            "Thread states not used because they no longer matched their seal (altered in the \
             store): the thread started again from the request's raw history",
            m.thread_states_refused.clone(),
        );
        r.register(
            "tamp_prefix_kept_tokens",
            "Answer tokens that were an unchanged prefix of the thread's previous answer \
             (what the main model's prompt cache can reuse)",
            m.prefix_kept_tokens.clone(),
        );
        r.register(
            "tamp_reloads",
            "Config reloads, by result (applied, rejected: invalid config kept the old \
             chain, unchanged: same config and plugin files)",
            m.reloads.clone(),
        );
        r.register(
            "tamp_http_requests",
            "HTTP requests answered, by route and status code",
            m.http_requests.clone(),
        );
        m
    }

    /// Records a finished compaction.
    pub fn compaction(&self, report: &ChainReport) {
        self.compactions
            .get_or_create(&OutcomeLabel { outcome: "ok" })
            .inc();
        self.compaction_seconds.observe(report.duration_ms / 1e3);
        for run in &report.stages {
            let status = status_label(run.status);
            self.stage_runs
                .get_or_create(&StageRunLabels {
                    stage: run.stage.clone(),
                    status,
                })
                .inc();
            if run.status == StageStatus::RolledBack {
                self.stage_rollbacks
                    .get_or_create(&StageLabel {
                        stage: run.stage.clone(),
                    })
                    .inc();
            }
            if run.status != StageStatus::NotRun {
                self.stage_seconds
                    .get_or_create(&StageLabel {
                        stage: run.stage.clone(),
                    })
                    .observe(run.duration_ms / 1e3);
            }
            self.llm_failed_calls
                .inc_by(u64::from(run.failed_llm_calls));
        }
        self.llm_calls.inc_by(u64::from(report.llm_calls));
        self.llm_tokens
            .get_or_create(&INPUT)
            .inc_by(report.usage.input_tokens);
        self.llm_tokens
            .get_or_create(&OUTPUT)
            .inc_by(report.usage.output_tokens);
        self.cache_hits.inc_by(u64::from(report.cache_hits));
        self.conversation_tokens
            .get_or_create(&IN)
            .inc_by(report.tokens_before);
        self.conversation_tokens
            .get_or_create(&OUT)
            .inc_by(report.tokens_after);
        if let Some(thread) = &report.thread {
            self.threads_continued.inc_by(u64::from(thread.continued));
            self.thread_states_refused
                .inc_by(u64::from(thread.state_refused));
            self.prefix_kept_tokens.inc_by(thread.prefix_kept_tokens);
        }
    }

    /// Records a compaction refused (`invalid`) or failed (`error`) as a whole.
    pub fn compaction_failed(&self, outcome: &'static str) {
        self.compactions
            .get_or_create(&OutcomeLabel { outcome })
            .inc();
    }

    pub fn reload(&self, outcome: ReloadOutcome) {
        self.reloads.get_or_create(&outcome.label()).inc();
    }

    pub fn reloads(&self, outcome: ReloadOutcome) -> u64 {
        self.reloads
            .get(&outcome.label())
            .map_or(0, |counter| counter.get())
    }

    pub fn http_request(&self, route: String, status: u16) {
        self.http_requests
            .get_or_create(&HttpLabels { route, status })
            .inc();
    }

    /// The exposition of one scrape: these series, the active chain's (`chain_hash` and
    /// `loaded_at_unix` describe it; `in_flight` compactions are running), then each of
    /// `more` (the proxy's, the deferred worker's), then `# EOF`.
    pub fn render(
        &self,
        chain_hash: &str,
        loaded_at_unix: f64,
        in_flight: usize,
        more: &[&Registry],
    ) -> String {
        let mut now = Registry::default();
        now.register(
            "tamp_requests_in_flight",
            "Compactions running now",
            ConstGauge::new(i64::try_from(in_flight).unwrap_or(i64::MAX)),
        );
        // An info metric (`tamp_chain_info`, value 1): the hash is a label, and it changes
        // with every reload, so it is made per scrape.
        now.register(
            "tamp_chain",
            "The active chain: its config hash",
            Info::new([("config_hash", chain_hash.to_owned())]),
        );
        now.register(
            "tamp_chain_loaded_timestamp_seconds",
            "When the active chain was loaded (Unix time)",
            ConstGauge::new(loaded_at_unix),
        );
        let mut out = String::with_capacity(4096);
        for registry in [&self.registry, &now]
            .into_iter()
            .chain(more.iter().copied())
        {
            // Writing to a String cannot fail.
            let _ = encode_registry(&mut out, registry);
        }
        let _ = encode_eof(&mut out);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chain::{BudgetReport, StageRun};
    use tamp_plugin_api::Usage;

    /// A report of a compaction whose stages ran as `stages` says: name, status, ms.
    fn report(stages: &[(&str, StageStatus, f64)]) -> ChainReport {
        let stages = stages
            .iter()
            .map(|(stage, status, ms)| StageRun {
                stage: (*stage).to_owned(),
                plugin: "p".into(),
                plugin_version: "0".into(),
                status: *status,
                reason: String::new(),
                error: None,
                tokens_before: 0,
                tokens_after: 0,
                duration_ms: *ms,
                llm_calls: 0,
                failed_llm_calls: 0,
                cache_hits: 0,
                usage: Usage::default(),
                cost_usd: None,
                llm_errors: Vec::new(),
                pages: Vec::new(),
                messages_removed: 0,
                summaries_added: 0,
                messages_cleared: 0,
                warnings: Vec::new(),
                details: serde_json::Value::Null,
            })
            .collect();
        ChainReport {
            tokens_before: 0,
            tokens_after: 0,
            messages_before: 0,
            messages_after: 0,
            budget: BudgetReport {
                max_tokens: 0,
                high_watermark: 0,
                low_watermark: 0,
                keep_recent: 0,
                protected_tail: 0,
            },
            reason: String::new(),
            stages,
            llm_calls: 0,
            cache_hits: 0,
            usage: Usage::default(),
            cost_usd: None,
            duration_ms: 1.0,
            thread: None,
            low_watermark_missed: None,
            opaque: Vec::new(),
            unrecognized_summaries: 0,
        }
    }

    #[test]
    fn histogram_buckets_are_cumulative_and_end_at_the_count() {
        let m = Metrics::default();
        for s in [0.0005, 0.003, 0.003, 0.2, 100.0] {
            m.compaction(&report(&[("a", StageStatus::Acted, s * 1e3)]));
        }
        let out = m.render("h", 1.0, 0, &[]);
        let name = "tamp_stage_duration_seconds";
        for (le, n) in [
            ("0.001", 1),
            ("0.005", 3),
            ("0.25", 4),
            ("60.0", 4),
            ("+Inf", 5),
        ] {
            // The encoder writes `le` first, then the family's labels.
            let line = format!("{name}_bucket{{le=\"{le}\",stage=\"a\"}} {n}\n");
            assert!(out.contains(&line), "{line} in {out}");
        }
        assert!(
            out.contains(&format!("{name}_count{{stage=\"a\"}} 5\n")),
            "{out}"
        );
    }

    #[test]
    fn label_values_are_escaped() {
        let m = Metrics::default();
        m.compaction(&report(&[("a\"b\\c\nd", StageStatus::RolledBack, 1.0)]));
        let out = m.render("x\"y", 1.0, 0, &[]);
        assert!(
            out.contains("tamp_stage_rollbacks_total{stage=\"a\\\"b\\\\c\\nd\"} 1\n"),
            "{out}"
        );
        assert!(
            out.contains("tamp_chain_info{config_hash=\"x\\\"y\"} 1\n"),
            "{out}"
        );
    }

    #[test]
    fn reloads_are_counted_by_result() {
        let m = Metrics::default();
        m.reload(ReloadOutcome::Applied);
        m.reload(ReloadOutcome::Rejected);
        m.reload(ReloadOutcome::Rejected);
        assert_eq!(m.reloads(ReloadOutcome::Rejected), 2);
        let text = m.render("abc", 1.0, 0, &[]);
        assert!(text.contains("tamp_reloads_total{result=\"applied\"} 1\n"));
        assert!(text.contains("tamp_reloads_total{result=\"rejected\"} 2\n"));
        assert!(text.contains("tamp_reloads_total{result=\"unchanged\"} 0\n"));
        assert!(text.contains("tamp_chain_info{config_hash=\"abc\"} 1\n"));
    }

    #[test]
    fn the_exposition_is_openmetrics_with_one_eof_after_every_registry() {
        let m = Metrics::default();
        let mut extra = Registry::default();
        extra.register("tamp_extra", "An extra series", Counter::<u64>::default());
        let text = m.render("abc", 1_718_000_000.25, 3, &[&extra]);
        assert!(text.contains("# TYPE tamp_compactions counter\n"), "{text}");
        assert!(text.contains("tamp_compactions_total{outcome=\"error\"} 0\n"));
        assert!(text.contains("# TYPE tamp_chain info\n"), "{text}");
        assert!(text.contains("tamp_requests_in_flight 3\n"), "{text}");
        assert!(
            text.contains("tamp_chain_loaded_timestamp_seconds 1718000000.25\n"),
            "{text}"
        );
        assert!(text.contains("tamp_extra_total 0\n"), "{text}");
        assert!(text.ends_with("tamp_extra_total 0\n# EOF\n"), "{text}");
        assert_eq!(text.matches("# EOF").count(), 1);
    }
}
