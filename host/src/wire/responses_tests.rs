//! Tests of the Responses API reader and writer: the items Codex sends, their grouping into
//! the model and back, and errors with their paths.

use serde_json::{json, Value};

use super::*;
use crate::plugin_api::sdk::{compactable_range, pinned, summary_message, units, UnitKind};
use crate::plugin_api::{Role, SummaryStatus};

const R: WireFormat = WireFormat::Responses;

fn round_trip(value: &Value) -> Conversation {
    round_trip_text(&value.to_string())
}

fn round_trip_text(text: &str) -> Conversation {
    let (conversation, read_as) = parse_str(text, Some(R)).unwrap();
    assert_eq!(read_as, R);
    assert_eq!(to_string(&conversation, R), text);
    let (detected, read_as) = parse_str(text, None).unwrap();
    assert_eq!(read_as, R, "detected");
    assert_eq!(detected, conversation, "detection changed the reading");
    conversation
}

fn err(value: &Value) -> String {
    match parse_str(&value.to_string(), Some(R)) {
        Ok(_) => panic!("accepted: {value}"),
        Err(e) => e.to_string(),
    }
}

fn reasoning(id: &str) -> Value {
    json!({"type": "reasoning", "id": id, "summary": [], "content": null, "encrypted_content": format!("gAAAA{id}==")})
}

fn call(id: &str, command: &str) -> Value {
    json!({"type": "function_call", "name": "shell", "arguments": json!({"command": ["bash", "-lc", command]}).to_string(), "call_id": id})
}

fn output(id: &str, text: &str) -> Value {
    json!({"type": "function_call_output", "call_id": id, "output": text})
}

/// A request shaped as Codex 0.169 sends it (`store: false`, encrypted reasoning).
fn codex_request() -> Value {
    json!({
        "model": "gpt-5.1-codex",
        "instructions": "You are Codex, a coding agent.",
        "input": [
            {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "<permissions>workspace-write</permissions>"}]},
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "<environment_context>cwd=/repo</environment_context>"}]},
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Fix the failing test."}]},
            reasoning("rs_1"),
            call("call_1", "cargo test"),
            output("call_1", "1 failed"),
            reasoning("rs_2"),
            {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Looking at the test.", "annotations": []}], "phase": "commentary"},
            reasoning("rs_3"),
            call("call_2", "cat src/lib.rs"),
            reasoning("rs_4"),
            call("call_3", "cat tests/it.rs"),
            output("call_2", "fn main() {}"),
            output("call_3", "#[test] fn it() {}"),
            {"type": "custom_tool_call", "call_id": "call_4", "name": "apply_patch", "input": "*** Begin Patch\n*** End Patch"},
            {"type": "custom_tool_call_output", "call_id": "call_4", "output": "Success"}
        ],
        "tools": [{"type": "function", "name": "shell", "parameters": {"type": "object"}}],
        "tool_choice": "auto",
        "parallel_tool_calls": false,
        "reasoning": {"effort": "medium", "summary": "auto"},
        "store": false,
        "stream": true,
        "include": ["reasoning.encrypted_content"],
        "prompt_cache_key": "0199-session"
    })
}

