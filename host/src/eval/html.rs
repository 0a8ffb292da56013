//! `tamp eval --format html`: one self-contained page (inline CSS and SVG, no script, nothing
//! fetched), so it can be mailed or attached to a CI run: the table, for each conversation the
//! context over the replay's requests per chain with its compaction events marked, and the
//! retention of each run.

use std::fmt::Write;

use super::{cells, Mode, Run};
use crate::markup::escape;

/// One color per chain, in the order chains were given.
const PALETTE: [&str; 6] = [
    "#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b",
];
const WIDTH: f64 = 760.0;
const HEIGHT: f64 = 260.0;
const MARGIN: f64 = 48.0;

/// The distinct values of `field` over `runs`, in the order they first appear.
fn distinct<'a>(runs: &'a [Run], field: impl Fn(&'a Run) -> &'a str) -> Vec<&'a str> {
    let mut out: Vec<&str> = Vec::new();
    for value in runs.iter().map(field) {
        if !out.contains(&value) {
            out.push(value);
        }
    }
    out
}

fn color(chains: &[&str], chain: &str) -> &'static str {
    let i = chains.iter().position(|c| *c == chain).unwrap_or(0);
    PALETTE[i % PALETTE.len()]
}

pub fn render(runs: &[Run]) -> String {
    let chains = distinct(runs, |r| &r.chain);
    let mut out = String::from(
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <title>tamp eval</title><style>\
         body{font-family:sans-serif;margin:24px;color:#222;background:#fff}\
         table{border-collapse:collapse;font-size:13px}\
         td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}\
         td:nth-child(-n+3),th{text-align:left}\
         .legend span{display:inline-block;margin-right:16px}\
         .swatch{display:inline-block;width:14px;height:4px;vertical-align:middle;margin-right:4px}\
         </style></head><body>\n<h1>tamp eval</h1>\n",
    );
    out.push_str("<p class=\"legend\">");
    for chain in &chains {
        let _ = write!(
            out,
            "<span><i class=\"swatch\" style=\"background:{}\"></i>{}</span>",
            color(&chains, chain),
            escape(chain)
        );
    }
    out.push_str("</p>\n");
    table(&mut out, runs);

    for conversation in distinct(runs, |r| &r.conversation) {
        let _ = writeln!(out, "<h2>{}</h2>", escape(conversation));
        let replays: Vec<&Run> = runs
            .iter()
            .filter(|r| r.conversation == conversation && r.mode == Mode::Replay)
            .collect();
        if !replays.is_empty() {
            context_chart(&mut out, &chains, &replays);
        }
        let scored: Vec<&Run> = runs
            .iter()
            .filter(|r| r.conversation == conversation && r.retention.is_some())
            .collect();
        if !scored.is_empty() {
            retention_chart(&mut out, &chains, &scored);
        }
    }
    out.push_str("</body></html>\n");
    out
}

fn table(out: &mut String, runs: &[Run]) {
    out.push_str(
        "<table><tr><th>conversation</th><th>chain</th><th>mode</th><th>requests</th>\
         <th>tokens before</th><th>tokens after</th><th>LLM calls</th><th>tokens sent</th>\
         <th>cost</th><th>prefix reuse</th><th>main model</th><th>ms/compaction</th><th>retention</th>\
         <th>lost</th><th>probe</th></tr>\n",
    );
    for r in runs {
        let retention = r.retention.as_ref();
        let _ = writeln!(
            out,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td>\
             <td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{:.1}</td><td>{}</td><td>{}</td>\
             <td>{}</td></tr>",
            escape(&r.conversation),
            escape(&r.chain),
            r.mode.label(),
            r.requests,
            r.tokens_before,
            r.tokens_after,
            r.llm_calls,
            r.tokens_sent,
            cells::cost(r),
            cells::prefix_reuse(r),
            cells::main_model_cost(r),
            r.ms_per_compaction,
            retention.map_or("-".into(), |x| format!("{}/{}", x.found, x.total)),
            retention.map_or(String::new(), |x| escape(&x.lost.join(", "))),
            cells::probe(r),
        );
    }
    out.push_str("</table>\n");
}

