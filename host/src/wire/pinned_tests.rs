//! Tests of what the readers carry without interpreting: mid-conversation system messages,
//! opaque units (roles, blocks and items tamp does not know) and providers' compaction
//! boundaries. Each comes back exactly where it stood, and is pinned (`rules::pinned`).

use serde_json::{json, Value};

use super::*;
use crate::plugin_api::sdk::{compactable_range, pinned, units, UnitKind};
use crate::plugin_api::Role;

/// Reads `value` in `format`, writes it back, and checks the text is the same.
fn round_trip(value: &Value, format: WireFormat) -> Conversation {
    let text = value.to_string();
    let (conversation, read_as) = parse_str(&text, Some(format)).unwrap();
    assert_eq!(read_as, format);
    assert_eq!(to_string(&conversation, format), text, "{format}");
    conversation
}

/// A Claude Code 2.1 request: a top-level `system`, the task, then a system message in
/// `messages` right after it, and tool use.
fn claude_code_request() -> Value {
    json!({
        "model": "claude-sonnet-4-5",
        "max_tokens": 32000,
        "system": [{"type": "text", "text": "You are Claude Code.", "cache_control": {"type": "ephemeral"}}],
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "Fix the failing test."}]},
            {"role": "system", "content": "The user works in /repo. Today is 2026-08-01."},
            {"role": "assistant", "content": [
                {"type": "thinking", "thinking": "look first", "signature": "sig"},
                {"type": "tool_use", "id": "toolu_1", "name": "Bash", "input": {"command": "cargo test"}}]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": "1 failed"}]},
            {"role": "assistant", "content": "Found it."}
        ],
        "context_management": {"edits": [{"type": "clear_thinking_20251015"}]},
        "thinking": {"type": "adaptive"},
        "output_config": {"effort": "high"},
        "stream": true
    })
}

