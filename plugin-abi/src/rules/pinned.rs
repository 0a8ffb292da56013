//! Messages no stage may summarize, replace or clear, and where a conversation's compactable
//! part may begin: the one home of these rules, read by the host's checks and by every
//! strategy through [`units`](super::units) and [`compactable_range`](super::compactable_range).
//!
//! - **Instructions** (a [`Role::System`] message wherever it stands: the system prompt, or a
//!   mid-conversation system or developer message) are pinned: never summarized, replaced or
//!   cleared, kept in order (rule TAMP-INV-11). Inside a summarized span the host keeps them,
//!   right after the summary. One exception, [`repeated_later`]: a system message said again
//!   word for word later in the conversation may go into the span's page, since the later
//!   copy keeps the instruction (Claude Code repeats the same reminder every few tool calls;
//!   kept every time, a long session's copies filled the context).
//! - **Opaque units** are pinned too (TAMP-INV-12): a message in a role, or holding a block,
//!   or standing for a wire item of a type tamp does not know. The wire reader keeps it
//!   verbatim where it stands and marks it with [`OPAQUE`] (what it is: `item:web_search_call`,
//!   `role:critic`, `block:fancy_block`); a whole unknown message or item is a `Role::System`
//!   message holding one [`ContentBlock::Opaque`](crate::ContentBlock::Opaque), so it is
//!   pinned as instructions are and every renderer sees it as what it is not: something the
//!   model was told, not said.
//! - **Compaction boundaries** (TAMP-INV-13): a provider's own compaction (Anthropic's
//!   `compaction` block, the Responses API's `compaction` item) stands for everything before
//!   it, which the provider then ignores. The reader marks the message holding one with
//!   [`BOUNDARY`]; nothing up to the end of the unit holding the last one is compactable
//!   ([`boundary_end`]), and the boundary itself is never dropped.
//!
//! The markers are keys of a message's `extra_json` that start with `tamp:` (reserved to tamp;
//! the wire writers strip them), so the plugin ABI needs no new field.

use crate::conversation::{Message, Role};
use crate::rules::unit::Unit;

/// Marker key (in a message's `extra_json`): a JSON array naming what in the message tamp does
/// not know, each entry `item:<type>`, `role:<role>` or `block:<type>`.
pub const OPAQUE: &str = "tamp:opaque";

/// Marker key (in a message's `extra_json`): the message holds a provider's compaction
/// boundary (its value names it, e.g. `"compaction"`).
pub const BOUNDARY: &str = "tamp:boundary";

/// Whether no stage may summarize, replace, clear or move `message`: instructions (a system
/// message) or an opaque unit.
pub fn is_pinned(message: &Message) -> bool {
    message.role == Role::System || has_marker(message, OPAQUE)
}

/// Whether `message` is instructions: a system message that is not an opaque unit (which is
/// also a system message, holding what tamp did not read). Only instructions may be said
/// again ([`repeated_later`]).
pub fn is_instructions(message: &Message) -> bool {
    message.role == Role::System && !has_marker(message, OPAQUE)
}

/// For each of `messages`, whether it is instructions said again later word for word: a
/// system message (not an opaque unit) with an identical message after it. Such a copy is
/// not kept after a summary of its span: the last copy keeps the instruction in the
/// conversation (TAMP-INV-11 allows it).
pub fn repeated_later(messages: &[Message]) -> Vec<bool> {
    let mut repeated = vec![false; messages.len()];
    let mut later: std::collections::HashMap<String, Vec<&Message>> = Default::default();
    for (i, message) in messages.iter().enumerate().rev() {
        if !is_instructions(message) {
            continue;
        }
        let copies = later.entry(message.joined_text()).or_default();
        repeated[i] = copies.contains(&message);
        copies.push(message);
    }
    repeated
}

/// Whether `message` holds a provider's compaction boundary.
pub fn is_boundary(message: &Message) -> bool {
    has_marker(message, BOUNDARY)
}

/// Where the compactable part of `messages` may begin at the earliest because of compaction
/// boundaries: the end of the unit holding the last boundary (0 when there is none). The
/// provider ignores what comes before a boundary, so summarizing it saves nothing, and the
/// boundary must reach the provider as it came.
pub fn boundary_end(messages: &[Message], units: &[Unit]) -> usize {
    let Some(last) = messages.iter().rposition(is_boundary) else {
        return 0;
    };
    units
        .iter()
        .find(|u| u.range.contains(&last))
        .map_or(last + 1, |u| u.range.end)
}

/// What kind of thing tamp did not know.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum OpaqueKind {
    /// A wire item of an unknown type (Responses API).
    Item,
    /// A message in an unknown role.
    Role,
    /// A content block of an unknown type, inside a message that is otherwise read.
    Block,
}

impl OpaqueKind {
    /// `item`, `role` or `block`: the prefix of a marker entry.
    pub fn as_str(self) -> &'static str {
        match self {
            OpaqueKind::Item => "item",
            OpaqueKind::Role => "role",
            OpaqueKind::Block => "block",
        }
    }
}

/// One thing tamp did not know in a message: its kind and its wire name.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Opaque {
    pub kind: OpaqueKind,
    /// The wire type or role, as sent.
    pub name: String,
}

