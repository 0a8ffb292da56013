//! Splitting a conversation into units that must never be split: a tool exchange (an
//! assistant message with tool calls and every message carrying their results) or a single
//! message. A unit that holds a pinned message ([`pinned`](super::pinned): instructions or
//! an opaque unit) is [`UnitKind::System`], so a strategy that leaves those alone keeps the
//! pinning rules without looking further.

use crate::conversation::Message;
use crate::rules::pinned::is_pinned;

pub use super::unit::{Unit, UnitKind};

/// Splits `messages` into units, in order; together they cover every message once.
///
/// A tool exchange spans from the message making a call to the last message answering any of
/// its calls, so parallel calls answered by several OpenAI `tool` messages, or one Anthropic
/// `user` message answering several calls, stay one unit. Results that answer no known call
/// are left as their own unit (rejecting them is the host's job).
pub fn units(messages: &[Message]) -> Vec<Unit> {
    let mut call_site: foldhash::HashMap<&str, usize> = foldhash::HashMap::default();
    // reach[i]: the last message a unit starting at or containing i must extend to.
    let mut reach: Vec<usize> = (0..messages.len()).collect();
    for (i, message) in messages.iter().enumerate() {
        for id in message.tool_result_ids() {
            if let Some(&j) = call_site.get(id) {
                reach[j] = reach[j].max(i);
            }
        }
        for id in message.tool_use_ids() {
            call_site.insert(id, i);
        }
    }

    let mut out = Vec::new();
    let mut start = 0;
    while start < messages.len() {
        let mut end = reach[start];
        let mut i = start;
        while i <= end {
            end = end.max(reach[i]);
            i += 1;
        }
        let range = start..end + 1;
        out.push(Unit {
            kind: kind_of(&messages[range.clone()]),
            range,
        });
        start = end + 1;
    }
    out
}

fn kind_of(run: &[Message]) -> UnitKind {
    if run.iter().any(is_pinned) {
        return UnitKind::System;
    }
    if run.len() == 1 && run[0].is_summary() {
        return UnitKind::Summary;
    }
    if run.iter().any(|m| m.tool_use_ids().next().is_some()) {
        UnitKind::ToolExchange
    } else {
        UnitKind::Message
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conversation::{ContentBlock, Role, ToolResultPart};
    use crate::rules::pinned::boundary_end;

    fn call(ids: &[&str]) -> Message {
        Message::new(
            Role::Assistant,
            ids.iter()
                .map(|id| ContentBlock::ToolUse {
                    id: (*id).into(),
                    name: "bash".into(),
                    input_json: "{}".into(),
                    extra_json: Default::default(),
                })
                .collect(),
        )
    }

    fn result(role: Role, ids: &[&str]) -> Message {
        Message::new(
            role,
            ids.iter()
                .map(|id| ContentBlock::ToolResult {
                    tool_use_id: (*id).into(),
                    content: vec![ToolResultPart::Text { text: "ok".into() }].into(),
                    is_error: false,
                    extra_json: Default::default(),
                })
                .collect(),
        )
    }

    #[test]
    fn openai_parallel_calls_are_one_unit() {
        let msgs = vec![
            Message::text(Role::System, "sys"),
            Message::text(Role::User, "hi"),
            call(&["a", "b"]),
            result(Role::Tool, &["a"]),
            result(Role::Tool, &["b"]),
            Message::text(Role::Assistant, "done"),
        ];
        let u = units(&msgs);
        let ranges: Vec<_> = u.iter().map(|u| (u.range.clone(), u.kind)).collect();
        assert_eq!(
            ranges,
            vec![
                (0..1, UnitKind::System),
                (1..2, UnitKind::Message),
                (2..5, UnitKind::ToolExchange),
                (5..6, UnitKind::Message),
            ]
        );
    }

    #[test]
    fn anthropic_exchange_spans_call_and_answering_user_message() {
        let msgs = vec![
            Message::text(Role::User, "go"),
            call(&["t1"]),
            result(Role::User, &["t1"]),
            call(&["t2"]),
            result(Role::User, &["t2"]),
        ];
        let u = units(&msgs);
        assert_eq!(u.len(), 3);
        assert_eq!(u[1].range, 1..3);
        assert_eq!(u[2].range, 3..5);
    }

    #[test]
    fn interleaved_exchanges_merge() {
        // A call answered only after another exchange began must not be split from it.
        let msgs = vec![
            call(&["a"]),
            call(&["b"]),
            result(Role::Tool, &["b"]),
            result(Role::Tool, &["a"]),
        ];
        let u = units(&msgs);
        assert_eq!(u.len(), 1);
        assert_eq!(u[0].range, 0..4);
    }

    #[test]
    fn orphan_result_and_unanswered_call_stand_alone() {
        let msgs = vec![result(Role::Tool, &["zz"]), call(&["q"])];
        let u = units(&msgs);
        assert_eq!(u.len(), 2);
        assert_eq!(u[0].kind, UnitKind::Message);
        assert_eq!(u[1].kind, UnitKind::ToolExchange);
    }

    #[test]
    fn a_unit_holding_a_pinned_message_is_pinned_whole() {
        let mut opaque_result = result(Role::User, &["a"]);
        opaque_result.extra_json = r#"{"tamp:opaque":["block:fancy"]}"#.into();
        let msgs = vec![
            Message::text(Role::User, "task"),
            call(&["a"]),
            opaque_result,
            Message::text(Role::System, "mid-conversation instructions"),
            call(&["b"]),
            result(Role::User, &["b"]),
        ];
        let kinds: Vec<_> = units(&msgs)
            .iter()
            .map(|u| (u.range.clone(), u.kind))
            .collect();
        assert_eq!(
            kinds,
            vec![
                (0..1, UnitKind::Message),
                (1..3, UnitKind::System),
                (3..4, UnitKind::System),
                (4..6, UnitKind::ToolExchange),
            ]
        );
        assert!(units(&msgs)[1].is_pinned());
    }

    #[test]
    fn empty_conversation_has_no_units() {
        assert!(units(&[]).is_empty());
    }

    #[test]
    fn the_boundary_ends_with_the_unit_holding_the_last_one() {
        let mut boundary = Message::new(
            Role::Assistant,
            vec![ContentBlock::Opaque { json: "{}".into() }],
        );
        boundary.extra_json = r#"{"tamp:boundary":"compaction"}"#.into();
        let mut call = boundary.clone();
        call.content = vec![ContentBlock::tool_use("t1", "bash", "{}")].into();
        let result = Message::new(
            Role::User,
            vec![ContentBlock::tool_result("t1", "ok", false)],
        );
        let m = vec![
            Message::text(Role::User, "task"),
            boundary.clone(),
            Message::text(Role::User, "more"),
            call,
            result,
            Message::text(Role::Assistant, "done"),
        ];
        // The last boundary makes a call: the exchange it starts ends the boundary's unit.
        assert_eq!(boundary_end(&m, &units(&m)), 5);
        assert_eq!(boundary_end(&m[..3], &units(&m[..3])), 2);
        assert_eq!(boundary_end(&m[..1], &units(&m[..1])), 0);
    }
}
