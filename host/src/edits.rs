//! Applying a stage's edits: checked against the input first, then archived, then spliced.
//!
//! A stage reads the conversation shared and returns [`Edit`]s; nothing it does changes the
//! input, so rolling a stage back is not applying its edits. The checks are structural: one
//! pass over the conversation for its unit boundaries, then O(edits + removed messages), with
//! no copy of the conversation and no diff of a whole output against its input:
//!
//! - every span lies inside the compactable range (after the system prompt and the task,
//!   before the protected tail: TAMP-INV-03) and on unit boundaries, so a tool exchange is
//!   never split (TAMP-INV-02); it holds nothing before the last compaction boundary
//!   (TAMP-INV-13), and a clearing touches no pinned unit (a system message: TAMP-INV-11; an
//!   opaque unit: TAMP-INV-12);
//! - the pinned units inside a summarized or replaced span are kept, right after what
//!   replaces it, in order: Claude Code sends a system message every few tool calls, and a
//!   span that had to stop at each would leave almost nothing to summarize. Its page holds
//!   the whole span, them included. A system message said again later word for word is not
//!   kept: its later copy keeps the instruction (`sdk::pinned::repeated_later`);
//! - spans are disjoint, so kept messages keep their order and only summaries are new
//!   (TAMP-INV-04);
//! - a `Summarize` span is archived by the host itself, and a `Replace` names a page that
//!   holds exactly its span (one hash of the span, pages being content-addressed), so nothing
//!   removed is lost (TAMP-INV-01);
//! - a `Finalize` turns one of this strategy's pending summaries final, on the same page;
//! - a `Clear` keeps its message's structure (TAMP-INV-10: only tool-result content and tool
//!   inputs change, each to a placeholder) and its placeholders name the page of exactly the
//!   original message, which the host archives before it applies the clearing (TAMP-INV-01).
//!
//! The no-growth rule (TAMP-INV-06) is counted from the spans and their replacements.

use tamp_plugin_api::sdk::{self, summary_message};
use tamp_plugin_api::{Conversation, Edit, EditFfi, FfiVec, Message, PageDraft, SummaryStatus};

use crate::invariants::{check_clearing, pinning_rule, Rule, Violation};
use crate::store::page_id;
use crate::tokens::TokenCounter;

/// An edit that passed the checks, in input order.
#[derive(Debug)]
pub(crate) enum Checked {
    Summarize {
        range: std::ops::Range<usize>,
        /// The pinned messages inside `range`, kept after the summary.
        kept: Vec<usize>,
        text: String,
        status: SummaryStatus,
        metadata_json: String,
    },
    Replace {
        range: std::ops::Range<usize>,
        kept: Vec<usize>,
        message: Message,
    },
    Finalize {
        index: usize,
        text: String,
    },
    Clear {
        index: usize,
        message: Message,
        /// The page its placeholders name: the original message's.
        page: String,
    },
}

impl Checked {
    /// The pinned messages inside the span, which stay.
    fn kept(&self) -> &[usize] {
        match self {
            Checked::Summarize { kept, .. } | Checked::Replace { kept, .. } => kept,
            _ => &[],
        }
    }

    fn range(&self) -> std::ops::Range<usize> {
        match self {
            Checked::Summarize { range, .. } | Checked::Replace { range, .. } => range.clone(),
            Checked::Finalize { index, .. } | Checked::Clear { index, .. } => *index..*index + 1,
        }
    }

