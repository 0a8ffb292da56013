//! What tamp does not interpret comes back exactly as it was sent: property tests over JSON
//! values `serde_json::Value` cannot hold (nesting past its recursion limit, lone surrogate
//! escapes, numbers outside `f64`, duplicate keys), in every position a reader passes through.

use proptest::prelude::*;

use super::*;

/// A JSON string literal with escapes that `serde_json` refuses to decode (lone surrogates)
/// or would write differently (`\u00e9`, `\/`).
fn string_literal() -> impl Strategy<Value = String> {
    let piece = prop_oneof![
        "[a-z ]{0,6}",
        Just(r"\ud83d".to_string()),
        Just(r"\udc00".to_string()),
        Just(r"\ud83d\ude00".to_string()),
        Just(r"\u00e9".to_string()),
        Just(r"\/".to_string()),
        Just(r#"\""#.to_string()),
        Just("é✓".to_string()),
    ];
    proptest::collection::vec(piece, 0..5).prop_map(|pieces| format!("\"{}\"", pieces.concat()))
}

fn number() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<i64>().prop_map(|n| n.to_string()),
        // Wider than 64 bits, and outside f64's range.
        "-?[1-9][0-9]{20,40}",
        "-?[1-9]\\.[0-9]{1,20}[eE][+-]?[3-9][0-9]{2,3}",
        Just("1.0".to_string()),
        Just("1E2".to_string()),
        Just("-0".to_string()),
    ]
}

/// Compact JSON text of any shape, with duplicate keys now and then.
fn json_value() -> impl Strategy<Value = String> {
    let leaf = prop_oneof![
        Just("null".to_string()),
        Just("true".to_string()),
        Just("false".to_string()),
        number(),
        string_literal(),
    ];
    leaf.prop_recursive(4, 32, 4, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..4)
                .prop_map(|items| format!("[{}]", items.join(","))),
            proptest::collection::vec((prop_oneof!["[ab]", string_literal()], inner), 0..4)
                .prop_map(|fields| {
                    let fields: Vec<String> = fields
                        .into_iter()
                        .map(|(k, v)| {
                            let key = if k.starts_with('"') {
                                k
                            } else {
                                format!("\"{k}\"")
                            };
                            format!("{key}:{v}")
                        })
                        .collect();
                    format!("{{{}}}", fields.join(","))
                }),
        ]
    })
}

/// A value nested deeper than `serde_json`'s recursion limit of 128.
fn deep_value() -> impl Strategy<Value = String> {
    (127usize..400, json_value(), any::<bool>()).prop_map(|(depth, inner, arrays)| {
        if arrays {
            format!("{}{inner}{}", "[".repeat(depth), "]".repeat(depth))
        } else {
            format!("{}{inner}{}", r#"{"d":"#.repeat(depth), "}".repeat(depth))
        }
    })
}

fn any_value() -> impl Strategy<Value = String> {
    prop_oneof![4 => json_value(), 1 => deep_value()]
}

/// An Anthropic request with `v` in every unknown position: a top-level field (twice), a
/// message field, a block field, an opaque block, a tool input, a tool result's opaque part.
fn anthropic_request(v: &str) -> String {
    format!(
        r#"{{"model":"m","x":{v},"system":"s","messages":[{{"role":"user","content":[{{"type":"text","text":"hi","cache":{v}}},{{"type":"image","source":{v}}}],"meta":{v}}},{{"role":"assistant","content":[{{"type":"tool_use","id":"t1","name":"f","input":{{"a":{v}}}}}]}},{{"role":"user","content":[{{"type":"tool_result","tool_use_id":"t1","content":[{{"type":"text","text":"r"}},{{"type":"doc","d":{v}}}]}}]}}],"x":{v},"max_tokens":9}}"#
    )
}

/// An OpenAI request with `v` in every unknown position: top-level fields, a message field,
/// a content part field, an opaque part, a tool call's field and its `function`'s field, JSON
/// `arguments` (a string `arguments` is the tool input's text, which tamp reads), and a tool
/// message's field.
fn openai_request(v: &str) -> String {
    format!(
        r#"{{"model":"m","n":{v},"messages":[{{"role":"system","content":"s"}},{{"role":"user","content":[{{"type":"text","text":"hi","k":{v}}},{{"type":"image_url","image_url":{v}}}],"name":{v}}},{{"role":"assistant","content":null,"tool_calls":[{{"id":"c1","type":"function","function":{{"name":"f","arguments":{{"a":{v}}},"strict":{v}}},"extra":{v}}}]}},{{"role":"tool","tool_call_id":"c1","content":"r","name":{v}}}],"n":{v}}}"#
    )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    #[test]
    fn unknown_values_survive_read_then_write_byte_for_byte(v in any_value()) {
        for (text, format) in [
            (anthropic_request(&v), WireFormat::Anthropic),
            (openai_request(&v), WireFormat::OpenAi),
        ] {
            let (conversation, read_as) = parse_str(&text, None).unwrap();
            prop_assert_eq!(read_as, format);
            prop_assert_eq!(to_string(&conversation, format), text.clone());
            // What a page keeps (plugin-api's own JSON, as the stores encode it) writes back
            // the same messages.
            let stored = serde_json::to_string(&conversation.messages).unwrap();
            let back: Vec<Message> = serde_json::from_str(&stored).unwrap();
            prop_assert_eq!(
                write_messages(&back, format).compact(),
                write_messages(&conversation.messages, format).compact()
            );
            // Pretty output is the same JSON, laid out.
            let pretty = to_string_pretty(&conversation, format);
            let (again, _) = parse_str(&pretty, Some(format)).unwrap();
            prop_assert_eq!(to_string(&again, format), text);
        }
    }
}

#[test]
fn the_probes_requests_keep_every_field() {
    let text = r#"{"model":"m","max_tokens":9,"tools":[{"name":"t","description":"\ud83d","input_schema":{}}],"messages":[{"role":"user","content":"hi"}]}"#;
    let (conversation, format) = parse_str(text, None).unwrap();
    assert_eq!(to_string(&conversation, format), text);
    let text =
        r#"{"model":"m","n":123456789012345678901234,"messages":[{"role":"user","content":"hi"}]}"#;
    let (conversation, format) = parse_str(text, None).unwrap();
    assert_eq!(to_string(&conversation, format), text);
    assert!(to_string_pretty(&conversation, format).contains("\"n\": 123456789012345678901234"));
}

#[test]
fn a_tool_input_loses_only_its_indentation() {
    let text = r#"{"system":"s","messages":[{"role":"assistant","content":[{"type":"tool_use","id":"t","name":"f","input":{ "a" : [1E400, "\ud83d \" x"] ,
        "b":1.0}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":"ok"}]}]}"#;
    let (conversation, _) = parse_str(text, None).unwrap();
    let ContentBlock::ToolUse { input_json, .. } = &conversation.messages[1].content[0] else {
        panic!("no tool use")
    };
    assert_eq!(
        input_json.as_str(),
        r#"{"a":[1E400,"\ud83d \" x"],"b":1.0}"#
    );
}