#[test]
fn a_codex_request_round_trips_and_groups_into_units() {
    let c = round_trip(&codex_request());
    let m = &c.messages;
    let roles: Vec<Role> = m.iter().map(|m| m.role).collect();
    assert_eq!(
        roles,
        [
            Role::System,    // instructions
            Role::System,    // developer
            Role::User,      // environment context
            Role::User,      // the task
            Role::Assistant, // rs_1 + call_1
            Role::Tool,
            Role::Assistant, // rs_2, the message, rs_3, call_2, rs_4, call_3
            Role::Tool,
            Role::Tool,
            Role::Assistant, // the custom call
            Role::Tool,
        ]
    );
    assert_eq!(m[0].joined_text(), "You are Codex, a coding agent.");
    assert!(
        matches!(&m[4].content[..], [ContentBlock::Opaque { json }, ContentBlock::ToolUse { id, .. }]
        if json.contains("rs_1") && id.as_str() == "call_1")
    );
    // Each reasoning item stands before what it preceded: the message item, or its call.
    let reasoning_before = |at: usize, id: &str| matches!(&m[6].content[at], ContentBlock::Opaque { json } if json.contains(id));
    assert!(
        reasoning_before(0, "rs_2") && reasoning_before(2, "rs_3") && reasoning_before(4, "rs_4")
    );
    assert_eq!(m[6].joined_text(), "Looking at the test.");
    let calls: Vec<&str> = m[6].tool_use_ids().collect();
    assert_eq!(calls, ["call_2", "call_3"]);
    assert_eq!(m[6].content.len(), 6);
    assert!(
        matches!(&m[9].content[0], ContentBlock::ToolUse { input_json, .. } if input_json.starts_with("*** Begin"))
    );
    let kinds: Vec<(std::ops::Range<usize>, UnitKind)> =
        units(m).into_iter().map(|u| (u.range, u.kind)).collect();
    assert_eq!(
        kinds,
        vec![
            (0..1, UnitKind::System),
            (1..2, UnitKind::System),
            (2..3, UnitKind::Message),
            (3..4, UnitKind::Message),
            (4..6, UnitKind::ToolExchange),
            (6..9, UnitKind::ToolExchange),
            (9..11, UnitKind::ToolExchange),
        ]
    );
    check_tool_pairing(m, R).unwrap();
    // The same conversation written in the other formats reads back with the same exchanges.
    for other in [WireFormat::OpenAi, WireFormat::Anthropic] {
        let (back, _) = parse_value(to_value(&c, other), Some(other)).unwrap();
        let ids = |c: &Conversation| {
            c.messages
                .iter()
                .flat_map(|m| m.tool_result_ids().map(str::to_string).collect::<Vec<_>>())
                .collect::<Vec<_>>()
        };
        assert_eq!(ids(&back), ids(&c), "{other}");
    }
}