    /// The message that takes the span's place, its summary referring to `page` (a
    /// `Summarize` edit's new page; a `Finalize` keeps the pending summary's).
    fn message(&self, messages: &[Message], strategy: &str, page: &str) -> Message {
        match self {
            Checked::Summarize { text, status, .. } => {
                summary_message(text, page, strategy, *status)
            }
            Checked::Replace { message, .. } | Checked::Clear { message, .. } => message.clone(),
            Checked::Finalize { index, text } => {
                let pending = &messages[*index];
                let page_ref = pending.summary_info().map_or("", |i| i.page_ref.as_str());
                let mut message = summary_message(text, page_ref, strategy, SummaryStatus::Final);
                message.role = pending.role;
                message
            }
        }
    }
}

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
    let units = sdk::units(messages);
    let allowed = sdk::compactable_range_of(messages, &units, keep_recent);
    let head = sdk::protected_head(messages);
    let boundary = sdk::pinned::boundary_end(messages, &units);
    let repeated_once = std::cell::OnceCell::new();
    let repeated = || repeated_once.get_or_init(|| sdk::pinned::repeated_later(messages));
    // A span must start and end on a unit boundary; units are in order, so a search finds it.
    let starts_a_unit = |i: usize| units.binary_search_by_key(&i, |u| u.range.start).is_ok();
    let ends_a_unit = |i: usize| units.binary_search_by_key(&i, |u| u.range.end).is_ok();

    let mut checked = Vec::with_capacity(edits.len());
    for (n, edit) in edits.into_iter().enumerate() {
        let edit = edit.into_enum().map_err(|_| {
            violation(
                Rule::OrderKept,
                format!(
                    "edit {n} is of a kind this host does not know (a plugin built for a newer \
                     plugin ABI?)"
                ),
            )
        })?;
        let span = edit.span();
        let range = span.range();
        if span.is_empty() || range.end > messages.len() {
            return Err(violation(
                Rule::OrderKept,
                format!(
                    "edit {n} names messages[{}..{}] of a conversation of {}",
                    range.start,
                    range.end,
                    messages.len()
                ),
            )
            .at_message(range.start));
        }
        let outside = || {
            violation(
                Rule::ProtectedUntouched,
                format!(
                    "edit {n} touches messages[{}..{}], outside the compactable range {}..{} \
                     (the system prompt and the task come before it, the protected recent \
                     tail of {} message(s) after it)",
                    range.start,
                    range.end,
                    allowed.start,
                    allowed.end,
                    messages.len() - allowed.end
                ),
            )
            .at_message(range.start)
        };
        if range.start < head || range.end > allowed.end {
            return Err(outside());
        }
        // A clearing changes one message, but not one of a pinned unit's either.
        let touched = match edit {
            Edit::Clear { .. } => units
                .iter()
                .find(|u| u.range.contains(&range.start))
                .map_or(range.clone(), |u| u.range.clone()),
            _ => range.clone(),
        };
        // A summarized or replaced span keeps its pinned units (the module doc); nothing
        // before the boundary may be in any span.
        let keeps_pinned = matches!(edit, Edit::Summarize { .. } | Edit::Replace { .. });
        let pinned = touched.into_iter().find_map(|i| {
            pinning_rule(messages, i, boundary)
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
        // Instructions said again later word for word go into the page: the later copy keeps
        // them (`sdk::pinned::repeated_later`).
        let kept: Vec<usize> = if keeps_pinned {
            units
                .iter()
                .filter(|u| {
                    u.is_pinned() && range.start <= u.range.start && u.range.end <= range.end
                })
                .filter(|u| u.range.len() > 1 || !repeated()[u.range.start])
                .flat_map(|u| u.range.clone())
                .collect()
        } else {
            Vec::new()
        };
        if kept.len() == range.len() {
            // Each is pinned: a system message (TAMP-INV-11) or an opaque unit (-12).
            let (rule, what) = pinning_rule(messages, range.start, boundary)
                .unwrap_or((Rule::InstructionsKept, String::new()));
            return Err(violation(
                rule,
                format!(
                    "edit {n} replaces messages[{}..{}], all of them pinned (message {} {what}): \
                     a span's pinned units are kept, so it would replace nothing",
                    range.start, range.end, range.start
                ),
            )
            .at_message(range.start));
        }
        if range.start < allowed.start {
            return Err(outside());
        }
        // A clearing changes one message in place and keeps its tool ids, so it cannot split
        // an exchange; a finalized summary is a unit of its own.
        let in_place = matches!(edit, Edit::Clear { .. } | Edit::Finalize { .. });
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
        checked.push(match edit {
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
                let expected = page_id(&messages[range.clone()]);
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
                Checked::Replace {
                    range,
                    kept,
                    message,
                }
            }
            Edit::Finalize { index, text } => {
                let index = index as usize;
                let pending_of_ours = messages[index].summary_info().is_some_and(|info| {
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
                Checked::Finalize {
                    index,
                    text: text.into(),
                }
            }
            Edit::Clear { index, message } => {
                let index = index as usize;
                let original = &messages[index];
                let named = check_clearing(original, &message).map_err(|e| {
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
        });
    }
    checked.sort_by_key(|c| c.range().start);
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
    Ok(checked)
}

/// One line on what `edit` asks for, for reports: `summarize messages[2..6] (final): "…"`.
pub fn describe(edit: &EditFfi) -> String {
    let Ok(edit) = edit.as_enum() else {
        return "an edit of a kind this host does not know".into();
    };
    let span = edit.span();
    let at = format!("messages[{}..{}]", span.start, span.end);
    let preview = |text: &str| sdk::cap_chars(text, 60);
    match edit {
        Edit::Summarize { text, status, .. } => {
            format!("summarize {at} ({}): {:?}", status.as_str(), preview(text))
        }
        Edit::Replace { message, .. } => match message.summary_info() {
            Some(info) => format!("replace {at} by a summary of page {}", info.page_ref),
            None => format!("replace {at} by a message that is not a summary"),
        },
        Edit::Finalize { text, .. } => format!("finalize {at}: {:?}", preview(text)),
        Edit::Clear { message, .. } => {
            let cleared = message
                .content
                .iter()
                .filter(|b| sdk::clearing::is_cleared(b))
                .count();
            format!("clear {at} ({cleared} cleared block(s) in it)")
        }
        _ => format!("an edit of another kind at {at}"),
    }
}

/// What a checked edit puts in its span's place, once its page exists.
pub(crate) struct Ready {
    range: std::ops::Range<usize>,
    /// The pinned messages inside `range`, which stay, after `message`.
    kept: Vec<usize>,
    message: Message,
    /// The page it refers to, when the edit removed messages into one, or cleared one.
    page: Option<String>,
    cleared: bool,
}

/// The key of a clearing's page metadata that says a placeholder stands for the page, not a
/// summary (what `recall` tells the model).
pub(crate) const REPLACED_BY: &str = "replaced_by";
pub(crate) const PLACEHOLDER: &str = "placeholder";

/// The page drafts of the `Summarize` and `Clear` edits, in order, for the host to archive
/// (a clearing's page holds the original message alone, its metadata [`REPLACED_BY`]).
pub(crate) fn drafts(messages: &[Message], checked: &[Checked], strategy: &str) -> Vec<PageDraft> {
    checked
        .iter()
        .filter_map(|c| match c {
            Checked::Summarize {
                range,
                metadata_json,
                ..
            } => Some(PageDraft {
                messages: messages[range.clone()].to_vec().into(),
                strategy: strategy.into(),
                metadata_json: metadata_json.as_str().into(),
            }),
            Checked::Clear { index, .. } => Some(PageDraft {
                messages: vec![messages[*index].clone()].into(),
                strategy: strategy.into(),
                metadata_json: format!(r#"{{"{REPLACED_BY}":"{PLACEHOLDER}"}}"#).into(),
            }),
            _ => None,
        })
        .collect()
}

/// Turns checked edits into replacements, `pages` being the ids the drafts were archived
/// under, in order. A store that gave a clearing's original another id than the one its
/// placeholders name is an error: the placeholders would name a page that is not there.
pub(crate) fn ready(
    messages: &[Message],
    checked: Vec<Checked>,
    mut pages: impl Iterator<Item = String>,
    strategy: &str,
) -> Result<Vec<Ready>, String> {
    checked
        .into_iter()
        .map(|c| {
            let range = c.range();
            let kept = c.kept().to_vec();
            let cleared = matches!(c, Checked::Clear { .. });
            let page = match &c {
                Checked::Summarize { .. } => {
                    Some(pages.next().expect("one page per Summarize edit"))
                }
                Checked::Clear { page, .. } => {
                    let archived = pages.next().expect("one page per Clear edit");
                    if archived != *page {
                        return Err(format!(
                            "the store archived a cleared message as page {archived}, not as \
                             page {page}, which its placeholders name"
                        ));
                    }
                    Some(archived)
                }
                Checked::Replace { message, .. } => {
                    message.summary_info().map(|i| i.page_ref.to_string())
                }
                Checked::Finalize { .. } => None,
            };
            let message = match c {
                Checked::Replace { message, .. } | Checked::Clear { message, .. } => message,
                other => other.message(messages, strategy, page.as_deref().unwrap_or("")),
            };
            Ok(Ready {
                range,
                kept,
                message,
                page,
                cleared,
            })
        })
        .collect()
}

/// The tokens of `messages` (`tokens_before` in all) once `checked` is applied, counted from
/// the spans and what replaces them alone. A summary's page ref is not counted, so the page
/// it will get does not matter yet.
pub(crate) fn count_after(
    messages: &[Message],
    checked: &[Checked],
    tokens_before: u64,
    tokens: &TokenCounter,
    strategy: &str,
) -> u64 {
    let mut removed = 0u64;
    let mut added = 0u64;
    for c in checked {
        removed += tokens.count_messages(&messages[c.range()]);
        removed -= c
            .kept()
            .iter()
            .map(|&i| tokens.count_message(&messages[i]))
            .sum::<u64>();
        added += match c {
            Checked::Replace { message, .. } | Checked::Clear { message, .. } => {
                tokens.count_message(message)
            }
            // The page ref is not counted, so the page a summary will get does not matter.
            other => tokens.count_message(&other.message(messages, strategy, "")),
        };
    }
    (tokens_before + added).saturating_sub(removed)
}

/// The pages that `Replace` edits name (which must exist).
pub(crate) fn replaced_pages(checked: &[Checked]) -> Vec<String> {
    checked
        .iter()
        .filter_map(|c| match c {
            Checked::Replace { message, .. } => {
                message.summary_info().map(|i| i.page_ref.to_string())
            }
            _ => None,
        })
        .collect()
}

/// The result of applying a stage's edits.
pub(crate) struct Applied {
    pub conversation: Conversation,
    /// Pages the summaries put in place refer to (archived now, or by the stage).
    pub pages: Vec<String>,
    pub messages_removed: u32,
    pub summaries_added: u32,
    /// Messages cleared in place (their originals archived).
    pub messages_cleared: u32,
}

/// Splices `ready` into `input`, moving the kept messages (none is copied).
pub(crate) fn splice(input: Conversation, ready: Vec<Ready>) -> Applied {
    let mut pages = Vec::new();
    let mut messages_removed = 0u32;
    let mut summaries_added = 0u32;
    let mut messages_cleared = 0u32;
    for r in &ready {
        if let Some(page) = &r.page {
            pages.push(page.clone());
            if r.cleared {
                messages_cleared += 1;
            } else {
                messages_removed += (r.range.len() - r.kept.len()) as u32;
                summaries_added += 1;
            }
        }
    }
    let Conversation {
        thread_id,
        messages,
        metadata_json,
    } = input;
    let mut out = Vec::with_capacity(messages.len());
    let mut edits = ready.into_iter().peekable();
    let mut skip_until = 0usize;
    // The pinned messages of the span being skipped, which stay (in order, after its
    // replacement).
    let mut kept: Vec<usize> = Vec::new();
    for (i, message) in messages.into_iter().enumerate() {
        if i < skip_until {
            if kept.binary_search(&i).is_ok() {
                out.push(message);
            }
            continue;
        }
        match edits.peek() {
            Some(r) if r.range.start == i => {
                let r = edits.next().expect("peeked");
                skip_until = r.range.end;
                kept = r.kept;
                out.push(r.message);
                if kept.binary_search(&i).is_ok() {
                    out.push(message);
                }
            }
            _ => out.push(message),
        }
    }
    Applied {
        conversation: Conversation {
            thread_id,
            messages: out.into(),
            metadata_json,
        },
        pages,
        messages_removed,
        summaries_added,
        messages_cleared,
    }
}

/// A page id and the messages it holds.
pub type ArchivedPage = (String, Vec<Message>);

/// A stage's edits applied to a copy of `input` without a store, for the conformance kit:
/// each `Summarize` page gets the id the store would give it (pages are content-addressed),
/// and is returned with its messages so the kit's checks can find it.
pub fn preview(
    input: &Conversation,
    asked: FfiVec<EditFfi>,
    keep_recent: usize,
    strategy: &str,
) -> Result<(Conversation, Vec<ArchivedPage>), Violation> {
    let checked = check(&input.messages, asked, keep_recent, strategy)?;
    let pages: Vec<ArchivedPage> = drafts(&input.messages, &checked, strategy)
        .into_iter()
        .map(|draft| {
            let messages: Vec<Message> = draft.messages.into();
            (page_id(&messages), messages)
        })
        .collect();
    let ids = pages.iter().map(|(id, _)| id.clone()).collect::<Vec<_>>();
    let ready = ready(&input.messages, checked, ids.into_iter(), strategy)
        .expect("pages made by page_id are the pages clearings name");
    Ok((splice(input.clone(), ready).conversation, pages))
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use proptest::prelude::*;
    use tamp_plugin_api::{ContentBlock, Role, ToolResultPart};

    use super::*;
    use crate::invariants::check_stage_output;
    use crate::wire::WireFormat;

    const ME: &str = "tester";

    fn call(id: &str) -> Message {
        Message::new(
            Role::Assistant,
            vec![ContentBlock::ToolUse {
                id: id.into(),
                name: "bash".into(),
                input_json: "{}".into(),
                extra_json: Default::default(),
            }],
        )
    }

    fn result(id: &str) -> Message {
        Message::new(
            Role::User,
            vec![ContentBlock::ToolResult {
                tool_use_id: id.into(),
                content: vec![ToolResultPart::Text {
                    text: format!("output of {id}, long enough to be worth a summary").into(),
                }]
                .into(),
                is_error: false,
                extra_json: Default::default(),
            }],
        )
    }

    /// System, task, then `turns` turns (a text, or a tool exchange every third), then a
    /// closing user message.
    fn conversation(turns: usize) -> Conversation {
        let mut m = vec![
            Message::text(Role::System, "sys"),
            Message::text(Role::User, "the task"),
        ];
        for t in 0..turns {
            if t % 3 == 2 {
                let id = format!("c{t}");
                m.push(call(&id));
                m.push(result(&id));
            } else {
                let role = if t % 2 == 0 {
                    Role::Assistant
                } else {
                    Role::User
                };
                m.push(Message::text(role, format!("turn {t} says something")));
            }
        }
        m.push(Message::text(Role::User, "latest"));
        Conversation::new(m)
    }

    /// [`conversation`] with pinned messages in it: a mid-conversation system message after
    /// turn 0, a message of a role tamp does not know after turn 3 and, with `boundary`, a
    /// compaction boundary on turn 1.
    fn pinned_conversation(turns: usize, boundary: bool) -> Conversation {
        let mut c = conversation(turns);
        let mut m: Vec<Message> = c.messages.to_vec();
        let mut opaque = Message::new(
            Role::System,
            vec![ContentBlock::Opaque {
                json: r#"{"role":"critic","content":"x"}"#.into(),
            }],
        );
        opaque.extra_json = r#"{"tamp:item":"raw","tamp:opaque":["role:critic"]}"#.into();
        if m.len() > 7 {
            m.insert(7, opaque);
        }
        if boundary && m.len() > 4 {
            m[3].extra_json = r#"{"tamp:boundary":"compaction"}"#.into();
        }
        if m.len() > 3 {
            m.insert(
                3,
                Message::text(Role::System, "mid-conversation instructions"),
            );
        }
        c.messages = m.into();
        c
    }

    fn ffi(edits: Vec<Edit>) -> FfiVec<EditFfi> {
        edits.into_iter().map(Edit::into_ffi).collect()
    }

    fn refused(c: &Conversation, edits: Vec<Edit>, keep_recent: usize) -> Violation {
        check(&c.messages, ffi(edits), keep_recent, ME).expect_err("refused")
    }

    #[test]
    fn a_refused_edit_carries_the_index_of_the_first_message_it_names() {
        let c = conversation(6);
        let split = refused(&c, vec![Edit::summarize(2..5, "s")], 1);
        assert_eq!(split.message_index, Some(2), "{split}");
        let overlap = refused(
            &c,
            vec![Edit::summarize(3..6, "s"), Edit::summarize(2..4, "s")],
            1,
        );
        assert_eq!(overlap.message_index, Some(2), "{overlap}");
        // The text names "a message" before the span; the index is the span's start.
        let not_a_summary = refused(
            &c,
            vec![Edit::replace(2..4, Message::text(Role::User, "made up"))],
            1,
        );
        assert_eq!(not_a_summary.rule, Rule::NothingLost);
        assert_eq!(not_a_summary.message_index, Some(2), "{not_a_summary}");
    }

    #[test]
    fn spans_outside_the_compactable_range_or_splitting_an_exchange_are_refused() {
        let c = conversation(6); // sys, task, t0, t1, call c2, result c2, t3, t4, call, result, latest
        assert_eq!(
            refused(&c, vec![Edit::summarize(1..3, "s")], 1).rule,
            Rule::ProtectedUntouched,
            "the task is pinned"
        );
        let n = c.messages.len();
        assert_eq!(
            refused(&c, vec![Edit::summarize(n - 2..n, "s")], 1).rule,
            Rule::ProtectedUntouched,
            "the tail is protected"
        );
        let split = refused(&c, vec![Edit::summarize(2..5, "s")], 1);
        assert_eq!(split.rule, Rule::ToolExchangesIntact, "{split:?}");
        let overlap = refused(
            &c,
            vec![Edit::summarize(2..4, "s"), Edit::summarize(3..6, "s")],
            1,
        );
        assert_eq!(overlap.rule, Rule::OrderKept);
        assert_eq!(
            refused(&c, vec![Edit::summarize(4..4, "s")], 1).rule,
            Rule::OrderKept,
            "an empty span"
        );
        assert_eq!(
            refused(&c, vec![Edit::summarize(2..n + 5, "s")], 0).rule,
            Rule::OrderKept,
            "past the end"
        );
    }

    #[test]
    fn pinned_messages_in_a_span_are_kept_after_its_summary_and_a_boundary_is_refused() {
        // sys, task, t0, MID, t1, call c2, result c2, t3, OPAQUE, t4, call c5, result c5, latest
        let c = pinned_conversation(6, false);
        // The instructions and the opaque unit inside the span stay, after its summary, in
        // order; the page holds the whole span.
        let (out, pages) = preview(&c, ffi(vec![Edit::summarize(2..10, "s")]), 1, ME).unwrap();
        assert!(out.messages[2].is_summary());
        assert_eq!(out.messages[3], c.messages[3]);
        assert_eq!(out.messages[4], c.messages[8]);
        assert_eq!(out.messages[5], c.messages[10]);
        assert_eq!(pages[0].1, c.messages[2..10].to_vec());
        check_stage_output(
            &c.messages,
            &out.messages,
            1,
            WireFormat::Anthropic,
            &pages.into_iter().collect(),
        )
        .unwrap();
        // The same instructions said again later: the earlier copy goes into the page, the
        // later one keeps them; the checker accepts it, and refuses losing the last copy.
        let mut repeated = c.clone();
        let mut m = repeated.messages.to_vec();
        m.insert(12, c.messages[3].clone());
        repeated.messages = m.into();
        let (out, pages) =
            preview(&repeated, ffi(vec![Edit::summarize(2..10, "s")]), 1, ME).unwrap();
        assert!(out.messages[2].is_summary());
        assert_eq!(out.messages[3], c.messages[8]);
        assert_eq!(out.messages[6], repeated.messages[12]);
        assert_eq!(
            out.messages.iter().filter(|m| **m == c.messages[3]).count(),
            1
        );
        let pages: HashMap<String, Vec<Message>> = pages.into_iter().collect();
        check_stage_output(
            &repeated.messages,
            &out.messages,
            1,
            WireFormat::Anthropic,
            &pages,
        )
        .unwrap();
        let mut lost = out.messages.to_vec();
        lost.remove(6);
        let v = check_stage_output(&repeated.messages, &lost, 1, WireFormat::Anthropic, &pages)
            .unwrap_err();
        assert_eq!(v.rule, Rule::InstructionsKept, "{v}");
        // A span of pinned units alone replaces nothing.
        let v = refused(&c, vec![Edit::summarize(3..4, "s")], 1);
        assert_eq!(v.rule, Rule::InstructionsKept, "{v}");
        let v = refused(&c, vec![Edit::summarize(8..9, "s")], 1);
        assert_eq!(v.rule, Rule::OpaqueKept, "{v}");
        assert!(v.detail.contains("role \"critic\""), "{v}");
        assert_eq!(
            refused(&c, vec![Edit::summarize(1..3, "s")], 1).rule,
            Rule::ProtectedUntouched,
            "the task stays INV-03"
        );
        let (out, _) = preview(&c, ffi(vec![Edit::summarize(4..8, "s")]), 1, ME).unwrap();
        assert_eq!(out.messages[3], c.messages[3]);
        assert_eq!(out.messages[5], c.messages[8]);
        // sys, task, t0, MID, t1 (boundary), call c2, result c2, ...
        let c = pinned_conversation(6, true);
        let v = refused(&c, vec![Edit::summarize(2..3, "s")], 1);
        assert_eq!(v.rule, Rule::BoundaryKept, "{v}");
        let v = refused(&c, vec![Edit::summarize(4..5, "s")], 1);
        assert_eq!(v.rule, Rule::BoundaryKept, "{v}");
        preview(&c, ffi(vec![Edit::summarize(5..7, "s")]), 1, ME).expect("after the boundary");
    }

    #[test]
    fn a_replacement_must_name_the_page_of_exactly_its_span() {
        let c = conversation(6);
        let wrong = summary_message("s", &page_id(&c.messages[2..3]), ME, SummaryStatus::Pending);
        let v = refused(&c, vec![Edit::replace(2..4, wrong)], 1);
        assert_eq!(v.rule, Rule::NothingLost, "{v:?}");
        let not_a_summary = Message::text(Role::User, "plain");
        assert_eq!(
            refused(&c, vec![Edit::replace(2..4, not_a_summary)], 1).rule,
            Rule::NothingLost
        );
        let right = summary_message("s", &page_id(&c.messages[2..4]), ME, SummaryStatus::Pending);
        let checked = check(&c.messages, ffi(vec![Edit::replace(2..4, right)]), 1, ME).unwrap();
        assert_eq!(replaced_pages(&checked), vec![page_id(&c.messages[2..4])]);
    }

    #[test]
    fn only_our_pending_summaries_are_finalized_in_place() {
        let mut c = conversation(3);
        let page = page_id(&c.messages[2..3]);
        c.messages[2] = summary_message("pending", &page, ME, SummaryStatus::Pending);
        c.messages[3] = summary_message("theirs", "pg_1", "other", SummaryStatus::Pending);
        assert_eq!(
            refused(&c, vec![Edit::finalize(3, "done")], 1).rule,
            Rule::OrderKept
        );
        let (out, pages) =
            preview(&c, ffi(vec![Edit::finalize(2, "done")]), 1, ME).expect("finalized");
        assert!(pages.is_empty());
        let info = out.messages[2].summary_info().unwrap();
        assert_eq!(
            (info.page_ref.as_str(), info.status),
            (page.as_str(), SummaryStatus::Final)
        );
        assert_eq!(out.messages[2].joined_text(), "done");
        assert_eq!(out.messages.len(), c.messages.len());
    }

    #[test]
    fn summaries_go_in_place_and_their_pages_hold_the_spans() {
        let c = conversation(6);
        let edits = vec![
            Edit::summarize(6..7, "later").with_metadata(&serde_json::json!({"k": 1})),
            Edit::summarize(2..6, "earlier"),
        ];
        let (out, pages) = preview(&c, ffi(edits), 1, ME).unwrap();
        assert_eq!(out.messages.len(), c.messages.len() - 5 + 2);
        assert_eq!(out.messages[..2], c.messages[..2]);
        assert_eq!(out.messages[2].joined_text(), "earlier");
        assert_eq!(out.messages[3].joined_text(), "later");
        assert_eq!(out.messages[4..], c.messages[7..]);
        assert_eq!(pages[0].1, c.messages[2..6].to_vec());
        assert_eq!(
            out.messages[2].summary_info().unwrap().page_ref.as_str(),
            pages[0].0
        );
    }

    /// `message` with every tool result and input in it cleared.
    fn cleared(message: &Message, index: usize) -> Edit {
        let mut clearing = sdk::clearing::Clearing::new(message, index);
        for b in 0..message.content.len() {
            clearing.clear_result(b, "cleared");
            clearing.clear_input(b);
        }
        clearing.into_edit().expect("a tool message")
    }

    fn clear_message(edit: Edit) -> Message {
        match edit {
            Edit::Clear { message, .. } => message,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_clearing_archives_the_original_and_keeps_the_message_in_place() {
        let c = conversation(6); // call c2 at 4, its result at 5
        let edits = vec![cleared(&c.messages[5], 5), Edit::summarize(2..4, "early")];
        let (out, pages) = preview(&c, ffi(edits), 1, ME).unwrap();
        assert_eq!(out.messages.len(), c.messages.len() - 1);
        assert_eq!(out.messages[3], c.messages[4], "the call is kept");
        let cleared = &out.messages[4];
        assert_eq!(cleared.tool_result_ids().collect::<Vec<_>>(), ["c2"]);
        let page = page_id(&c.messages[5..6]);
        assert_eq!(
            sdk::clearing::cleared_page(&cleared.content[0]),
            Some(page.as_str())
        );
        assert!(pages.contains(&(page, c.messages[5..6].to_vec())));
        let pages: HashMap<String, Vec<Message>> = pages.into_iter().collect();
        check_stage_output(&c.messages, &out.messages, 1, WireFormat::Anthropic, &pages)
            .expect("the diff checker agrees");
        // Without the original's page, the diff checker finds it lost.
        let mut without = pages.clone();
        without.retain(|_, v| v.len() != 1);
        let v = check_stage_output(
            &c.messages,
            &out.messages,
            1,
            WireFormat::Anthropic,
            &without,
        )
        .unwrap_err();
        assert_eq!(v.rule, Rule::NothingLost, "{v}");
    }

    #[test]
    fn clearings_that_change_more_than_tool_output_are_refused_by_rule() {
        let c = conversation(6);
        let result = &c.messages[5];
        let good = clear_message(cleared(result, 5));
        let refused_as =
            |message: Message, index: usize| refused(&c, vec![Edit::clear(index, message)], 1);

        let mut changed_id = good.clone();
        if let ContentBlock::ToolResult { tool_use_id, .. } = &mut changed_id.content[0] {
            *tool_use_id = "other".into();
        }
        let v = refused_as(changed_id, 5);
        assert_eq!(v.rule, Rule::ClearingKeepsStructure, "{v}");
        assert!(v.detail.contains("tool id changed"), "{v}");

        let mut dropped = good.clone();
        dropped.content = Vec::new().into();
        let v = refused_as(dropped, 5);
        assert_eq!(v.rule, Rule::ClearingKeepsStructure, "{v}");
        assert!(v.detail.contains("keeps every block"), "{v}");

        let mut no_page = good.clone();
        if let ContentBlock::ToolResult { content, .. } = &mut no_page.content[0] {
            *content = vec![ToolResultPart::Text {
                text: "[output cleared]".into(),
            }]
            .into();
        }
        let v = refused_as(no_page, 5);
        assert_eq!(v.rule, Rule::ClearingKeepsStructure, "{v}");
        assert!(v.detail.contains("not a placeholder"), "{v}");

        let other_page = clear_message(cleared(&c.messages[9], 5));
        let mut wrong_page = good.clone();
        wrong_page.content[0] = match (&other_page.content[0], &good.content[0]) {
            (
                ContentBlock::ToolResult { content, .. },
                ContentBlock::ToolResult {
                    tool_use_id,
                    is_error,
                    extra_json,
                    ..
                },
            ) => ContentBlock::ToolResult {
                tool_use_id: tool_use_id.clone(),
                content: content.clone(),
                is_error: *is_error,
                extra_json: extra_json.clone(),
            },
            other => panic!("{other:?}"),
        };
        let v = refused_as(wrong_page, 5);
        assert_eq!(v.rule, Rule::NothingLost, "{v}");

        let text = Message::text(Role::Assistant, "turn 0 rewritten");
        assert_eq!(refused_as(text, 2).rule, Rule::ClearingKeepsStructure);

        // The protected tail: the last result (9) with keep_recent 2.
        let tail = clear_message(cleared(&c.messages[9], 9));
        let v = refused(&c, vec![Edit::clear(9, tail)], 2);
        assert_eq!(v.rule, Rule::ProtectedUntouched, "{v}");

        // A block is cleared once: clearing the cleared message again is refused.
        let (once, _) = preview(&c, ffi(vec![cleared(result, 5)]), 1, ME).unwrap();
        let mut again = clear_message(cleared(result, 5));
        if let ContentBlock::ToolResult { content, .. } = &mut again.content[0] {
            *content = vec![ToolResultPart::Text {
                text: sdk::clearing::result_placeholder(&page_id(&once.messages[5..6]), "x").into(),
            }]
            .into();
        }
        let v = refused(&once, vec![Edit::clear(5, again)], 1);
        assert_eq!(v.rule, Rule::ClearingKeepsStructure, "{v}");
        assert!(v.detail.contains("cleared already"), "{v}");

        assert_eq!(
            refused(&c, vec![cleared(result, 5), Edit::summarize(4..6, "s")], 1).rule,
            Rule::OrderKept,
            "a clearing inside a summarized span overlaps it"
        );
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(300))]

        /// Whatever spans and clearings a plugin asks for, the host either refuses them or the
        /// result keeps every rule the diff-based checker knows: nothing lost, no exchange
        /// split, the protected messages and the order kept, clearings in place.
        #[test]
        fn no_edits_lose_a_message_or_split_an_exchange(
            turns in 1usize..14,
            pins in 0usize..4,
            keep_recent in 0usize..4,
            spans in prop::collection::vec((0usize..40, 0usize..6, any::<bool>()), 0..4),
            clears in prop::collection::vec(0usize..40, 0..3),
        ) {
            let c = match pins {
                0 => conversation(turns),
                // The mid-conversation instructions said again at the end.
                3 => {
                    let mut c = pinned_conversation(turns, false);
                    let mut m = c.messages.to_vec();
                    if m.len() > 4 {
                        let again = m[3].clone();
                        m.push(again);
                    }
                    c.messages = m.into();
                    c
                }
                n => pinned_conversation(turns, n == 2),
            };
            let clearings = clears
                .iter()
                .filter(|&&i| {
                    c.messages.get(i).is_some_and(|m| {
                        m.tool_use_ids().next().is_some() || m.tool_result_ids().next().is_some()
                    })
                })
                .map(|&i| cleared(&c.messages[i], i));
            let edits: Vec<Edit> = spans
                .iter()
                .map(|&(start, len, pending)| {
                    let span = start..start + len;
                    if pending {
                        Edit::summarize_pending(span, "s")
                    } else {
                        Edit::summarize(span, "s")
                    }
                })
                .chain(clearings)
                .collect();
            if let Ok((out, pages)) = preview(&c, ffi(edits), keep_recent, ME) {
                let pages: HashMap<String, Vec<Message>> = pages.into_iter().collect();
                let checked = check_stage_output(
                    &c.messages,
                    &out.messages,
                    keep_recent,
                    WireFormat::Anthropic,
                    &pages,
                );
                prop_assert!(checked.is_ok(), "{checked:?}");
            }
        }
    }
}
