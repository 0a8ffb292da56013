//! `tamp eval --output-format html`: one self-contained page (inline CSS and SVG, no script,
//! nothing fetched), so it can be mailed or attached to a CI run: the best chain of each
//! conversation, the table with a note on each column, and for each conversation its charts,
//! each with its own scale and legend: the context over the replay's requests per chain
//! against the budget's watermarks, the history the client posted on a panel of its own, and
//! the retention of each run. docs/eval.md describes the page.

use std::cmp::Ordering;
use std::fmt::Write;

use super::cells::{self, Column};
use super::{Mode, Run};

/// One color per chain, in the order chains were given.
const PALETTE: [&str; 6] = [
    "#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b",
];
/// The charts' width; the context chart's height and the history panel's.
const WIDTH: f64 = 960.0;
const CONTEXT_HEIGHT: f64 = 360.0;
const HISTORY_HEIGHT: f64 = 170.0;
/// Room left of the plot for the y-axis labels and title, and right of it.
const LEFT: f64 = 78.0;
const RIGHT: f64 = 24.0;
/// Room under a plot for the x-axis labels and title.
const BOTTOM: f64 = 46.0;
/// The background of a context chart: the page's tests find each chart by it.
const CHART_BACKGROUND: &str = "#fafafa";
/// The history as posted, and the watermarks when every chain of a chart shares them.
const GREY: &str = "#777";

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// `56490` as `56,490`.
fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, d) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(d);
    }
    out
}

/// The smallest round step (1, 2, 2.5 or 5 times a power of ten, a whole number) that
/// divides 0..=`max` into at most `intervals` steps.
fn round_step(max: u64, intervals: u64) -> u64 {
    let mut magnitude = 1u64;
    loop {
        for tenths in [10, 20, 25, 50] {
            let scaled = magnitude * tenths;
            if scaled.is_multiple_of(10) && max.div_ceil(scaled / 10) <= intervals {
                return scaled / 10;
            }
        }
        magnitude *= 10;
    }
}

/// A y axis from 0: its step and its top, a whole number of steps at or above `max` with
/// some room above it, so that a line at the maximum does not run along the top edge.
fn y_axis(max: u64) -> (u64, u64) {
    let wanted = (max + max / 20).max(1);
    let step = round_step(wanted, 5);
    (step, wanted.div_ceil(step) * step)
}

/// The requests an x axis of `requests` labels: the first, then every round step.
fn x_ticks(requests: usize) -> Vec<usize> {
    let step = round_step(requests as u64, 8) as usize;
    let mut ticks = vec![1];
    ticks.extend(
        (1..)
            .map(|k| k * step)
            .take_while(|&n| n <= requests)
            .filter(|&n| n > 1),
    );
    ticks
}

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

/// How [`best`] ranks runs, as the page states it.
pub const BEST_RULE: &str = "Of each conversation's replays (its one-shot runs when it had no \
    replay), the run that kept the largest share of the facts; among runs that kept as many, \
    the one with the fewest tokens after; then the one whose summarizer cost least (its \
    estimated cost when the chain file prices its provider, else the tokens sent to it). The \
    first chain given wins a tie on all three.";

/// The best of one conversation's runs by [`BEST_RULE`]; `None` when there are none.
pub fn best<'a>(runs: &[&'a Run]) -> Option<&'a Run> {
    let replayed = runs.iter().any(|r| r.mode == Mode::Replay);
    let wanted = if replayed {
        Mode::Replay
    } else {
        Mode::OneShot
    };
    let share = |r: &Run| r.retention.as_ref().map_or(0.0, |x| x.share());
    let summarizer_cost = |a: &Run, b: &Run| match (a.cost_usd, b.cost_usd) {
        (Some(a), Some(b)) => a.total_cmp(&b),
        _ => a.tokens_sent.cmp(&b.tokens_sent),
    };
    let better = |a: &Run, b: &Run| -> Ordering {
        share(b)
            .total_cmp(&share(a))
            .then(a.tokens_after.cmp(&b.tokens_after))
            .then_with(|| summarizer_cost(a, b))
    };
    // `min_by` keeps the first of equals: the first chain given wins a tie.
    runs.iter()
        .copied()
        .filter(|r| r.mode == wanted)
        .min_by(|a, b| better(a, b))
}

