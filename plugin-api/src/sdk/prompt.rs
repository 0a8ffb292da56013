//! Rendering messages into prompt text, filling prompt templates, and the `<content>` section
//! that holds a prompt's material.

use std::collections::HashMap;
use std::fmt::Write as _;

use crate::conversation::{ContentBlock, Message, Role, ToolResultPart};
use crate::error::PluginError;
use crate::sdk::clearing;
use crate::sdk::summary::cap_chars;

/// How [`render_messages`] renders.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RenderOptions {
    /// Cut each text, tool input and tool result to this many characters (0: no cut).
    pub max_block_chars: usize,
    /// Cut each tool input and tool result further, to about this many characters, keeping
    /// its head and its tail (0: `max_block_chars` alone). A summarizer that reads slowly
    /// (a small local model) is shown what each call did and how it ended, while the page
    /// keeps the whole output.
    pub max_tool_chars: usize,
    /// Cut each text the assistant wrote further, to about this many characters, keeping its
    /// head and its tail (0: `max_block_chars` alone). An agent's long narration is most of
    /// what a slow summarizer reads; its start says what it found and its end what it does
    /// next. The user's words are never cut further.
    pub max_assistant_chars: usize,
}

impl Default for RenderOptions {
    fn default() -> Self {
        RenderOptions {
            max_block_chars: 4_000,
            max_tool_chars: 0,
            max_assistant_chars: 0,
        }
    }
}

