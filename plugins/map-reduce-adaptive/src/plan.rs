//! What a run summarizes and how much: the span and its prior summary, the level the
//! content's length calls for, and the report's details. Pure functions of the conversation
//! and the config (tokens counted by a function passed in), tested without a host.

use std::ops::Range;

use tamp_plugin_api::prelude::*;
use tamp_plugin_api::sdk::prompt::RenderOptions;

use crate::config::Config;
use crate::NAME;

/// How much summarizing the content gets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Level {
    /// Too little to be worth a summary.
    None,
    /// One call for a one-sentence brief.
    Brief,
    /// Map, collapse as needed, synthesize.
    MapReduce,
    /// Nothing new worth a call: the cached summary of the older part is used as it is.
    Cached,
}

impl Level {
    /// The level for content of `tokens` tokens.
    pub fn for_tokens(tokens: u64, config: &Config) -> Level {
        if tokens < config.none_below {
            Level::None
        } else if tokens < config.brief_below {
            Level::Brief
        } else {
            Level::MapReduce
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Level::None => "none",
            Level::Brief => "brief",
            Level::MapReduce => "map-reduce",
            Level::Cached => "cached",
        }
    }
}

/// The messages the stage replaces, split into the prior summary and the content.
#[derive(Debug)]
pub struct Selection {
    /// One contiguous run of messages, replaced by one summary.
    pub span: Range<usize>,
    /// The texts of this strategy's earlier summaries in the span, joined.
    pub prior: Option<String>,
    /// The rest of the span, one rendered unit (message or tool exchange) per piece.
    pub pieces: Vec<String>,
    /// The messages of each piece.
    pub piece_ranges: Vec<Range<usize>>,
}

impl Selection {
    /// Keeps the first `n` pieces and ends the span after the last one kept.
    pub fn truncate(&mut self, n: usize) {
        if let Some(last) = n.checked_sub(1).and_then(|i| self.piece_ranges.get(i)) {
            self.span.end = last.end;
        }
        self.pieces.truncate(n);
        self.piece_ranges.truncate(n);
    }
}

/// The span to replace: from the start of the compactable range (after the `skip` summaries
/// kept in place) to its end (one contiguous run, so one page and one summary; the system
/// messages inside it are kept by the host, not summarized).
pub fn select(messages: &[Message], keep_recent: usize, skip: usize, config: &Config) -> Selection {
    let compactable = sdk::compactable_range(messages, keep_recent);
    let range = (compactable.start + skip).min(compactable.end)..compactable.end;
    let render = RenderOptions::cut_at(config.max_block_chars);
    let mut selected = sdk::span::select_span(messages, range, NAME, &render);
    // The model sees a prior summary's narrative: its ledger is carried by `finish`.
    let prior: Vec<String> = selected
        .priors
        .iter()
        .map(|&i| config.ledger.shown(&messages[i].joined_text()).to_string())
        .filter(|p| !p.trim().is_empty())
        .collect();
    let (piece_ranges, pieces) = selected.take_pieces();
    Selection {
        span: selected.span,
        prior: (!prior.is_empty()).then(|| prior.join("\n\n")),
        pieces,
        piece_ranges,
    }
}

/// How many summaries at the start of the compactable range stay where they are: all of them
/// while their narratives together fit in `keep_summaries_share` of the budget and their
/// ledgers in the ledger's cap, else none (they are folded into the new summary). `count`
/// counts a text's tokens.
pub fn summaries_kept(
    messages: &[Message],
    keep_recent: usize,
    max_tokens: u64,
    config: &Config,
    count: &dyn Fn(&str) -> u64,
) -> usize {
    let range = sdk::compactable_range(messages, keep_recent);
    let limit = (max_tokens as f64 * config.keep_summaries_share) as u64;
    let leading: Vec<&Message> = messages[range]
        .iter()
        .take_while(|m| m.is_summary())
        .collect();
    // Their narratives count against the share, their ledgers against the ledger's cap.
    // (Counting their ledgers against the share, or half the cap, folds far more often, and
    // each fold sends the prior again: +10% and +15% summarizer tokens on the planted
    // session.)
    if config
        .ledger
        .kept_summaries_fit(&leading, limit, max_tokens, count)
    {
        leading.len()
    } else {
        0
    }
}

/// The report's details, also kept in the page's metadata.
#[derive(Debug, Serialize)]
#[serde(crate = "tamp_plugin_api::serde")]
pub struct Details {
    pub level: &'static str,
    pub content_type: &'static str,
    pub messages: usize,
    pub content_tokens: u64,
    pub prior_summary_tokens: u64,
    pub input_tokens: u64,
    pub reused_messages: usize,
    pub summaries_kept: usize,
    /// What the summary came to, once there is one.
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    pub summary: Option<SummaryFigures>,
}

/// The figures of a summary written.
#[derive(Debug, Serialize)]
#[serde(crate = "tamp_plugin_api::serde")]
pub struct SummaryFigures {
    pub output_tokens: u64,
    /// Output over input tokens, to four decimals.
    pub compression_ratio: f64,
    pub depth: u32,
    pub calls: usize,
    pub chunks: usize,
    pub ledger_entries: usize,
    pub ledger_moved: usize,
}

