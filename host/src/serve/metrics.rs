//! The server's counters and histograms, written in the Prometheus text exposition format
//! (version 0.0.4) for `GET /metrics`.
//!
//! Hand-written rather than a metrics crate: a dozen series under one mutex, updated once per
//! compaction (microseconds next to the compaction itself), need no registry machinery.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Mutex;

use crate::chain::{ChainReport, StageStatus};

/// Upper bounds of the latency histograms' buckets, in seconds.
const LATENCY_BUCKETS: &[f64] = &[
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
];

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
    fn label(self) -> &'static str {
        match self {
            ReloadOutcome::Applied => "applied",
            ReloadOutcome::Rejected => "rejected",
            ReloadOutcome::Unchanged => "unchanged",
        }
    }
}

#[derive(Debug, Clone, Default)]
pub(crate) struct Histogram {
    /// Per bucket of [`LATENCY_BUCKETS`] (not cumulative; summed when written).
    counts: Vec<u64>,
    sum: f64,
    count: u64,
}

impl Histogram {
    pub(crate) fn observe(&mut self, seconds: f64) {
        if self.counts.is_empty() {
            self.counts = vec![0; LATENCY_BUCKETS.len()];
        }
        if let Some(i) = LATENCY_BUCKETS.iter().position(|b| seconds <= *b) {
            self.counts[i] += 1;
        }
        self.sum += seconds;
        self.count += 1;
    }

    pub(crate) fn write(&self, out: &mut String, name: &str, labels: &str) {
        let sep = if labels.is_empty() { "" } else { "," };
        let mut cumulative = 0;
        for (i, bound) in LATENCY_BUCKETS.iter().enumerate() {
            cumulative += self.counts.get(i).copied().unwrap_or(0);
            let _ = writeln!(
                out,
                "{name}_bucket{{{labels}{sep}le=\"{bound}\"}} {cumulative}"
            );
        }
        let _ = writeln!(
            out,
            "{name}_bucket{{{labels}{sep}le=\"+Inf\"}} {}",
            self.count
        );
        let braces = if labels.is_empty() {
            String::new()
        } else {
            format!("{{{labels}}}")
        };
        let _ = writeln!(out, "{name}_sum{braces} {}", self.sum);
        let _ = writeln!(out, "{name}_count{braces} {}", self.count);
    }
}

#[derive(Debug, Default)]
struct Inner {
    /// By outcome: `ok`, `invalid` (the request was refused), `error`.
    compactions: BTreeMap<&'static str, u64>,
    compaction_seconds: Histogram,
    /// By stage name.
    stage_seconds: BTreeMap<String, Histogram>,
    /// By (stage, status).
    stage_runs: BTreeMap<(String, &'static str), u64>,
    llm_calls: u64,
    llm_failed_calls: u64,
    llm_input_tokens: u64,
    llm_output_tokens: u64,
    cache_hits: u64,
    conversation_tokens_in: u64,
    conversation_tokens_out: u64,
    /// Compactions that continued their thread from its last answer.
    threads_continued: u64,
    /// Answer tokens that were an unchanged prefix of the thread's previous answer.
    prefix_kept_tokens: u64,
    reloads: BTreeMap<ReloadOutcome, u64>,
    /// By (method + route, status code).
    http_requests: BTreeMap<(String, u16), u64>,
}

/// The server's metrics. Cheap to update from many tasks at once.
#[derive(Debug, Default)]
pub struct Metrics {
    inner: Mutex<Inner>,
}

fn status_label(status: StageStatus) -> &'static str {
    match status {
        StageStatus::Acted => "acted",
        StageStatus::Skipped => "skipped",
        StageStatus::NotRun => "not_run",
        StageStatus::RolledBack => "rolled_back",
    }
}

