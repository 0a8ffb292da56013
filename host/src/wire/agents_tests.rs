//! Every request Claude Code 2.1.328 and Codex 0.169.0 sent in the captured sessions
//! (`tests/fixtures/agents/captures/`) reads and writes back to the same text, and reads as
//! what it is: mid-conversation system messages pinned, reasoning items with their calls,
//! Codex's server-side compaction as a boundary, its `compaction_trigger` an opaque unit.

use std::path::PathBuf;

use serde::Deserialize;
use serde_json::value::RawValue;

use super::*;
use crate::plugin_api::sdk::{compactable_range, pinned, units, UnitKind};
use crate::plugin_api::Role;

#[derive(Deserialize)]
struct Session {
    requests: Vec<Request>,
}

#[derive(Deserialize)]
struct Request {
    method: String,
    path: String,
    body: Option<Box<RawValue>>,
}

/// The POST bodies of a captured session, in order, with the format their path names.
fn bodies(file: &str) -> Vec<(WireFormat, String)> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures/agents/captures")
        .join(file);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path:?}: {e}"));
    let session: Session = serde_json::from_str(&text).unwrap();
    session
        .requests
        .into_iter()
        .filter(|r| r.method == "POST")
        .filter_map(|r| {
            let format = match r.path.split('?').next() {
                Some("/v1/messages") => WireFormat::Anthropic,
                Some("/v1/responses") => WireFormat::Responses,
                _ => return None,
            };
            Some((format, r.body?.get().to_string()))
        })
        .collect()
}

/// Reads `body` (in the format its path says, and detected), writes it back and checks the
/// text is the same (the capture's own whitespace aside).
fn round_trip(format: WireFormat, body: &str, what: &str) -> Conversation {
    let (conversation, _) = parse_str(body, Some(format)).unwrap_or_else(|e| panic!("{what}: {e}"));
    let (detected, as_format) = parse_str(body, None).unwrap();
    assert_eq!(as_format, format, "{what}: detected");
    assert_eq!(detected, conversation, "{what}");
    let sent = json::strip_whitespace(body);
    let written = to_string(&conversation, format);
    if written != sent {
        let at = written
            .bytes()
            .zip(sent.bytes())
            .take_while(|(a, b)| a == b)
            .count();
        panic!(
            "{what}: written back differently at byte {at}:\n sent    {:?}\n written {:?}",
            &sent[at.saturating_sub(80)..(at + 80).min(sent.len())],
            &written[at.saturating_sub(80)..(at + 80).min(written.len())]
        );
    }
    conversation
}

#[test]
fn every_captured_request_reads_and_writes_back_to_the_same_text() {
    for file in [
        "claude-code-2.1.328.tool-task.json",
        "codex-0.169.0.custom-provider.tool-task.json",
        "codex-0.169.0.custom-provider.local-compaction.json",
        "codex-0.169.0.remote-compaction.json",
        "codex-0.169.0.builtin-openai-provider.json",
    ] {
        let bodies = bodies(file);
        assert!(bodies.len() >= 10, "{file}: {} requests", bodies.len());
        for (i, (format, body)) in bodies.iter().enumerate() {
            let c = round_trip(*format, body, &format!("{file} request {i}"));
            assert!(
                c.messages
                    .iter()
                    .all(|m| pinned::opaque(m).is_empty()
                        || m.extra_json.contains("compaction_trigger")),
                "{file} request {i}: only compaction_trigger is unknown"
            );
        }
    }
}

#[test]
fn claude_codes_system_messages_are_pinned_where_they_stand() {
    let bodies = bodies("claude-code-2.1.328.tool-task.json");
    let (format, last) = bodies.last().unwrap();
    let c = round_trip(*format, last, "the last request");
    let m = &c.messages;
    // The top-level system, the task, and Claude Code's system message right after it.
    assert_eq!(
        (m[0].role, m[1].role, m[2].role),
        (Role::System, Role::User, Role::System)
    );
    let mid: Vec<usize> = (1..m.len())
        .filter(|&i| m[i].role == Role::System)
        .collect();
    assert!(mid.len() >= 2, "the reminders after tool results: {mid:?}");
    for &i in &mid {
        // Each follows a user message (the task or tool results).
        assert_eq!(m[i - 1].role, Role::User, "message {i}");
    }
    let all = units(m);
    for &i in &mid {
        let unit = all.iter().find(|u| u.range.contains(&i)).unwrap();
        assert_eq!(unit.kind, UnitKind::System, "message {i}");
    }
    // The range begins after the system message that follows the task.
    assert_eq!(compactable_range(m, 4).start, 3);
    check_tool_pairing(m, *format).unwrap();
}

#[test]
fn codex_reasoning_travels_with_its_calls() {
    let bodies = bodies("codex-0.169.0.custom-provider.tool-task.json");
    let (format, last) = bodies.last().unwrap();
    let c = round_trip(*format, last, "the last request");
    let m = &c.messages;
    // No instructions: Codex's base prompt is its first developer message.
    assert_eq!((m[0].role, m[1].role), (Role::System, Role::System));
    let exchanges: Vec<_> = units(m)
        .into_iter()
        .filter(|u| u.kind == UnitKind::ToolExchange)
        .collect();
    assert_eq!(exchanges.len(), 12, "one per tool turn");
    for u in &exchanges {
        let calls = &m[u.range.start];
        assert!(
            matches!(&calls.content[0], ContentBlock::Opaque { json } if json.contains("\"reasoning\"") && json.contains("encrypted_content")),
            "the reasoning item leads its call: {:?}",
            calls.content[0]
        );
        assert_eq!(m[u.range.end - 1].role, Role::Tool);
    }
}

#[test]
fn codex_remote_compaction_is_a_boundary_and_its_trigger_opaque() {
    let bodies = bodies("codex-0.169.0.remote-compaction.json");
    let read: Vec<Conversation> = bodies
        .iter()
        .enumerate()
        .map(|(i, (f, b))| round_trip(*f, b, &format!("request {i}")))
        .collect();
    let trigger = read
        .iter()
        .position(|c| {
            c.messages.last().is_some_and(|m| {
                pinned::opaque(m)
                    .iter()
                    .any(|o| o.name == "compaction_trigger")
            })
        })
        .expect("a request ends with compaction_trigger");
    let after = &read[trigger + 1].messages;
    let boundary = after
        .iter()
        .position(pinned::is_boundary)
        .expect("the next request carries the compaction item");
    assert!(pinned::is_pinned(&after[boundary]));
    let range = compactable_range(after, 1);
    assert!(range.start > boundary, "{range:?} after {boundary}");
}