/// `output / input` tokens, rounded to four decimals (an empty input counts as one token).
pub fn compression_ratio(output_tokens: u64, input_tokens: u64) -> f64 {
    let ratio = output_tokens as f64 / input_tokens.max(1) as f64;
    (ratio * 10_000.0).round() / 10_000.0
}

/// Why level `none` leaves the conversation alone.
pub fn level_none_reason(selection: &Selection, content_tokens: u64, config: &Config) -> String {
    if selection.span.is_empty() {
        "level none: no messages outside the system prompt and the protected recent messages"
            .to_string()
    } else {
        format!(
            "level none: {content_tokens} tokens of new content, below none_below ({})",
            config.none_below
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tamp_plugin_api::sdk::summary_message;
    use tamp_plugin_api::serde_json;

    #[test]
    fn levels_at_the_thresholds() {
        let c = Config::default();
        assert_eq!(Level::for_tokens(0, &c), Level::None);
        assert_eq!(Level::for_tokens(99, &c), Level::None);
        assert_eq!(Level::for_tokens(100, &c), Level::Brief);
        assert_eq!(Level::for_tokens(499, &c), Level::Brief);
        assert_eq!(Level::for_tokens(500, &c), Level::MapReduce);
    }

    #[test]
    fn selection_takes_the_prior_summary_apart_and_runs_past_a_system_message() {
        let msgs = vec![
            Message::text(Role::System, "sys"),
            summary_message("PRIOR", "pg_1", NAME, SummaryStatus::Final),
            Message::text(Role::User, "hello"),
            summary_message("OTHER", "pg_2", "buffered-tool-call", SummaryStatus::Final),
            Message::text(Role::Assistant, "hi"),
            Message::text(Role::System, "mid-conversation instructions"),
            Message::text(Role::User, "later"),
            Message::text(Role::User, "recent"),
        ];
        let config = Config::default();
        // Folding: the prior summary is taken apart from the content.
        // The system message is in the span but not summarized: the host keeps it.
        let s = select(&msgs, 1, 0, &config);
        assert_eq!(s.span, 1..7);
        assert_eq!(s.prior.as_deref(), Some("PRIOR"));
        assert_eq!(s.pieces.len(), 4);
        assert_eq!(s.pieces[0], "user: hello\n");
        assert!(s.pieces[1].contains("OTHER") && s.pieces[1].contains("pg_2"));
        assert_eq!(s.pieces[3], "user: later\n");
        // Keeping it in place: the span starts after it.
        let mut s = select(&msgs, 1, 1, &config);
        assert_eq!(s.span, 2..7);
        assert_eq!(s.prior, None);
        assert_eq!(s.pieces.len(), 4);
        // Truncated to its first piece, the span ends after it.
        s.truncate(1);
        assert_eq!((s.span.clone(), s.pieces.len()), (2..3, 1));
    }

    #[test]
    fn nothing_to_select_outside_the_protected_tail() {
        let msgs = vec![
            Message::text(Role::System, "sys"),
            Message::text(Role::User, "a"),
        ];
        let s = select(&msgs, 5, 0, &Config::default());
        assert!(s.span.is_empty());
        assert!(s.prior.is_none() && s.pieces.is_empty());
        assert!(level_none_reason(&s, 0, &Config::default()).contains("no messages outside"));
    }

    #[test]
    fn leading_summaries_stay_while_they_fit_the_share() {
        let msgs = vec![
            Message::text(Role::System, "sys"),
            summary_message("one two three", "pg_1", NAME, SummaryStatus::Final),
            summary_message("four five", "pg_2", NAME, SummaryStatus::Final),
            Message::text(Role::User, "new"),
            Message::text(Role::User, "recent"),
        ];
        let words = |text: &str| text.split_whitespace().count() as u64;
        let config = Config {
            keep_summaries_share: 0.5,
            ..Config::default()
        };
        // 5 words of narrative: kept under a share of 10 tokens, folded under one of 4.
        assert_eq!(summaries_kept(&msgs, 1, 20, &config, &words), 2);
        assert_eq!(summaries_kept(&msgs, 1, 8, &config, &words), 0);
    }

    #[test]
    fn details_carry_the_summary_figures_only_once_there_is_a_summary() {
        let mut details = Details {
            level: Level::None.as_str(),
            content_type: "conversation",
            messages: 3,
            content_tokens: 10,
            prior_summary_tokens: 0,
            input_tokens: 10,
            reused_messages: 0,
            summaries_kept: 0,
            summary: None,
        };
        let none = serde_json::to_value(&details).unwrap();
        assert_eq!(none["level"], "none");
        assert!(none.get("output_tokens").is_none());
        details.summary = Some(SummaryFigures {
            output_tokens: 4,
            compression_ratio: compression_ratio(4, 3),
            depth: 0,
            calls: 1,
            chunks: 1,
            ledger_entries: 0,
            ledger_moved: 0,
        });
        let done = serde_json::to_value(&details).unwrap();
        assert_eq!(done["output_tokens"], 4);
        assert_eq!(done["compression_ratio"], 1.3333);
        assert_eq!(compression_ratio(5, 0), 5.0);
    }
}