#[test]
fn anthropic_system_messages_in_messages_are_read_kept_in_place_and_written_back() {
    let request = claude_code_request();
    let c = round_trip(&request, WireFormat::Anthropic);
    let roles: Vec<Role> = c.messages.iter().map(|m| m.role).collect();
    assert_eq!(
        roles,
        [
            Role::System,
            Role::User,
            Role::System,
            Role::Assistant,
            Role::User,
            Role::Assistant
        ]
    );
    assert_eq!(
        c.messages[2].joined_text(),
        "The user works in /repo. Today is 2026-08-01."
    );
    let kinds: Vec<UnitKind> = units(&c.messages).iter().map(|u| u.kind).collect();
    assert_eq!(kinds[2], UnitKind::System);
    // The range begins after the pinned message that follows the task.
    assert_eq!(compactable_range(&c.messages, 1).start, 3);

    // With no top-level `system`, a leading system message stays in `messages`; after a
    // top-level one too.
    for request in [
        json!({"messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}]}),
        json!({"system": "top", "messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}]}),
    ] {
        round_trip(&request, WireFormat::Anthropic);
    }
    // A conversation from elsewhere: its leading system messages go to `system`, a later one
    // stays a system message where it stands.
    let c = Conversation::new(vec![
        Message::text(Role::System, "s"),
        Message::text(Role::User, "u"),
        Message::text(Role::System, "later"),
    ]);
    assert_eq!(
        to_value(&c, WireFormat::Anthropic),
        json!({"system": "s", "messages": [{"role": "user", "content": "u"}, {"role": "system", "content": "later"}]})
    );
    // System messages one after another (a summary keeps those of its span after it) are
    // written as one: the API takes a system message only right after a user turn.
    let c = Conversation::new(vec![
        Message::text(Role::User, "u"),
        Message::text(Role::System, "first"),
        Message::text(Role::System, "second"),
        Message::text(Role::Assistant, "a"),
    ]);
    assert_eq!(
        to_value(&c, WireFormat::Anthropic),
        json!({"messages": [
            {"role": "user", "content": "u"},
            {"role": "system", "content": [{"type": "text", "text": "first"}, {"type": "text", "text": "second"}]},
            {"role": "assistant", "content": "a"}
        ]})
    );
}

#[test]
fn unknown_roles_are_opaque_units_kept_verbatim_in_both_chat_formats() {
    for format in [WireFormat::Anthropic, WireFormat::OpenAi] {
        let request = json!({"messages": [
            {"role": "user", "content": "task"},
            {"role": "critic", "content": [{"type": "text", "text": "too slow"}], "score": 12345678901234567890u64},
            {"role": "assistant", "content": "ok"}
        ]});
        let c = round_trip(&request, format);
        let unit = &c.messages[1];
        assert_eq!(unit.role, Role::System, "{format}");
        assert!(pinned::is_pinned(unit));
        assert_eq!(
            pinned::opaque(unit),
            vec![pinned::Opaque {
                kind: pinned::OpaqueKind::Role,
                name: "critic".into()
            }]
        );
        // Values serde_json's Value cannot hold come back exactly.
        let text = r#"{"messages":[{"role":"user","content":"t"},{"role":"x","content":"c","note":"\ud83d","n":123456789012345678901234567890,"d":1,"d":2}]}"#;
        let (c, _) = parse_str(text, Some(format)).unwrap();
        assert_eq!(to_string(&c, format), text, "{format}");
        // Pages write it as it came too.
        assert_eq!(
            write_messages(&c.messages[1..], format).compact(),
            r#"[{"role":"x","content":"c","note":"\ud83d","n":123456789012345678901234567890,"d":1,"d":2}]"#
        );
    }
}

#[test]
fn items_carried_into_a_messages_list_are_opaque_units() {
    // A Responses item a conversion wrote into `messages` reads back as what it is.
    let (c, _) = parse_str(
        r#"{"input":[{"type":"web_search_call","id":"ws_1"},{"type":"compaction","encrypted_content":"e"}]}"#,
        None,
    )
    .unwrap();
    for format in [WireFormat::Anthropic, WireFormat::OpenAi] {
        let written = to_string(&c, format);
        assert_eq!(
            written,
            r#"{"messages":[{"type":"web_search_call","id":"ws_1"},{"type":"compaction","encrypted_content":"e"}]}"#
        );
        let (back, _) = parse_str(&written, Some(format)).unwrap();
        assert_eq!(
            pinned::opaque(&back.messages[0])[0].entry(),
            "item:web_search_call"
        );
        assert_eq!(to_string(&back, format), written);
    }
    let bad = r#"{"messages":[{"content":"no role, no type"}]}"#;
    assert_eq!(
        parse_str(bad, Some(WireFormat::Anthropic))
            .unwrap_err()
            .to_string(),
        "messages[0]: message without \"role\""
    );
}

#[test]
fn unknown_blocks_pin_their_message_and_known_ones_do_not() {
    let anthropic = json!({"system": "s", "messages": [
        {"role": "user", "content": [{"type": "text", "text": "task"}]},
        {"role": "assistant", "content": [{"type": "hologram", "data": [1, 2]}, {"type": "text", "text": "see"}]},
        {"role": "user", "content": [{"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AA=="}}]}
    ]});
    let c = round_trip(&anthropic, WireFormat::Anthropic);
    assert_eq!(c.messages[2].role, Role::Assistant);
    assert!(pinned::is_pinned(&c.messages[2]));
    assert_eq!(pinned::opaque(&c.messages[2])[0].entry(), "block:hologram");
    assert!(
        !pinned::is_pinned(&c.messages[3]),
        "an image is known, not pinned"
    );

    let openai = json!({"messages": [
        {"role": "user", "content": "task"},
        {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "video_url", "video_url": {"url": "x"}}]},
        {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "y"}}]}
    ]});
    let c = round_trip(&openai, WireFormat::OpenAi);
    assert_eq!(pinned::opaque(&c.messages[1])[0].entry(), "block:video_url");
    assert!(!pinned::is_pinned(&c.messages[2]));
}