/// Context tokens after each request of each replay (a line per chain, a dot where a stage
/// acted), over the tokens the client posted (grey).
fn context_chart(out: &mut String, chains: &[&str], replays: &[&Run]) {
    let requests = replays
        .iter()
        .map(|r| r.series.len())
        .max()
        .unwrap_or(0)
        .max(2);
    let top = replays
        .iter()
        .flat_map(|r| r.series.iter().map(|p| p.tokens_posted.max(p.tokens_after)))
        .max()
        .unwrap_or(1)
        .max(1) as f64;
    let x = |i: usize| MARGIN + (WIDTH - 2.0 * MARGIN) * i as f64 / (requests - 1) as f64;
    let y = |t: u64| HEIGHT - MARGIN + (2.0 * MARGIN - HEIGHT) * t as f64 / top;
    let _ = writeln!(
        out,
        "<p>Context over the replay: tokens after each compaction (one line per chain, a dot \
         where a stage acted) and tokens posted (grey).</p>\n<svg xmlns=\"http://www.w3.org/2000/svg\" \
         width=\"{WIDTH}\" height=\"{HEIGHT}\" role=\"img\" aria-label=\"context tokens per request\">\
         <rect width=\"100%\" height=\"100%\" fill=\"#fafafa\"/>\
         <line x1=\"{MARGIN}\" y1=\"{b}\" x2=\"{r}\" y2=\"{b}\" stroke=\"#999\"/>\
         <line x1=\"{MARGIN}\" y1=\"{MARGIN}\" x2=\"{MARGIN}\" y2=\"{b}\" stroke=\"#999\"/>\
         <text x=\"4\" y=\"{t}\" font-size=\"11\">{top}</text>\
         <text x=\"4\" y=\"{b}\" font-size=\"11\">0</text>\
         <text x=\"{r}\" y=\"{l}\" font-size=\"11\" text-anchor=\"end\">request {requests}</text>",
        b = HEIGHT - MARGIN,
        r = WIDTH - MARGIN,
        t = MARGIN + 4.0,
        l = HEIGHT - MARGIN + 16.0,
    );
    if let Some(longest) = replays.iter().max_by_key(|r| r.series.len()) {
        let points: Vec<String> = longest
            .series
            .iter()
            .enumerate()
            .map(|(i, p)| format!("{:.1},{:.1}", x(i), y(p.tokens_posted)))
            .collect();
        let _ = write!(
            out,
            "<polyline fill=\"none\" stroke=\"#bbb\" stroke-dasharray=\"4 3\" stroke-width=\"2\" points=\"{}\"/>",
            points.join(" ")
        );
    }
    for run in replays {
        let c = color(chains, &run.chain);
        let points: Vec<String> = run
            .series
            .iter()
            .enumerate()
            .map(|(i, p)| format!("{:.1},{:.1}", x(i), y(p.tokens_after)))
            .collect();
        let _ = write!(
            out,
            "<polyline fill=\"none\" stroke=\"{c}\" stroke-width=\"3\" points=\"{}\"/>",
            points.join(" ")
        );
        for (i, p) in run.series.iter().enumerate().filter(|(_, p)| p.compacted) {
            let _ = write!(
                out,
                "<circle cx=\"{:.1}\" cy=\"{:.1}\" r=\"4\" fill=\"{c}\"/>",
                x(i),
                y(p.tokens_after)
            );
        }
    }
    out.push_str("</svg>\n");
}

/// Retention of each run as a bar.
fn retention_chart(out: &mut String, chains: &[&str], runs: &[&Run]) {
    const ROW: f64 = 26.0;
    const LABEL: f64 = 260.0;
    let height = ROW * runs.len() as f64 + 10.0;
    let _ = writeln!(
        out,
        "<p>Retention: facts found in the final context.</p>\n<svg xmlns=\"http://www.w3.org/2000/svg\" \
         width=\"{WIDTH}\" height=\"{height}\" role=\"img\" aria-label=\"retention per run\">"
    );
    for (i, run) in runs.iter().enumerate() {
        let Some(r) = &run.retention else { continue };
        let top = 5.0 + ROW * i as f64;
        let full = WIDTH - LABEL - 80.0;
        let _ = write!(
            out,
            "<text x=\"0\" y=\"{:.1}\" font-size=\"12\">{} ({})</text>\
             <rect x=\"{LABEL}\" y=\"{top:.1}\" width=\"{full:.1}\" height=\"18\" fill=\"#eee\"/>\
             <rect x=\"{LABEL}\" y=\"{top:.1}\" width=\"{:.1}\" height=\"18\" fill=\"{}\"/>\
             <text x=\"{:.1}\" y=\"{:.1}\" font-size=\"12\">{}/{}</text>",
            top + 14.0,
            escape(&run.chain),
            run.mode.label(),
            full * r.share(),
            color(chains, &run.chain),
            LABEL + full + 8.0,
            top + 14.0,
            r.found,
            r.total
        );
    }
    out.push_str("</svg>\n");
}