/// A label value with `\`, `"` and newlines escaped as the exposition format requires.
pub(crate) fn escape(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// The `# HELP` and `# TYPE` lines of a metric family.
pub(crate) fn family(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
}

impl Metrics {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Records a finished compaction.
    pub fn compaction(&self, report: &ChainReport) {
        let mut m = self.lock();
        *m.compactions.entry("ok").or_default() += 1;
        m.compaction_seconds.observe(report.duration_ms / 1e3);
        for run in &report.stages {
            *m.stage_runs
                .entry((run.stage.clone(), status_label(run.status)))
                .or_default() += 1;
            if run.status != StageStatus::NotRun {
                m.stage_seconds
                    .entry(run.stage.clone())
                    .or_default()
                    .observe(run.duration_ms / 1e3);
            }
            m.llm_failed_calls += u64::from(run.failed_llm_calls);
        }
        m.llm_calls += u64::from(report.llm_calls);
        m.llm_input_tokens += report.usage.input_tokens;
        m.llm_output_tokens += report.usage.output_tokens;
        m.cache_hits += u64::from(report.cache_hits);
        m.conversation_tokens_in += report.tokens_before;
        m.conversation_tokens_out += report.tokens_after;
        if let Some(thread) = &report.thread {
            m.threads_continued += u64::from(thread.continued);
            m.prefix_kept_tokens += thread.prefix_kept_tokens;
        }
    }

    /// Records a compaction refused (`invalid`) or failed (`error`) as a whole.
    pub fn compaction_failed(&self, outcome: &'static str) {
        *self.lock().compactions.entry(outcome).or_default() += 1;
    }

    pub fn reload(&self, outcome: ReloadOutcome) {
        *self.lock().reloads.entry(outcome).or_default() += 1;
    }

    pub fn reloads(&self, outcome: ReloadOutcome) -> u64 {
        self.lock().reloads.get(&outcome).copied().unwrap_or(0)
    }

    pub fn http_request(&self, route: String, status: u16) {
        *self
            .lock()
            .http_requests
            .entry((route, status))
            .or_default() += 1;
    }

    /// The exposition text. `chain_hash` and `loaded_at_unix` describe the active chain.
    pub fn render(&self, chain_hash: &str, loaded_at_unix: f64, in_flight: usize) -> String {
        let m = self.lock();
        let mut out = String::with_capacity(4096);

        family(
            &mut out,
            "tamp_compactions_total",
            "counter",
            "Compaction requests, by outcome (ok; invalid: refused request; error).",
        );
        for outcome in ["ok", "invalid", "error"] {
            let n = m.compactions.get(outcome).copied().unwrap_or(0);
            let _ = writeln!(out, "tamp_compactions_total{{outcome=\"{outcome}\"}} {n}");
        }
        family(
            &mut out,
            "tamp_compaction_duration_seconds",
            "histogram",
            "Time the chain took per successful compaction.",
        );
        m.compaction_seconds
            .write(&mut out, "tamp_compaction_duration_seconds", "");
        family(
            &mut out,
            "tamp_stage_duration_seconds",
            "histogram",
            "Time each stage took when it ran, by stage name.",
        );
        for (stage, h) in &m.stage_seconds {
            h.write(
                &mut out,
                "tamp_stage_duration_seconds",
                &format!("stage=\"{}\"", escape(stage)),
            );
        }
        family(
            &mut out,
            "tamp_stage_runs_total",
            "counter",
            "Stage outcomes, by stage and status (acted, skipped, not_run, rolled_back).",
        );
        for ((stage, status), n) in &m.stage_runs {
            let _ = writeln!(
                out,
                "tamp_stage_runs_total{{stage=\"{}\",status=\"{status}\"}} {n}",
                escape(stage)
            );
        }
        family(
            &mut out,
            "tamp_stage_rollbacks_total",
            "counter",
            "Stages rolled back (error, panic, timeout or broken invariant), by stage.",
        );
        for ((stage, status), n) in &m.stage_runs {
            if *status == "rolled_back" {
                let _ = writeln!(
                    out,
                    "tamp_stage_rollbacks_total{{stage=\"{}\"}} {n}",
                    escape(stage)
                );
            }
        }
        let counters: [(&str, &str, String); 7] = [
            (
                "tamp_llm_calls_total",
                "LLM calls made by stages (cache hits excluded).",
                format!("tamp_llm_calls_total {}", m.llm_calls),
            ),
            (
                "tamp_llm_failed_calls_total",
                "LLM calls that failed.",
                format!("tamp_llm_failed_calls_total {}", m.llm_failed_calls),
            ),
            (
                "tamp_llm_tokens_total",
                "Tokens sent to (input) and received from (output) the LLM provider.",
                format!(
                    "tamp_llm_tokens_total{{direction=\"input\"}} {}\n\
                     tamp_llm_tokens_total{{direction=\"output\"}} {}",
                    m.llm_input_tokens, m.llm_output_tokens
                ),
            ),
            (
                "tamp_summary_cache_hits_total",
                "LLM requests answered from the summary cache.",
                format!("tamp_summary_cache_hits_total {}", m.cache_hits),
            ),
            (
                "tamp_conversation_tokens_total",
                "Conversation tokens before (in) and after (out) compaction.",
                format!(
                    "tamp_conversation_tokens_total{{direction=\"in\"}} {}\n\
                     tamp_conversation_tokens_total{{direction=\"out\"}} {}",
                    m.conversation_tokens_in, m.conversation_tokens_out
                ),
            ),
            (
                "tamp_threads_continued_total",
                "Compactions that started from their thread's last answer (thread continuity).",
                format!("tamp_threads_continued_total {}", m.threads_continued),
            ),
            (
                "tamp_prefix_kept_tokens_total",
                "Answer tokens that were an unchanged prefix of the thread's previous answer \
                 (what the main model's prompt cache can reuse).",
                format!("tamp_prefix_kept_tokens_total {}", m.prefix_kept_tokens),
            ),
        ];
        for (name, help, lines) in counters {
            family(&mut out, name, "counter", help);
            out.push_str(&lines);
            out.push('\n');
        }
        family(
            &mut out,
            "tamp_reloads_total",
            "counter",
            "Config reloads, by result (applied, rejected: invalid config kept the old \
             chain, unchanged: same config and plugin files).",
        );
        for outcome in [
            ReloadOutcome::Applied,
            ReloadOutcome::Rejected,
            ReloadOutcome::Unchanged,
        ] {
            let n = m.reloads.get(&outcome).copied().unwrap_or(0);
            let _ = writeln!(
                out,
                "tamp_reloads_total{{result=\"{}\"}} {n}",
                outcome.label()
            );
        }
        family(
            &mut out,
            "tamp_http_requests_total",
            "counter",
            "HTTP requests answered, by route and status code.",
        );
        for ((route, status), n) in &m.http_requests {
            let _ = writeln!(
                out,
                "tamp_http_requests_total{{route=\"{}\",status=\"{status}\"}} {n}",
                escape(route)
            );
        }
        family(
            &mut out,
            "tamp_requests_in_flight",
            "gauge",
            "Compactions running now.",
        );
        let _ = writeln!(out, "tamp_requests_in_flight {in_flight}");
        family(
            &mut out,
            "tamp_chain_info",
            "gauge",
            "The active chain: its config hash (always 1).",
        );
        let _ = writeln!(
            out,
            "tamp_chain_info{{config_hash=\"{}\"}} 1",
            escape(chain_hash)
        );
        family(
            &mut out,
            "tamp_chain_loaded_timestamp_seconds",
            "gauge",
            "When the active chain was loaded (Unix time).",
        );
        let _ = writeln!(out, "tamp_chain_loaded_timestamp_seconds {loaded_at_unix}");
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_buckets_are_cumulative_and_end_at_the_count() {
        let mut h = Histogram::default();
        for s in [0.0005, 0.003, 0.003, 0.2, 100.0] {
            h.observe(s);
        }
        let mut out = String::new();
        h.write(&mut out, "x", "stage=\"a\"");
        assert!(
            out.contains("x_bucket{stage=\"a\",le=\"0.001\"} 1\n"),
            "{out}"
        );
        assert!(
            out.contains("x_bucket{stage=\"a\",le=\"0.005\"} 3\n"),
            "{out}"
        );
        assert!(
            out.contains("x_bucket{stage=\"a\",le=\"0.25\"} 4\n"),
            "{out}"
        );
        assert!(out.contains("x_bucket{stage=\"a\",le=\"60\"} 4\n"), "{out}");
        assert!(
            out.contains("x_bucket{stage=\"a\",le=\"+Inf\"} 5\n"),
            "{out}"
        );
        assert!(out.contains("x_count{stage=\"a\"} 5\n"), "{out}");
    }

    #[test]
    fn label_values_are_escaped() {
        assert_eq!(escape("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
    }

    #[test]
    fn reloads_are_counted_by_result() {
        let m = Metrics::default();
        m.reload(ReloadOutcome::Applied);
        m.reload(ReloadOutcome::Rejected);
        m.reload(ReloadOutcome::Rejected);
        let text = m.render("abc", 1.0, 0);
        assert!(text.contains("tamp_reloads_total{result=\"applied\"} 1\n"));
        assert!(text.contains("tamp_reloads_total{result=\"rejected\"} 2\n"));
        assert!(text.contains("tamp_reloads_total{result=\"unchanged\"} 0\n"));
        assert!(text.contains("tamp_chain_info{config_hash=\"abc\"} 1\n"));
    }
}
