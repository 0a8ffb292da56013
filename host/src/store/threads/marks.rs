//! Marks: what a client moves from request to request without changing a message.
//!
//! Claude Code puts Anthropic's `cache_control` on the last block of its newest message only,
//! so the message that was newest loses it on the next request. A mark's coming and going also
//! changes how the wire reader recorded the message's spelling: a system message that was last
//! goes from one cache-marked text block back to a plain string (`tamp:content`), and a block's
//! recorded key order (`tamp:keys`) lists `cache_control` only while the block has it. Thread
//! continuity must see through all of it, or a request stops continuing its thread as soon as
//! the mark moves off a message the thread's last answer stood for, and every later request is
//! compacted again from the raw history, with a new prefix each time: the provider's prompt
//! cache, which the proxy exists to keep, is then written on every request instead of read.
//!
//! Two views of a message:
//!
//! - [`unmarked`], its identity: no marks and no record of its spelling. Two requests' copies of
//!   one message are equal in this view; hashes and prefix comparisons use it.
//! - [`remarked`], the thread's answer as the next request continues it: each message the
//!   request sends again exactly as the request sends it now (its marks where the client put
//!   them), every other message (summaries, cleared messages) as it was forwarded before, less
//!   its marks. So the answer's prefix is the bytes forwarded last time, and the breakpoints are
//!   the client's own: left as they were, old ones would pile up past the four Anthropic allows.

use std::borrow::Cow;

use abi_stable::std_types::RString;
use tamp_plugin_api::{ContentBlock, Message, ToolResultPart};

use crate::digest::message_digest;

/// The keys of a block's `extra_json`, or of an opaque block's or part's JSON, that are marks.
const MARKS: [&str; 1] = ["cache_control"];
/// The wire readers' records of how a message or block was spelled (a `content` string or
/// array, the order of an object's keys): a mark's coming and going changes them.
const SPELLING: [&str; 2] = ["tamp:content", "tamp:keys"];
/// The record of an object's key order, whose list names a mark while the mark is there.
const KEY_ORDER: &str = "tamp:keys";

/// `message` as itself: without marks, and without the record of its spelling (see the
/// module doc). The message itself when it has neither.
pub fn unmarked(message: &Message) -> Cow<'_, Message> {
    rewrite(message, View::Identity)
}

/// The thread's stored answer as a continuation of `request` (whose leading messages it
/// stands for): each of its messages that `request` sends again (the same but for marks) as
/// `request` sends it now, every other as it is less its marks.
pub fn remarked(output: &[Message], request: &[Message]) -> Vec<Message> {
    let sent: std::collections::HashMap<_, &Message> = request
        .iter()
        .map(|m| (message_digest(&unmarked(m)), m))
        .collect();
    output
        .iter()
        .map(|m| match sent.get(&message_digest(&unmarked(m))) {
            Some(now) => (*now).clone(),
            None => rewrite(m, View::Forwarded).into_owned(),
        })
        .collect()
}

/// Which of a message's `tamp:` records a view keeps.
#[derive(Clone, Copy, PartialEq, Eq)]
enum View {
    /// Marks and spelling records gone: what makes two copies of a message the same.
    Identity,
    /// Marks gone (and out of the key-order record), the spelling kept: the bytes the writer
    /// gave it before, less the marks.
    Forwarded,
}

fn rewrite(message: &Message, view: View) -> Cow<'_, Message> {
    let message_marked = view == View::Identity && has_any(&message.extra_json, &SPELLING);
    if !message_marked && !message.content.iter().any(|b| block_marked(b, view)) {
        return Cow::Borrowed(message);
    }
    let mut copy = message.clone();
    if view == View::Identity {
        copy.extra_json = without(&copy.extra_json, &SPELLING, view);
    }
    for block in copy.content.iter_mut() {
        match block {
            ContentBlock::Text { extra_json, .. }
            | ContentBlock::ToolUse { extra_json, .. }
            | ContentBlock::ToolResult { extra_json, .. } => {
                *extra_json = without(extra_json, &block_keys(view), view);
                if let ContentBlock::ToolResult { content, .. } = block {
                    for part in content.iter_mut() {
                        if let ToolResultPart::Opaque { json } = part {
                            *json = without(json, &MARKS, View::Forwarded);
                        }
                    }
                }
            }
            ContentBlock::Opaque { json } => *json = without(json, &MARKS, View::Forwarded),
        }
    }
    Cow::Owned(copy)
}

