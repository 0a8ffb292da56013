//! A thread's timeline as SVG, drawn on the server: the context of each request as the agent
//! sent it and as it was forwarded, the budget's high and low watermarks, and a mark at each
//! compaction that links to it. Drawn here rather than by a script in the page: the geometry
//! is tested with the rest of tamp, the only text in it is tamp's own (escaped all the same),
//! and the page needs no charting library.

use std::fmt::Write as _;

use crate::markup::escape;
use crate::store::activity::RequestRow;

const WIDTH: f64 = 960.0;
const HEIGHT: f64 = 320.0;
const LEFT: f64 = 64.0;
const RIGHT: f64 = 16.0;
const TOP: f64 = 16.0;
const BOTTOM: f64 = 56.0;

/// The colors of the series (the legend and the tests read the same).
pub const SENT: &str = "#8c8c8c";
pub const FORWARDED: &str = "#1f77b4";
pub const HIGH: &str = "#d62728";
pub const LOW: &str = "#ff7f0e";
pub const MARK: &str = "#9467bd";

/// `12.5k`, `1.2M`: a token count for an axis.
fn short(n: u64) -> String {
    match n {
        0..=999 => n.to_string(),
        1_000..=999_999 => format!("{:.1}k", n as f64 / 1e3),
        _ => format!("{:.1}M", n as f64 / 1e6),
    }
}

/// The tokens at the bottom and the top of the chart: from 0, unless every value lies in the
/// upper half of the range (a thread that stays near its watermarks), where the axis starts
/// at a round number under the lowest, so that what compaction did is seen.
fn y_range(requests: &[RequestRow]) -> (f64, f64) {
    let values: Vec<u64> = requests
        .iter()
        .flat_map(|r| {
            [
                r.request.tokens_in,
                r.request.tokens_out,
                r.request.tokens_at_most,
                r.request.high_tokens,
                r.request.low_tokens,
            ]
        })
        .flatten()
        .collect();
    let high = values.iter().copied().max().unwrap_or(0).max(1) as f64;
    let low = values.iter().copied().min().unwrap_or(0) as f64;
    let span = (high - low).max(1.0);
    let top = high + span * 0.1;
    if low <= high / 2.0 {
        return (0.0, high * 1.08);
    }
    let step = 10f64.powf(span.log10().floor());
    let floor = ((low - span * 0.25) / step).floor() * step;
    (floor.max(0.0), top)
}