/// An assistant turn that says something and calls tools is one message in Chat Completions;
/// written as Responses items (a message item, then the calls) it reads back as that one
/// message, so a session is the same conversation in both formats.
#[test]
fn an_assistant_message_item_and_the_calls_after_it_are_one_message() {
    let chat = json!({"messages": [
        {"role": "system", "content": "s"},
        {"role": "user", "content": "Fix the failing test."},
        {"role": "assistant", "content": "Running the tests first.", "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "shell", "arguments": "{\"cmd\":\"cargo test\"}"}},
            {"id": "c2", "type": "function", "function": {"name": "shell", "arguments": "{\"cmd\":\"ls\"}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "1 failed"},
        {"role": "tool", "tool_call_id": "c2", "content": "src tests"},
        {"role": "assistant", "content": "Done."}
    ]});
    let (from_chat, _) = parse_value(chat, Some(WireFormat::OpenAi)).unwrap();
    let written = to_string(&from_chat, R);
    let c = round_trip_text(&written);
    let shape = |c: &Conversation| {
        c.messages
            .iter()
            .map(|m| {
                let calls: Vec<String> = m.tool_use_ids().map(str::to_string).collect();
                (m.role, m.joined_text(), calls)
            })
            .collect::<Vec<_>>()
    };
    assert_eq!(shape(&c), shape(&from_chat));
    assert_eq!(c.messages[2].content.len(), 3);
    // No marker is needed for it: the default writing is the items it came as.
    assert!(!c.messages[2].extra_json.contains("tamp:tail"));
    let kinds: Vec<UnitKind> = units(&c.messages).into_iter().map(|u| u.kind).collect();
    let chat_kinds: Vec<UnitKind> = units(&from_chat.messages)
        .into_iter()
        .map(|u| u.kind)
        .collect();
    assert_eq!(kinds, chat_kinds);

    // Reasoning among the calls, or a message item with no parts, is marked, and comes back
    // as it was; the assistant message item of a turn without calls stays a message of its own.
    for request in [
        json!({"input": [{"role": "user", "content": "go"},
            {"type": "message", "role": "assistant", "content": []}, call("c1", "ls"), output("c1", "a")]}),
        json!({"input": [{"role": "user", "content": "go"}, reasoning("rs_1"),
            {"type": "message", "role": "assistant", "content": "say"}, reasoning("rs_2"), call("c1", "ls"),
            reasoning("rs_3"), call("c2", "pwd"), reasoning("rs_4")]}),
        json!({"input": [{"role": "user", "content": "go"},
            {"type": "message", "role": "assistant", "content": "say"}, reasoning("rs_2"),
            {"type": "message", "role": "assistant", "content": "more"}, call("c1", "ls"), output("c1", "a")]}),
    ] {
        let c = round_trip(&request);
        let calls = c
            .messages
            .iter()
            .filter(|m| m.tool_use_ids().next().is_some());
        assert_eq!(calls.count(), 1, "{request}");
    }
}

#[test]
fn summarizing_a_span_takes_its_reasoning_items_and_a_summary_reads_back() {
    let c = round_trip(&codex_request());
    let mut messages = c.messages[..4].to_vec();
    messages.push(summary_message(
        "Ran the tests; one failed.",
        "pg_1",
        "test",
        SummaryStatus::Final,
    ));
    messages.extend_from_slice(&c.messages[6..]);
    let compacted = c.with_messages(messages);
    let written = to_value(&compacted, R);
    let input = written["input"].as_array().unwrap();
    // rs_1, call_1 and its output are gone; the summary is a user message item.
    assert!(!written.to_string().contains("rs_1"));
    assert_eq!(input[3]["type"], "message");
    assert_eq!(input[3]["role"], "user");
    let text = input[3]["content"][0]["text"].as_str().unwrap();
    assert!(text.starts_with("<tamp-summary page=\"pg_1\""), "{text}");
    assert_eq!(input[3]["content"][0]["type"], "input_text");
    // rs_2 still precedes the assistant message it went with.
    assert_eq!(input[4]["id"], "rs_2");
    assert_eq!(input[5]["role"], "assistant");
    let (back, _) = parse_value(written, Some(R)).unwrap();
    assert!(back.messages[4].is_summary());
    assert_eq!(back.messages[4].joined_text(), "Ran the tests; one failed.");
}

#[test]
fn input_strings_messages_without_type_and_other_shapes_round_trip() {
    for request in [
        json!({"model": "m", "input": "hello"}),
        json!({"instructions": "be brief", "input": "hello"}),
        json!({"input": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]}),
        json!({"input": [{"type": "message", "role": "user", "content": [
            {"type": "input_text", "text": "look"},
            {"type": "input_image", "image_url": "data:image/png;base64,AA==", "detail": "auto"}]}]}),
        json!({"input": [{"type": "message", "role": "assistant", "id": "msg_1", "status": "completed",
            "content": [{"type": "output_text", "text": "a", "annotations": [], "logprobs": []}, {"type": "refusal", "refusal": "no"}]}]}),
        // A system message with no instructions before it stays in `input`.
        json!({"input": [{"type": "message", "role": "system", "content": [{"type": "input_text", "text": "s"}]},
            {"type": "message", "role": "user", "content": [{"type": "output_text", "text": "odd but sent"}]}]}),
        json!({"input": [call("c1", "ls"), {"type": "function_call_output", "call_id": "c1",
            "output": [{"type": "input_text", "text": "a"}, {"type": "input_image", "image_url": "x"}]}]}),
        json!({"input": [{"type": "function_call", "call_id": "c1", "name": "f", "arguments": {"a": 1}, "id": "fc_1", "status": "completed"},
            {"type": "function_call_output", "call_id": "c1", "output": "", "id": "fco_1"}]}),
        // A trailing call may wait for its output; trailing reasoning goes with it.
        json!({"input": [{"role": "user", "content": "go"}, reasoning("rs_1"), call("c1", "ls"), reasoning("rs_2")]}),
        json!({"input": [{"role": "user", "content": "go"}, reasoning("rs_1")]}),
        json!({"input": []}),
        json!({"input": "x", "instructions": null, "previous_response_id": "resp_1"}),
    ] {
        round_trip(&request);
    }
    // A conversation from elsewhere: its system prompt becomes `instructions`.
    let c = Conversation::new(vec![
        Message::text(Role::System, "s"),
        Message::text(Role::User, "u"),
        Message::new(
            Role::Assistant,
            vec![
                ContentBlock::text("calling"),
                ContentBlock::tool_use("t1", "f", "{}"),
            ],
        ),
        Message::new(
            Role::User,
            vec![
                ContentBlock::tool_result("t1", "r", false),
                ContentBlock::text("and a note"),
            ],
        ),
    ]);
    assert_eq!(
        to_value(&c, R),
        json!({"instructions": "s", "input": [
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "u"}]},
            {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "calling"}]},
            {"type": "function_call", "call_id": "t1", "name": "f", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "t1", "output": "r"},
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "and a note"}]}
        ]})
    );
    let (back, _) = parse_value(to_value(&c, R), Some(R)).unwrap();
    check_tool_pairing(&back.messages, R).unwrap();
}

