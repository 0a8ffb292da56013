//! The parts of a conversation no stage may touch.

use std::ops::Range;

use crate::conversation::{ContentBlock, Message, Role};
use crate::sdk::exchanges::{units, Unit};
use crate::sdk::pinned;

/// How many leading messages no stage may touch: the leading system messages and the task,
/// the first message after them when it is a plain user message (not a tool result, not a
/// summary). The task often carries the session's one constraint ("do not touch the billing
/// module"), which no summary may lose.
pub fn protected_head(messages: &[Message]) -> usize {
    let system = messages
        .iter()
        .take_while(|m| m.role == Role::System)
        .count();
    let task = messages.get(system).is_some_and(|m| {
        m.role == Role::User
            && !m.is_summary()
            && !m
                .content
                .iter()
                .any(|b| matches!(b, ContentBlock::ToolResult { .. }))
    });
    system + usize::from(task)
}

/// The messages a stage may replace: after the protected head ([`protected_head`]: the
/// leading system messages and the task), after the last compaction boundary
/// ([`pinned::boundary_end`]) and the pinned units right after those, and before the
/// protected tail of the last `keep_recent` messages. The tail is widened backwards to a unit
/// boundary, so a tool exchange that straddles it is protected whole. Pinned units further
/// inside the range still must not be touched (skip [`UnitKind::System`](super::UnitKind)
/// units; [`span::select_span`](super::span::select_span) does).
pub fn compactable_range(messages: &[Message], keep_recent: usize) -> Range<usize> {
    compactable_range_of(messages, &units(messages), keep_recent)
}

/// [`compactable_range`] for a caller that already has the conversation's [`units`].
pub fn compactable_range_of(
    messages: &[Message],
    units: &[Unit],
    keep_recent: usize,
) -> Range<usize> {
    let mut start = protected_head(messages).max(pinned::boundary_end(messages, units));
    // Pinned units where the range would begin (Claude Code's system message right after the
    // task) are not part of it: a span starting there could only start after them.
    if let Ok(at) = units.binary_search_by_key(&start, |u| u.range.start) {
        for unit in units[at..].iter().take_while(|u| u.is_pinned()) {
            start = unit.range.end;
        }
    }
    let mut tail_start = messages.len().saturating_sub(keep_recent);
    if let Some(unit) = units.iter().find(|u| u.range.contains(&tail_start)) {
        tail_start = unit.range.start;
    }
    start..tail_start.max(start)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conversation::ToolResultPart;

    #[test]
    fn tail_widens_to_keep_a_straddling_exchange_whole() {
        let msgs = vec![
            Message::text(Role::System, "s"),
            Message::text(Role::User, "u"),
            Message::new(
                Role::Assistant,
                vec![ContentBlock::ToolUse {
                    id: "a".into(),
                    name: "t".into(),
                    input_json: "{}".into(),
                    extra_json: Default::default(),
                }],
            ),
            Message::new(
                Role::Tool,
                vec![ContentBlock::ToolResult {
                    tool_use_id: "a".into(),
                    content: vec![ToolResultPart::Text { text: "r".into() }].into(),
                    is_error: false,
                    extra_json: Default::default(),
                }],
            ),
            Message::text(Role::Assistant, "end"),
        ];
        // The system prompt and the task ("u") are the protected head.
        assert_eq!(protected_head(&msgs), 2);
        // keep_recent = 2 would start the tail at the tool result; the call joins it.
        assert_eq!(compactable_range(&msgs, 2), 2..2);
        assert_eq!(compactable_range(&msgs, 1), 2..4);
        assert_eq!(compactable_range(&msgs, 0), 2..5);
        assert_eq!(compactable_range(&msgs, 10), 2..2);
    }

    #[test]
    fn the_range_begins_after_pinned_units_and_the_last_compaction_boundary() {
        let text = |role, t: &str| Message::text(role, t);
        let mut boundary = text(Role::Assistant, "compacted");
        boundary.extra_json = r#"{"tamp:boundary":"compaction"}"#.into();
        let mut msgs = vec![
            text(Role::System, "s"),
            text(Role::User, "task"),
            text(Role::System, "mid-conversation instructions"),
            text(Role::Assistant, "a1"),
            text(Role::User, "u1"),
            text(Role::Assistant, "a2"),
        ];
        // Claude Code's system message right after the task is not where the range begins.
        assert_eq!(compactable_range(&msgs, 1), 3..5);
        msgs.insert(4, boundary);
        assert_eq!(compactable_range(&msgs, 1), 5..6);
        assert_eq!(compactable_range(&msgs, 3), 5..5);
    }

    #[test]
    fn the_task_is_the_first_plain_user_message_after_the_system_prompt() {
        let task = Message::text(Role::User, "fix the bug; do not touch billing");
        let sys = Message::text(Role::System, "s");
        assert_eq!(protected_head(&[sys.clone(), task.clone()]), 2);
        assert_eq!(protected_head(std::slice::from_ref(&task)), 1);
        assert_eq!(protected_head(&[]), 0);
        // An assistant first, a tool result or a summary is no task.
        let assistant = Message::text(Role::Assistant, "hi");
        assert_eq!(protected_head(&[sys.clone(), assistant, task]), 1);
        let result = Message::new(
            Role::User,
            vec![ContentBlock::ToolResult {
                tool_use_id: "a".into(),
                content: vec![].into(),
                is_error: false,
                extra_json: Default::default(),
            }],
        );
        assert_eq!(protected_head(&[sys.clone(), result]), 1);
        let summary = crate::sdk::summary_message("s", "pg_1", "x", crate::SummaryStatus::Final);
        assert_eq!(protected_head(&[sys, summary]), 1);
    }
}
