//! Tests of the wire readers and writers: the real-conversation corpus in both formats,
//! validation errors with their paths, and the shapes that must survive a round trip.

use std::path::PathBuf;

use serde_json::{json, Value};

use super::*;
use crate::plugin_api::sdk::summary_message;
use crate::plugin_api::{Role, SummaryInfo, SummaryStatus, ToolResultPart};

const CORPUS: [&str; 10] = [
    "msa_deepseek_astroid-1333_rerun",
    "msa_deepseek_django-13964",
    "msa_deepseek_sqlfluff-1733",
    "msa_deepseek_pvlib-1606",
    "msa_deepseek_django-14752",
    "openhands_llama4_ponyc-4588",
    "openhands_llama4_ponyc-4593",
    "taubench_gpt4o_airline_task23_trial3",
    "taubench_gpt4o_airline_task33_trial3",
    "taubench_gpt4o_airline_task2_trial2",
];

fn corpus_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/corpus")
}

fn corpus_text(format: WireFormat, name: &str) -> String {
    let path = corpus_dir()
        .join(format.as_str())
        .join(format!("{name}.json"));
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn corpus_meta(name: &str) -> Value {
    let path = corpus_dir().join("meta").join(format!("{name}.json"));
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn tool_uses(conversation: &Conversation) -> Vec<(String, String, String)> {
    conversation
        .messages
        .iter()
        .flat_map(|m| m.content.iter())
        .filter_map(|b| match b {
            ContentBlock::ToolUse {
                id,
                name,
                input_json,
                ..
            } => Some((id.to_string(), name.to_string(), input_json.to_string())),
            _ => None,
        })
        .collect()
}

fn tool_results(conversation: &Conversation) -> Vec<(String, String)> {
    conversation
        .messages
        .iter()
        .flat_map(|m| m.content.iter())
        .filter_map(|b| match b {
            ContentBlock::ToolResult {
                tool_use_id,
                content,
                ..
            } => {
                let text: String = content
                    .iter()
                    .map(|p| match p {
                        ToolResultPart::Text { text } => text.as_str(),
                        ToolResultPart::Opaque { .. } => "<opaque>",
                    })
                    .collect();
                Some((tool_use_id.to_string(), text))
            }
            _ => None,
        })
        .collect()
}

/// Compact text of a value: equal texts mean equal values with the same key order.
fn compact(value: &Value) -> String {
    serde_json::to_string(value).unwrap()
}

/// Parses `text` in `format`, writes it back, and checks the JSON (and its key order) is
/// unchanged.
fn assert_round_trip(text: &str, format: WireFormat) -> Conversation {
    let (conversation, read_as) = parse_str(text, Some(format)).unwrap();
    assert_eq!(read_as, format);
    let original: Value = serde_json::from_str(text).unwrap();
    let written = to_value(&conversation, format);
    assert_eq!(written, original);
    assert_eq!(compact(&written), compact(&original));
    conversation
}

fn err(text: &str, format: Option<WireFormat>) -> String {
    match parse_str(text, format) {
        Ok(_) => panic!("accepted: {text}"),
        Err(e) => e.to_string(),
    }
}

// ---------------------------------------------------------------------------------------------
// The corpus

#[test]
fn corpus_parses_in_every_format_and_round_trips_exactly() {
    for name in CORPUS {
        let meta = corpus_meta(name);
        let counts = &meta["counts"];
        for format in WireFormat::ALL {
            let text = corpus_text(format, name);
            let (detected, as_format) = parse_str(&text, None).unwrap();
            assert_eq!(as_format, format, "{name}: detected format");
            let conversation = assert_round_trip(&text, format);
            assert_eq!(
                detected, conversation,
                "{name}: detection changed the reading"
            );

            let messages = &conversation.messages;
            assert_eq!(messages[0].role, Role::System, "{name} {format}");
            let expected_len = match format {
                WireFormat::Anthropic => counts["anthropic_messages"].as_u64().unwrap() + 1,
                // The same conversation: an assistant turn with text and calls is one message
                // in both (in Responses, a message item and the calls after it).
                WireFormat::OpenAi | WireFormat::Responses => {
                    counts["openai_messages"].as_u64().unwrap()
                }
            };
            assert_eq!(messages.len() as u64, expected_len, "{name} {format}");
            assert_eq!(
                tool_uses(&conversation).len() as u64,
                counts["tool_calls"].as_u64().unwrap(),
                "{name} {format}"
            );
            assert!(messages.iter().all(|m| !m.is_summary()));
            check_tool_pairing(messages, format).unwrap();

            // parse_value reads the same conversation.
            let value: Value = serde_json::from_str(&text).unwrap();
            assert_eq!(detect(&value).unwrap(), format);
            let (from_value, _) = parse_value(value.clone(), None).unwrap();
            assert_eq!(
                to_value(&from_value, format),
                value,
                "{name} {format}: parse_value"
            );
            // From a value there is no original text: a tool input is its compact JSON.
            for ((_, _, from_text), (_, _, from_value)) in
                tool_uses(&conversation).iter().zip(&tool_uses(&from_value))
            {
                match format {
                    WireFormat::OpenAi | WireFormat::Responses => {
                        assert_eq!(from_text, from_value)
                    }
                    WireFormat::Anthropic => assert_eq!(
                        from_value,
                        &serde_json::from_str::<Value>(from_text)
                            .unwrap()
                            .to_string()
                    ),
                }
            }
        }
    }
}

#[test]
fn corpus_formats_agree_on_tool_calls_and_results() {
    for name in CORPUS {
        let (a, _) = parse_str(&corpus_text(WireFormat::Anthropic, name), None).unwrap();
        let (o, _) = parse_str(&corpus_text(WireFormat::OpenAi, name), None).unwrap();
        let (a_uses, o_uses) = (tool_uses(&a), tool_uses(&o));
        assert_eq!(a_uses.len(), o_uses.len());
        for ((a_id, a_name, a_input), (o_id, o_name, o_args)) in a_uses.iter().zip(&o_uses) {
            assert_eq!((a_id, a_name), (o_id, o_name), "{name}");
            let a_input: Value = serde_json::from_str(a_input).unwrap();
            let o_args: Value = serde_json::from_str(o_args).unwrap();
            assert_eq!(a_input, o_args, "{name} {a_id}");
        }
        assert_eq!(tool_results(&a), tool_results(&o), "{name}");
        assert_eq!(a.messages[0], o.messages[0], "{name}: system prompt");
        // The Responses form, written by an independent converter, reads as the same
        // exchanges and texts.
        let (r, _) = parse_str(&corpus_text(WireFormat::Responses, name), None).unwrap();
        assert_eq!(tool_uses(&r), o_uses, "{name}");
        assert_eq!(tool_results(&r), tool_results(&o), "{name}");
        assert_eq!(r.messages[0], o.messages[0], "{name}: system prompt");
        let texts = |c: &Conversation| -> Vec<String> {
            c.messages
                .iter()
                .map(|m| m.joined_text())
                .filter(|t| !t.is_empty())
                .collect()
        };
        assert_eq!(texts(&r), texts(&o), "{name}");
    }
}

#[test]
fn corpus_tool_inputs_are_canonical_and_arguments_verbatim() {
    let name = "taubench_gpt4o_airline_task2_trial2";
    let anthropic = corpus_text(WireFormat::Anthropic, name);
    let (a, _) = parse_str(&anthropic, None).unwrap();
    // Anthropic inputs are compact JSON whatever the source's indentation, so one message
    // has one identity however a client formats it.
    let reindented =
        serde_json::to_string(&serde_json::from_str::<Value>(&anthropic).unwrap()).unwrap();
    let (b, _) = parse_str(&reindented, None).unwrap();
    assert_eq!(a, b);
    for (_, _, input) in tool_uses(&a) {
        let value: Value = serde_json::from_str(&input).unwrap();
        assert_eq!(input, value.to_string(), "input not canonical: {input}");
    }
    let openai: Value = serde_json::from_str(&corpus_text(WireFormat::OpenAi, name)).unwrap();
    let arguments: Vec<&str> = openai["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|m| m.get("tool_calls"))
        .flat_map(|calls| calls.as_array().unwrap())
        .map(|c| c["function"]["arguments"].as_str().unwrap())
        .collect();
    let (o, _) = parse_value(openai.clone(), None).unwrap();
    let inputs: Vec<String> = tool_uses(&o).into_iter().map(|u| u.2).collect();
    assert_eq!(inputs, arguments);
}

#[test]
fn corpus_pairing_holds_in_the_other_format_too() {
    for name in CORPUS {
        let pairs = WireFormat::ALL
            .into_iter()
            .flat_map(|from| WireFormat::ALL.into_iter().map(move |to| (from, to)))
            .filter(|(from, to)| from != to);
        for (from, to) in pairs {
            let (conversation, _) = parse_str(&corpus_text(from, name), Some(from)).unwrap();
            check_tool_pairing(&conversation.messages, to).unwrap();
            // The other format's writer gives a request its reader accepts, with the same
            // tool exchanges.
            let converted = to_value(&conversation, to);
            let (back, _) = parse_value(converted, Some(to)).unwrap();
            assert_eq!(tool_results(&back), tool_results(&conversation), "{name}");
            assert_eq!(
                tool_uses(&back).iter().map(|u| &u.0).collect::<Vec<_>>(),
                tool_uses(&conversation)
                    .iter()
                    .map(|u| &u.0)
                    .collect::<Vec<_>>()
            );
        }
    }
}

#[test]
fn a_thousand_messages_parse_and_serialize_quickly() {
    let mut messages = vec![json!({"role": "system", "content": "You are an agent."})];
    for i in 0..333 {
        messages.push(
            json!({"role": "user", "content": format!("step {i}: {}", "lorem ipsum ".repeat(40))}),
        );
        messages.push(json!({"role": "assistant", "content": "Running it.", "tool_calls": [
            {"id": format!("call_{i}"), "type": "function",
             "function": {"name": "bash", "arguments": format!("{{\"command\": \"ls -la /tmp/{i}\"}}")}}
        ]}));
        messages.push(json!({"role": "tool", "tool_call_id": format!("call_{i}"),
                             "content": "drwxr-xr-x 2 root root 4096 file\n".repeat(20)}));
    }
    let text = serde_json::to_string(&json!({"model": "gpt-4o", "messages": messages})).unwrap();
    let start = std::time::Instant::now();
    let (conversation, format) = parse_str(&text, None).unwrap();
    let parsed = start.elapsed();
    let out = to_string_pretty(&conversation, format);
    let total = start.elapsed();
    assert_eq!(conversation.messages.len(), 1000);
    assert_eq!(
        serde_json::from_str::<Value>(&out).unwrap(),
        serde_json::from_str::<Value>(&text).unwrap()
    );
    eprintln!(
        "1000 messages, {} KiB: parse {parsed:?}, parse + serialize {total:?}",
        text.len() / 1024
    );
    if !cfg!(debug_assertions) {
        assert!(total.as_millis() < 50, "too slow: {total:?}");
    }
}

// ---------------------------------------------------------------------------------------------
// Formats, errors, detection

#[test]
fn wire_format_names() {
    assert_eq!(
        "anthropic".parse::<WireFormat>().unwrap(),
        WireFormat::Anthropic
    );
    assert_eq!("openai".parse::<WireFormat>().unwrap(), WireFormat::OpenAi);
    assert_eq!(
        "gemini".parse::<WireFormat>().unwrap_err().to_string(),
        "unknown wire format \"gemini\" (expected \"anthropic\", \"openai\" or \"responses\")"
    );
    for format in WireFormat::ALL {
        assert_eq!(format.as_str().parse::<WireFormat>().unwrap(), format);
        assert_eq!(
            serde_json::to_value(format).unwrap(),
            json!(format.as_str())
        );
    }
    assert_eq!(WireFormat::OpenAi.to_string(), "openai");
    assert_eq!(WireFormat::Anthropic.to_string(), "anthropic");
    assert_eq!(
        serde_json::to_value(WireFormat::OpenAi).unwrap(),
        json!("openai")
    );
    assert_eq!(
        serde_json::from_value::<WireFormat>(json!("anthropic")).unwrap(),
        WireFormat::Anthropic
    );
}

#[test]
fn wire_error_display() {
    assert_eq!(
        WireError::new("messages[1].content[0]", "boom").to_string(),
        "messages[1].content[0]: boom"
    );
    assert_eq!(WireError::new("", "boom").to_string(), "boom");
    let boxed: Box<dyn std::error::Error> = Box::new(WireError::new("", "x"));
    assert_eq!(boxed.to_string(), "x");
}

#[test]
fn detect_reads_the_signals_of_each_format() {
    let cases = [
        (
            json!({"system": "s", "messages": []}),
            WireFormat::Anthropic,
        ),
        (
            json!({"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": [
                {"type": "tool_use", "id": "t", "name": "n", "input": {}}]}]}),
            WireFormat::Anthropic,
        ),
        (
            json!({"messages": [{"role": "user", "content": [{"type": "image", "source": {}}]}]}),
            WireFormat::Anthropic,
        ),
        (
            json!({"messages": [{"role": "system", "content": "s"}]}),
            WireFormat::OpenAi,
        ),
        // A system role says nothing: the blocks after it tell.
        (
            json!({"messages": [{"role": "system", "content": "s"}, {"role": "user", "content": [
                {"type": "image", "source": {}}]}]}),
            WireFormat::Anthropic,
        ),
        (
            json!({"input": [{"role": "user", "content": "hi"}]}),
            WireFormat::Responses,
        ),
        (
            json!({"messages": [{"role": "developer", "content": "s"}]}),
            WireFormat::OpenAi,
        ),
        (
            json!({"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": null}]}),
            WireFormat::OpenAi,
        ),
        (
            json!({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "u"}}]}]}),
            WireFormat::OpenAi,
        ),
        (
            json!({"messages": [{"role": "user", "content": "plain"}]}),
            WireFormat::OpenAi,
        ),
    ];
    for (value, expected) in cases {
        assert_eq!(detect(&value).unwrap(), expected, "{value}");
        let (_, format) = parse_str(&value.to_string(), None).unwrap();
        assert_eq!(format, expected, "{value}");
    }
    assert!(detect(&json!([1]))
        .unwrap_err()
        .to_string()
        .starts_with("expected a JSON object, found an array (a bare list of messages?"));
    assert!(detect(&json!({"model": "m"}))
        .unwrap_err()
        .to_string()
        .starts_with("missing \"messages\"; tamp reads a request body"));
    assert_eq!(
        detect(&json!({"messages": {}})).unwrap_err().to_string(),
        "messages: expected an array, found an object"
    );
}