impl Opaque {
    /// The marker entry (`item:web_search_call`).
    pub fn entry(&self) -> String {
        format!("{}:{}", self.kind.as_str(), self.name)
    }

    /// Reads a marker entry.
    pub fn parse(entry: &str) -> Option<Opaque> {
        let (kind, name) = entry.split_once(':')?;
        let kind = match kind {
            "item" => OpaqueKind::Item,
            "role" => OpaqueKind::Role,
            "block" => OpaqueKind::Block,
            _ => return None,
        };
        Some(Opaque {
            kind,
            name: name.to_string(),
        })
    }
}

/// What in `message` tamp did not know (empty for an ordinary message).
pub fn opaque(message: &Message) -> Vec<Opaque> {
    if !has_marker(message, OPAQUE) {
        return Vec::new();
    }
    #[derive(serde::Deserialize)]
    struct Markers {
        #[serde(rename = "tamp:opaque", default)]
        opaque: Vec<String>,
    }
    serde_json::from_str::<Markers>(message.extra_json.as_str())
        .map(|m| m.opaque.iter().filter_map(|e| Opaque::parse(e)).collect())
        .unwrap_or_default()
}

/// `message` marked as holding `what`, as the wire readers mark a message with something tamp
/// does not know (added to the marks it has): to test how a strategy treats opaque units.
pub fn mark_opaque(mut message: Message, what: &Opaque) -> Message {
    let mut extra: serde_json::Map<String, serde_json::Value> =
        serde_json::from_str(message.extra_json.as_str()).unwrap_or_default();
    let marks = extra
        .entry(OPAQUE)
        .or_insert_with(|| serde_json::Value::Array(Vec::new()));
    if let serde_json::Value::Array(entries) = marks {
        entries.push(what.entry().into());
    }
    message.extra_json = serde_json::Value::Object(extra).to_string().into();
    message
}

/// Whether `message`'s `extra_json` has the marker key `key`. Most messages have no extras at
/// all, so this is a length check; a text search comes before any parse.
fn has_marker(message: &Message, key: &str) -> bool {
    let extra = message.extra_json.as_str();
    if extra.len() < key.len() + 2 {
        return false;
    }
    let quoted_at = |at: usize| {
        extra.as_bytes().get(at.wrapping_sub(1)) == Some(&b'"')
            && extra.as_bytes().get(at + key.len()) == Some(&b'"')
    };
    extra.match_indices(key).any(|(at, _)| quoted_at(at)) && key_present(extra, key)
}

/// Whether `key` is a top-level key of the JSON object `text` (not a string value that
/// happens to read like one).
fn key_present(text: &str, key: &str) -> bool {
    use serde::de::IgnoredAny;
    serde_json::from_str::<std::collections::HashMap<String, IgnoredAny>>(text)
        .is_ok_and(|keys| keys.contains_key(key))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conversation::ContentBlock;

    #[test]
    fn marking_opaque_adds_to_the_marks() {
        let block = Opaque::parse("block:fancy").unwrap();
        let marked = mark_opaque(Message::text(Role::Tool, "out"), &block);
        assert!(is_pinned(&marked));
        assert_eq!(opaque(&marked), std::slice::from_ref(&block));
        let role = Opaque::parse("role:critic").unwrap();
        let twice = mark_opaque(marked, &role);
        assert_eq!(opaque(&twice), [block, role]);
    }

    fn marked(role: Role, extra: &str) -> Message {
        let mut m = Message::new(role, vec![ContentBlock::Opaque { json: "{}".into() }]);
        m.extra_json = extra.into();
        m
    }

    #[test]
    fn instructions_and_opaque_units_are_pinned_and_values_do_not_count_as_keys() {
        assert!(is_pinned(&Message::text(Role::System, "be brief")));
        assert!(!is_pinned(&Message::text(Role::User, "tamp:opaque")));
        let unknown = marked(Role::User, r#"{"tamp:opaque":["block:fancy"]}"#);
        assert!(is_pinned(&unknown));
        assert_eq!(
            opaque(&unknown),
            vec![Opaque {
                kind: OpaqueKind::Block,
                name: "fancy".into()
            }]
        );
        // A wire field whose value is the marker's name is no marker.
        let value = marked(
            Role::User,
            r#"{"note":"tamp:opaque","x":"\"tamp:boundary\""}"#,
        );
        assert!(!is_pinned(&value));
        assert!(!is_boundary(&value));
        assert!(opaque(&value).is_empty());
        assert_eq!(
            Opaque::parse("item:web_search_call").unwrap().entry(),
            "item:web_search_call"
        );
        assert_eq!(Opaque::parse("nothing"), None);
    }

    #[test]
    fn only_earlier_copies_of_the_same_instructions_are_repeated() {
        let nudge = || Message::text(Role::System, "keep them updated");
        let messages = [
            Message::text(Role::System, "sys"),
            nudge(),
            Message::text(Role::User, "u"),
            Message::text(Role::System, "other"),
            nudge(),
            Message::text(Role::User, "keep them updated"),
            nudge(),
        ];
        assert_eq!(
            repeated_later(&messages),
            [false, true, false, false, true, false, false]
        );
    }
}
