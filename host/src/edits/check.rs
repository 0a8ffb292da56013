//! The checks of a stage's edits against its input (the rules are in the module doc of
//! [`super`]), one step each, in the order a refusal is reported.

use std::cell::OnceCell;
use std::ops::Range;

use tamp_plugin_api::rules::{self, exchanges::Unit};
use tamp_plugin_api::{Edit, EditFfi, FfiVec, Message, SummaryStatus};

use super::Checked;
use crate::invariants::{check_clearing, pinning_rule, Rule, Violation};
use crate::store::page_id;

fn violation(rule: Rule, detail: String) -> Violation {
    Violation::new(rule, detail)
}

/// Checks `edits` against `messages` (the stage's input) for a stage of `strategy` with
/// `keep_recent` protected messages; returns them sorted by position.
pub(crate) fn check(
    messages: &[Message],
    edits: FfiVec<EditFfi>,
    keep_recent: usize,
    strategy: &str,
) -> Result<Vec<Checked>, Violation> {
    let input = Input::of(messages, keep_recent, strategy);
    let mut checked = Vec::with_capacity(edits.len());
    for (n, edit) in edits.into_iter().enumerate() {
        checked.push(input.check_edit(n, edit)?);
    }
    checked.sort_by_key(|c| c.range().start);
    spans_are_disjoint(&checked)?;
    Ok(checked)
}

/// What every edit is checked against, read once from the stage's input.
struct Input<'a> {
    messages: &'a [Message],
    strategy: &'a str,
    units: Vec<Unit>,
    /// The compactable range: after the system prompt and the task, before the tail.
    allowed: Range<usize>,
    /// Where the protected head (the system prompt and the task) ends.
    head: usize,
    /// Where the last compaction boundary ends: nothing before it may be in a span.
    boundary: usize,
    /// Which system messages are said again later word for word; found only when a span
    /// holds a pinned unit.
    repeated: OnceCell<Vec<bool>>,
}

impl<'a> Input<'a> {
    fn of(messages: &'a [Message], keep_recent: usize, strategy: &'a str) -> Self {
        let units = rules::exchanges::units(messages);
        Input {
            allowed: rules::protect::compactable_range_of(messages, &units, keep_recent),
            head: rules::protect::protected_head(messages),
            boundary: rules::pinned::boundary_end(messages, &units),
            units,
            messages,
            strategy,
            repeated: OnceCell::new(),
        }
    }

    /// Edit `n`, through every step; the first refusal is the answer.
    fn check_edit(&self, n: usize, edit: EditFfi) -> Result<Checked, Violation> {
        let edit = known_kind(n, edit)?;
        let range = self.span_in_conversation(n, &edit)?;
        if range.start < self.head || range.end > self.allowed.end {
            return Err(self.outside(n, &range));
        }
        // A summarized or replaced span keeps its pinned units (the module doc).
        let keeps_pinned = matches!(edit, Edit::Summarize { .. } | Edit::Replace { .. });
        self.touches_nothing_pinned(n, &edit, &range, keeps_pinned)?;
        let kept = if keeps_pinned {
            self.pinned_kept(&range)
        } else {
            Vec::new()
        };
        self.replaces_something(n, &range, &kept)?;
        if range.start < self.allowed.start {
            return Err(self.outside(n, &range));
        }
        self.splits_no_exchange(n, &edit, &range)?;
        self.checked(n, edit, range, kept)
    }

    /// The span names messages of this conversation, at least one.
    fn span_in_conversation(&self, n: usize, edit: &Edit) -> Result<Range<usize>, Violation> {
        let span = edit.span();
        let range = span.range();
        if span.is_empty() || range.end > self.messages.len() {
            return Err(violation(
                Rule::OrderKept,
                format!(
                    "edit {n} names messages[{}..{}] of a conversation of {}",
                    range.start,
                    range.end,
                    self.messages.len()
                ),
            )
            .at_message(range.start));
        }
        Ok(range)
    }

    /// The refusal of a span outside the compactable range.
    fn outside(&self, n: usize, range: &Range<usize>) -> Violation {
        violation(
            Rule::ProtectedUntouched,
            format!(
                "edit {n} touches messages[{}..{}], outside the compactable range {}..{} \
                 (the system prompt and the task come before it, the protected recent \
                 tail of {} message(s) after it)",
                range.start,
                range.end,
                self.allowed.start,
                self.allowed.end,
                self.messages.len() - self.allowed.end
            ),
        )
        .at_message(range.start)
    }

