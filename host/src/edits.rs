//! Applying a stage's edits: checked against the input first, then archived, then spliced.
//!
//! A stage reads the conversation shared and returns [`Edit`]s; nothing it does changes the
//! input, so rolling a stage back is not applying its edits. The checks are structural: one
//! pass over the conversation for its unit boundaries, then O(edits + removed messages), with
//! no copy of the conversation and no diff of a whole output against its input:
//!
//! - every span lies inside the compactable range (after the system prompt and the task,
//!   before the protected tail: TAMP-INV-03) and on unit boundaries, so a tool exchange is
//!   never split (TAMP-INV-02);
//! - spans are disjoint, so kept messages keep their order and only summaries are new
//!   (TAMP-INV-04);
//! - a `Summarize` span is archived by the host itself, and a `Replace` names a page that
//!   holds exactly its span (one hash of the span, pages being content-addressed), so nothing
//!   removed is lost (TAMP-INV-01);
//! - a `Finalize` turns one of this strategy's pending summaries final, on the same page.
//!
//! The no-growth rule (TAMP-INV-06) is counted from the spans and their replacements.

use tamp_plugin_api::sdk::{self, summary_message};
use tamp_plugin_api::{Conversation, Edit, EditFfi, FfiVec, Message, PageDraft, SummaryStatus};

use crate::invariants::{Rule, Violation};
use crate::store::page_id;
use crate::tokens::TokenCounter;

/// An edit that passed the checks, in input order.
#[derive(Debug)]
pub(crate) enum Checked {
    Summarize {
        range: std::ops::Range<usize>,
        text: String,
        status: SummaryStatus,
        metadata_json: String,
    },
    Replace {
        range: std::ops::Range<usize>,
        message: Message,
    },
    Finalize {
        index: usize,
        text: String,
    },
}

impl Checked {
    fn range(&self) -> std::ops::Range<usize> {
        match self {
            Checked::Summarize { range, .. } | Checked::Replace { range, .. } => range.clone(),
            Checked::Finalize { index, .. } => *index..*index + 1,
        }
    }

    /// The message that takes the span's place, its summary referring to `page` (a
    /// `Summarize` edit's new page; a `Finalize` keeps the pending summary's).
    fn message(&self, messages: &[Message], strategy: &str, page: &str) -> Message {
        match self {
            Checked::Summarize { text, status, .. } => {
                summary_message(text, page, strategy, *status)
            }
            Checked::Replace { message, .. } => message.clone(),
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
    Violation { rule, detail }
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
            ));
        }
        if range.start < allowed.start || range.end > allowed.end {
            return Err(violation(
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
            ));
        }
        if !starts_a_unit(range.start) || !ends_a_unit(range.end) {
            return Err(violation(
                Rule::ToolExchangesIntact,
                format!(
                    "edit {n} (messages[{}..{}]) splits a tool exchange: a span must start and \
                     end on a unit boundary (sdk::units)",
                    range.start, range.end
                ),
            ));
        }
        checked.push(match edit {
            Edit::Summarize {
                text,
                status,
                metadata_json,
                ..
            } => Checked::Summarize {
                range,
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
                    ));
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
                    ));
                }
                Checked::Replace { range, message }
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
                    ));
                }
                Checked::Finalize {
                    index,
                    text: text.into(),
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
            ));
        }
    }
    Ok(checked)
}

/// One line on what `edit` asks for, for reports: `summarize messages[2..6] (final): "…"`.
pub(crate) fn describe(edit: &EditFfi) -> String {
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
        _ => format!("an edit of another kind at {at}"),
    }
}

/// What a checked edit puts in its span's place, once its page exists.
pub(crate) struct Ready {
    range: std::ops::Range<usize>,
    message: Message,
    /// The page it refers to, when the edit removed messages into one.
    page: Option<String>,
}

/// The page drafts of the `Summarize` edits, in order, for the host to archive.
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
            _ => None,
        })
        .collect()
}

/// Turns checked edits into replacements, `pages` being the ids the `Summarize` drafts were
/// archived under, in order.
pub(crate) fn ready(
    messages: &[Message],
    checked: Vec<Checked>,
    mut pages: impl Iterator<Item = String>,
    strategy: &str,
) -> Vec<Ready> {
    checked
        .into_iter()
        .map(|c| {
            let range = c.range();
            let page = match &c {
                Checked::Summarize { .. } => {
                    Some(pages.next().expect("one page per Summarize edit"))
                }
                Checked::Replace { message, .. } => {
                    message.summary_info().map(|i| i.page_ref.to_string())
                }
                Checked::Finalize { .. } => None,
            };
            let message = match c {
                Checked::Replace { message, .. } => message,
                other => other.message(messages, strategy, page.as_deref().unwrap_or("")),
            };
            Ready {
                range,
                message,
                page,
            }
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
        added += match c {
            Checked::Replace { message, .. } => tokens.count_message(message),
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
}

/// Splices `ready` into `input`, moving the kept messages (none is copied).
pub(crate) fn splice(input: Conversation, ready: Vec<Ready>) -> Applied {
    let mut pages = Vec::new();
    let mut messages_removed = 0u32;
    let mut summaries_added = 0u32;
    for r in &ready {
        if let Some(page) = &r.page {
            pages.push(page.clone());
            messages_removed += r.range.len() as u32;
            summaries_added += 1;
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
    for (i, message) in messages.into_iter().enumerate() {
        if i < skip_until {
            continue;
        }
        match edits.peek() {
            Some(r) if r.range.start == i => {
                let r = edits.next().expect("peeked");
                skip_until = r.range.end;
                out.push(r.message);
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
    }
}

/// A page id and the messages it holds.
pub(crate) type ArchivedPage = (String, Vec<Message>);

/// A stage's edits applied to a copy of `input` without a store, for the conformance kit:
/// each `Summarize` page gets the id the store would give it (pages are content-addressed),
/// and is returned with its messages so the kit's checks can find it.
pub(crate) fn preview(
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
    let ready = ready(&input.messages, checked, ids.into_iter(), strategy);
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

    fn ffi(edits: Vec<Edit>) -> FfiVec<EditFfi> {
        edits.into_iter().map(Edit::into_ffi).collect()
    }

    fn refused(c: &Conversation, edits: Vec<Edit>, keep_recent: usize) -> Violation {
        check(&c.messages, ffi(edits), keep_recent, ME).expect_err("refused")
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

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(300))]

        /// Whatever spans a plugin asks for, the host either refuses them or the result keeps
        /// every rule the diff-based checker knows: nothing lost, no exchange split, the
        /// protected messages and the order kept.
        #[test]
        fn no_edits_lose_a_message_or_split_an_exchange(
            turns in 1usize..14,
            keep_recent in 0usize..4,
            spans in prop::collection::vec((0usize..40, 0usize..6, any::<bool>()), 0..4),
        ) {
            let c = conversation(turns);
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
