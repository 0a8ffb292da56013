//! Choosing the span a summarizing strategy replaces, as the shipped ones do: from the start
//! of a range (past any pinned units there) to its end (one contiguous run, so one page and
//! one summary), with the strategy's own earlier summaries (its *priors*) told apart from the
//! rest (the *pieces*, rendered one unit at a time). Pinned units inside it (a system message,
//! an opaque unit) are neither: the host keeps them, right after the summary. Claude Code
//! sends a system message every few tool calls; a span that stopped at each would leave
//! almost nothing to summarize.

use std::ops::Range;

use crate::conversation::Message;
use crate::sdk::exchanges::{units, UnitKind};
use crate::sdk::prompt::{render_messages, RenderOptions};

/// A unit of the span and its rendering.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Piece {
    /// Its messages.
    pub range: Range<usize>,
    pub text: String,
}

/// The span to replace, taken apart.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SpanSelection {
    /// The messages to replace (empty when there is nothing to take).
    pub span: Range<usize>,
    /// Indices of `strategy`'s own summaries in the span, in order.
    pub priors: Vec<usize>,
    /// Everything else in the span, one rendered unit (message, tool exchange, another
    /// strategy's summary) per piece, in order.
    pub pieces: Vec<Piece>,
    /// The pinned units inside the span, in order: not summarized; the host keeps them right
    /// after the summary that replaces the span (all but a system message said again later,
    /// which goes into the page: `pinned::repeated_later`).
    pub kept: Vec<Range<usize>>,
}

impl SpanSelection {
    /// The pieces taken out, as their message ranges and their texts (in order), for a
    /// strategy that keeps the two apart (the texts to summarize, the ranges to look up a
    /// cached summary by).
    pub fn take_pieces(&mut self) -> (Vec<Range<usize>>, Vec<String>) {
        std::mem::take(&mut self.pieces)
            .into_iter()
            .map(|p| (p.range, p.text))
            .unzip()
    }
}

/// Takes the span within `range` (usually `sdk::compactable_range`, or a later start): pinned
/// units at its start are stepped over, those inside it are kept (none ends it);
/// `strategy`'s summaries become priors.
pub fn select_span(
    messages: &[Message],
    range: Range<usize>,
    strategy: &str,
    render: &RenderOptions,
) -> SpanSelection {
    let mut selection = SpanSelection {
        span: range.start..range.start,
        ..SpanSelection::default()
    };
    let inside = units(messages)
        .into_iter()
        .filter(|u| range.start <= u.range.start && u.range.end <= range.end);
    for unit in inside {
        let run = &messages[unit.range.clone()];
        let ours = unit.kind == UnitKind::Summary
            && run[0]
                .summary_info()
                .is_some_and(|info| info.strategy.as_str() == strategy);
        match unit.kind {
            UnitKind::System if selection.span.is_empty() => {
                selection.span = unit.range.end..unit.range.end;
                continue;
            }
            // Not yet part of the span: only once a unit after it is taken.
            UnitKind::System => {
                selection.kept.push(unit.range.clone());
                continue;
            }
            _ if ours => selection.priors.push(unit.range.start),
            _ => selection.pieces.push(Piece {
                text: render_messages(run, render),
                range: unit.range.clone(),
            }),
        }
        selection.span.end = unit.range.end;
    }
    let end = selection.span.end;
    selection.kept.retain(|kept| kept.end <= end);
    selection
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conversation::{Role, SummaryStatus};
    use crate::sdk::summary::summary_message;

    #[test]
    fn priors_are_told_apart_and_a_system_message_inside_is_kept() {
        let m = vec![
            Message::text(Role::System, "sys"),
            summary_message("ours", "pg_1", "me", SummaryStatus::Final),
            summary_message("theirs", "pg_2", "other", SummaryStatus::Final),
            Message::text(Role::User, "u1"),
            Message::text(Role::Assistant, "a1"),
            Message::text(Role::System, "mid-conversation instructions"),
            Message::text(Role::User, "after"),
        ];
        let s = select_span(&m, 1..7, "me", &RenderOptions::default());
        assert_eq!(s.span, 1..7);
        assert_eq!(s.priors, vec![1]);
        assert_eq!(s.kept, vec![5..6]);
        let ranges: Vec<_> = s.pieces.iter().map(|p| p.range.clone()).collect();
        assert_eq!(ranges, vec![2..3, 3..4, 4..5, 6..7]);
        // A pinned unit at the span's end is not taken into it.
        let short = select_span(&m, 1..6, "me", &RenderOptions::default());
        assert_eq!((short.span, short.kept), (1..5, vec![]));
        assert!(s.pieces[1].text.contains("u1"));
        let mut taken = s.clone();
        let (piece_ranges, texts) = taken.take_pieces();
        assert_eq!(piece_ranges, ranges);
        assert_eq!(texts[1], s.pieces[1].text);
        assert!(taken.pieces.is_empty());
        // A pinned unit where the range starts is stepped over.
        assert_eq!(
            select_span(&m, 5..7, "me", &RenderOptions::default()).span,
            6..7
        );
        // Nothing to take: an empty span where the range ends.
        assert_eq!(
            select_span(&m, 5..6, "me", &RenderOptions::default()).span,
            6..6
        );
    }
}