#[test]
fn compaction_items_are_boundaries_and_unknown_items_opaque_units() {
    let request = json!({"instructions": "i", "input": [
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "kept by the server"}]},
        {"type": "compaction", "id": "cmp_1", "encrypted_content": "ZW5j"},
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "go on"}]},
        {"type": "web_search_call", "id": "ws_1", "status": "completed", "action": {"type": "search", "query": "q"}},
        {"type": "hologram_call", "id": "h_1", "payload": "BIG"},
        {"id": "msg_7"},
        {"type": "message", "role": "critic", "content": "nope"},
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "a"}, {"type": "input_video", "video": "v"}]},
        {"type": "message", "role": "assistant", "content": "b"},
        {"type": "message", "role": "user", "content": "c"}
    ]});
    // A number serde_json's Value cannot hold, in an item tamp does not know.
    let text = request
        .to_string()
        .replace(r#""payload":"BIG""#, r#""payload":12345678901234567890123"#);
    let c = round_trip_text(&text);
    let m = &c.messages;
    assert!(pinned::is_boundary(&m[2]) && pinned::is_pinned(&m[2]));
    assert_eq!(pinned::boundary_end(m, &units(m)), 3);
    let names: Vec<String> = m
        .iter()
        .flat_map(pinned::opaque)
        .map(|o| o.entry())
        .collect();
    assert_eq!(
        names,
        [
            "item:web_search_call",
            "item:hologram_call",
            "item:item_reference",
            "role:critic",
            "block:input_video"
        ]
    );
    // After the boundary; the pinned units after it are stepped over.
    assert_eq!(compactable_range(m, 1).start, 3);
    assert_eq!(
        write_messages(&m[5..6], R).compact(),
        r#"[{"type":"hologram_call","id":"h_1","payload":12345678901234567890123}]"#
    );
}

