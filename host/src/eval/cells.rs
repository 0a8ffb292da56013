//! The figures of a run as the tables show them, one way for the text table and the HTML
//! page alike: the columns, what each means, and each cell ("-" where a run has none).

use super::Run;

/// A column of the run tables.
pub struct Column {
    pub header: &'static str,
    /// What the column means, for a reader of the HTML page (docs/eval.md says it at length).
    pub meaning: &'static str,
    /// The run's cell; `None` where the run has no such figure (a one-shot run's prefix reuse).
    pub cell: fn(&Run) -> Option<String>,
}

impl Column {
    /// The cell as the text table shows it.
    pub fn text(&self, run: &Run) -> String {
        (self.cell)(run).unwrap_or_else(|| "-".into())
    }
}

/// Every column, in the tables' order. The text table leaves `probe` out when no run has one.
pub const COLUMNS: [Column; 15] = [
    Column {
        header: "conversation",
        meaning: "the conversation file's name",
        cell: |r| Some(r.conversation.clone()),
    },
    Column {
        header: "chain",
        meaning: "the chain file's name",
        cell: |r| Some(r.chain.clone()),
    },
    Column {
        header: "mode",
        meaning: "one-shot: the whole conversation compacted once; replay: compacted before \
                  every model call, as the agent lived it, continuing the thread",
        cell: |r| Some(r.mode.label().to_string()),
    },
    Column {
        header: "requests",
        meaning: "compactions made: 1 one-shot, one per model call in a replay",
        cell: |r| Some(r.requests.to_string()),
    },
    Column {
        header: "tokens before",
        meaning: "the conversation's tokens",
        cell: |r| Some(r.tokens_before.to_string()),
    },
    Column {
        header: "tokens after",
        meaning: "the final context's tokens (a replay's last answer)",
        cell: |r| Some(r.tokens_after.to_string()),
    },
    Column {
        header: "LLM calls",
        meaning: "calls to the summarizer over the run",
        cell: |r| Some(r.llm_calls.to_string()),
    },
    Column {
        header: "tokens sent",
        meaning: "input tokens sent to the summarizer over the run, the parts its provider \
                  read from its prompt cache included",
        cell: |r| Some(r.tokens_sent.to_string()),
    },
    Column {
        header: "cost",
        meaning: "the summarizer's estimated cost in US dollars, from the chain file's \
                  [provider.price]",
        cell: cost,
    },
    Column {
        header: "prefix reuse",
        meaning: "replays: the mean share of each answer that is an unchanged message prefix \
                  of the previous answer, which is what the main model's prompt cache keeps",
        cell: prefix_reuse,
    },
    Column {
        header: "main model",
        meaning: "replays: what the compacted answers cost the main model they are sent to, \
                  with prompt caching (each request's unchanged message prefix of the previous \
                  one read from the cache, the rest written to it, at the cache prices), as a \
                  multiple of what the history as the client posted it would cost the same \
                  way. 0.514x: the thread costs the main model 51.4% of its uncompacted input \
                  cost, a saving of 48.6%; a chain that never acts costs 1.000x",
        cell: main_model_cost,
    },
    Column {
        header: "ms/compaction",
        meaning: "mean wall time of a compaction, LLM calls included, in milliseconds",
        cell: |r| Some(format!("{:.1}", r.ms_per_compaction)),
    },
    Column {
        header: "retention",
        meaning: "facts of the facts files found in the final context, out of those given for \
                  the conversation",
        cell: retention,
    },
    Column {
        header: "probe",
        meaning: "--probe: the facts' questions a judge model answered from the final context \
                  as from the original, out of those the original answers",
        cell: probe,
    },
    Column {
        header: "rolled back",
        meaning: "stage runs the chain rolled back (an error, a timeout, a broken rule)",
        cell: |r| Some(r.rolled_back.to_string()),
    },
];

/// The estimated cost, in dollars.
pub fn cost(run: &Run) -> Option<String> {
    run.cost_usd.map(|c| format!("${c:.4}"))
}

/// The share of each request's prefix the provider could reuse.
pub fn prefix_reuse(run: &Run) -> Option<String> {
    run.prefix_reuse.map(|r| format!("{r:.3}"))
}

/// The main model's cost with prompt caching ÷ the uncompacted history's.
pub fn main_model_cost(run: &Run) -> Option<String> {
    run.main_model_cost.map(|r| format!("{r:.3}x"))
}

/// `found/total (share)` of the facts kept.
pub fn retention(run: &Run) -> Option<String> {
    run.retention
        .as_ref()
        .map(|r| format!("{}/{} ({:.0}%)", r.found, r.total, 100.0 * r.share()))
}

/// `same/answerable (share)` of a run's `--probe`.
pub fn probe(run: &Run) -> Option<String> {
    run.probe
        .as_ref()
        .map(|p| format!("{}/{} ({:.0}%)", p.same, p.answerable, 100.0 * p.share()))
}
