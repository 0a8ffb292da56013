//! `tamp eval`'s output: a text table, JSON, or CSV.

use super::{cells, Run};

/// The output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Text,
    Json,
    Csv,
    /// A self-contained page with charts.
    Html,
}

impl Format {
    /// Every format's name, as `--format` takes it.
    pub const NAMES: [&'static str; 4] = ["text", "json", "csv", "html"];
}

impl std::str::FromStr for Format {
    type Err = String;

    fn from_str(name: &str) -> Result<Self, String> {
        Ok(match name {
            "text" => Format::Text,
            "json" => Format::Json,
            "csv" => Format::Csv,
            "html" => Format::Html,
            other => {
                return Err(format!(
                    "unknown format \"{other}\" (one of {})",
                    Format::NAMES.join(", ")
                ))
            }
        })
    }
}

pub fn render(runs: &[Run], format: Format) -> String {
    match format {
        Format::Text => text(runs),
        Format::Json => {
            let mut s = serde_json::to_string_pretty(&serde_json::json!({ "runs": runs }))
                .expect("runs serialize");
            s.push('\n');
            s
        }
        Format::Csv => csv(runs),
        Format::Html => super::html::render(runs),
    }
}

fn text(runs: &[Run]) -> String {
    // The probe's column only when there was a probe.
    let probed = runs.iter().any(|r| r.probe.is_some());
    let columns: Vec<&cells::Column> = cells::COLUMNS
        .iter()
        .filter(|c| probed || c.header != "probe")
        .collect();
    let header: Vec<&str> = columns.iter().map(|c| c.header).collect();
    let rows: Vec<Vec<String>> = runs
        .iter()
        .map(|r| columns.iter().map(|c| c.text(r)).collect())
        .collect();
    let widths: Vec<usize> = (0..header.len())
        .map(|c| {
            rows.iter()
                .map(|r| r[c].chars().count())
                .chain([header[c].len()])
                .max()
                .unwrap_or(0)
        })
        .collect();
    let line = |cells: &[&str]| {
        let mut out = String::new();
        for (c, cell) in cells.iter().enumerate() {
            // Names left, figures right.
            if c < 3 {
                out.push_str(&format!("{cell:<w$}  ", w = widths[c]));
            } else {
                out.push_str(&format!("{cell:>w$}  ", w = widths[c]));
            }
        }
        out.truncate(out.trim_end().len());
        out.push('\n');
        out
    };
    let mut out = line(&header);
    for row in &rows {
        out.push_str(&line(&row.iter().map(String::as_str).collect::<Vec<_>>()));
    }
    let lost: Vec<String> = runs
        .iter()
        .filter_map(|r| {
            let ret = r.retention.as_ref()?;
            (!ret.lost.is_empty()).then(|| {
                format!(
                    "  {} / {} / {}: lost {}",
                    r.conversation,
                    r.chain,
                    r.mode.label(),
                    ret.lost.join(", ")
                )
            })
        })
        .collect();
    if !lost.is_empty() {
        out.push_str("\nfacts not found in the final context:\n");
        for l in lost {
            out.push_str(&l);
            out.push('\n');
        }
    }
    let differed: Vec<String> = runs
        .iter()
        .flat_map(|r| {
            let probe = r.probe.iter();
            probe.flat_map(move |p| {
                p.differed.iter().map(move |d| {
                    format!(
                        "  {} / {} / {}: {}: {:?}, not {:?}",
                        r.conversation,
                        r.chain,
                        r.mode.label(),
                        d.id,
                        d.answer,
                        d.reference
                    )
                })
            })
        })
        .collect();
    if !differed.is_empty() {
        out.push_str("\nquestions answered otherwise than from the original:\n");
        for l in differed {
            out.push_str(&l);
            out.push('\n');
        }
    }
    out
}

/// A CSV field, quoted when it must be (RFC 4180).
fn field(value: &str) -> String {
    if value.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", value.replace('"', "\"\""))
    } else {
        value.to_string()
    }
}

fn csv(runs: &[Run]) -> String {
    let header = [
        "conversation",
        "chain",
        "mode",
        "requests",
        "tokens_before",
        "tokens_after",
        "llm_calls",
        "tokens_sent",
        "cost_usd",
        "prefix_reuse",
        "main_model_cost",
        "ms_per_compaction",
        "facts_found",
        "facts_total",
        "probe_same",
        "probe_answerable",
        "rolled_back",
    ];
    let mut out = header.join(",");
    out.push('\n');
    for r in runs {
        let row = [
            r.conversation.clone(),
            r.chain.clone(),
            r.mode.label().to_string(),
            r.requests.to_string(),
            r.tokens_before.to_string(),
            r.tokens_after.to_string(),
            r.llm_calls.to_string(),
            r.tokens_sent.to_string(),
            r.cost_usd.map_or(String::new(), |c| format!("{c:.6}")),
            r.prefix_reuse.map_or(String::new(), |p| format!("{p:.4}")),
            r.main_model_cost
                .map_or(String::new(), |c| format!("{c:.4}")),
            format!("{:.3}", r.ms_per_compaction),
            r.retention
                .as_ref()
                .map_or(String::new(), |x| x.found.to_string()),
            r.retention
                .as_ref()
                .map_or(String::new(), |x| x.total.to_string()),
            r.probe
                .as_ref()
                .map_or(String::new(), |p| p.same.to_string()),
            r.probe
                .as_ref()
                .map_or(String::new(), |p| p.answerable.to_string()),
            r.rolled_back.to_string(),
        ];
        out.push_str(&row.iter().map(|v| field(v)).collect::<Vec<_>>().join(","));
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::super::facts::Retention;
    use super::super::Mode;
    use super::*;

    fn run(chain: &str) -> Run {
        Run {
            chain: chain.into(),
            conversation: "conv".into(),
            mode: Mode::Replay,
            requests: 3,
            tokens_before: 1000,
            tokens_after: 400,
            llm_calls: 2,
            failed_llm_calls: 0,
            tokens_sent: 900,
            cost_usd: None,
            prefix_reuse: Some(0.95),
            main_model_cost: Some(0.25),
            main_model_prices: Some(super::super::main_model::CachePrices::ANTHROPIC),
            ms_per_compaction: 1.25,
            retention: Some(Retention {
                found: 3,
                total: 4,
                lost: vec!["d2".into()],
            }),
            probe: None,
            rolled_back: 0,
            budget: Default::default(),
            series: Vec::new(),
        }
    }

    #[test]
    fn the_table_aligns_and_names_the_lost_facts() {
        let text = render(&[run("default"), run("a, \"quoted\" chain")], Format::Text);
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines[0].starts_with("conversation  chain"), "{text}");
        assert!(
            lines[1].contains("3/4 (75%)")
                && lines[1].contains("0.950")
                && lines[1].contains("0.250x"),
            "{text}"
        );
        assert!(text.contains("conv / default / replay: lost d2"), "{text}");
        let csv = render(&[run("a, \"quoted\" chain")], Format::Csv);
        assert!(
            csv.lines()
                .nth(1)
                .unwrap()
                .starts_with("conv,\"a, \"\"quoted\"\" chain\",replay,3,"),
            "{csv}"
        );
        let json: serde_json::Value =
            serde_json::from_str(&render(&[run("x")], Format::Json)).unwrap();
        assert_eq!(json["runs"][0]["retention"]["found"], 3);
        assert_eq!(json["runs"][0]["mode"], "replay");
    }
}