#[test]
fn a_compaction_item_of_tamps_reads_as_the_items_it_stands_for() {
    // What `proxy::server_compaction` answers: a summary with its page, and a kept call.
    let summary = summary_message(
        "Ran the tests; one failed.",
        "pg_1",
        "test",
        SummaryStatus::Final,
    );
    let stands_for = to_value(&Conversation::new(vec![summary]), R)["input"]
        .as_array()
        .unwrap()
        .iter()
        .cloned()
        .chain([
            reasoning("rs_9"),
            call("call_9", "ls"),
            output("call_9", "src"),
        ])
        .collect::<Vec<_>>();
    let content = format!("{OWN_COMPACTION}{}", Value::Array(stands_for.clone()));
    let request = json!({"input": [
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Fix it."}]},
        {"type": "compaction", "id": "cmp_tamp_1", "encrypted_content": content},
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "go on"}]}
    ]});
    let text = request.to_string();
    assert!(carries_own_compaction(&text));
    let (c, _) = parse_str(&text, Some(R)).unwrap();
    let m = &c.messages;
    assert_eq!(m.len(), 5, "{m:#?}");
    assert!(m[1].is_summary() && m[1].summary_info().unwrap().page_ref == "pg_1");
    assert!(!m.iter().any(pinned::is_boundary));
    // Written back, the items stand where the compaction item stood: no upstream sees it.
    let written = to_value(&c, R);
    let input = written["input"].as_array().unwrap();
    assert_eq!(input[1..5], stands_for[..]);
    assert_eq!(input[5]["content"][0]["text"], "go on");
    assert!(!written.to_string().contains("compaction"));

    // Anyone else's compaction item stays a boundary; a broken one of tamp's is refused.
    assert!(!carries_own_compaction(&codex_request().to_string()));
    let broken = json!({"input": [{"type": "compaction", "id": "c", "encrypted_content": format!("{OWN_COMPACTION}[{{")}]});
    assert!(
        err(&broken).starts_with("input[0].encrypted_content: "),
        "{}",
        err(&broken)
    );
}

#[test]
fn bad_requests_are_refused_with_their_paths() {
    let cases = [
        (
            json!({"input": 5}),
            "input: expected a string or an array of items, found a number",
        ),
        (
            json!({"model": "m"}),
            "missing \"input\"; tamp reads a request body: {\"messages\": [...]} (Anthropic Messages or OpenAI Chat Completions) or {\"input\": [...]} (OpenAI Responses)",
        ),
        (
            json!({"instructions": 1, "input": []}),
            "instructions: expected a string, found a number",
        ),
        (
            json!({"input": [1]}),
            "input[0]: expected an object, found a number",
        ),
        (
            json!({"input": [{"x": 1}]}),
            "input[0]: item without \"type\"",
        ),
        (
            json!({"input": [{"type": "message", "content": "x"}]}),
            "input[0]: message without \"role\"",
        ),
        (
            json!({"input": [{"role": "user"}]}),
            "input[0]: message without \"content\"",
        ),
        (
            json!({"input": [{"role": "user", "content": 3}]}),
            "input[0].content: expected a string or an array of content parts, found a number",
        ),
        (
            json!({"input": [{"role": "user", "content": [{"type": "input_text"}]}]}),
            "input[0].content[0]: input_text without \"text\"",
        ),
        (
            json!({"input": [{"type": "function_call", "name": "f", "arguments": "{}"}]}),
            "input[0]: function_call without \"call_id\"",
        ),
        (
            json!({"input": [{"type": "function_call_output", "output": "x"}]}),
            "input[0]: function_call_output without \"call_id\"",
        ),
        (
            json!({"input": [{"role": "user", "content": "u"}, output("zz", "x")]}),
            "input[1]: function_call_output for unknown call_id \"zz\"",
        ),
        (
            json!({"input": [call("c1", "ls"), output("c1", "a"), output("c1", "b")]}),
            "input[2]: duplicate function_call_output for call_id \"c1\"",
        ),
        (
            json!({"input": [call("c1", "ls"), call("c1", "ls"), output("c1", "a")]}),
            "input[1]: duplicate call_id \"c1\"",
        ),
        (
            json!({"instructions": "i", "input": [reasoning("r"), call("c1", "ls"), {"role": "user", "content": "u"}]}),
            "input[1]: function_call \"c1\" has no function_call_output",
        ),
    ];
    for (request, expected) in cases {
        assert_eq!(err(&request), expected, "{request}");
    }
    let twice = r#"{"input":[{"role":"user","content":"a","content":"b"}]}"#;
    assert_eq!(
        parse_str(twice, Some(R)).unwrap_err().to_string(),
        "input[0]: \"content\" appears more than once; a provider may read either value, so \
         tamp will not guess"
    );
}