/// The timeline of `requests` (oldest first).
pub fn timeline(requests: &[RequestRow]) -> String {
    let mut svg = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 {WIDTH} {HEIGHT}\" \
         class=\"timeline\" role=\"img\" aria-label=\"context tokens per request\">\
         <rect width=\"{WIDTH}\" height=\"{HEIGHT}\" fill=\"#ffffff\"/>"
    );
    let (floor, top) = y_range(requests);
    let n = requests.len();
    let x = |i: usize| {
        if n <= 1 {
            LEFT + (WIDTH - LEFT - RIGHT) / 2.0
        } else {
            LEFT + (WIDTH - LEFT - RIGHT) * i as f64 / (n - 1) as f64
        }
    };
    let y = |t: u64| HEIGHT - BOTTOM - (HEIGHT - TOP - BOTTOM) * (t as f64 - floor) / (top - floor);
    // Grid and axis.
    for k in 0..=4 {
        let t = (floor + (top - floor) * k as f64 / 4.0) as u64;
        let _ = write!(
            svg,
            "<line x1=\"{LEFT}\" x2=\"{}\" y1=\"{y:.1}\" y2=\"{y:.1}\" stroke=\"#e5e5e5\"/>\
             <text x=\"{}\" y=\"{:.1}\" font-size=\"11\" text-anchor=\"end\" fill=\"#555\">{}</text>",
            WIDTH - RIGHT,
            LEFT - 6.0,
            y(t) + 4.0,
            short(t),
            y = y(t),
        );
    }
    if n == 0 {
        let _ = write!(
            svg,
            "<text x=\"{}\" y=\"{}\" font-size=\"14\" text-anchor=\"middle\" fill=\"#555\">\
             no request recorded</text></svg>",
            WIDTH / 2.0,
            HEIGHT / 2.0
        );
        return svg;
    }
    let _ = write!(
        svg,
        "<text x=\"{LEFT}\" y=\"{b}\" font-size=\"11\" fill=\"#555\">request 1</text>\
         <text x=\"{r}\" y=\"{b}\" font-size=\"11\" text-anchor=\"end\" fill=\"#555\">request {n}</text>",
        b = HEIGHT - BOTTOM + 16.0,
        r = WIDTH - RIGHT,
    );
    // The watermarks, as steps: a model's budget may change between requests.
    for (value, color, class) in [
        (
            (|r: &RequestRow| r.request.high_tokens) as fn(&RequestRow) -> Option<u64>,
            HIGH,
            "high",
        ),
        (|r: &RequestRow| r.request.low_tokens, LOW, "low"),
    ] {
        let points: Vec<String> = requests
            .iter()
            .enumerate()
            .filter_map(|(i, r)| value(r).map(|v| (i, v)))
            .flat_map(|(i, v)| {
                let half = if n <= 1 {
                    (WIDTH - LEFT - RIGHT) / 2.0
                } else {
                    (WIDTH - LEFT - RIGHT) / (n - 1) as f64 / 2.0
                };
                let (from, to) = ((x(i) - half).max(LEFT), (x(i) + half).min(WIDTH - RIGHT));
                [
                    format!("{from:.1},{:.1}", y(v)),
                    format!("{to:.1},{:.1}", y(v)),
                ]
            })
            .collect();
        if !points.is_empty() {
            let _ = write!(
                svg,
                "<polyline class=\"{class}\" fill=\"none\" stroke=\"{color}\" stroke-width=\"1.5\" \
                 stroke-dasharray=\"6 4\" points=\"{}\"/>",
                points.join(" ")
            );
        }
    }
    for (value, color, width, dash, class) in [
        (
            (|r: &RequestRow| r.request.tokens_in) as fn(&RequestRow) -> Option<u64>,
            SENT,
            2.0,
            " stroke-dasharray=\"3 3\"",
            "sent",
        ),
        (
            |r: &RequestRow| r.request.tokens_out,
            FORWARDED,
            3.0,
            "",
            "forwarded",
        ),
    ] {
        let points: Vec<String> = requests
            .iter()
            .enumerate()
            .filter_map(|(i, r)| value(r).map(|v| format!("{:.1},{:.1}", x(i), y(v))))
            .collect();
        if !points.is_empty() {
            let _ = write!(
                svg,
                "<polyline class=\"{class}\" fill=\"none\" stroke=\"{color}\" \
                 stroke-width=\"{width}\"{dash} stroke-linejoin=\"round\" points=\"{}\"/>",
                points.join(" ")
            );
        }
    }
    for (i, r) in requests.iter().enumerate() {
        if let (None, Some(most)) = (r.request.tokens_out, r.request.tokens_at_most) {
            let _ = write!(
                svg,
                "<circle class=\"unread\" cx=\"{:.1}\" cy=\"{:.1}\" r=\"4\" fill=\"#ffffff\" \
                 stroke=\"{SENT}\" stroke-width=\"1.5\"><title>{}</title></circle>",
                x(i),
                y(most),
                escape(&format!(
                    "request {}: forwarded unread, at most {most} tokens",
                    i + 1
                )),
            );
        }
    }
    for (i, r) in requests.iter().enumerate().filter(|(_, r)| r.compacted) {
        let after = r.request.tokens_out.unwrap_or(0);
        let before = r.request.tokens_in.unwrap_or(after);
        let _ = write!(
            svg,
            "<line x1=\"{cx:.1}\" x2=\"{cx:.1}\" y1=\"{:.1}\" y2=\"{:.1}\" stroke=\"{MARK}\" \
             stroke-width=\"1.5\" stroke-dasharray=\"2 2\"/>\
             <a href=\"#/compaction/{seq}\" class=\"mark\" data-compaction=\"{seq}\">\
             <circle cx=\"{cx:.1}\" cy=\"{:.1}\" r=\"8\" fill=\"{MARK}\" stroke=\"#ffffff\" \
             stroke-width=\"2\"/><title>{}</title></a>",
            y(before),
            y(after),
            y(after),
            escape(&format!(
                "request {}: compacted {before} -> {after} tokens, {} page(s): click for what it did",
                i + 1,
                r.request.pages
            )),
            cx = x(i),
            seq = r.seq,
        );
    }
    // The legend.
    let legend = [
        (SENT, "sent by the agent"),
        (FORWARDED, "forwarded upstream"),
        (HIGH, "high watermark"),
        (LOW, "low watermark"),
        (MARK, "compaction (click)"),
    ];
    let mut at = LEFT;
    for (color, label) in legend {
        let _ = write!(
            svg,
            "<rect x=\"{at:.1}\" y=\"{:.1}\" width=\"14\" height=\"4\" fill=\"{color}\"/>\
             <text x=\"{:.1}\" y=\"{:.1}\" font-size=\"12\" fill=\"#333\">{label}</text>",
            HEIGHT - 18.0,
            at + 18.0,
            HEIGHT - 13.0,
        );
        at += 18.0 + 7.0 * label.len() as f64 + 24.0;
    }
    svg.push_str("</svg>");
    svg
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::activity::RequestRecord;

    fn row(seq: i64, tokens: Option<(u64, u64)>, at_most: Option<u64>) -> RequestRow {
        let mut request = RequestRecord {
            tokens_at_most: at_most,
            ..RequestRecord::default()
        };
        request.set_tokens(tokens);
        request.set_budget(Some((10_000, 8_000, 5_000)));
        RequestRow {
            seq,
            compacted: false,
            request,
        }
    }

    #[test]
    fn each_compaction_is_a_mark_that_links_to_it() {
        let mut compacted = row(7, Some((9_000, 4_000)), None);
        compacted.compacted = true;
        compacted.request.pages = 3;
        let svg = timeline(&[
            row(5, None, Some(6_000)),
            row(6, Some((7_000, 7_000)), None),
            compacted,
            row(8, Some((4_500, 4_500)), None),
        ]);
        assert_eq!(svg.matches("class=\"mark\"").count(), 1);
        assert!(svg.contains("href=\"#/compaction/7\" class=\"mark\" data-compaction=\"7\""));
        assert!(svg.contains("compacted 9000 -&gt; 4000 tokens, 3 page(s)"));
        assert_eq!(svg.matches("class=\"unread\"").count(), 1);
        for class in ["sent", "forwarded", "high", "low"] {
            assert!(svg.contains(&format!("class=\"{class}\"")), "{class}");
        }
        // The forwarded line has the three counted requests.
        let forwarded = svg.split("class=\"forwarded\"").nth(1).unwrap();
        let points = forwarded.split("points=\"").nth(1).unwrap();
        assert_eq!(points.split('"').next().unwrap().split(' ').count(), 3);
    }

    #[test]
    fn the_axis_starts_under_the_lowest_value_when_all_are_near_the_top() {
        let mut near = [
            row(1, Some((3_890, 3_890)), None),
            row(2, Some((4_170, 4_028)), None),
        ];
        for r in &mut near {
            (r.request.high_tokens, r.request.low_tokens) = (Some(4_000), Some(3_850));
        }
        let (floor, top) = y_range(&near);
        assert!(floor > 3_000.0 && floor < 3_850.0, "{floor}");
        assert!(top > 4_170.0, "{top}");
        let mut wide = near.to_vec();
        wide.push(row(3, Some((100, 100)), None));
        assert_eq!(y_range(&wide).0, 0.0);
    }

    #[test]
    fn no_request_is_said() {
        assert!(timeline(&[]).contains("no request recorded"));
    }
}
