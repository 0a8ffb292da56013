//! Messages as the console shows them: roles, text, tool calls with their inputs, tool
//! results with the name of the call they answer, and what tamp does not read by its type.
//! A cleared output or input names the page that keeps the original, which the page view
//! links to. Every string goes to the page as JSON and is put in as text there.

use std::collections::HashMap;

use serde_json::{json, Value};
use tamp_plugin_api::rules::clearing;
use tamp_plugin_api::{ContentBlock, Message, Role, ToolResultPart};

/// The most characters of an opaque block's JSON shown.
const OPAQUE_CHARS: usize = 2_000;

/// Each message of `messages` as [`message_view`] shows it, tool results named after the
/// calls they answer.
pub fn messages_view(messages: &[Message]) -> Vec<Value> {
    let mut calls = HashMap::new();
    for message in messages {
        for block in message.content.iter() {
            if let ContentBlock::ToolUse { id, name, .. } = block {
                calls.insert(id.to_string(), name.to_string());
            }
        }
    }
    messages.iter().map(|m| message_view(m, &calls)).collect()
}

fn role(role: Role) -> &'static str {
    match role {
        Role::System => "system",
        Role::User => "user",
        Role::Assistant => "assistant",
        Role::Tool => "tool",
    }
}

/// One message: its role, whether it is a summary (and of which page), and its blocks.
/// `calls` names the tool calls by id, for the results.
pub fn message_view(message: &Message, calls: &HashMap<String, String>) -> Value {
    let blocks: Vec<Value> = message
        .content
        .iter()
        .map(|block| block_view(block, calls))
        .collect();
    let mut view = json!({"role": role(message.role), "blocks": blocks});
    if let Some(info) = message.summary_info() {
        view["summary"] = json!({
            "page": info.page_ref.as_str(),
            "strategy": info.strategy.as_str(),
            "status": format!("{:?}", info.status).to_lowercase(),
        });
    }
    view
}

fn block_view(block: &ContentBlock, calls: &HashMap<String, String>) -> Value {
    let cleared = clearing::cleared_page(block);
    match block {
        ContentBlock::Text { text, .. } => json!({"type": "text", "text": text.as_str()}),
        ContentBlock::ToolUse {
            id,
            name,
            input_json,
            ..
        } => json!({
            "type": "tool_use",
            "id": id.as_str(),
            "name": name.as_str(),
            "input": pretty_json(input_json),
            "cleared_page": cleared,
        }),
        ContentBlock::ToolResult {
            tool_use_id,
            content,
            is_error,
            ..
        } => {
            let text: Vec<String> = content
                .iter()
                .map(|part| match part {
                    ToolResultPart::Text { text } => text.to_string(),
                    ToolResultPart::Opaque { json } => format!("[{}]", opaque_type(json)),
                })
                .collect();
            json!({
                "type": "tool_result",
                "id": tool_use_id.as_str(),
                "name": calls.get(tool_use_id.as_str()),
                "is_error": is_error,
                "text": text.join("\n"),
                "cleared_page": cleared,
            })
        }
        ContentBlock::Opaque { json } => {
            let shown: String = json.chars().take(OPAQUE_CHARS).collect();
            json!({
                "type": "opaque",
                "kind": opaque_type(json),
                "json": shown,
                "cut": json.chars().count() > OPAQUE_CHARS,
            })
        }
    }
}

/// The `type` an opaque block's JSON gives itself (`image`, `thinking`), else `block`.
fn opaque_type(json: &str) -> String {
    serde_json::from_str::<Value>(json)
        .ok()
        .and_then(|v| v.get("type").and_then(Value::as_str).map(str::to_string))
        .unwrap_or_else(|| "block".into())
}

/// A tool input indented for reading, or as it is when it is not JSON.
fn pretty_json(text: &str) -> String {
    serde_json::from_str::<Value>(text)
        .ok()
        .and_then(|v| serde_json::to_string_pretty(&v).ok())
        .unwrap_or_else(|| text.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_result_is_named_after_its_call_and_a_cleared_one_names_its_page() {
        let messages = vec![
            Message::new(
                Role::Assistant,
                vec![ContentBlock::tool_use("t1", "Bash", r#"{"command":"ls"}"#)],
            ),
            Message::new(
                Role::User,
                vec![ContentBlock::ToolResult {
                    tool_use_id: "t1".into(),
                    content: vec![ToolResultPart::Text {
                        text: clearing::result_placeholder("pg_0123", "cleared").into(),
                    }]
                    .into(),
                    is_error: true,
                    extra_json: Default::default(),
                }],
            ),
            Message::new(
                Role::Assistant,
                vec![ContentBlock::Opaque {
                    json: r#"{"type":"thinking","thinking":"<b>x</b>"}"#.into(),
                }],
            ),
        ];
        let view = messages_view(&messages);
        assert_eq!(view[0]["blocks"][0]["input"], "{\n  \"command\": \"ls\"\n}");
        assert_eq!(view[1]["blocks"][0]["name"], "Bash");
        assert_eq!(view[1]["blocks"][0]["cleared_page"], "pg_0123");
        assert_eq!(view[1]["blocks"][0]["is_error"], true);
        assert_eq!(view[2]["blocks"][0]["kind"], "thinking");
        // Text stays text: the page puts it in with textContent.
        assert!(view[2]["blocks"][0]["json"]
            .as_str()
            .unwrap()
            .contains("<b>x</b>"));
    }
}