    /// Nothing before the boundary is in any span, and an edit that does not keep pinned
    /// units (a clearing, a finalization) touches none.
    fn touches_nothing_pinned(
        &self,
        n: usize,
        edit: &Edit,
        range: &Range<usize>,
        keeps_pinned: bool,
    ) -> Result<(), Violation> {
        // A clearing changes one message, but not one of a pinned unit's either.
        let touched = match edit {
            Edit::Clear { .. } => self
                .units
                .iter()
                .find(|u| u.range.contains(&range.start))
                .map_or(range.clone(), |u| u.range.clone()),
            _ => range.clone(),
        };
        let pinned = touched.into_iter().find_map(|i| {
            pinning_rule(self.messages, i, self.boundary)
                .filter(|(rule, _)| !keeps_pinned || *rule == Rule::BoundaryKept)
                .map(|p| (i, p))
        });
        if let Some((i, (rule, what))) = pinned {
            return Err(violation(
                rule,
                format!(
                    "edit {n} touches messages[{}..{}]: message {i} {what}",
                    range.start, range.end
                ),
            )
            .at_message(i));
        }
        Ok(())
    }

    /// The pinned messages inside `range`, which stay after what replaces it. Instructions
    /// said again later word for word go into the page: the later copy keeps them
    /// (`rules::pinned::repeated_later`).
    fn pinned_kept(&self, range: &Range<usize>) -> Vec<usize> {
        let repeated = || {
            self.repeated
                .get_or_init(|| rules::pinned::repeated_later(self.messages))
        };
        self.units
            .iter()
            .filter(|u| u.is_pinned() && range.start <= u.range.start && u.range.end <= range.end)
            .filter(|u| u.range.len() > 1 || !repeated()[u.range.start])
            .flat_map(|u| u.range.clone())
            .collect()
    }

    /// A span whose every message is kept would replace nothing.
    fn replaces_something(
        &self,
        n: usize,
        range: &Range<usize>,
        kept: &[usize],
    ) -> Result<(), Violation> {
        if kept.len() != range.len() {
            return Ok(());
        }
        // Each is pinned: a system message (TAMP-INV-11) or an opaque unit (-12).
        let (rule, what) = pinning_rule(self.messages, range.start, self.boundary)
            .unwrap_or((Rule::InstructionsKept, String::new()));
        Err(violation(
            rule,
            format!(
                "edit {n} replaces messages[{}..{}], all of them pinned (message {} {what}): \
                 a span's pinned units are kept, so it would replace nothing",
                range.start, range.end, range.start
            ),
        )
        .at_message(range.start))
    }

    /// A span starts and ends on unit boundaries (TAMP-INV-02). A clearing changes one
    /// message in place and keeps its tool ids, so it cannot split an exchange; a finalized
    /// summary is a unit of its own.
    fn splits_no_exchange(
        &self,
        n: usize,
        edit: &Edit,
        range: &Range<usize>,
    ) -> Result<(), Violation> {
        let in_place = matches!(edit, Edit::Clear { .. } | Edit::Finalize { .. });
        // Units are in order, so a search finds a boundary.
        let starts_a_unit = |i: usize| {
            self.units
                .binary_search_by_key(&i, |u| u.range.start)
                .is_ok()
        };
        let ends_a_unit = |i: usize| self.units.binary_search_by_key(&i, |u| u.range.end).is_ok();
        if !in_place && (!starts_a_unit(range.start) || !ends_a_unit(range.end)) {
            return Err(violation(
                Rule::ToolExchangesIntact,
                format!(
                    "edit {n} (messages[{}..{}]) splits a tool exchange: a span must start and \
                     end on a unit boundary (sdk::units)",
                    range.start, range.end
                ),
            )
            .at_message(range.start));
        }
        Ok(())
    }

