//! Replacing runs of messages with summaries: how a 0.1 stage built the conversation it
//! returned. A 0.2 stage returns edits instead (`Edit::summarize`, `Edit::replace`), which the
//! host checks, archives and applies; nothing here is needed, and both items are deprecated.

use std::ops::Range;

use crate::conversation::Message;

/// Put `message` where the messages in `range` were.
#[deprecated(
    since = "0.2.0",
    note = "return `Edit::summarize(span, text)` (or `Edit::replace`): the host splices, archives and checks; docs/writing-a-plugin.md, \"Porting a plugin from 0.1\""
)]
#[derive(Clone, Debug)]
pub struct Replacement {
    pub range: Range<usize>,
    pub message: Message,
}

/// Applies replacements (non-overlapping, in any order) and returns the new message list;
/// every message outside the ranges keeps its order.
#[deprecated(
    since = "0.2.0",
    note = "return `Edit::summarize(span, text)` (or `Edit::replace`): the host splices, archives and checks; docs/writing-a-plugin.md, \"Porting a plugin from 0.1\""
)]
#[allow(deprecated)]
pub fn splice(messages: &[Message], mut replacements: Vec<Replacement>) -> Vec<Message> {
    replacements.sort_by_key(|r| r.range.start);
    let mut out = Vec::with_capacity(messages.len());
    let mut next = 0;
    for r in replacements {
        assert!(
            r.range.start >= next,
            "splice: overlapping replacement ranges"
        );
        out.extend_from_slice(&messages[next..r.range.start]);
        out.push(r.message);
        next = r.range.end;
    }
    out.extend_from_slice(&messages[next..]);
    out
}

#[cfg(test)]
#[allow(deprecated)]
mod tests {
    use super::*;
    use crate::conversation::Role;

    #[test]
    fn replaces_ranges_and_keeps_order() {
        let msgs: Vec<_> = (0..6)
            .map(|i| Message::text(Role::User, i.to_string()))
            .collect();
        let out = splice(
            &msgs,
            vec![
                Replacement {
                    range: 4..6,
                    message: Message::text(Role::User, "B"),
                },
                Replacement {
                    range: 1..3,
                    message: Message::text(Role::User, "A"),
                },
            ],
        );
        let texts: Vec<_> = out.iter().map(|m| m.joined_text()).collect();
        assert_eq!(texts, ["0", "A", "3", "B"]);
    }
}