/// The type of every content block or part in `value`'s messages (or `input` items).
fn part_types(value: &Value, list: &str) -> Vec<String> {
    value[list]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|m| m["content"].as_array())
        .flatten()
        .map(|b| b["type"].as_str().unwrap().to_string())
        .collect()
}

/// A block or part type the reader knows but does not interpret (an image, thinking, a server
/// tool's call and result...) stays inside its message as an opaque block without pinning it:
/// only what tamp does not know is kept out of a strategy's reach. Every type a reader lists
/// as known has a sample here, so a type added to a list without one fails this test.
#[test]
fn known_blocks_it_does_not_interpret_leave_their_message_compactable() {
    let anthropic = json!({"system": "s", "messages": [
        {"role": "user", "content": "Look these up."},
        {"role": "assistant", "content": [
            {"type": "thinking", "thinking": "", "signature": "sig"},
            {"type": "redacted_thinking", "data": "opaque"},
            {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {"query": "tamp"}},
            {"type": "web_search_tool_result", "tool_use_id": "srvtoolu_1", "content": [
                {"type": "web_search_result", "url": "https://example.com", "title": "t", "encrypted_content": "e"}]},
            {"type": "server_tool_use", "id": "srvtoolu_2", "name": "web_fetch", "input": {"url": "https://example.com"}},
            {"type": "web_fetch_tool_result", "tool_use_id": "srvtoolu_2", "content": {"type": "web_fetch_result", "url": "https://example.com",
                "content": {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": "page"}}}},
            {"type": "server_tool_use", "id": "srvtoolu_3", "name": "advisor", "input": {}},
            {"type": "advisor_tool_result", "tool_use_id": "srvtoolu_3", "content": {"type": "advisor_result", "text": "advice"}},
            {"type": "server_tool_use", "id": "srvtoolu_4", "name": "code_execution", "input": {"code": "1+1"}},
            {"type": "code_execution_tool_result", "tool_use_id": "srvtoolu_4", "content": {"type": "code_execution_result", "stdout": "2", "stderr": "", "return_code": 0, "content": []}},
            {"type": "server_tool_use", "id": "srvtoolu_5", "name": "bash_code_execution", "input": {"command": "ls"}},
            {"type": "bash_code_execution_tool_result", "tool_use_id": "srvtoolu_5", "content": {"type": "bash_code_execution_result", "stdout": "a", "stderr": "", "return_code": 0, "content": []}},
            {"type": "server_tool_use", "id": "srvtoolu_6", "name": "text_editor_code_execution", "input": {"command": "view", "path": "a"}},
            {"type": "text_editor_code_execution_tool_result", "tool_use_id": "srvtoolu_6", "content": {"type": "text_editor_code_execution_view_result", "content": "x", "file_type": "text"}},
            {"type": "server_tool_use", "id": "srvtoolu_7", "name": "tool_search_tool_regex", "input": {"query": "db"}},
            {"type": "tool_search_tool_result", "tool_use_id": "srvtoolu_7", "content": {"type": "tool_search_tool_search_result", "tool_references": []}},
            {"type": "mcp_tool_use", "id": "mcptoolu_1", "name": "query", "server_name": "db", "input": {}},
            {"type": "mcp_tool_result", "tool_use_id": "mcptoolu_1", "content": [{"type": "text", "text": "rows"}], "is_error": false},
            {"type": "text", "text": "Found them."}]},
        {"role": "user", "content": [
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AA=="}},
            {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": "notes"}},
            {"type": "search_result", "source": "https://example.com", "title": "t", "content": [{"type": "text", "text": "r"}]},
            {"type": "container_upload", "file_id": "file_1"},
            {"type": "text", "text": "And these?"}]},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "Bash", "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "ok"}]},
        {"role": "assistant", "content": "Done."},
        {"role": "user", "content": "Thanks."}
    ]});
    // "Sure." closes the opening turn, so the attachments after it are not the task.
    let chat = json!({"messages": [
        {"role": "user", "content": "Look at these."},
        {"role": "assistant", "content": "Sure."},
        {"role": "user", "content": [
            {"type": "text", "text": "a"},
            {"type": "image_url", "image_url": {"url": "data:image/png;base64,AA=="}},
            {"type": "input_audio", "input_audio": {"data": "AA==", "format": "wav"}},
            {"type": "file", "file": {"file_id": "file_1"}}]},
        {"role": "assistant", "content": [{"type": "refusal", "refusal": "no"}]},
        {"role": "user", "content": "Then this."},
        {"role": "assistant", "content": "Done."},
        {"role": "user", "content": "Thanks."}
    ]});
    let responses = json!({"input": [
        {"role": "user", "content": "Look at these."},
        {"role": "assistant", "content": "Sure."},
        {"type": "message", "role": "user", "content": [
            {"type": "input_text", "text": "a"},
            {"type": "input_image", "image_url": "data:image/png;base64,AA==", "detail": "auto"},
            {"type": "input_file", "file_id": "file_1"},
            {"type": "input_audio", "input_audio": {"data": "AA==", "format": "wav"}}]},
        {"type": "message", "role": "assistant", "content": [
            {"type": "output_text", "text": "b", "annotations": []},
            {"type": "refusal", "refusal": "no"},
            {"type": "reasoning_text", "text": "r"},
            {"type": "summary_text", "text": "s"}]},
        {"role": "user", "content": "Then this."},
        {"role": "assistant", "content": "Done."},
        {"role": "user", "content": "Thanks."}
    ]});
    // Compactable: all but the system prompt, the task and the last two messages.
    for (request, format, list, known, compactable) in [
        (
            &anthropic,
            WireFormat::Anthropic,
            "messages",
            anthropic::KNOWN_BLOCKS,
            2..6,
        ),
        (
            &chat,
            WireFormat::OpenAi,
            "messages",
            openai::KNOWN_PARTS,
            1..5,
        ),
        (
            &responses,
            WireFormat::Responses,
            "input",
            responses::KNOWN_PARTS,
            1..5,
        ),
    ] {
        let sampled = part_types(request, list);
        for ty in known.iter().filter(|ty| **ty != "compaction") {
            assert!(
                sampled.iter().any(|s| s == ty),
                "{format}: no sample of {ty}"
            );
        }
        let c = round_trip(request, format);
        for (k, message) in c.messages.iter().enumerate() {
            assert!(pinned::opaque(message).is_empty(), "{format}: message {k}");
            assert!(
                message.role == Role::System || !pinned::is_pinned(message),
                "{format}: message {k} is pinned"
            );
        }
        assert_eq!(compactable_range(&c.messages, 2), compactable, "{format}");
    }
}

#[test]
fn an_anthropic_compaction_block_is_a_boundary() {
    let request = json!({"system": "s", "messages": [
        {"role": "user", "content": "task"},
        {"role": "assistant", "content": "a1"},
        {"role": "user", "content": "u1"},
        {"role": "assistant", "content": [
            {"type": "compaction", "content": "Summary of the work so far.", "encrypted_content": "e"},
            {"type": "text", "text": "Continuing."}]},
        {"role": "user", "content": "u2"},
        {"role": "assistant", "content": "a2"},
        {"role": "user", "content": "u3"}
    ]});
    let c = round_trip(&request, WireFormat::Anthropic);
    assert!(pinned::is_boundary(&c.messages[4]));
    assert!(
        !pinned::is_pinned(&c.messages[4]),
        "a boundary is no opaque unit"
    );
    assert_eq!(pinned::boundary_end(&c.messages, &units(&c.messages)), 5);
    assert_eq!(compactable_range(&c.messages, 1), 5..7);
}