/// The keys a view takes out of a block's `extra_json`.
fn block_keys(view: View) -> Vec<&'static str> {
    match view {
        View::Identity => MARKS.iter().chain(&SPELLING).copied().collect(),
        View::Forwarded => MARKS.to_vec(),
    }
}

/// Whether the view would change `block`.
fn block_marked(block: &ContentBlock, view: View) -> bool {
    match block {
        ContentBlock::Text { extra_json, .. } | ContentBlock::ToolUse { extra_json, .. } => {
            has_any(extra_json, &MARKS)
                || (view == View::Identity && has_any(extra_json, &SPELLING))
        }
        ContentBlock::ToolResult {
            extra_json,
            content,
            ..
        } => {
            has_any(extra_json, &MARKS)
                || (view == View::Identity && has_any(extra_json, &SPELLING))
                || content.iter().any(|part| match part {
                    ToolResultPart::Opaque { json } => has_any(json, &MARKS),
                    ToolResultPart::Text { .. } => false,
                })
        }
        ContentBlock::Opaque { json } => has_any(json, &MARKS),
    }
}

/// Whether the JSON object text `json` has one of `keys` at its top level (a cheap test
/// first: most have none).
fn has_any(json: &RString, keys: &[&str]) -> bool {
    keys.iter().any(|key| json.contains(key))
        && serde_json::from_str::<serde_json::Map<String, serde_json::Value>>(json)
            .is_ok_and(|map| keys.iter().any(|key| map.contains_key(*key)))
}

/// The JSON object text `json` less `keys` at its top level (empty when nothing is left); in
/// the forwarded view the marks also leave the key-order record. `json` itself when it is not
/// an object or has none of them.
fn without(json: &RString, keys: &[&str], view: View) -> RString {
    let Ok(mut map) = serde_json::from_str::<serde_json::Map<String, serde_json::Value>>(json)
    else {
        return json.clone();
    };
    let mut changed = false;
    for key in keys {
        changed |= map.remove(*key).is_some();
    }
    if view == View::Forwarded {
        if let Some(serde_json::Value::Array(order)) = map.get_mut(KEY_ORDER) {
            let before = order.len();
            order.retain(|k| !k.as_str().is_some_and(|k| MARKS.contains(&k)));
            changed |= order.len() != before;
        }
    }
    if !changed {
        json.clone()
    } else if map.is_empty() {
        RString::new()
    } else {
        serde_json::Value::Object(map).to_string().into()
    }
}

#[cfg(test)]
mod tests {
    use tamp_plugin_api::Role;

    use super::super::{common_prefix, prefix_hashes};
    use super::*;
    use crate::wire::{self, WireFormat};

    fn marked(role: Role, text: &str, cache: bool) -> Message {
        let mut m = Message::text(role, text);
        if cache {
            m.content[0] = ContentBlock::Text {
                text: text.into(),
                extra_json: r#"{"cache_control":{"type":"ephemeral"}}"#.into(),
            };
            m.extra_json = r#"{"tamp:content":"array"}"#.into();
        }
        m
    }

