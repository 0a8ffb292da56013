//! Rendering messages into prompt text, and filling prompt templates.

use std::collections::HashMap;
use std::fmt::Write as _;

use crate::conversation::{ContentBlock, Message, ToolResultPart};
use crate::error::PluginError;
use crate::sdk::summary::cap_chars;

/// How [`render_messages`] renders.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RenderOptions {
    /// Cut each text, tool input and tool result to this many characters (0: no cut).
    pub max_block_chars: usize,
}

impl Default for RenderOptions {
    fn default() -> Self {
        RenderOptions {
            max_block_chars: 4_000,
        }
    }
}

fn cap(text: &str, opts: &RenderOptions) -> String {
    if opts.max_block_chars == 0 {
        text.to_string()
    } else {
        cap_chars(text, opts.max_block_chars)
    }
}

/// Renders messages as `role: text` turns, one per line group, with tool calls as
/// `assistant called name(input)` and results as `tool name returned: ...`.
pub fn render_messages(messages: &[Message], opts: &RenderOptions) -> String {
    let mut tool_names: HashMap<&str, &str> = HashMap::new();
    let mut out = String::new();
    for message in messages {
        let role = message.role.as_str();
        if let Some(info) = message.summary_info() {
            let _ = writeln!(
                out,
                "summary of earlier messages (page {}): {}",
                info.page_ref,
                cap(&message.joined_text(), opts)
            );
            continue;
        }
        for block in message.content.iter() {
            match block {
                ContentBlock::Text { text, .. } => {
                    let _ = writeln!(out, "{role}: {}", cap(text, opts));
                }
                ContentBlock::ToolUse {
                    id,
                    name,
                    input_json,
                    ..
                } => {
                    tool_names.insert(id.as_str(), name.as_str());
                    let _ = writeln!(out, "{role} called {name}({})", cap(input_json, opts));
                }
                ContentBlock::ToolResult {
                    tool_use_id,
                    content,
                    is_error,
                    ..
                } => {
                    let name = tool_names
                        .get(tool_use_id.as_str())
                        .copied()
                        .unwrap_or("tool");
                    let verb = if *is_error { "failed" } else { "returned" };
                    let _ = writeln!(out, "{name} {verb}: {}", cap(&result_text(content), opts));
                }
                ContentBlock::Opaque { .. } => {
                    let _ = writeln!(out, "{role}: [non-text content]");
                }
            }
        }
    }
    out
}

/// The text parts of a tool result, joined; other parts are noted, not rendered.
pub fn result_text(parts: &[ToolResultPart]) -> String {
    let mut out = String::new();
    for part in parts {
        if !out.is_empty() {
            out.push('\n');
        }
        match part {
            ToolResultPart::Text { text } => out.push_str(text),
            ToolResultPart::Opaque { .. } => out.push_str("[non-text content]"),
        }
    }
    out
}

/// Fills `{name}` placeholders in `template` from `vars`; `{{` and `}}` stand for braces.
/// An unknown or unclosed placeholder is an error naming it, so a typo in a configured prompt
/// is caught when the stage is built rather than sent to the LLM.
pub fn render_template(template: &str, vars: &[(&str, &str)]) -> Result<String, PluginError> {
    let mut out = String::with_capacity(template.len());
    let mut rest = template;
    while let Some(pos) = rest.find(['{', '}']) {
        out.push_str(&rest[..pos]);
        let tail = &rest[pos..];
        if let Some(after) = tail.strip_prefix("{{") {
            out.push('{');
            rest = after;
        } else if let Some(after) = tail.strip_prefix("}}") {
            out.push('}');
            rest = after;
        } else if tail.starts_with('}') {
            return Err(PluginError::invalid_config(
                "prompt template: unmatched `}` (write `}}` for a literal brace)",
            ));
        } else {
            let close = tail.find('}').ok_or_else(|| {
                PluginError::invalid_config(
                    "prompt template: unclosed `{` (write `{{` for a literal brace)",
                )
            })?;
            let name = &tail[1..close];
            let value = vars
                .iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| *v)
                .ok_or_else(|| {
                    let known: Vec<String> = vars.iter().map(|(k, _)| format!("{{{k}}}")).collect();
                    PluginError::invalid_config(format!(
                        "prompt template: unknown placeholder {{{name}}}; known: {}",
                        known.join(", ")
                    ))
                })?;
            out.push_str(value);
            rest = &tail[close + 1..];
        }
    }
    out.push_str(rest);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conversation::Role;

    #[test]
    fn template_fills_and_escapes() {
        let out = render_template("{{x}} {a}-{b}}}", &[("a", "1"), ("b", "2")]).unwrap();
        assert_eq!(out, "{x} 1-2}");
    }

    #[test]
    fn template_names_unknown_placeholder() {
        let err = render_template("hi {nope}", &[("tool", "x")]).unwrap_err();
        assert!(err.message.contains("{nope}"), "{}", err.message);
        assert!(err.message.contains("{tool}"));
        assert!(render_template("a {b", &[]).is_err());
        assert!(render_template("a } b", &[]).is_err());
    }

    #[test]
    fn renders_tool_calls_with_names() {
        let msgs = vec![
            Message::text(Role::User, "list files"),
            Message::new(
                Role::Assistant,
                vec![ContentBlock::ToolUse {
                    id: "c1".into(),
                    name: "ls".into(),
                    input_json: r#"{"dir":"/"}"#.into(),
                    extra_json: Default::default(),
                }],
            ),
            Message::new(
                Role::Tool,
                vec![ContentBlock::ToolResult {
                    tool_use_id: "c1".into(),
                    content: vec![ToolResultPart::Text {
                        text: "etc usr".into(),
                    }]
                    .into(),
                    is_error: true,
                    extra_json: Default::default(),
                }],
            ),
        ];
        let text = render_messages(&msgs, &RenderOptions::default());
        assert_eq!(
            text,
            "user: list files\nassistant called ls({\"dir\":\"/\"})\nls failed: etc usr\n"
        );
    }
}