impl RenderOptions {
    /// Every block cut to `max_block_chars` characters (0: no cut), tool blocks no further.
    pub fn cut_at(max_block_chars: usize) -> Self {
        RenderOptions {
            max_block_chars,
            ..RenderOptions::default()
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

/// A block with its own head-and-tail cut `max_chars` (0: none), as [`RenderOptions`] has
/// it shown: that cut where it is tighter than `max_block_chars`, else `max_block_chars`'s.
fn cap_to(text: &str, max_chars: usize, opts: &RenderOptions) -> String {
    let tighter = max_chars != 0 && (opts.max_block_chars == 0 || max_chars < opts.max_block_chars);
    if tighter {
        head_and_tail(text, max_chars)
    } else {
        cap(text, opts)
    }
}

fn cap_tool(text: &str, opts: &RenderOptions) -> String {
    cap_to(text, opts.max_tool_chars, opts)
}

/// `text` cut to its first two thirds of `max_chars` characters and its last third, with
/// how much was left out between them. The tail is kept because a command's output ends with
/// what it came to (the last line of a traceback, a test run's count, an exit status).
pub fn head_and_tail(text: &str, max_chars: usize) -> String {
    let total = text.chars().count();
    if total <= max_chars {
        return text.to_string();
    }
    let head = max_chars * 2 / 3;
    let tail = max_chars - head;
    let byte_at = |chars: usize| {
        text.char_indices()
            .nth(chars)
            .map_or(text.len(), |(i, _)| i)
    };
    let head_end = byte_at(head);
    let tail_start = byte_at(total - tail);
    format!(
        "{} […{} characters…] {}",
        text[..head_end].trim_end(),
        total - head - tail,
        text[tail_start..].trim_start()
    )
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
                    let shown = if message.role == Role::Assistant {
                        cap_to(text, opts.max_assistant_chars, opts)
                    } else {
                        cap(text, opts)
                    };
                    let _ = writeln!(out, "{role}: {shown}");
                }
                ContentBlock::ToolUse {
                    id,
                    name,
                    input_json,
                    ..
                } => {
                    tool_names.insert(id.as_str(), name.as_str());
                    // A cleared input or output is shown as such, not as its placeholder: the
                    // page id in it means nothing to a summarizer and costs it tokens.
                    let input = match clearing::parse_input_placeholder(input_json) {
                        Some(_) => "[input cleared]".to_string(),
                        None => cap_tool(input_json, opts),
                    };
                    let _ = writeln!(out, "{role} called {name}({input})");
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
                    if clearing::is_cleared(block) {
                        let _ = writeln!(out, "{name} {verb}: [output cleared]");
                        continue;
                    }
                    let _ = writeln!(
                        out,
                        "{name} {verb}: {}",
                        cap_tool(&result_text(content), opts)
                    );
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
/// An unknown or unclosed placeholder is an error naming it. A template read from a config is
/// better made a [`Template`] once, when the stage is built, than checked on every render.
pub fn render_template(template: &str, vars: &[(&str, &str)]) -> Result<String, PluginError> {
    let names: Vec<&str> = vars.iter().map(|(name, _)| *name).collect();
    let pieces = parse_template("prompt template", template, &names)?;
    Ok(fill(&pieces, &names, vars))
}

/// A prompt template from a stage's config: text with `{name}` placeholders (`{{` and `}}`
/// for literal braces), checked once, when it is made, against the placeholders the stage
/// fills in. Every plugin's template errors read the same way, led by the config field:
///
/// ```
/// use tamp_plugin_api::sdk::prompt::Template;
///
/// let template = Template::new("prompt_template", "Summarize {count} calls:\n{calls}", &["calls", "count"])
///     .and_then(|t| t.require("calls"))
///     .unwrap();
/// assert_eq!(template.render(&[("calls", "ls → a b"), ("count", "1")]), "Summarize 1 calls:\nls → a b");
///
/// let typo = Template::new("prompt_template", "{cals}", &["calls", "count"]).unwrap_err();
/// assert_eq!(typo.message, "prompt_template: unknown placeholder {cals}; known: {calls}, {count}");
/// let missing = Template::new("prompt_template", "{count}", &["calls", "count"])
///     .and_then(|t| t.require("calls"))
///     .unwrap_err();
/// assert_eq!(missing.message, "prompt_template: must contain {calls}");
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Template {
    field: String,
    text: String,
    placeholders: Vec<String>,
    pieces: Vec<Piece>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Piece {
    Text(String),
    /// The placeholder at this index of the known ones.
    Slot(usize),
}

impl Template {
    /// Parses `text`, read from the config key `field`, whose placeholders may be any of
    /// `placeholders`. An unknown placeholder or a stray brace is an
    /// [`InvalidConfig`](crate::ErrorKind::InvalidConfig) error naming `field` and the fault.
    pub fn new(field: &str, text: &str, placeholders: &[&str]) -> Result<Template, PluginError> {
        let pieces = parse_template(field, text, placeholders)?;
        Ok(Template {
            field: field.to_string(),
            text: text.to_string(),
            placeholders: placeholders.iter().map(|p| p.to_string()).collect(),
            pieces,
        })
    }

    /// The template, or an error when it does not use `placeholder` (the material a prompt
    /// without it would leave out).
    pub fn require(self, placeholder: &str) -> Result<Template, PluginError> {
        if self.uses(placeholder) {
            Ok(self)
        } else {
            Err(PluginError::invalid_config(format!(
                "{}: must contain {{{placeholder}}}",
                self.field
            )))
        }
    }

    /// Whether the template has the placeholder `name` somewhere.
    pub fn uses(&self, name: &str) -> bool {
        self.pieces.iter().any(|piece| match piece {
            Piece::Slot(i) => self.placeholders[*i] == name,
            Piece::Text(_) => false,
        })
    }

    /// The text with each placeholder replaced by its value in `values`; a placeholder
    /// given no value is left empty.
    pub fn render(&self, values: &[(&str, &str)]) -> String {
        let names: Vec<&str> = self.placeholders.iter().map(String::as_str).collect();
        fill(&self.pieces, &names, values)
    }

    /// The template as configured.
    pub fn as_str(&self) -> &str {
        &self.text
    }
}

/// `text` cut into literal text and placeholders (indexes into `known`); errors are led by
/// `field`.
fn parse_template(field: &str, text: &str, known: &[&str]) -> Result<Vec<Piece>, PluginError> {
    let mut pieces = Vec::new();
    let mut literal = String::new();
    let mut rest = text;
    while let Some(pos) = rest.find(['{', '}']) {
        literal.push_str(&rest[..pos]);
        let tail = &rest[pos..];
        if let Some(after) = tail.strip_prefix("{{") {
            literal.push('{');
            rest = after;
        } else if let Some(after) = tail.strip_prefix("}}") {
            literal.push('}');
            rest = after;
        } else if tail.starts_with('}') {
            return Err(PluginError::invalid_config(format!(
                "{field}: unmatched `}}` (write `}}}}` for a literal brace)"
            )));
        } else {
            let close = tail.find('}').ok_or_else(|| {
                PluginError::invalid_config(format!(
                    "{field}: unclosed `{{` (write `{{{{` for a literal brace)"
                ))
            })?;
            let name = &tail[1..close];
            let index = known.iter().position(|k| *k == name).ok_or_else(|| {
                let listed: Vec<String> = known.iter().map(|k| format!("{{{k}}}")).collect();
                PluginError::invalid_config(format!(
                    "{field}: unknown placeholder {{{name}}}; known: {}",
                    listed.join(", ")
                ))
            })?;
            if !literal.is_empty() {
                pieces.push(Piece::Text(std::mem::take(&mut literal)));
            }
            pieces.push(Piece::Slot(index));
            rest = &tail[close + 1..];
        }
    }
    literal.push_str(rest);
    if !literal.is_empty() {
        pieces.push(Piece::Text(literal));
    }
    Ok(pieces)
}

/// The pieces with each slot (an index into `names`) replaced by its value in `values`.
fn fill(pieces: &[Piece], names: &[&str], values: &[(&str, &str)]) -> String {
    let mut out = String::new();
    for piece in pieces {
        match piece {
            Piece::Text(text) => out.push_str(text),
            Piece::Slot(i) => {
                let value = values.iter().find(|(name, _)| *name == names[*i]);
                out.push_str(value.map_or("", |(_, v)| v));
            }
        }
    }
    out
}

/// Opens the material section of a prompt: the host's providers (the extractive summarizer,
/// the scripted provider's matching) read the material between the last pair of tags.
pub const CONTENT_OPEN: &str = "<content>";
/// Closes the material section of a prompt.
pub const CONTENT_CLOSE: &str = "</content>";

/// Wraps `material` in [`CONTENT_OPEN`]/[`CONTENT_CLOSE`] on lines of their own:
/// `<content>\n{material}\n</content>`.
///
/// Tags that occur inside the material itself are escaped (`&lt;content&gt;`,
/// `&lt;/content&gt;`) so that [`content_section`] finds the real section boundaries; the
/// material is otherwise unchanged.
pub fn wrap_content(material: &str) -> String {
    let mut out =
        String::with_capacity(material.len() + CONTENT_OPEN.len() + CONTENT_CLOSE.len() + 2);
    out.push_str(CONTENT_OPEN);
    out.push('\n');
    if material.contains(CONTENT_OPEN) || material.contains(CONTENT_CLOSE) {
        out.push_str(
            &material
                .replace(CONTENT_OPEN, "&lt;content&gt;")
                .replace(CONTENT_CLOSE, "&lt;/content&gt;"),
        );
    } else {
        out.push_str(material);
    }
    out.push('\n');
    out.push_str(CONTENT_CLOSE);
    out
}

/// The material of a prompt: the text between the last [`CONTENT_CLOSE`] and the last
/// [`CONTENT_OPEN`] before it, without the single newline [`wrap_content`] puts on each side.
/// The whole prompt when it has no such pair (no closing tag, or no opening tag before it).
pub fn content_section(prompt: &str) -> &str {
    let Some(close) = prompt.rfind(CONTENT_CLOSE) else {
        return prompt;
    };
    let Some(open) = prompt[..close].rfind(CONTENT_OPEN) else {
        return prompt;
    };
    let inner = &prompt[open + CONTENT_OPEN.len()..close];
    let inner = inner
        .strip_prefix("\r\n")
        .or_else(|| inner.strip_prefix('\n'))
        .unwrap_or(inner);
    inner
        .strip_suffix("\r\n")
        .or_else(|| inner.strip_suffix('\n'))
        .unwrap_or(inner)
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
    fn templates_are_checked_once_and_render_by_name() {
        let known = ["calls", "tools"];
        let t = Template::new("prompt_template", "{{{tools}}}: {calls} {calls}}}", &known)
            .unwrap()
            .require("calls")
            .unwrap();
        assert_eq!(t.render(&[("tools", "ls"), ("calls", "c")]), "{ls}: c c}");
        // A value left out renders empty; one not in the template is ignored.
        assert_eq!(t.render(&[("calls", "c"), ("other", "x")]), "{}: c c}");
        assert!(t.uses("tools") && !t.uses("other"));
        assert_eq!(t.as_str(), "{{{tools}}}: {calls} {calls}}}");
        let err = |text: &str| Template::new("note", text, &known).unwrap_err();
        assert_eq!(
            err("{tool}").message,
            "note: unknown placeholder {tool}; known: {calls}, {tools}"
        );
        assert_eq!(err("{tool}").kind, crate::ErrorKind::InvalidConfig);
        assert_eq!(
            err("a {calls").message,
            "note: unclosed `{` (write `{{` for a literal brace)"
        );
        assert_eq!(
            err("a } b").message,
            "note: unmatched `}` (write `}}` for a literal brace)"
        );
        let without = Template::new("note", "{tools}", &known).unwrap();
        assert_eq!(
            without.require("calls").unwrap_err().message,
            "note: must contain {calls}"
        );
    }

    /// A user message, then a failed call of `name` with `input` answered by `output`.
    fn failed_call(said: &str, name: &str, input: &str, output: &str) -> Vec<Message> {
        vec![
            Message::text(Role::User, said),
            Message::new(
                Role::Assistant,
                vec![ContentBlock::ToolUse {
                    id: "c1".into(),
                    name: name.into(),
                    input_json: input.into(),
                    extra_json: Default::default(),
                }],
            ),
            Message::new(
                Role::Tool,
                vec![ContentBlock::ToolResult {
                    tool_use_id: "c1".into(),
                    content: vec![ToolResultPart::Text {
                        text: output.into(),
                    }]
                    .into(),
                    is_error: true,
                    extra_json: Default::default(),
                }],
            ),
        ]
    }

    #[test]
    fn renders_tool_calls_with_names() {
        let msgs = failed_call("list files", "ls", r#"{"dir":"/"}"#, "etc usr");
        let text = render_messages(&msgs, &RenderOptions::default());
        assert_eq!(
            text,
            "user: list files\nassistant called ls({\"dir\":\"/\"})\nls failed: etc usr\n"
        );
        // Cleared, the call and its output are said to be cleared, without the placeholders.
        let mut cleared = msgs.clone();
        for i in 1..3 {
            let mut c = crate::sdk::clearing::Clearing::new(&msgs[i], i);
            c.clear_input(0);
            c.clear_result(0, "Output of ls cleared.");
            cleared[i] = c.message().clone();
        }
        assert_eq!(
            render_messages(&cleared, &RenderOptions::default()),
            "user: list files\nassistant called ls([input cleared])\nls failed: [output cleared]\n"
        );
    }

    #[test]
    fn tool_blocks_are_cut_to_their_head_and_tail_and_texts_are_not() {
        let output = format!(
            "Traceback (most recent call last):\n{}ValueError: bad total",
            "  frame\n".repeat(200)
        );
        let script = format!("{{\"command\":\"python -c '{}'\"}}", "x = 1; ".repeat(100));
        let said = "a".repeat(900);
        let msgs = failed_call(&said, "bash", &script, &output);
        let opts = RenderOptions {
            max_tool_chars: 300,
            ..RenderOptions::default()
        };
        let text = render_messages(&msgs, &opts);
        // The user's words stay whole; the call's input and its output keep how they start
        // and how they end, and say how much is left out.
        assert!(text.starts_with(&format!("user: {said}\n")), "{text}");
        let result = &text[text.find("bash failed: ").unwrap()..].trim_end();
        assert!(result.starts_with("bash failed: Traceback (most recent call last):"));
        assert!(result.ends_with("ValueError: bad total"), "{result}");
        let cut = output.chars().count() - 300;
        assert!(
            result.contains(&format!("[…{cut} characters…]")),
            "{result}"
        );
        assert!(text.contains("bash({\"command\":\"python -c 'x = 1;"));
        assert!(text.contains("x = 1; '\"})"), "{text}");
        assert!(text.len() < said.len() + 900, "{} characters", text.len());
        // Off (0), and a tool cap no tighter than the block cap, change nothing.
        for same in [
            RenderOptions::default(),
            RenderOptions {
                max_tool_chars: 5_000,
                ..RenderOptions::default()
            },
        ] {
            let whole = render_messages(&msgs, &same);
            assert!(whole.contains(&output), "{same:?}");
        }
    }

    #[test]
    fn the_assistant_s_texts_are_cut_to_their_head_and_tail_and_the_user_s_are_not() {
        let said = format!("Please fix the loader. {}", "Details. ".repeat(200));
        let narration = format!(
            "I found the cause. {}Next I will run the tests.",
            "Reading the code. ".repeat(200)
        );
        let msgs = vec![
            Message::text(Role::User, said.as_str()),
            Message::text(Role::Assistant, narration.as_str()),
        ];
        let opts = RenderOptions {
            max_assistant_chars: 300,
            ..RenderOptions::default()
        };
        let text = render_messages(&msgs, &opts);
        assert!(text.starts_with(&format!("user: {said}\n")), "{text}");
        let shown = text.lines().nth(1).unwrap();
        assert!(
            shown.starts_with("assistant: I found the cause."),
            "{shown}"
        );
        assert!(shown.ends_with("Next I will run the tests."), "{shown}");
        let cut = narration.chars().count() - 300;
        assert!(shown.contains(&format!("[…{cut} characters…]")), "{shown}");
        // Off (0) changes nothing below the block cap.
        let whole = render_messages(&msgs, &RenderOptions::cut_at(0));
        assert!(whole.contains(&narration));
    }

    #[test]
    fn head_and_tail_counts_characters_not_bytes() {
        assert_eq!(head_and_tail("short", 100), "short");
        let text = "é".repeat(30) + &"ü".repeat(30);
        let cut = head_and_tail(&text, 30);
        assert_eq!(
            cut,
            format!("{} […30 characters…] {}", "é".repeat(20), "ü".repeat(10))
        );
    }

    #[test]
    fn content_section_uses_last_pair() {
        assert_eq!(content_section("no tags here"), "no tags here");
        assert_eq!(
            content_section("x <content>only open"),
            "x <content>only open"
        );
        assert_eq!(
            content_section("only close</content>"),
            "only close</content>"
        );
        let p = format!(
            "Summarize the text in {CONTENT_OPEN}{CONTENT_CLOSE} tags.\n{}\nBe brief.",
            wrap_content("the material")
        );
        assert_eq!(content_section(&p), "the material");
        let p = format!(
            "{}\nand now\n{}",
            wrap_content("first"),
            wrap_content("second")
        );
        assert_eq!(content_section(&p), "second");
        assert_eq!(content_section("<content>inline</content>"), "inline");
    }

    #[test]
    fn wrap_escapes_nested_tags() {
        let wrapped = wrap_content("html: <content>x</content> end");
        assert_eq!(
            content_section(&wrapped),
            "html: &lt;content&gt;x&lt;/content&gt; end"
        );
        assert_eq!(content_section(&wrap_content("")), "");
    }
}