pub fn render(runs: &[Run]) -> String {
    let chains = distinct(runs, |r| &r.chain);
    let conversations = distinct(runs, |r| &r.conversation);
    let mut out = String::from(
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <title>tamp eval</title><style>\
         body{font-family:sans-serif;margin:24px;color:#222;background:#fff;max-width:1000px}\
         table{border-collapse:collapse;font-size:13px}\
         td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}td{white-space:nowrap}td.lost{white-space:normal;text-align:left}\
         td:nth-child(-n+3),th{text-align:left}\
         td.none{color:#aaa;text-align:center}\
         abbr{text-decoration:underline dotted;cursor:help}\
         dl.columns{font-size:13px;display:grid;grid-template-columns:max-content 1fr;gap:2px 12px}\
         dl.columns dt{font-weight:bold}dl.columns dd{margin:0}\
         .legend{font-size:13px;margin:4px 0}.legend span{display:inline-block;margin-right:16px}\
         .swatch{display:inline-block;width:18px;height:4px;vertical-align:middle;margin-right:4px}\
         .dashed{display:inline-block;width:18px;border-top:2px dashed;vertical-align:middle;margin-right:4px}\
         .dot{display:inline-block;width:8px;height:8px;border-radius:4px;background:#555;\
         vertical-align:middle;margin-right:4px}\
         .rule,figcaption{font-size:13px;color:#555}\
         figure{margin:8px 0 24px 0}svg{display:block;max-width:100%;height:auto}\
         </style></head><body>\n<h1>tamp eval</h1>\n",
    );
    let _ = writeln!(
        out,
        "<p>{} on {}.</p>",
        count(chains.len(), "chain"),
        count(conversations.len(), "conversation")
    );
    if chains.len() > 1 {
        best_summary(&mut out, &chains, &conversations, runs);
    }
    table(&mut out, runs);

    for conversation in conversations {
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

fn count(n: usize, what: &str) -> String {
    format!("{n} {what}{}", if n == 1 { "" } else { "s" })
}

/// A line per conversation naming its best chain, and the rule.
fn best_summary(out: &mut String, chains: &[&str], conversations: &[&str], runs: &[Run]) {
    out.push_str("<h2>Best chain per conversation</h2>\n<ul class=\"best\">\n");
    for conversation in conversations {
        let mine: Vec<&Run> = runs
            .iter()
            .filter(|r| r.conversation == *conversation)
            .collect();
        let Some(run) = best(&mine) else { continue };
        let mut figures = Vec::new();
        if let Some(r) = &run.retention {
            figures.push(format!("{}/{} facts", r.found, r.total));
        }
        figures.push(format!("{} tokens after", thousands(run.tokens_after)));
        figures.push(match run.cost_usd {
            Some(c) => format!("${c:.4}"),
            None => format!("{} tokens sent", thousands(run.tokens_sent)),
        });
        let _ = writeln!(
            out,
            "<li>{}: <i class=\"swatch\" style=\"background:{}\"></i><b>{}</b> ({}: {})</li>",
            escape(conversation),
            color(chains, &run.chain),
            escape(&run.chain),
            run.mode.label(),
            figures.join(", ")
        );
    }
    let _ = writeln!(out, "</ul>\n<p class=\"rule\">{BEST_RULE}</p>");
}

/// The HTML table's columns: the text table's, with the facts lost after retention (the text
/// lists them under its table).
fn columns() -> Vec<Column> {
    let mut columns: Vec<Column> = cells::COLUMNS.into_iter().collect();
    let at = columns
        .iter()
        .position(|c| c.header == "retention")
        .map_or(columns.len(), |i| i + 1);
    columns.insert(
        at,
        Column {
            header: "lost",
            meaning: "the facts not found in the final context, by id",
            cell: |r| {
                r.retention
                    .as_ref()
                    .filter(|x| !x.lost.is_empty())
                    .map(|x| x.lost.join(", "))
            },
        },
    );
    columns
}

/// The table, without the columns no run has a figure for, and a note on each column shown.
fn table(out: &mut String, runs: &[Run]) {
    let shown: Vec<Column> = columns()
        .into_iter()
        .filter(|c| runs.iter().any(|r| (c.cell)(r).is_some()))
        .collect();
    out.push_str("<table><tr>");
    for c in &shown {
        let _ = write!(
            out,
            "<th><abbr title=\"{}\">{}</abbr></th>",
            escape(c.meaning),
            c.header
        );
    }
    out.push_str("</tr>\n");
    for r in runs {
        out.push_str("<tr>");
        for c in &shown {
            match (c.cell)(r) {
                // A figure stays on one line; the list of facts lost may be long.
                Some(cell) if c.header == "lost" => {
                    let _ = write!(out, "<td class=\"lost\">{}</td>", escape(&cell));
                }
                Some(cell) => {
                    let _ = write!(out, "<td>{}</td>", escape(&cell));
                }
                None => out.push_str("<td class=\"none\">–</td>"),
            }
        }
        out.push_str("</tr>\n");
    }
    out.push_str("</table>\n<dl class=\"columns\">\n");
    for c in &shown {
        let _ = write!(out, "<dt>{}</dt><dd>{}", c.header, escape(c.meaning));
        if c.header == "main model" {
            if let Some(prices) = runs.iter().find_map(|r| r.main_model_prices) {
                let _ = write!(
                    out,
                    ". Cache prices here: a read at {} and a write at {} times the input price \
                     (<code>--cache-prices {prices}</code>)",
                    prices.read, prices.write
                );
            }
        }
        out.push_str(".</dd>\n");
    }
    out.push_str(
        "<dt>–</dt><dd>the run has no such figure (a one-shot run has no prefix reuse); a column \
         no run has a figure for is left out.</dd>\n</dl>\n",
    );
}

/// Where a plot lies in its chart, and its scales.
struct Plot {
    top: f64,
    bottom: f64,
    /// Requests on the x axis, and the y axis' top.
    requests: usize,
    y_top: u64,
}

impl Plot {
    fn x(&self, request: usize) -> f64 {
        let span = WIDTH - RIGHT - LEFT;
        if self.requests < 2 {
            return LEFT + span / 2.0;
        }
        LEFT + span * (request - 1) as f64 / (self.requests - 1) as f64
    }

    fn y(&self, tokens: u64) -> f64 {
        self.bottom - (self.bottom - self.top) * tokens as f64 / self.y_top.max(1) as f64
    }

    /// Gridlines and labels of both axes, the axes, their titles.
    fn axes(&self, out: &mut String, step: u64, y_title: &str) {
        let (left, right) = (LEFT, WIDTH - RIGHT);
        let mut tokens = 0;
        while tokens <= self.y_top {
            let y = self.y(tokens);
            let _ = write!(
                out,
                "<line x1=\"{left}\" y1=\"{y:.1}\" x2=\"{right}\" y2=\"{y:.1}\" stroke=\"#e3e3e3\"/>\
                 <text x=\"{:.1}\" y=\"{:.1}\" font-size=\"12\" text-anchor=\"end\">{}</text>",
                left - 8.0,
                y + 4.0,
                thousands(tokens)
            );
            tokens += step;
        }
        for request in x_ticks(self.requests) {
            let x = self.x(request);
            let _ = write!(
                out,
                "<line x1=\"{x:.1}\" y1=\"{b}\" x2=\"{x:.1}\" y2=\"{:.1}\" stroke=\"#999\"/>\
                 <text x=\"{x:.1}\" y=\"{:.1}\" font-size=\"12\" text-anchor=\"middle\">{request}</text>",
                self.bottom + 5.0,
                self.bottom + 18.0,
                b = self.bottom,
            );
        }
        let middle = (self.top + self.bottom) / 2.0;
        let _ = write!(
            out,
            "<line x1=\"{left}\" y1=\"{b}\" x2=\"{right}\" y2=\"{b}\" stroke=\"#999\"/>\
             <line x1=\"{left}\" y1=\"{t}\" x2=\"{left}\" y2=\"{b}\" stroke=\"#999\"/>\
             <text x=\"{:.1}\" y=\"{:.1}\" font-size=\"12\" text-anchor=\"middle\">request</text>\
             <text x=\"16\" y=\"{middle:.1}\" font-size=\"12\" text-anchor=\"middle\" \
             transform=\"rotate(-90 16 {middle:.1})\">{y_title}</text>",
            (left + right) / 2.0,
            self.bottom + 36.0,
            t = self.top,
            b = self.bottom,
        );
    }
}

fn polyline(plot: &Plot, values: impl Iterator<Item = u64>) -> String {
    values
        .enumerate()
        .map(|(i, t)| format!("{:.1},{:.1}", plot.x(i + 1), plot.y(t)))
        .collect::<Vec<_>>()
        .join(" ")
}

/// A dashed horizontal line at `tokens`, labeled at its right end; the label has a halo of
/// the background, so that it stays legible where a chain's line crosses it.
fn watermark(out: &mut String, plot: &Plot, tokens: u64, stroke: &str, label: &str) {
    let y = plot.y(tokens);
    let _ = write!(
        out,
        "<line x1=\"{LEFT}\" y1=\"{y:.1}\" x2=\"{r}\" y2=\"{y:.1}\" stroke=\"{stroke}\" \
         stroke-width=\"1.5\" stroke-dasharray=\"7 5\"/>\
         <text x=\"{:.1}\" y=\"{:.1}\" font-size=\"11\" text-anchor=\"end\" fill=\"{stroke}\" \
         stroke=\"{CHART_BACKGROUND}\" stroke-width=\"4\" paint-order=\"stroke\">{}</text>",
        WIDTH - RIGHT - 4.0,
        y - 4.0,
        escape(label),
        r = WIDTH - RIGHT,
    );
}

/// One conversation's replays: context tokens after each request, a line per chain with a
/// dot where a stage acted, scaled to those lines, with the chains' watermarks; under it the
/// tokens the client posted, on a panel and a scale of its own (the history outgrows every
/// compacted line, and on one scale would flatten them).
fn context_chart(out: &mut String, chains: &[&str], replays: &[&Run]) {
    let requests = replays.iter().map(|r| r.series.len()).max().unwrap_or(0);
    let lines_max = replays
        .iter()
        .flat_map(|r| r.series.iter().map(|p| p.tokens_after))
        .max()
        .unwrap_or(0);
    // The watermarks of each chain, drawn in its color when the chains' differ.
    let mut marks: Vec<(&str, u64, u64)> = replays
        .iter()
        .map(|r| {
            (
                r.chain.as_str(),
                r.budget.high_tokens(),
                r.budget.low_tokens(),
            )
        })
        .collect();
    let shared = marks.iter().all(|m| (m.1, m.2) == (marks[0].1, marks[0].2));
    if shared {
        marks.truncate(1);
    }
    // A watermark far above every line (a budget the conversation never reached) would
    // flatten them: it is named in the legend instead.
    let near = |tokens: u64| tokens <= lines_max.saturating_mul(3) / 2;
    let scale_max = marks
        .iter()
        .flat_map(|m| [m.1, m.2])
        .filter(|&t| near(t))
        .chain([lines_max])
        .max()
        .unwrap_or(0);
    let (step, y_top) = y_axis(scale_max);
    let plot = Plot {
        top: 14.0,
        bottom: CONTEXT_HEIGHT - BOTTOM,
        requests,
        y_top,
    };

    out.push_str("<figure>\n<div class=\"legend\">");
    for run in replays {
        let _ = write!(
            out,
            "<span><i class=\"swatch\" style=\"background:{}\"></i>{}</span>",
            color(chains, &run.chain),
            escape(&run.chain)
        );
    }
    out.push_str("<span><i class=\"dot\"></i>a stage acted</span>");
    for (chain, high, low) in &marks {
        let (stroke, whose) = if shared {
            (GREY, String::new())
        } else {
            (color(chains, chain), format!("{}: ", escape(chain)))
        };
        let above = match (near(*high), near(*low)) {
            (true, _) => "",
            (false, true) => " (the high one above the chart)",
            (false, false) => " (both above the chart)",
        };
        let _ = write!(
            out,
            "<span><i class=\"dashed\" style=\"border-color:{stroke}\"></i>{whose}watermarks: \
             high {} (a compaction starts above it), low {} (it brings the context down to \
             it){above}</span>",
            thousands(*high),
            thousands(*low)
        );
    }
    out.push_str("</div>\n");

    let _ = write!(
        out,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{WIDTH}\" height=\"{CONTEXT_HEIGHT}\" \
         viewBox=\"0 0 {WIDTH} {CONTEXT_HEIGHT}\" role=\"img\" \
         aria-label=\"context tokens after each request, per chain\">\
         <rect width=\"100%\" height=\"100%\" fill=\"{CHART_BACKGROUND}\"/>"
    );
    plot.axes(out, step, "context tokens");
    for (chain, high, low) in &marks {
        let stroke = if shared { GREY } else { color(chains, chain) };
        let whose = if shared {
            String::new()
        } else {
            format!("{chain}: ")
        };
        if near(*high) {
            watermark(
                out,
                &plot,
                *high,
                stroke,
                &format!("{whose}high watermark {}", thousands(*high)),
            );
        }
        if near(*low) {
            watermark(
                out,
                &plot,
                *low,
                stroke,
                &format!("{whose}low watermark {}", thousands(*low)),
            );
        }
    }
    for run in replays {
        let c = color(chains, &run.chain);
        let _ = write!(
            out,
            "<polyline fill=\"none\" stroke=\"{c}\" stroke-width=\"2.5\" stroke-linejoin=\"round\" points=\"{}\"/>",
            polyline(&plot, run.series.iter().map(|p| p.tokens_after))
        );
        for (i, p) in run.series.iter().enumerate().filter(|(_, p)| p.compacted) {
            let _ = write!(
                out,
                "<circle cx=\"{:.1}\" cy=\"{:.1}\" r=\"3.5\" fill=\"{c}\"/>",
                plot.x(i + 1),
                plot.y(p.tokens_after)
            );
        }
    }
    out.push_str("</svg>\n");

    // The history as posted: the same for every chain (each counts it with its own
    // tokenizer; the longest replay's is drawn).
    if let Some(longest) = replays.iter().max_by_key(|r| r.series.len()) {
        let posted_max = longest
            .series
            .iter()
            .map(|p| p.tokens_posted)
            .max()
            .unwrap_or(0);
        let (step, y_top) = y_axis(posted_max);
        let plot = Plot {
            top: 10.0,
            bottom: HISTORY_HEIGHT - BOTTOM,
            requests,
            y_top,
        };
        let _ = write!(
            out,
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{WIDTH}\" height=\"{HISTORY_HEIGHT}\" \
             viewBox=\"0 0 {WIDTH} {HISTORY_HEIGHT}\" role=\"img\" \
             aria-label=\"tokens the client posted at each request\">"
        );
        plot.axes(out, step, "tokens posted");
        let _ = writeln!(
            out,
            "<polyline fill=\"none\" stroke=\"{GREY}\" stroke-width=\"2\" points=\"{}\"/></svg>",
            polyline(&plot, longest.series.iter().map(|p| p.tokens_posted))
        );
    }
    let _ = writeln!(
        out,
        "<figcaption>Above: the context each chain answered with at each request of the replay \
         (the tokens after its compaction), on a scale fitted to these lines. Below, on its own \
         scale: the history the client posted at each request, uncompacted ({} tokens at the \
         end).</figcaption>\n</figure>",
        thousands(
            replays
                .iter()
                .filter_map(|r| r.series.last())
                .map(|p| p.tokens_posted)
                .max()
                .unwrap_or(0)
        )
    );
}

/// Retention of each run as a bar.
fn retention_chart(out: &mut String, chains: &[&str], runs: &[&Run]) {
    const ROW: f64 = 26.0;
    const LABEL: f64 = 300.0;
    let height = ROW * runs.len() as f64 + 10.0;
    out.push_str("<figure>\n<div class=\"legend\">");
    let mut named: Vec<&str> = Vec::new();
    for run in runs {
        if !named.contains(&run.chain.as_str()) {
            named.push(&run.chain);
            let _ = write!(
                out,
                "<span><i class=\"swatch\" style=\"background:{}\"></i>{}</span>",
                color(chains, &run.chain),
                escape(&run.chain)
            );
        }
    }
    let _ = writeln!(
        out,
        "</div>\n<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{WIDTH}\" height=\"{height}\" \
         viewBox=\"0 0 {WIDTH} {height}\" role=\"img\" aria-label=\"retention per run\">"
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
    out.push_str(
        "</svg>\n<figcaption>Retention: the share of the facts found in each run's final \
         context.</figcaption>\n</figure>\n",
    );
}

#[cfg(test)]
mod tests {
    use super::super::facts::Retention;
    use super::super::Point;
    use super::*;

    fn run(chain: &str, mode: Mode, found: usize, after: u64, sent: u64) -> Run {
        Run {
            chain: chain.into(),
            conversation: "conv".into(),
            mode,
            requests: 3,
            tokens_before: 50_000,
            tokens_after: after,
            llm_calls: 2,
            failed_llm_calls: 0,
            tokens_sent: sent,
            cost_usd: None,
            prefix_reuse: (mode == Mode::Replay).then_some(0.9),
            main_model_cost: (mode == Mode::Replay).then_some(0.514),
            main_model_prices: (mode == Mode::Replay)
                .then_some(super::super::main_model::CachePrices::ANTHROPIC),
            ms_per_compaction: 1.0,
            retention: Some(Retention {
                found,
                total: 8,
                lost: Vec::new(),
            }),
            probe: None,
            rolled_back: 0,
            budget: Default::default(),
            series: Vec::new(),
        }
    }

    #[test]
    fn numbers_are_grouped_by_thousands() {
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(1_000), "1,000");
        assert_eq!(thousands(56_490), "56,490");
        assert_eq!(thousands(1_234_567), "1,234,567");
    }

    #[test]
    fn axes_have_a_few_round_ticks_and_room_above_the_top_line() {
        // (largest value, step, top): 4 to 6 ticks from 0.
        for (max, step, top) in [
            (6_000, 2_000, 8_000),
            (56_490, 20_000, 60_000),
            (4_011, 1_000, 5_000),
            (1, 1, 1),
            (0, 1, 1),
            (123_456, 50_000, 150_000),
        ] {
            assert_eq!(y_axis(max), (step, top), "{max}");
            let ticks = top / step + 1;
            assert!((2..=6).contains(&ticks), "{max}: {ticks} ticks");
        }
        assert_eq!(x_ticks(166), [1, 25, 50, 75, 100, 125, 150]);
        assert_eq!(x_ticks(5), [1, 2, 3, 4, 5]);
        assert_eq!(x_ticks(21), [1, 5, 10, 15, 20]);
        assert_eq!(x_ticks(1), [1]);
    }

    #[test]
    fn the_best_run_keeps_most_facts_then_the_fewest_tokens_then_costs_least() {
        let a = run("a", Mode::Replay, 6, 3_000, 9_000);
        let b = run("b", Mode::Replay, 7, 4_000, 9_000);
        let one_shot = run("c", Mode::OneShot, 8, 1_000, 1_000);
        // Replays first: the one-shot run kept more, but a replay is how an agent lives.
        assert_eq!(best(&[&a, &b, &one_shot]).unwrap().chain, "b");
        assert_eq!(best(&[&one_shot]).unwrap().chain, "c");
        let smaller = run("smaller", Mode::Replay, 7, 3_500, 20_000);
        assert_eq!(best(&[&a, &b, &smaller]).unwrap().chain, "smaller");
        let cheaper = run("cheaper", Mode::Replay, 7, 3_500, 10_000);
        assert_eq!(best(&[&smaller, &cheaper]).unwrap().chain, "cheaper");
        // Priced: dollars decide, not tokens.
        let (mut x, mut y) = (cheaper.clone(), smaller.clone());
        (x.cost_usd, y.cost_usd) = (Some(0.02), Some(0.01));
        assert_eq!(best(&[&x, &y]).unwrap().chain, "smaller");
        // A tie on all three: the first given.
        assert_eq!(
            best(&[&cheaper, &cheaper.clone()]).unwrap().chain,
            "cheaper"
        );
        assert!(best(&[]).is_none());
    }

    #[test]
    fn the_page_leaves_out_empty_columns_and_explains_the_others() {
        let mut replay = run("a", Mode::Replay, 6, 3_000, 9_000);
        replay.series = (1..=10)
            .map(|n| Point {
                messages: n,
                tokens_posted: 1_000 * n as u64,
                tokens_after: 500 * n as u64,
                compacted: n == 5,
            })
            .collect();
        let runs = [run("a", Mode::OneShot, 5, 2_000, 8_000), replay];
        let page = render(&runs);
        // No run is priced or probed, and nothing was lost.
        for gone in [">cost<", ">probe<", ">lost<"] {
            assert!(!page.contains(gone), "{gone}: {page}");
        }
        for shown in [
            ">rolled back</abbr>",
            ">main model</abbr>",
            "<dt>main model</dt>",
        ] {
            assert!(page.contains(shown), "{shown}: {page}");
        }
        assert!(page.contains("51.4%") && page.contains("--cache-prices 0.1,1.25"));
        // The one-shot run's prefix reuse: a figure it has not.
        assert!(page.contains("<td class=\"none\">–</td>"));
        // One chain: no best to name.
        assert!(!page.contains("Best chain"));
        // The chart: its axes' titles and ticks, the watermarks of the default budget far
        // above the lines (5,000 tokens at most) named, not drawn.
        assert!(page.contains(">context tokens</text>") && page.contains(">request</text>"));
        assert!(page.contains(">6,000</text>") && page.contains(">tokens posted</text>"));
        assert!(page.contains("(both above the chart)") && !page.contains("high watermark 96,000"));
        assert!(!page.contains("<script") && !page.contains(" src=") && !page.contains(" href="));
    }

    #[test]
    fn watermarks_are_drawn_in_grey_when_shared_and_in_each_chains_color_when_not() {
        let series: Vec<Point> = (1..=4)
            .map(|n| Point {
                messages: n,
                tokens_posted: 3_000 * n as u64,
                tokens_after: 1_500 * n as u64,
                compacted: false,
            })
            .collect();
        let mut a = run("a", Mode::Replay, 6, 3_000, 9_000);
        a.budget.max_tokens = 8_000;
        a.series = series.clone();
        let mut b = a.clone();
        b.chain = "b".into();
        let page = render(&[a.clone(), b.clone()]);
        assert!(page.contains("high watermark 6,000") && page.contains("low watermark 4,000"));
        assert!(page.contains(&format!("stroke=\"{GREY}\" stroke-width=\"1.5\"")));
        assert!(page.contains("Best chain per conversation"));
        b.budget.max_tokens = 6_000;
        let page = render(&[a, b]);
        assert!(
            page.contains("a: high watermark 6,000") && page.contains("b: high watermark 4,500")
        );
        assert!(page.contains(&format!("stroke=\"{}\" stroke-width=\"1.5\"", PALETTE[1])));
    }
}