    #[test]
    fn a_message_that_only_lost_its_cache_mark_is_sent_again() {
        // Claude Code: the last message carries the breakpoint, then the next one does.
        let first = vec![
            marked(Role::User, "a", false),
            marked(Role::Assistant, "b", true),
        ];
        let second = vec![
            marked(Role::User, "a", false),
            marked(Role::Assistant, "b", false),
            marked(Role::User, "c", true),
        ];
        assert_eq!(prefix_hashes(&first)[2], prefix_hashes(&second)[2]);
        assert_eq!(common_prefix(&first, &second), 2);
        // Other fields still count.
        let mut cited = marked(Role::Assistant, "b", false);
        cited.content[0] = ContentBlock::Text {
            text: "b".into(),
            extra_json: r#"{"cache_control":{"type":"ephemeral"},"citations":[]}"#.into(),
        };
        let bare = unmarked(&cited);
        let ContentBlock::Text { extra_json, .. } = &bare.content[0] else {
            panic!("{bare:?}")
        };
        assert_eq!(extra_json, r#"{"citations":[]}"#);
        assert_ne!(*bare, first[1]);
        let edited = vec![
            marked(Role::User, "a", false),
            marked(Role::Assistant, "B", false),
        ];
        assert_ne!(prefix_hashes(&first)[2], prefix_hashes(&edited)[2]);

        // The stored answer takes the request's marks: the old breakpoint goes, a summary
        // keeps none but keeps its spelling, a message sent again comes as it is sent now.
        let summary = marked(Role::User, "summary", true);
        let output = vec![summary, marked(Role::Assistant, "b", true)];
        let now = remarked(&output, &second);
        let mut bare_summary = marked(Role::User, "summary", false);
        bare_summary.extra_json = r#"{"tamp:content":"array"}"#.into();
        assert_eq!(now[0], bare_summary);
        assert_eq!(now[1], second[1]);
    }

    /// The messages of an Anthropic request body.
    fn read(body: serde_json::Value) -> Vec<Message> {
        let (conversation, _) =
            wire::parse_str(&body.to_string(), Some(WireFormat::Anthropic)).unwrap();
        conversation.messages.to_vec()
    }

    #[test]
    fn a_mark_that_moves_off_a_tool_result_leaves_it_the_same_message() {
        // Claude Code writes a tool result's keys in its own order, which the reader records;
        // the record listed `cache_control` while the block had it, so the message that had
        // been newest was another message on the next request, and the thread never continued.
        let result = |marked: bool| {
            let mut block = serde_json::json!({"tool_use_id": "toolu_1", "type": "tool_result",
                "content": "step 1", "is_error": false});
            if marked {
                block["cache_control"] = serde_json::json!({"type": "ephemeral"});
            }
            block
        };
        let body = |marked: bool, more: bool| {
            let mut messages = vec![
                serde_json::json!({"role": "user", "content": "run it"}),
                serde_json::json!({"role": "assistant", "content": [{"type": "tool_use",
                    "id": "toolu_1", "name": "Bash", "input": {"command": "echo step 1"}}]}),
                serde_json::json!({"role": "user", "content": [result(marked)]}),
            ];
            if more {
                messages.push(serde_json::json!({"role": "assistant", "content": "done"}));
            }
            serde_json::json!({"model": "m", "max_tokens": 10, "messages": messages})
        };
        let first = read(body(true, false));
        let second = read(body(false, true));
        assert_ne!(
            first[2], second[2],
            "the reader records the mark in the key order"
        );
        assert_eq!(unmarked(&first[2]), unmarked(&second[2]));
        assert_eq!(prefix_hashes(&first)[3], prefix_hashes(&second)[3]);

        // Forwarded again, a message the request no longer sends (one a stage rewrote) keeps
        // its spelling, less the mark: the writer gives it the bytes it had, but the mark.
        let again = remarked(&first[2..3], &[]);
        let expected = read(body(false, false));
        assert_eq!(again[0], expected[2]);
        let written = wire::write(
            &tamp_plugin_api::Conversation {
                thread_id: None.into(),
                messages: again.into(),
                metadata_json: "{}".into(),
            },
            WireFormat::Anthropic,
        )
        .compact();
        assert!(
            written.contains(r#"{"tool_use_id":"toolu_1","type":"tool_result","#),
            "{written}"
        );
        assert!(!written.contains("cache_control"), "{written}");
    }

    #[test]
    fn a_mark_on_an_opaque_block_or_part_is_a_mark_too() {
        let image = |marked: bool| {
            let mut block = serde_json::json!({"type": "image", "source": {"type": "base64",
                "media_type": "image/png", "data": "iVBORw0KGgo="}});
            if marked {
                block["cache_control"] = serde_json::json!({"type": "ephemeral"});
            }
            let body = serde_json::json!({"model": "m", "max_tokens": 10,
                "messages": [{"role": "user", "content": [block]}]});
            read(body).remove(0)
        };
        assert_ne!(image(true), image(false));
        assert_eq!(unmarked(&image(true)), unmarked(&image(false)));
        let in_result = |marked: bool| {
            let mut part = serde_json::json!({"type": "image", "source": {"type": "base64",
                "media_type": "image/png", "data": "iVBORw0KGgo="}});
            if marked {
                part["cache_control"] = serde_json::json!({"type": "ephemeral"});
            }
            let body = serde_json::json!({"model": "m", "max_tokens": 10, "messages": [
                {"role": "user", "content": "look"},
                {"role": "assistant", "content": [{"type": "tool_use", "id": "t1",
                    "name": "Screenshot", "input": {}}]},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1",
                    "content": [part]}]}]});
            read(body).remove(2)
        };
        assert_ne!(in_result(true), in_result(false));
        assert_eq!(unmarked(&in_result(true)), unmarked(&in_result(false)));
    }
}
