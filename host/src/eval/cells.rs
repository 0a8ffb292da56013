//! The figures of a run as the tables show them, one way for the text table and the HTML
//! page alike ("-" where a run has none).

use super::Run;

/// The estimated cost, in dollars.
pub fn cost(run: &Run) -> String {
    run.cost_usd.map_or("-".into(), |c| format!("${c:.4}"))
}

/// The share of each request's prefix the provider could reuse.
pub fn prefix_reuse(run: &Run) -> String {
    run.prefix_reuse.map_or("-".into(), |r| format!("{r:.3}"))
}

/// The main model's cost with prompt caching ÷ the uncompacted history's.
pub fn main_model_cost(run: &Run) -> String {
    run.main_model_cost
        .map_or("-".into(), |r| format!("{r:.3}x"))
}

/// `found/total (share)` of the facts kept.
pub fn retention(run: &Run) -> String {
    run.retention.as_ref().map_or("-".into(), |r| {
        format!("{}/{} ({:.0}%)", r.found, r.total, 100.0 * r.share())
    })
}

/// `same/answerable (share)` of a run's `--probe`.
pub fn probe(run: &Run) -> String {
    run.probe.as_ref().map_or("-".into(), |p| {
        format!("{}/{} ({:.0}%)", p.same, p.answerable, 100.0 * p.share())
    })
}
