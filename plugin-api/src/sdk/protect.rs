//! The parts of a conversation no stage may touch.

use std::ops::Range;

use crate::conversation::{Message, Role};
use crate::sdk::exchanges::units;

/// The messages a stage may replace: after the leading system messages and before the
/// protected tail of the last `keep_recent` messages. The tail is widened backwards to a unit
/// boundary, so a tool exchange that straddles it is protected whole. System messages inside
/// the range still must not be replaced (skip [`UnitKind::System`](super::UnitKind) units).
pub fn compactable_range(messages: &[Message], keep_recent: usize) -> Range<usize> {
    let start = messages
        .iter()
        .take_while(|m| m.role == Role::System)
        .count();
    let mut tail_start = messages.len().saturating_sub(keep_recent);
    if tail_start < messages.len() {
        if let Some(unit) = units(messages)
            .into_iter()
            .find(|u| u.range.contains(&tail_start))
        {
            tail_start = unit.range.start;
        }
    }
    start..tail_start.max(start)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conversation::{ContentBlock, ToolResultPart};

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
        // keep_recent = 2 would start the tail at the tool result; the call joins it.
        assert_eq!(compactable_range(&msgs, 2), 1..2);
        assert_eq!(compactable_range(&msgs, 1), 1..4);
        assert_eq!(compactable_range(&msgs, 0), 1..5);
        assert_eq!(compactable_range(&msgs, 10), 1..1);
    }
}