#[test]
fn rejects_invalid_json_with_line_and_column() {
    let e = parse_str(
        "{\n  \"messages\": [\n    {\"role\": \"user\",, }\n  ]\n}",
        None,
    )
    .unwrap_err();
    assert_eq!(e.path, "");
    assert!(e.message.contains("line 3 column 21"), "{}", e.message);
    let e = parse_str("{\"messages\": []} trailing", None).unwrap_err();
    assert!(e.message.contains("line 1 column 18"), "{}", e.message);
}

#[test]
fn rejects_bad_shapes_with_their_paths() {
    use WireFormat::{Anthropic as A, OpenAi as O};
    let cases: Vec<(Value, Option<WireFormat>, &str)> = vec![
        (
            json!("text"),
            None,
            "expected a JSON object, found a string; tamp reads a request body: {\"messages\": [...]} (Anthropic Messages or OpenAI Chat Completions) or {\"input\": [...]} (OpenAI Responses)",
        ),
        (
            json!({"model": "m"}),
            None,
            "missing \"messages\"; tamp reads a request body: {\"messages\": [...]} (Anthropic Messages or OpenAI Chat Completions) or {\"input\": [...]} (OpenAI Responses)",
        ),
        (json!({"messages": "m"}), Some(A), "messages: expected an array, found a string"),
        (
            json!({"messages": [{"role": "user", "content": "a"}, "oops"]}),
            Some(O),
            "messages[1]: expected an object, found a string",
        ),
        (
            json!({"messages": [{"role": "user", "content": "a"}, 7]}),
            Some(A),
            "messages[1]: expected an object, found a number",
        ),
        (
            json!({"messages": [{"role": "user", "content": "a"}, {"role": "bot", "content": 5}]}),
            Some(A),
            "messages[1].content: a number, which tamp cannot carry through exactly in a message it does not know",
        ),
        (
            json!({"messages": [{"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "n", "input": {}}]},
                                {"role": "system", "content": [{"type": "tool_result", "tool_use_id": "t", "content": "r"}]}]}),
            Some(A),
            "messages[1].content[0]: tool_result in a system message",
        ),
        (json!({"messages": [{"content": "s"}]}), Some(O), "messages[0]: message without \"role\""),
        (json!({"messages": [{"role": 1, "content": "s"}]}), Some(O), "messages[0].role: expected a string, found a number"),
        (json!({"messages": [{"role": "user"}]}), Some(A), "messages[0]: message without \"content\""),
        (
            json!({"messages": [{"role": "user", "content": 5}]}),
            Some(A),
            "messages[0].content: expected a string or an array of content blocks, found a number",
        ),
        (
            json!({"messages": [{"role": "user", "content": {"text": "x"}}]}),
            Some(O),
            "messages[0].content: expected a string, null or an array of content parts, found an object",
        ),
        (
            json!({"system": 3, "messages": []}),
            None,
            "system: expected a string or an array of text blocks, found a number",
        ),
        (
            json!({"messages": [{"role": "user", "content": [{"text": "x"}]}]}),
            Some(A),
            "messages[0].content[0]: block without \"type\"",
        ),
        (
            json!({"messages": [{"role": "user", "content": ["x"]}]}),
            Some(A),
            "messages[0].content[0]: expected an object, found a string",
        ),
        (
            json!({"messages": [{"role": "user", "content": [{"type": "text"}]}]}),
            Some(A),
            "messages[0].content[0]: text without \"text\"",
        ),
        (
            json!({"messages": [{"role": "user", "content": [{"type": "text", "text": 1}]}]}),
            Some(A),
            "messages[0].content[0].text: expected a string, found a number",
        ),
        (
            json!({"messages": [{"role": "user", "content": "go"}, {"role": "assistant", "content": "ok"},
                                {"role": "assistant", "content": [{"type": "tool_use", "name": "n", "input": {}}]}]}),
            Some(A),
            "messages[2].content[0]: tool_use without \"id\"",
        ),
        (
            json!({"messages": [{"role": "assistant", "content": [{"type": "tool_use", "id": "t", "input": {}}]}]}),
            Some(A),
            "messages[0].content[0]: tool_use without \"name\"",
        ),
        (
            json!({"messages": [{"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "n"}]}]}),
            Some(A),
            "messages[0].content[0]: tool_use without \"input\"",
        ),
        (
            json!({"messages": [{"role": "user", "content": [{"type": "tool_result", "content": "x"}]}]}),
            Some(A),
            "messages[0].content[0]: tool_result without \"tool_use_id\"",
        ),
        (
            json!({"messages": [{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "content": 1}]}]}),
            Some(A),
            "messages[0].content[0].content: expected a string or an array of content blocks, found a number",
        ),
        (
            json!({"messages": [{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "is_error": "yes"}]}]}),
            Some(A),
            "messages[0].content[0].is_error: expected a boolean, found a string",
        ),
        (
            json!({"messages": [{"role": "user", "content": [{"type": "text"}]}]}),
            Some(O),
            "messages[0].content[0]: text without \"text\"",
        ),
        (
            json!({"messages": [{"role": "user", "content": [{"image_url": {}}]}]}),
            Some(O),
            "messages[0].content[0]: part without \"type\"",
        ),
        (
            json!({"messages": [{"role": "assistant", "content": null, "tool_calls": [{"type": "function", "function": {"name": "f", "arguments": "{}"}}]}]}),
            Some(O),
            "messages[0].tool_calls[0]: tool call without \"id\"",
        ),
        (
            json!({"messages": [{"role": "assistant", "content": null, "tool_calls": [{"id": "c", "type": "function", "function": {"arguments": "{}"}}]}]}),
            Some(O),
            "messages[0].tool_calls[0].function: function without \"name\"",
        ),
        (
            json!({"messages": [{"role": "assistant", "content": null, "tool_calls": [{"id": "c", "type": "function", "function": {"name": "f"}}]}]}),
            Some(O),
            "messages[0].tool_calls[0].function: function without \"arguments\"",
        ),
        (
            json!({"messages": [{"role": "assistant", "content": null, "tool_calls": [{"id": "c", "type": "custom", "custom": {}}]}]}),
            Some(O),
            "messages[0].tool_calls[0].type: unsupported tool call type \"custom\"",
        ),
        (
            json!({"messages": [{"role": "assistant", "content": null, "tool_calls": {"id": "c"}}]}),
            Some(O),
            "messages[0].tool_calls: expected an array, found an object",
        ),
        (
            json!({"messages": [{"role": "tool", "content": "x"}]}),
            Some(O),
            "messages[0]: tool message without \"tool_call_id\"",
        ),
        (
            json!({"messages": [{"role": "tool", "tool_call_id": "c", "content": 3}]}),
            Some(O),
            "messages[0].content: expected a string or an array of content blocks, found a number",
        ),
        (
            json!({"thread_id": 7, "messages": []}),
            None,
            "thread_id: expected a string, found a number",
        ),
    ];
    for (value, format, expected) in cases {
        assert_eq!(err(&value.to_string(), format), expected, "{value}");
        // parse_value reports the same.
        match parse_value(value.clone(), format) {
            Ok(_) => panic!("parse_value accepted {value}"),
            Err(e) => assert_eq!(e.to_string(), expected),
        }
    }
}

/// `n` alternating user/assistant text messages (Anthropic and OpenAI alike).
fn chatter(n: usize) -> Vec<Value> {
    (0..n)
        .map(|i| {
            let role = if i % 2 == 0 { "user" } else { "assistant" };
            json!({"role": role, "content": format!("turn {i}")})
        })
        .collect()
}

#[test]
fn rejects_an_orphan_tool_result_anthropic() {
    let mut messages = chatter(13);
    messages.push(json!({"role": "assistant", "content": [
        {"type": "text", "text": "calling"},
        {"type": "tool_use", "id": "toolu_1", "name": "bash", "input": {"cmd": "ls"}}]}));
    messages.push(json!({"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "toolu_1", "content": "ok"},
        {"type": "tool_result", "tool_use_id": "toolu_9", "content": "??"}]}));
    // With a system prompt the paths still name the request's own messages array.
    let text = json!({"system": "s", "messages": messages}).to_string();
    assert_eq!(
        err(&text, None),
        "messages[14].content[1]: tool_result for unknown tool_use_id \"toolu_9\""
    );
    // A result for a call two messages back is an orphan too.
    let mut messages = chatter(1);
    messages.push(json!({"role": "assistant", "content": [
        {"type": "tool_use", "id": "toolu_1", "name": "bash", "input": {}}]}));
    messages.push(json!({"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "toolu_1", "content": "ok"}]}));
    messages.push(json!({"role": "assistant", "content": "done"}));
    messages.push(json!({"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "toolu_1", "content": "again"}]}));
    assert_eq!(
        err(
            &json!({ "messages": messages }).to_string(),
            Some(WireFormat::Anthropic)
        ),
        "messages[4].content[0]: tool_result for unknown tool_use_id \"toolu_1\""
    );
}

#[test]
fn rejects_an_orphan_tool_message_openai() {
    let mut messages = vec![json!({"role": "system", "content": "s"})];
    messages.extend(chatter(11));
    messages.push(json!({"role": "assistant", "content": null, "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]}));
    messages.push(json!({"role": "tool", "tool_call_id": "call_1", "content": "ok"}));
    messages.push(json!({"role": "tool", "tool_call_id": "call_9", "content": "??"}));
    assert_eq!(messages.len(), 15);
    assert_eq!(
        err(&json!({ "messages": messages }).to_string(), None),
        "messages[14]: tool message for unknown tool_call_id \"call_9\""
    );
    // A tool message after another message is an orphan.
    let messages = json!([
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": null, "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "ok"},
        {"role": "user", "content": "and?"},
        {"role": "tool", "tool_call_id": "call_1", "content": "again"}
    ]);
    assert_eq!(
        err(&json!({ "messages": messages }).to_string(), None),
        "messages[4]: tool message for unknown tool_call_id \"call_1\""
    );
}

#[test]
fn unanswered_calls_are_rejected_except_in_the_last_message() {
    let anthropic_call = |id: &str| {
        json!({"role": "assistant", "content": [
            {"type": "text", "text": "let me look"},
            {"type": "tool_use", "id": id, "name": "bash", "input": {}}]})
    };
    // Last message: accepted (and written back unchanged).
    let ok = json!({"messages": [{"role": "user", "content": "q"}, anthropic_call("toolu_1")]});
    let conversation = assert_round_trip(&ok.to_string(), WireFormat::Anthropic);
    check_tool_pairing(&conversation.messages, WireFormat::Anthropic).unwrap();
    check_tool_pairing(&conversation.messages, WireFormat::OpenAi).unwrap();
    // Anywhere else: rejected.
    let bad = json!({"messages": [{"role": "user", "content": "q"}, anthropic_call("toolu_1"),
                                  {"role": "user", "content": "well?"}]});
    assert_eq!(
        err(&bad.to_string(), None),
        "messages[1].content[1]: tool_use \"toolu_1\" has no tool_result in the next message"
    );

    let openai_call = json!({"role": "assistant", "content": null, "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{}"}},
        {"id": "call_2", "type": "function", "function": {"name": "g", "arguments": "{}"}}]});
    let ok = json!({"messages": [{"role": "user", "content": "q"}, openai_call]});
    assert_round_trip(&ok.to_string(), WireFormat::OpenAi);
    let bad = json!({"messages": [{"role": "user", "content": "q"}, openai_call,
                                  {"role": "tool", "tool_call_id": "call_1", "content": "ok"}]});
    assert_eq!(
        err(&bad.to_string(), None),
        "messages[1].tool_calls[1]: tool call \"call_2\" has no tool message"
    );
    let bad = json!({"messages": [{"role": "user", "content": "q"}, openai_call,
                                  {"role": "tool", "tool_call_id": "call_1", "content": "ok"},
                                  {"role": "user", "content": "well?"},
                                  {"role": "tool", "tool_call_id": "call_2", "content": "late"}]});
    assert_eq!(
        err(&bad.to_string(), None),
        "messages[1].tool_calls[1]: tool call \"call_2\" has no tool message"
    );
}

#[test]
fn rejects_duplicates_and_misplaced_tool_blocks() {
    let call = |id: &str| json!({"type": "tool_use", "id": id, "name": "n", "input": {}});
    let result = |id: &str| json!({"type": "tool_result", "tool_use_id": id, "content": "r"});
    let a = |messages: Value| {
        err(
            &json!({ "messages": messages }).to_string(),
            Some(WireFormat::Anthropic),
        )
    };
    assert_eq!(
        a(json!([{"role": "user", "content": "q"},
                 {"role": "assistant", "content": [call("t1")]},
                 {"role": "user", "content": [result("t1")]},
                 {"role": "assistant", "content": [call("t1")]}])),
        "messages[3].content[0]: duplicate tool_use id \"t1\""
    );
    assert_eq!(
        a(json!([{"role": "user", "content": "q"},
                 {"role": "assistant", "content": [call("t1")]},
                 {"role": "user", "content": [result("t1"), result("t1")]}])),
        "messages[2].content[1]: duplicate tool_result for tool_use_id \"t1\""
    );
    assert_eq!(
        a(json!([{"role": "user", "content": [call("t1")]}])),
        "messages[0].content[0]: tool_use in a user message"
    );
    assert_eq!(
        a(json!([{"role": "user", "content": "q"},
                 {"role": "assistant", "content": [call("t1"), result("t1")]}])),
        "messages[1].content[1]: tool_result in an assistant message"
    );
    assert_eq!(
        a(json!([{"role": "user", "content": "q"},
                 {"role": "assistant", "content": [call("t1")]},
                 {"role": "user", "content": [{"type": "text", "text": "here"}, result("t1")]}])),
        "messages[2].content[1]: tool_result after other content (tool_result blocks must come first in their message)"
    );
    let fcall = |id: &str| json!({"id": id, "type": "function", "function": {"name": "f", "arguments": "{}"}});
    let o = |messages: Value| {
        err(
            &json!({ "messages": messages }).to_string(),
            Some(WireFormat::OpenAi),
        )
    };
    assert_eq!(
        o(
            json!([{"role": "assistant", "content": null, "tool_calls": [fcall("c1"), fcall("c1")]}])
        ),
        "messages[0].tool_calls[1]: duplicate tool call id \"c1\""
    );
    assert_eq!(
        o(
            json!([{"role": "assistant", "content": null, "tool_calls": [fcall("c1")]},
                 {"role": "tool", "tool_call_id": "c1", "content": "a"},
                 {"role": "tool", "tool_call_id": "c1", "content": "b"}])
        ),
        "messages[2]: duplicate tool message for tool_call_id \"c1\""
    );
    assert_eq!(
        o(json!([{"role": "user", "content": "q", "tool_calls": [fcall("c1")]}])),
        "messages[0].tool_calls[0]: tool call in a user message"
    );
}

// ---------------------------------------------------------------------------------------------
// check_tool_pairing on the model

#[test]
fn check_tool_pairing_names_positions_in_the_list() {
    let text = corpus_text(WireFormat::Anthropic, "taubench_gpt4o_airline_task2_trial2");
    let (conversation, _) = parse_str(&text, None).unwrap();
    let mut messages = conversation.messages.to_vec();
    // Drop the first tool result message: its call is now unanswered.
    let result_at = messages
        .iter()
        .position(|m| m.tool_result_ids().next().is_some())
        .unwrap();
    let call_id = messages[result_at - 1]
        .tool_use_ids()
        .next()
        .unwrap()
        .to_string();
    let block = messages[result_at - 1]
        .content
        .iter()
        .position(|b| matches!(b, ContentBlock::ToolUse { .. }))
        .unwrap();
    messages.remove(result_at);
    assert_eq!(
        check_tool_pairing(&messages, WireFormat::Anthropic)
            .unwrap_err()
            .to_string(),
        format!(
            "messages[{}].content[{block}]: tool_use \"{call_id}\" has no tool_result in the next message",
            result_at - 1
        )
    );
    assert_eq!(
        check_tool_pairing(&messages, WireFormat::OpenAi)
            .unwrap_err()
            .to_string(),
        format!(
            "messages[{}].tool_calls[0]: tool call \"{call_id}\" has no tool message",
            result_at - 1
        )
    );
}

#[test]
fn check_tool_pairing_accepts_summaries_and_both_tool_result_layouts() {
    let call = |id: &str| ContentBlock::ToolUse {
        id: id.into(),
        name: "bash".into(),
        input_json: "{}".into(),
        extra_json: "".into(),
    };
    let result = |id: &str| ContentBlock::ToolResult {
        tool_use_id: id.into(),
        content: vec![ToolResultPart::Text { text: "ok".into() }].into(),
        is_error: false,
        extra_json: "".into(),
    };
    let messages = vec![
        Message::text(Role::System, "sys"),
        summary_message("earlier work", "pg_1", "test", SummaryStatus::Final),
        Message::new(Role::Assistant, vec![call("a"), call("b")]),
        // OpenAI layout: one tool message per result.
        Message::new(Role::Tool, vec![result("a")]),
        Message::new(Role::Tool, vec![result("b")]),
        Message::text(Role::User, "next"),
        Message::new(Role::Assistant, vec![call("c")]),
        // Anthropic layout: results in a user message.
        Message::new(
            Role::User,
            vec![result("c"), ContentBlock::text("and a note")],
        ),
    ];
    check_tool_pairing(&messages, WireFormat::Anthropic).unwrap();
    check_tool_pairing(&messages, WireFormat::OpenAi).unwrap();

    // The two tool messages are one user message in Anthropic; the user message's result is a
    // tool message before it in OpenAI.
    let conversation = Conversation::new(messages.clone());
    let anthropic = to_value(&conversation, WireFormat::Anthropic);
    assert_eq!(anthropic["system"], json!("sys"));
    assert_eq!(anthropic["messages"].as_array().unwrap().len(), 6);
    assert_eq!(
        anthropic["messages"][2],
        json!({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "a", "content": "ok"},
            {"type": "tool_result", "tool_use_id": "b", "content": "ok"}]})
    );
    let openai = to_value(&conversation, WireFormat::OpenAi);
    let wire = openai["messages"].as_array().unwrap();
    assert_eq!(wire.len(), 9);
    assert_eq!(
        wire[2],
        json!({"role": "assistant", "content": null, "tool_calls": [
            {"id": "a", "type": "function", "function": {"name": "bash", "arguments": "{}"}},
            {"id": "b", "type": "function", "function": {"name": "bash", "arguments": "{}"}}]})
    );
    assert_eq!(
        wire[7],
        json!({"role": "tool", "tool_call_id": "c", "content": "ok"})
    );
    assert_eq!(wire[8], json!({"role": "user", "content": "and a note"}));
    for (value, format) in [
        (anthropic, WireFormat::Anthropic),
        (openai, WireFormat::OpenAi),
    ] {
        let (back, _) = parse_value(value, Some(format)).unwrap();
        assert!(back.messages[1].is_summary());
    }

    // A result that lost its call, in both layouts.
    let mut broken = messages.clone();
    broken.remove(2);
    assert_eq!(
        check_tool_pairing(&broken, WireFormat::Anthropic)
            .unwrap_err()
            .to_string(),
        "messages[2].content[0]: tool_result for unknown tool_use_id \"a\""
    );
    assert_eq!(
        check_tool_pairing(&broken, WireFormat::OpenAi)
            .unwrap_err()
            .to_string(),
        "messages[2]: tool message for unknown tool_call_id \"a\""
    );
    let mut broken = messages;
    broken.remove(6);
    assert_eq!(
        check_tool_pairing(&broken, WireFormat::OpenAi)
            .unwrap_err()
            .to_string(),
        "messages[6].content[0]: tool message for unknown tool_call_id \"c\""
    );
}

// ---------------------------------------------------------------------------------------------
// Summaries

#[test]
fn summary_messages_round_trip_in_both_formats() {
    let info = SummaryInfo {
        page_ref: "pg_\"7\" & <more>".into(),
        strategy: "map-reduce".into(),
        status: SummaryStatus::Pending,
    };
    let mut summary = summary_message(
        "The agent listed files.\nThen it fixed a bug.",
        "x",
        "y",
        SummaryStatus::Final,
    );
    summary.summary = ROption::RSome(info.clone());
    let conversation = Conversation::new(vec![
        Message::text(Role::System, "sys"),
        summary,
        Message::text(Role::Assistant, "ok"),
    ]);
    let marker = "<tamp-summary page=\"pg_&quot;7&quot; &amp; &lt;more>\" strategy=\"map-reduce\" \
                  status=\"pending\">\nThe agent listed files.\nThen it fixed a bug.\n\
                  (The original messages: recall page pg_&quot;7&quot; &amp; &lt;more>.)\n\
                  </tamp-summary>";
    for format in [WireFormat::Anthropic, WireFormat::OpenAi] {
        let value = to_value(&conversation, format);
        let index = match format {
            WireFormat::Anthropic => 0,
            WireFormat::OpenAi | WireFormat::Responses => 1,
        };
        assert_eq!(
            value["messages"][index],
            json!({"role": "user", "content": marker})
        );
        let (back, _) = parse_value(value.clone(), Some(format)).unwrap();
        assert_eq!(back, conversation, "{format}");
        assert_eq!(back.messages[1].summary_info(), Some(&info));
        assert_eq!(
            back.messages[1].joined_text(),
            "The agent listed files.\nThen it fixed a bug."
        );
        assert_eq!(to_value(&back, format), value);
    }
}

#[test]
fn a_summary_in_array_form_with_cache_control_round_trips() {
    let text = json!({"system": "s", "messages": [
        {"role": "user", "content": [{"type": "text",
            "text": "<tamp-summary page=\"p1\" strategy=\"s\" status=\"final\">\nbody\n</tamp-summary>",
            "cache_control": {"type": "ephemeral"}}]},
        {"role": "assistant", "content": "ok"}
    ]})
    .to_string();
    let conversation = assert_round_trip(&text, WireFormat::Anthropic);
    let m = &conversation.messages[1];
    assert_eq!(m.summary_info().unwrap().page_ref.as_str(), "p1");
    assert_eq!(m.summary_info().unwrap().status, SummaryStatus::Final);
    assert_eq!(m.joined_text(), "body");
    match &m.content[0] {
        ContentBlock::Text { extra_json, .. } => {
            assert_eq!(
                extra_json.as_str(),
                r#"{"cache_control":{"type":"ephemeral"}}"#
            )
        }
        other => panic!("{other:?}"),
    }
    // A near miss is ordinary text.
    let text = json!({"messages": [{"role": "user",
        "content": "<tamp-summary page=\"p1\" strategy=\"s\" status=\"maybe\">\nbody\n</tamp-summary>"}]})
    .to_string();
    let conversation = assert_round_trip(&text, WireFormat::OpenAi);
    assert!(!conversation.messages[0].is_summary());
}

// ---------------------------------------------------------------------------------------------
// Shapes that must survive a round trip

#[test]
fn openai_shapes_round_trip() {
    let text = r#"{"model":"gpt-4o","messages":[
        {"role":"developer","content":"be brief"},
        {"role":"system","content":[{"type":"text","text":"and kind"}]},
        {"role":"user","content":[{"type":"text","text":"look"},{"type":"image_url","image_url":{"url":"data:image/png;base64,AAAA","detail":"low"}}],"name":"ann"},
        {"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"f","arguments":"{\"x\": 1.50,\n \"y\": \"\\u00e9\"}"}}]},
        {"role":"tool","tool_call_id":"call_1","content":[{"type":"text","text":"part one"},{"type":"text","text":"part two"}]},
        {"role":"assistant","tool_calls":[{"id":"call_2","function":{"name":"g","arguments":"not json"},"index":0}]},
        {"role":"tool","tool_call_id":"call_2","name":"g","content":""},
        {"role":"assistant","content":"","tool_calls":[]},
        {"role":"user","content":[{"type":"text","text":"single part"}]},
        {"role":"assistant","content":"done","refusal":null,"reasoning_content":"thought","tool_calls":null}
    ],"tools":[{"type":"function","function":{"name":"f","parameters":{}}}],"temperature":0}"#;
    let conversation = assert_round_trip(text, WireFormat::OpenAi);
    let m = &conversation.messages;
    assert_eq!(m[0].role, Role::System);
    assert_eq!(m[0].extra_json.as_str(), r#"{"tamp:role":"developer"}"#);
    assert_eq!(m[1].extra_json.as_str(), r#"{"tamp:content":"array"}"#);
    assert!(matches!(&m[2].content[1], ContentBlock::Opaque { json }
        if json.as_str() == r#"{"type":"image_url","image_url":{"url":"data:image/png;base64,AAAA","detail":"low"}}"#));
    assert_eq!(m[2].extra_json.as_str(), r#"{"name":"ann"}"#);
    // null content: no blocks besides the call, and nothing recorded (null is the default).
    assert_eq!(m[3].content.len(), 1);
    assert_eq!(m[3].extra_json.as_str(), "");
    match &m[3].content[0] {
        ContentBlock::ToolUse { input_json, .. } => {
            assert_eq!(input_json.as_str(), "{\"x\": 1.50,\n \"y\": \"\\u00e9\"}")
        }
        other => panic!("{other:?}"),
    }
    match &m[4].content[0] {
        ContentBlock::ToolResult { content, .. } => assert_eq!(content.len(), 2),
        other => panic!("{other:?}"),
    }
    assert_eq!(m[5].extra_json.as_str(), r#"{"tamp:content":"absent"}"#);
    match &m[5].content[0] {
        ContentBlock::ToolUse {
            input_json,
            extra_json,
            ..
        } => {
            assert_eq!(input_json.as_str(), "not json");
            assert_eq!(extra_json.as_str(), r#"{"tamp:type":"absent","index":0}"#);
        }
        other => panic!("{other:?}"),
    }
    // Fields the writer would put elsewhere record the original key order.
    assert_eq!(
        m[6].extra_json.as_str(),
        r#"{"name":"g","tamp:keys":["role","tool_call_id","name","content"]}"#
    );
    assert_eq!(m[7].extra_json.as_str(), r#"{"tamp:tool_calls":"empty"}"#);
    assert_eq!(
        m[9].extra_json.as_str(),
        r#"{"refusal":null,"reasoning_content":"thought","tamp:keys":["role","content","refusal","reasoning_content","tool_calls"],"tamp:tool_calls":"null"}"#
    );
    assert_eq!(
        conversation.metadata_json.as_str(),
        r#"{"model":"gpt-4o","tools":[{"type":"function","function":{"name":"f","parameters":{}}}],"temperature":0,"tamp:order":["model","messages","tools","temperature"]}"#
    );
}

#[test]
fn openai_arguments_given_as_json_and_function_extras_round_trip() {
    let text = r#"{"messages":[{"role":"user","content":"q"},
        {"role":"assistant","content":"","tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":{"a":[1,2]},"strict":true}}]},
        {"role":"tool","tool_call_id":"c","content":null}]}"#;
    let conversation = assert_round_trip(text, WireFormat::OpenAi);
    match &conversation.messages[1].content[1] {
        ContentBlock::ToolUse {
            input_json,
            extra_json,
            ..
        } => {
            assert_eq!(input_json.as_str(), r#"{"a":[1,2]}"#);
            assert_eq!(
                extra_json.as_str(),
                r#"{"tamp:arguments":"json","tamp:function":{"strict":true}}"#
            );
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn anthropic_shapes_round_trip() {
    let text = r#"{"model":"claude-sonnet-4-5","max_tokens":1024,
      "system":[{"type":"text","text":"You are terse.","cache_control":{"type":"ephemeral"}}],
      "thread_id":"th-42",
      "messages":[
        {"role":"user","content":[
          {"type":"image","source":{"type":"base64","media_type":"image/png","data":"iVBORw0KGgo="}},
          {"type":"text","text":"what is this?"}]},
        {"role":"assistant","content":[
          {"type":"thinking","thinking":"hmm","signature":"sig"},
          {"type":"text","text":"Let me check.","citations":[{"type":"char_location","cited_text":"x"}]},
          {"type":"tool_use","id":"toolu_1","name":"lookup","input":{"q": "png", "n": 1.0e2},"cache_control":{"type":"ephemeral"}}]},
        {"role":"user","content":[
          {"type":"tool_result","tool_use_id":"toolu_1","content":[{"type":"text","text":"a logo"},{"type":"image","source":{"type":"url","url":"https://x/y.png"}}],"is_error":false},
          {"type":"text","text":"and?"}],"name":"ignored-by-api"},
        {"role":"assistant","content":[{"type":"tool_use","id":"toolu_2","name":"lookup","input":{}}]},
        {"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_2"},{"type":"tool_result","tool_use_id":"toolu_3","content":[]}]}
      ],
      "metadata":{"user_id":"u"}}"#;
    // toolu_3 answers nothing: rejected.
    assert_eq!(
        err(text, None),
        "messages[4].content[1]: tool_result for unknown tool_use_id \"toolu_3\""
    );
    let text = text.replace(
        r#"{"type":"tool_use","id":"toolu_2","name":"lookup","input":{}}"#,
        r#"{"type":"tool_use","id":"toolu_2","name":"lookup","input":{}},{"type":"tool_use","id":"toolu_3","name":"lookup","input":{}}"#,
    );
    let conversation = assert_round_trip(&text, WireFormat::Anthropic);
    assert_eq!(conversation.thread_id(), Some("th-42"));
    let m = &conversation.messages;
    assert_eq!(m.len(), 6);
    assert_eq!(m[0].role, Role::System);
    assert_eq!(m[0].extra_json.as_str(), "");
    assert!(
        matches!(&m[0].content[0], ContentBlock::Text { extra_json, .. }
        if extra_json.as_str() == r#"{"cache_control":{"type":"ephemeral"}}"#)
    );
    assert!(matches!(&m[1].content[0], ContentBlock::Opaque { json }
        if json.as_str() == r#"{"type":"image","source":{"type":"base64","media_type":"image/png","data":"iVBORw0KGgo="}}"#));
    assert!(
        matches!(&m[2].content[0], ContentBlock::Opaque { json } if json.contains("\"thinking\""))
    );
    match &m[2].content[2] {
        ContentBlock::ToolUse {
            input_json,
            extra_json,
            ..
        } => {
            // Only the whitespace between tokens goes: keys, numbers and escapes as sent.
            assert_eq!(input_json.as_str(), r#"{"q":"png","n":1.0e2}"#);
            assert_eq!(
                extra_json.as_str(),
                r#"{"cache_control":{"type":"ephemeral"}}"#
            );
        }
        other => panic!("{other:?}"),
    }
    match &m[3].content[0] {
        ContentBlock::ToolResult {
            content,
            is_error,
            extra_json,
            ..
        } => {
            assert!(!is_error);
            assert_eq!(extra_json.as_str(), r#"{"tamp:is_error":"false"}"#);
            assert_eq!(
                content[0],
                ToolResultPart::Text {
                    text: "a logo".into()
                }
            );
            assert!(matches!(&content[1], ToolResultPart::Opaque { .. }));
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(m[3].extra_json.as_str(), r#"{"name":"ignored-by-api"}"#);
    match &m[5].content[..] {
        [ContentBlock::ToolResult {
            content: a,
            extra_json: ea,
            ..
        }, ContentBlock::ToolResult {
            content: b,
            extra_json: eb,
            ..
        }] => {
            assert!(a.is_empty() && b.is_empty());
            assert_eq!(ea.as_str(), "");
            assert_eq!(eb.as_str(), r#"{"tamp:content":"array"}"#);
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        conversation.metadata_json.as_str(),
        r#"{"model":"claude-sonnet-4-5","max_tokens":1024,"thread_id":"th-42","metadata":{"user_id":"u"},"tamp:order":["model","max_tokens","system","thread_id","messages","metadata"]}"#
    );
}

#[test]
fn string_and_array_content_round_trip_anthropic() {
    let text = json!({"system": [{"type": "text", "text": "s"}], "messages": [
        {"role": "user", "content": "plain string"},
        {"role": "assistant", "content": [{"type": "text", "text": "one block"}]},
        {"role": "user", "content": [{"type": "text", "text": "two"}, {"type": "text", "text": "blocks"}]},
        {"role": "assistant", "content": []}
    ]})
    .to_string();
    let conversation = assert_round_trip(&text, WireFormat::Anthropic);
    let extras: Vec<&str> = conversation
        .messages
        .iter()
        .map(|m| m.extra_json.as_str())
        .collect();
    assert_eq!(
        extras,
        [
            r#"{"tamp:content":"array"}"#,
            "",
            r#"{"tamp:content":"array"}"#,
            "",
            ""
        ]
    );
}

#[test]
fn thread_id_is_read_and_written_back() {
    let text = r#"{"thread_id":"abc-1","messages":[{"role":"user","content":"hi"}]}"#;
    let conversation = assert_round_trip(text, WireFormat::OpenAi);
    assert_eq!(conversation.thread_id(), Some("abc-1"));
    // A null thread id is no thread id, and is kept as it was.
    let text = r#"{"messages":[{"role":"user","content":"hi"}],"thread_id":null}"#;
    let conversation = assert_round_trip(text, WireFormat::OpenAi);
    assert_eq!(conversation.thread_id(), None);
    // A thread id set by the host (the API body's, --thread-id) is not written into the
    // request: the provider would refuse an unknown top-level field.
    let mut conversation = Conversation::new(vec![Message::text(Role::User, "hi")]);
    conversation.thread_id = ROption::RSome("t-9".into());
    assert_eq!(
        compact(&to_value(&conversation, WireFormat::Anthropic)),
        r#"{"messages":[{"role":"user","content":"hi"}]}"#
    );
}

#[test]
fn plugin_made_messages_get_the_natural_form() {
    let conversation = Conversation::new(vec![
        Message::text(Role::System, "sys"),
        Message::text(Role::User, "hi"),
        Message::new(
            Role::Assistant,
            vec![
                ContentBlock::text("a"),
                ContentBlock::text("b"),
                ContentBlock::Opaque {
                    json: r#"{"type":"thinking","thinking":"t"}"#.into(),
                },
            ],
        ),
        Message::new(
            Role::Assistant,
            vec![ContentBlock::ToolUse {
                id: "c1".into(),
                name: "f".into(),
                input_json: r#"{"k":"v"}"#.into(),
                extra_json: "".into(),
            }],
        ),
        Message::new(
            Role::Tool,
            vec![ContentBlock::ToolResult {
                tool_use_id: "c1".into(),
                content: vec![ToolResultPart::Text { text: "r".into() }].into(),
                is_error: true,
                extra_json: "".into(),
            }],
        ),
    ]);
    assert_eq!(
        to_value(&conversation, WireFormat::Anthropic),
        json!({"system": "sys", "messages": [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": [
                {"type": "text", "text": "a"}, {"type": "text", "text": "b"},
                {"type": "thinking", "thinking": "t"}]},
            {"role": "assistant", "content": [
                {"type": "tool_use", "id": "c1", "name": "f", "input": {"k": "v"}}]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "c1", "content": "r", "is_error": true}]}
        ]})
    );
    assert_eq!(
        to_value(&conversation, WireFormat::OpenAi),
        json!({"messages": [
            {"role": "system", "content": "sys"},
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": [
                {"type": "text", "text": "a"}, {"type": "text", "text": "b"},
                {"type": "thinking", "thinking": "t"}]},
            {"role": "assistant", "content": null, "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{\"k\":\"v\"}"}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "r"}
        ]})
    );
    assert_eq!(
        write_messages(&conversation.messages[..2], WireFormat::Anthropic).to_value(),
        json!([{"role": "system", "content": "sys"}, {"role": "user", "content": "hi"}])
    );
    let pretty = to_string_pretty(&conversation, WireFormat::OpenAi);
    assert!(pretty.starts_with("{\n  \"messages\": [\n"), "{pretty}");
}

#[test]
fn write_messages_writes_pages() {
    let text = corpus_text(WireFormat::OpenAi, "taubench_gpt4o_airline_task2_trial2");
    let original: Value = serde_json::from_str(&text).unwrap();
    let (conversation, _) = parse_str(&text, None).unwrap();
    let page = &conversation.messages[3..9];
    assert_eq!(
        write_messages(page, WireFormat::OpenAi).to_value(),
        Value::Array(original["messages"].as_array().unwrap()[3..9].to_vec())
    );
    let text = corpus_text(WireFormat::Anthropic, "taubench_gpt4o_airline_task2_trial2");
    let original: Value = serde_json::from_str(&text).unwrap();
    let (conversation, _) = parse_str(&text, None).unwrap();
    assert_eq!(
        write_messages(&conversation.messages[1..5], WireFormat::Anthropic).to_value(),
        Value::Array(original["messages"].as_array().unwrap()[0..4].to_vec())
    );
}

/// A key tamp reads, given twice, is refused with its path: a provider may read either value
/// (serde_json and most providers take the last, tamp's readers the first), so compacting one
/// would silently change the request. A key tamp does not read may repeat and is kept twice.
#[test]
fn a_known_key_given_twice_is_refused_and_an_unknown_one_kept() {
    let twice = "appears more than once; a provider may read either value, so tamp will not guess";
    let cases = [
        (
            r#"{"messages":[{"role":"user","content":"a","content":"b"}]}"#,
            "messages[0]: \"content\"",
        ),
        (
            r#"{"messages":[{"role":"user","content":"a"}],"messages":[]}"#,
            "\"messages\"",
        ),
        (
            r#"{"messages":[{"role":"user","content":[{"type":"text","text":"a","text":"b"}]}]}"#,
            "messages[0].content[0]: \"text\"",
        ),
        (
            r#"{"messages":[{"role":"user","content":"q"},{"role":"assistant","content":[{"type":"tool_use","id":"t","name":"n","input":{},"input":{"x":1}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":"r"}]}]}"#,
            "messages[1].content[0]: \"input\"",
        ),
        (
            r#"{"messages":[{"role":"user","content":"q"},{"role":"assistant","content":null,"tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"{}","arguments":"{\"x\":1}"}}]},{"role":"tool","tool_call_id":"c","content":"ok"}]}"#,
            "messages[1].tool_calls[0].function: \"arguments\"",
        ),
        (
            r#"{"messages":[{"role":"user","content":"q"},{"role":"tool","tool_call_id":"c","tool_call_id":"d","content":"ok"}]}"#,
            "messages[1]: \"tool_call_id\"",
        ),
    ];
    for (text, at) in cases {
        let message = err(text, None);
        assert_eq!(message, format!("{at} {twice}"), "{text}");
    }
    // Unknown keys, and any key inside an opaque block, repeat freely and come back twice.
    let kept = r#"{"model":"m","x":1,"x":2,"messages":[{"role":"user","content":[{"type":"image","source":{},"source":{"a":1}}],"n":1,"n":2}]}"#;
    let (conversation, format) = parse_str(kept, None).unwrap();
    let written = to_string(&conversation, format);
    assert_eq!(written, kept);
}

/// A client's key with the prefix of tamp's own marks is refused with its path, in every
/// format: kept, it would be read as a mark (`tamp:content` deciding how content is written)
/// or dropped by the writer.
#[test]
fn a_client_key_with_tamp_s_mark_prefix_is_refused() {
    let cases = [
        (
            r#"{"messages":[{"role":"user","content":"hi","tamp:content":"array"}]}"#,
            Some(WireFormat::Anthropic),
            "messages[0]: \"tamp:content\"",
        ),
        (
            r#"{"messages":[{"role":"user","content":[{"type":"text","text":"a","tamp:x":1}]}]}"#,
            Some(WireFormat::Anthropic),
            "messages[0].content[0]: \"tamp:x\"",
        ),
        (
            r#"{"model":"m","tamp:order":[],"messages":[{"role":"user","content":"hi"}]}"#,
            Some(WireFormat::OpenAi),
            "\"tamp:order\"",
        ),
        (
            r#"{"model":"m","input":[{"type":"message","role":"user","content":"hi","tamp:role":"x"}]}"#,
            Some(WireFormat::Responses),
            "input[0]: \"tamp:role\"",
        ),
    ];
    for (text, format, at) in cases {
        let message = err(text, format);
        assert!(
            message.starts_with(&format!("{at}: keys starting with \"tamp:\"")),
            "{text}: {message}"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Clearings

/// Every tool result and tool input of every corpus conversation cleared: in both formats the
/// cleared conversation is a valid request, reads back as the same conversation (from text and
/// from a JSON value), and every placeholder is still recognized, naming its original's page.
#[test]
fn cleared_blocks_survive_a_round_trip_in_both_formats() {
    use crate::plugin_api::page::page_id;
    use crate::plugin_api::rules::clearing::{cleared_page, Clearing};
    for name in CORPUS {
        for format in [WireFormat::Anthropic, WireFormat::OpenAi] {
            let (mut conversation, _) =
                parse_str(&corpus_text(format, name), Some(format)).unwrap();
            let mut cleared = 0;
            for (i, message) in conversation.messages.iter_mut().enumerate() {
                let mut clearing = Clearing::new(message, i);
                for b in 0..message.content.len() {
                    clearing.clear_result(b, "Output cleared (1,234 tokens).");
                    clearing.clear_input(b);
                }
                if clearing.cleared() > 0 {
                    cleared += clearing.cleared();
                    assert_eq!(clearing.page(), page_id(std::slice::from_ref(message)));
                    *message = clearing.message().clone();
                }
            }
            assert!(cleared > 0, "{name} {format}: has tool blocks");
            check_tool_pairing(&conversation.messages, format).unwrap();
            let text = to_string(&conversation, format);
            let (back, read_as) = parse_str(&text, None).unwrap();
            assert_eq!(read_as, format, "{name}: still detected as {format}");
            assert_eq!(back, conversation, "{name} {format}: read back unchanged");
            assert_eq!(
                to_string(&back, format),
                text,
                "{name} {format}: byte for byte"
            );
            let (from_value, _) = parse_value(serde_json::from_str(&text).unwrap(), None).unwrap();
            assert_eq!(
                from_value, conversation,
                "{name} {format}: from a JSON value"
            );
            let recognized: usize = back
                .messages
                .iter()
                .flat_map(|m| m.content.iter())
                .filter(|b| cleared_page(b).is_some())
                .count();
            assert_eq!(recognized, cleared, "{name} {format}");
        }
    }
}