    /// The checks of each kind of edit of its own, and the edit as checked.
    fn checked(
        &self,
        n: usize,
        edit: Edit,
        range: Range<usize>,
        kept: Vec<usize>,
    ) -> Result<Checked, Violation> {
        Ok(match edit {
            Edit::Summarize {
                text,
                status,
                metadata_json,
                ..
            } => Checked::Summarize {
                range,
                kept,
                text: text.into(),
                status,
                metadata_json: metadata_json.into(),
            },
            Edit::Replace { message, .. } => {
                self.replacement_names_its_page(n, &range, &message)?;
                Checked::Replace {
                    range,
                    kept,
                    message,
                }
            }
            Edit::Finalize { index, text } => {
                let index = index as usize;
                self.finalizes_a_pending_summary_of_ours(n, index)?;
                Checked::Finalize {
                    index,
                    text: text.into(),
                }
            }
            Edit::Clear { index, message } => {
                let index = index as usize;
                let page = self.clearing_keeps_structure_and_names_its_page(n, index, &message)?;
                Checked::Clear {
                    index,
                    message,
                    page,
                }
            }
            // `Edit` is non-exhaustive: a kind added to the ABI after this host was written.
            _ => {
                return Err(violation(
                    Rule::OrderKept,
                    format!("edit {n} is of a kind this host cannot apply"),
                ))
            }
        })
    }

    /// A `Replace` puts a summary in the span's place, of the page that holds exactly the
    /// span (TAMP-INV-01).
    fn replacement_names_its_page(
        &self,
        n: usize,
        range: &Range<usize>,
        message: &Message,
    ) -> Result<(), Violation> {
        let Some(info) = message.summary_info() else {
            return Err(violation(
                Rule::NothingLost,
                format!(
                    "edit {n} replaces messages[{}..{}] by a message that is not a \
                     summary",
                    range.start, range.end
                ),
            )
            .at_message(range.start));
        };
        let expected = page_id(&self.messages[range.clone()]);
        if info.page_ref.as_str() != expected {
            return Err(violation(
                Rule::NothingLost,
                format!(
                    "edit {n} replaces messages[{}..{}] by a summary of page {}, but \
                     those messages make page {expected}",
                    range.start, range.end, info.page_ref
                ),
            )
            .at_message(range.start));
        }
        Ok(())
    }

    /// A `Finalize` names a pending summary this stage's strategy wrote.
    fn finalizes_a_pending_summary_of_ours(&self, n: usize, index: usize) -> Result<(), Violation> {
        let strategy = self.strategy;
        let pending_of_ours = self.messages[index].summary_info().is_some_and(|info| {
            info.status == SummaryStatus::Pending && info.strategy.as_str() == strategy
        });
        if !pending_of_ours {
            return Err(violation(
                Rule::OrderKept,
                format!(
                    "edit {n} finalizes messages[{index}], which is not a pending \
                     summary of {strategy}"
                ),
            )
            .at_message(index));
        }
        Ok(())
    }

    /// A `Clear` keeps its message's structure (TAMP-INV-10) and its placeholders name the
    /// page of exactly the original message (TAMP-INV-01); returns that page.
    fn clearing_keeps_structure_and_names_its_page(
        &self,
        n: usize,
        index: usize,
        message: &Message,
    ) -> Result<String, Violation> {
        let original = &self.messages[index];
        let named = check_clearing(original, message).map_err(|e| {
            violation(
                Rule::ClearingKeepsStructure,
                format!("edit {n} clears messages[{index}]: {e}"),
            )
            .at_message(index)
        })?;
        let page = page_id(std::slice::from_ref(original));
        if named != page {
            return Err(violation(
                Rule::NothingLost,
                format!(
                    "edit {n} clears messages[{index}] with placeholders naming page \
                     {named}, but that message makes page {page}"
                ),
            )
            .at_message(index));
        }
        Ok(page)
    }
}

/// Edit `n` is of a kind this host's plugin ABI knows.
fn known_kind(n: usize, edit: EditFfi) -> Result<Edit, Violation> {
    edit.into_enum().map_err(|_| {
        violation(
            Rule::OrderKept,
            format!(
                "edit {n} is of a kind this host does not know (a plugin built for a newer \
                 plugin ABI?)"
            ),
        )
    })
}

/// No two spans overlap (TAMP-INV-04); `checked` is sorted by position.
fn spans_are_disjoint(checked: &[Checked]) -> Result<(), Violation> {
    for pair in checked.windows(2) {
        let (a, b) = (pair[0].range(), pair[1].range());
        if b.start < a.end {
            return Err(violation(
                Rule::OrderKept,
                format!(
                    "edits overlap: messages[{}..{}] and messages[{}..{}]",
                    a.start, a.end, b.start, b.end
                ),
            )
            .at_message(a.start));
        }
    }
    Ok(())
}
