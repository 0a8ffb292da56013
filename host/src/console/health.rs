//! The health view: read from the very exposition `/metrics` writes (this server's counters
//! since it started), so the console and a Prometheus scrape never disagree. Upstream answers,
//! errors and latencies by route, compaction latency, overloads (answers 429, 503 and 529),
//! stage rollbacks, what the chain made of the bodies, and reloads.

use std::collections::BTreeMap;

use serde_json::{json, Value};

/// One sample of the exposition: a series' name, its labels and its value.
#[derive(Clone, Debug, PartialEq)]
struct Sample {
    name: String,
    labels: Vec<(String, String)>,
    value: f64,
}

impl Sample {
    fn label(&self, name: &str) -> Option<&str> {
        self.labels
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

/// The samples of an OpenMetrics text (comment lines and lines that do not read are left
/// out).
fn samples(text: &str) -> Vec<Sample> {
    text.lines()
        .filter(|line| !line.starts_with('#') && !line.trim().is_empty())
        .filter_map(sample)
        .collect()
}

fn sample(line: &str) -> Option<Sample> {
    let (series, value) = line.rsplit_once(' ')?;
    let value: f64 = value.parse().ok()?;
    let (name, labels) = match series.split_once('{') {
        None => (series, Vec::new()),
        Some((name, rest)) => (name, labels(rest.strip_suffix('}')?)?),
    };
    Some(Sample {
        name: name.to_string(),
        labels,
        value,
    })
}

/// `a="x",b="y\"z"` as pairs, the escapes `\\`, `\"` and `\n` undone.
fn labels(text: &str) -> Option<Vec<(String, String)>> {
    let mut out = Vec::new();
    let mut rest = text;
    while !rest.is_empty() {
        let (key, after) = rest.split_once("=\"")?;
        let mut value = String::new();
        let mut chars = after.char_indices();
        let end = loop {
            let (i, c) = chars.next()?;
            match c {
                '\\' => match chars.next()?.1 {
                    'n' => value.push('\n'),
                    other => value.push(other),
                },
                '"' => break i,
                c => value.push(c),
            }
        };
        out.push((key.trim_start_matches(',').to_string(), value));
        rest = after[end + 1..].trim_start_matches(',');
    }
    Some(out)
}

/// The latency below which `q` of a histogram's observations fell, as its buckets bound it:
/// the upper bound of the first bucket holding that share (`None`: nothing observed, or past
/// the last finite bucket).
fn quantile(buckets: &[(f64, f64)], q: f64) -> Option<f64> {
    let total = buckets.last()?.1;
    if total <= 0.0 {
        return None;
    }
    buckets
        .iter()
        .find(|(_, count)| *count >= q * total)
        .map(|(le, _)| *le)
        .filter(|le| le.is_finite())
}

/// A histogram's count and quantile bounds, per value of `by` (one entry for none).
fn histograms(samples: &[Sample], name: &str, by: Option<&str>) -> BTreeMap<String, Value> {
    let mut buckets: BTreeMap<String, Vec<(f64, f64)>> = BTreeMap::new();
    let bucket = format!("{name}_bucket");
    for s in samples.iter().filter(|s| s.name == bucket) {
        let key = by.and_then(|b| s.label(b)).unwrap_or("").to_string();
        let le = match s.label("le") {
            Some("+Inf") => f64::INFINITY,
            Some(le) => le.parse().unwrap_or(f64::INFINITY),
            None => continue,
        };
        buckets.entry(key).or_default().push((le, s.value));
    }
    buckets
        .into_iter()
        .map(|(key, mut b)| {
            b.sort_by(|x, y| x.0.total_cmp(&y.0));
            let count = b.last().map_or(0.0, |l| l.1);
            let view = json!({
                "count": count,
                "p50_at_most_s": quantile(&b, 0.5),
                "p95_at_most_s": quantile(&b, 0.95),
                "p99_at_most_s": quantile(&b, 0.99),
            });
            (key, view)
        })
        .collect()
}

/// The values of a counter family, by the value of `by`.
fn counters(samples: &[Sample], name: &str, by: &str) -> BTreeMap<String, f64> {
    let mut out = BTreeMap::new();
    for s in samples.iter().filter(|s| s.name == name) {
        *out.entry(s.label(by).unwrap_or("").to_string())
            .or_insert(0.0) += s.value;
    }
    out
}

/// The health view of a `/metrics` exposition.
pub fn health_view(exposition: &str) -> Value {
    let samples = samples(exposition);
    let mut overloads: BTreeMap<String, f64> = BTreeMap::new();
    for s in samples
        .iter()
        .filter(|s| s.name == "tamp_http_requests_total")
        .filter(|s| matches!(s.label("status"), Some("429" | "503" | "529")))
    {
        let key = format!(
            "{} {}",
            s.label("route").unwrap_or(""),
            s.label("status").unwrap_or("")
        );
        *overloads.entry(key).or_insert(0.0) += s.value;
    }
    let gauge = |name: &str| {
        samples
            .iter()
            .find(|s| s.name == name)
            .map_or(0.0, |s| s.value)
    };
    json!({
        "upstream_latency": histograms(&samples, "tamp_proxy_upstream_duration_seconds", Some("route")),
        "upstream_errors": counters(&samples, "tamp_proxy_upstream_errors_total", "route"),
        "compaction_latency": histograms(&samples, "tamp_compaction_duration_seconds", None).remove(""),
        "compaction_wait": histograms(&samples, "tamp_proxy_compaction_wait_seconds", None).remove(""),
        "overloads": overloads,
        "rollbacks": counters(&samples, "tamp_stage_rollbacks_total", "stage"),
        "compactions": counters(&samples, "tamp_compactions_total", "outcome"),
        "proxy_bodies": counters(&samples, "tamp_proxy_compactions_total", "outcome"),
        "reloads": counters(&samples, "tamp_reloads_total", "result"),
        "in_flight": gauge("tamp_requests_in_flight"),
        "streams_open": gauge("tamp_proxy_streams_open"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_view_reads_the_exposition_of_the_metrics_module() {
        let metrics = crate::http::metrics::Metrics::default();
        metrics.http_request("POST /v1/messages".into(), 529);
        metrics.http_request("POST /v1/messages".into(), 529);
        metrics.http_request("POST /v1/messages".into(), 200);
        // The proxy's series as its registry writes them (`proxy::metrics`).
        let proxy = "# TYPE tamp_proxy_upstream_duration_seconds histogram\n\
            tamp_proxy_upstream_duration_seconds_sum{route=\"POST /v1/messages\"} 0.212\n\
            tamp_proxy_upstream_duration_seconds_count{route=\"POST /v1/messages\"} 4\n\
            tamp_proxy_upstream_duration_seconds_bucket{le=\"0.001\",route=\"POST /v1/messages\"} 0\n\
            tamp_proxy_upstream_duration_seconds_bucket{le=\"0.005\",route=\"POST /v1/messages\"} 3\n\
            tamp_proxy_upstream_duration_seconds_bucket{le=\"0.25\",route=\"POST /v1/messages\"} 4\n\
            tamp_proxy_upstream_duration_seconds_bucket{le=\"+Inf\",route=\"POST /v1/messages\"} 4\n\
            tamp_proxy_upstream_errors_total{route=\"POST /v1/chat/completions\"} 1\n";
        let text = metrics.render("abc", 0.0, 2, &[]).replace("# EOF", proxy);
        let view = health_view(&text);
        assert_eq!(view["overloads"]["POST /v1/messages 529"], 2.0, "{view:#}");
        let latency = &view["upstream_latency"]["POST /v1/messages"];
        assert_eq!(latency["count"], 4.0);
        assert_eq!(latency["p50_at_most_s"], 0.005);
        assert_eq!(latency["p99_at_most_s"], 0.25);
        assert_eq!(view["upstream_errors"]["POST /v1/chat/completions"], 1.0);
        assert_eq!(view["in_flight"], 2.0);
        assert_eq!(view["reloads"]["applied"], 0.0);
    }

    #[test]
    fn labels_are_unescaped() {
        let s = sample(r#"x_total{route="a \"b\" \\ c",status="200"} 3"#).unwrap();
        assert_eq!(s.label("route"), Some(r#"a "b" \ c"#));
        assert_eq!(s.label("status"), Some("200"));
        assert_eq!(s.value, 3.0);
        assert_eq!(sample("y 1.5").unwrap().labels, vec![]);
        assert!(sample("garbage").is_none());
    }
}
