//! The parts of a conversation no stage may touch.

use std::ops::Range;

use crate::conversation::{ContentBlock, Message, Role};
use crate::rules::exchanges::{units, Unit};
use crate::rules::pinned;

/// How many leading messages no stage may touch: the leading system messages and the task.
///
/// The task is the user's opening turn ([`opening_turn`]) once a reply or a summary has closed
/// it (system messages after it, such as Claude Code's environment, are pinned on their own):
/// an agent may open with context of its own in a user message before the user's words (Codex
/// sends its AGENTS.md and `<environment_context>` as one user message and the task as the
/// next). With no reply yet (or a tool result next), the task is the first plain user message
/// alone. The task often carries the session's one constraint ("do not touch the billing
/// module"), which no summary may lose.
pub fn protected_head(messages: &[Message]) -> usize {
    let system = leading_system(messages);
    let turn = opening_turn(messages);
    if turn == system {
        return system;
    }
    // A summary stands for what followed the head: the turn ended before it. System messages
    // right after the turn (Claude Code's environment) are pinned, not an answer.
    let closed = messages[turn..]
        .iter()
        .find(|m| m.role != Role::System)
        .is_some_and(|m| m.role == Role::Assistant || m.is_summary());
    if closed {
        turn
    } else {
        system + 1
    }
}

/// The end of the conversation's opening: the leading system messages, then the plain user
/// messages (not tool results, not summaries) right after them, however that run ends. A
/// thread is named by it (the host's derived thread key), so it must not depend on whether
/// the reply has come yet.
pub fn opening_turn(messages: &[Message]) -> usize {
    let system = leading_system(messages);
    let plain_user = |m: &Message| {
        m.role == Role::User
            && !m.is_summary()
            && !m
                .content
                .iter()
                .any(|b| matches!(b, ContentBlock::ToolResult { .. }))
    };
    system
        + messages[system..]
            .iter()
            .take_while(|m| plain_user(m))
            .count()
}

fn leading_system(messages: &[Message]) -> usize {
    messages
        .iter()
        .take_while(|m| m.role == Role::System)
        .count()
}

/// The messages a stage may replace: after the protected head ([`protected_head`]: the
/// leading system messages and the task), after the last compaction boundary
/// ([`pinned::boundary_end`]) and the pinned units right after those, and before the
/// protected tail of the last `keep_recent` messages. The tail is widened backwards to a unit
/// boundary, so a tool exchange that straddles it is protected whole. Pinned units further
/// inside the range are not summarized (skip [`UnitKind::System`](super::UnitKind) units); a
/// span may run past them, and the host keeps them after its summary
/// ([`span::select_span`](super::span::select_span) lists them).
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

    /// A summary message, as a strategy's SDK makes one.
    /// A user message holding only a tool result (no task, however early it stands).
    fn lone_result() -> Message {
        Message::new(
            Role::User,
            vec![ContentBlock::ToolResult {
                tool_use_id: "a".into(),
                content: vec![].into(),
                is_error: false,
                extra_json: Default::default(),
            }],
        )
    }

    fn summary() -> Message {
        let mut message = Message::text(Role::User, "s");
        message.summary = abi_stable::std_types::ROption::RSome(crate::SummaryInfo {
            page_ref: "pg_1".into(),
            strategy: "x".into(),
            status: crate::SummaryStatus::Final,
        });
        message
    }

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
        let result = lone_result();
        assert_eq!(protected_head(&[sys.clone(), result]), 1);
        let summary = summary();
        assert_eq!(protected_head(&[sys, summary]), 1);
    }

    #[test]
    fn the_task_is_the_user_s_whole_opening_turn() {
        let text = |role, t: &str| Message::text(role, t);
        // Codex (0.169, captured): its AGENTS.md and environment in one user message, the
        // user's words in the next, then the first reply.
        let codex = [
            text(Role::System, "You are Codex"),
            text(Role::System, "<permissions instructions>"),
            text(
                Role::User,
                "<environment_context><cwd>/w</cwd></environment_context>",
            ),
            text(Role::User, "Fix the bug; do not touch billing"),
            text(Role::Assistant, "on it"),
            text(Role::User, "and add a test"),
        ];
        assert_eq!(protected_head(&codex), 4);
        assert_eq!(compactable_range(&codex, 0), 4..6);
        // A system message (or an opaque unit, a boundary) ends the opening run; with no
        // reply right after it, the task is the first message.
        let mixed = [
            text(Role::User, "context"),
            text(Role::System, "mid"),
            text(Role::User, "task"),
            text(Role::Assistant, "a"),
        ];
        assert_eq!(protected_head(&mixed), 1);
        // Claude Code's system message right after the task is pinned, not part of the head.
        let claude = [
            text(Role::User, "task"),
            text(Role::System, "# Environment"),
            text(Role::Assistant, "a"),
        ];
        assert_eq!(protected_head(&claude), 1);
        let codex_then_system = [
            text(Role::User, "context"),
            text(Role::User, "task"),
            text(Role::System, "# Environment"),
            text(Role::Assistant, "a"),
        ];
        assert_eq!(protected_head(&codex_then_system), 2);
        // No reply yet: the first user message alone (a conversation of user messages only
        // still has something to compact).
        let unanswered = [text(Role::User, "u1"), text(Role::User, "u2")];
        assert_eq!(protected_head(&unanswered), 1);
        // A tool result before any reply ends the opening turn where it stands.
        let result = lone_result();
        let broken = [text(Role::User, "u1"), text(Role::User, "u2"), result];
        assert_eq!(protected_head(&broken), 1);
        // Once compacted, the first summary follows the opening turn.
        let summary = summary();
        let compacted = [
            codex[0].clone(),
            codex[1].clone(),
            codex[2].clone(),
            codex[3].clone(),
            summary,
            text(Role::Assistant, "a"),
        ];
        assert_eq!(protected_head(&compacted), 4);
        // The opening turn does not wait for the reply.
        assert_eq!(opening_turn(&codex[..4]), 4);
        assert_eq!(protected_head(&codex[..4]), 3);
        assert_eq!(opening_turn(&codex), 4);
    }
}