/// Regression (tests/e2e/fuzz.rs, wire/corpus): an OpenAI `arguments` text with spaces,
/// written as an Anthropic `input`, read and written again, gave other text (the reader
/// drops the whitespace, the writer kept it).
#[test]
fn openai_arguments_written_as_anthropic_read_back_as_written() {
    let text = r#"{"messages":[{"role":"user","content":"go"},{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"bash","arguments":"{\"command\": \"ls -la\",\n \"n\": [1, 2]}"}}]},{"role":"tool","tool_call_id":"c1","content":"ok"}]}"#;
    let (conversation, format) = parse_str(text, None).unwrap();
    assert_eq!(format, WireFormat::OpenAi);
    let anthropic = to_string(&conversation, WireFormat::Anthropic);
    assert!(
        anthropic.contains(r#""input":{"command":"ls -la","n":[1,2]}"#),
        "{anthropic}"
    );
    let (again, _) = parse_str(&anthropic, Some(WireFormat::Anthropic)).unwrap();
    assert_eq!(to_string(&again, WireFormat::Anthropic), anthropic);
    // An input that is not JSON is still written as a string, untouched.
    let text = text.replace(
        r#"{\"command\": \"ls -la\",\n \"n\": [1, 2]}"#,
        "not json  at all",
    );
    let (conversation, _) = parse_str(&text, None).unwrap();
    assert!(
        to_string(&conversation, WireFormat::Anthropic).contains(r#""input":"not json  at all""#)
    );
}

#[test]
fn a_string_tamp_reads_that_is_not_text_is_refused_with_its_path() {
    let text =
        r#"{"messages":[{"role":"user","content":"ok"},{"role":"assistant","content":"\ud83d"}]}"#;
    let e = parse_str(text, None).unwrap_err();
    assert_eq!(e.path, "messages[1].content", "{e}");
    assert!(e.message.starts_with("invalid JSON"), "{e}");
    // Issue 32: named as what it is, wherever the surrogate sits, never as "unexpected end
    // of hex escape" (serde_json's words for the character after it).
    for (content, escape) in [
        (r#""a\ud800b""#, r"\ud800"),
        (r#""\udc00""#, r"\udc00"),
        (r#"[{"type":"text","text":"x\uDBFF\u0041"}]"#, r"\uDBFF"),
        (
            r#""\\ud800 is text, \ud83d\ude00 a pair, \ud83d alone""#,
            r"\ud83d",
        ),
    ] {
        let text = format!(r#"{{"messages":[{{"role":"user","content":{content}}}]}}"#);
        let e = parse_str(&text, None).unwrap_err();
        assert!(e.path.starts_with("messages[0].content"), "{e}");
        assert!(
            e.message
                .contains(&format!("lone surrogate escape ({escape})")),
            "{content}: {e}"
        );
        assert!(!e.message.contains("hex escape"), "{e}");
    }
}
