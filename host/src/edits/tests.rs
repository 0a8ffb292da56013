use std::collections::HashMap;

use proptest::prelude::*;
use tamp_plugin_api::rules;
use tamp_plugin_api::{ContentBlock, Role, ToolResultPart};

use super::*;
use crate::invariants::{check_stage_output, Rule};
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
    let (out, pages) = preview(&repeated, ffi(vec![Edit::summarize(2..10, "s")]), 1, ME).unwrap();
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
    let (out, pages) = preview(&c, ffi(vec![Edit::finalize(2, "done")]), 1, ME).expect("finalized");
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
    let mut clearing = rules::clearing::Clearing::new(message, index);
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
        rules::clearing::cleared_page(&cleared.content[0]),
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
            text: rules::clearing::result_placeholder(&page_id(&once.messages[5..6]), "x").into(),
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
