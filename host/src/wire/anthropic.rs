//! Anthropic Messages: `{"system": str | [text blocks], "messages": [...], ...}`.

use std::borrow::Cow;

use abi_stable::std_types::{RString, RVec};

use crate::plugin_api::{ContentBlock, Conversation, Message, Role, ToolResultPart};

use super::form::{self, Form};
use super::json::{
    self, expected, expected_kind, field, level, rstring, string, Extra, Level, Msg, MsgField,
    ObjText, Path, Raw,
};
use super::out::{finish_object, Out};
use super::pairing::{self, Locator};
use super::{finish_message, written_blocks, Top, WireError, WireFormat};

/// The keys the writer puts first, in this order (see [`json::mark_key_order`]).
const MESSAGE_KEYS: &[&str] = &["role", "content"];
const TEXT_KEYS: &[&str] = &["type", "text"];
const TOOL_USE_KEYS: &[&str] = &["type", "id", "name", "input"];
const TOOL_RESULT_KEYS: &[&str] = &["type", "tool_use_id", "content", "is_error"];

pub(super) fn parse(top: Top<'_>) -> Result<Conversation, WireError> {
    let Top {
        list,
        system,
        thread_id,
        metadata_json,
    } = top;
    let wire = list.into_messages();
    let mut messages = Vec::with_capacity(wire.len() + 1);
    let has_system = system.is_some();
    if let Some(system) = system {
        messages.push(parse_system(system)?);
    }
    let root = Path::Root;
    let messages_path = root.key("messages");
    for (i, msg) in wire.into_iter().enumerate() {
        // A system message the writer would otherwise move into the top-level `system`.
        let leading = messages.iter().all(|m: &Message| m.role == Role::System);
        messages.push(parse_message(msg, &messages_path.index(i), leading)?);
    }
    pairing::check(
        &messages,
        WireFormat::Anthropic,
        Locator::anthropic_wire(has_system),
    )?;
    Ok(Conversation {
        thread_id,
        messages: RVec::from(messages),
        metadata_json,
    })
}

/// What a message held beyond its blocks: block types tamp does not know (for
/// `rules::pinned::OPAQUE`) and a compaction boundary.
#[derive(Default)]
struct Found {
    opaque: Vec<String>,
    boundary: bool,
}

impl Found {
    fn mark(self, extra: &mut ObjText) {
        super::mark_opaque(extra, &self.opaque);
        if self.boundary {
            extra.string(form::BOUNDARY, "compaction");
        }
    }
}

fn parse_system(raw: Raw<'_>) -> Result<Message, WireError> {
    let root = Path::Root;
    let path = root.key("system");
    let mut found = Found::default();
    let (blocks, shape) = match level(raw, &path)? {
        Level::String(s) => (vec![ContentBlock::text(rstring(s))], Form::String),
        Level::Array(items) => {
            let blocks = items
                .iter()
                .enumerate()
                .map(|(j, b)| parse_block(b, &path.index(j), &mut found))
                .collect::<Result<Vec<_>, _>>()?;
            (blocks, Form::Array)
        }
        other => {
            return Err(expected(
                &path,
                "a string or an array of text blocks",
                &other,
            ))
        }
    };
    let mut extra = ObjText::new();
    mark_shape(&mut extra, &blocks, shape);
    found.mark(&mut extra);
    Ok(finish_message(Role::System, blocks, extra))
}

/// One entry of `messages`; `leading` when every message before it is a system message.
fn parse_message(msg: Msg<'_>, path: &Path<'_>, leading: bool) -> Result<Message, WireError> {
    let fields = match msg {
        Msg::Object(fields) => fields,
        Msg::Other(kind) => return Err(expected_kind(path, "an object", kind)),
    };
    let Some(role) = Msg::raw(&fields, "role") else {
        return super::item_in_messages(&fields, path);
    };
    let role_path = path.key("role");
    let role = match string(role, &role_path)?.as_ref() {
        "user" => Role::User,
        "assistant" => Role::Assistant,
        // Mid-conversation system messages (Claude Code sends one after the task).
        "system" => Role::System,
        other => return super::opaque_message(&fields, path, &format!("role:{other}")),
    };
    json::known_keys_once(fields.iter().map(|(k, _)| k.as_ref()), MESSAGE_KEYS, path)?;
    let order = json::key_order_marker(fields.iter().map(|(k, _)| k.as_ref()), MESSAGE_KEYS);
    let mut content = None;
    let mut extra = ObjText::new();
    for (key, value) in fields {
        match value {
            MsgField::Content(level) => content = Some(level),
            MsgField::Raw(_) if key == "role" => {}
            MsgField::Raw(raw) => extra.raw(&key, raw.get()),
        }
    }
    if let Some(order) = order {
        extra.raw(form::KEYS, &order);
    }
    let Some(content) = content else {
        return Err(path.error("message without \"content\""));
    };
    let content_path = path.key("content");
    let mut found = Found::default();
    let (blocks, shape) = match content {
        Level::String(s) => (vec![ContentBlock::text(rstring(s))], Form::String),
        Level::Array(items) => {
            let blocks = items
                .iter()
                .enumerate()
                .map(|(j, b)| parse_block(b, &content_path.index(j), &mut found))
                .collect::<Result<Vec<_>, _>>()?;
            (blocks, Form::Array)
        }
        other => {
            return Err(expected(
                &content_path,
                "a string or an array of content blocks",
                &other,
            ))
        }
    };
    mark_shape(&mut extra, &blocks, shape);
    found.mark(&mut extra);
    if role == Role::System && leading {
        extra.string(form::SYSTEM, "inline");
    }
    Ok(finish_message(role, blocks, extra))
}

/// Records the content shape when it is not the default.
fn mark_shape(extra: &mut ObjText, blocks: &[ContentBlock], shape: Form) {
    let refs: Vec<&ContentBlock> = blocks.iter().collect();
    if shape != form::anthropic_default(&refs) {
        extra.string(form::CONTENT, shape.name());
    }
}

/// The block types of the Messages API (requests, beta features included) that tamp carries
/// as opaque blocks within their message. Any other type is one tamp does not know: the
/// message holding it is pinned (`rules::pinned`).
pub(super) const KNOWN_BLOCKS: &[&str] = &[
    "text",
    "tool_use",
    "tool_result",
    "image",
    "document",
    "search_result",
    "thinking",
    "redacted_thinking",
    "server_tool_use",
    "web_search_tool_result",
    "web_fetch_tool_result",
    "advisor_tool_result",
    "code_execution_tool_result",
    "bash_code_execution_tool_result",
    "text_editor_code_execution_tool_result",
    "tool_search_tool_result",
    "mcp_tool_use",
    "mcp_tool_result",
    "container_upload",
    "compaction",
];

fn parse_block(
    raw: Raw<'_>,
    path: &Path<'_>,
    found: &mut Found,
) -> Result<ContentBlock, WireError> {
    let (fields, ty) = json::typed_object(raw, path, "block")?;
    // The keys read from a block of this type; an opaque block is passed through whole.
    let interpreted = match ty.as_ref() {
        "text" => TEXT_KEYS,
        "tool_use" => TOOL_USE_KEYS,
        "tool_result" => TOOL_RESULT_KEYS,
        _ => &["type"],
    };
    json::known_keys_once(fields.iter().map(|(k, _)| k.as_ref()), interpreted, path)?;
    let required = |key: &str| {
        field(&fields, key).ok_or_else(|| path.error(format!("{ty} without \"{key}\"")))
    };
    let extras = |known: &[&str], canonical: &[&str], extra: &mut ObjText| {
        for (key, value) in &fields {
            if key != "type" && !known.contains(&key.as_ref()) {
                extra.raw(key, value.get());
            }
        }
        json::mark_key_order(extra, &fields, canonical, form::KEYS);
    };
    let mut extra = ObjText::new();
    match ty.as_ref() {
        "text" => {
            let text = string(required("text")?, &path.key("text"))?;
            extras(&["text"], TEXT_KEYS, &mut extra);
            Ok(ContentBlock::Text {
                text: rstring(text),
                extra_json: extra.finish(),
            })
        }
        "tool_use" => {
            let id = string(required("id")?, &path.key("id"))?;
            let name = string(required("name")?, &path.key("name"))?;
            let input = required("input")?;
            extras(&["id", "name", "input"], TOOL_USE_KEYS, &mut extra);
            Ok(ContentBlock::ToolUse {
                id: rstring(id),
                name: rstring(name),
                // Without the source's indentation (see `strip_whitespace`), every value
                // and escape kept as sent.
                input_json: json::rstring(json::strip_whitespace(input.get())),
                extra_json: extra.finish(),
            })
        }
        "tool_result" => {
            let id = string(required("tool_use_id")?, &path.key("tool_use_id"))?;
            let content_path = path.key("content");
            let content = match field(&fields, "content") {
                Some(raw) => Some(level(raw, &content_path)?),
                None => None,
            };
            let (parts, shape) = parse_result_content(content, path, &RESULT_CONTENT)?;
            let is_error = match field(&fields, "is_error") {
                None => false,
                Some(raw) => {
                    let is_error_path = path.key("is_error");
                    match level(raw, &is_error_path)? {
                        Level::Bool(b) => {
                            if !b {
                                extra.string(form::IS_ERROR, "false");
                            }
                            b
                        }
                        other => return Err(expected(&is_error_path, "a boolean", &other)),
                    }
                }
            };
            extras(
                &["tool_use_id", "content", "is_error"],
                TOOL_RESULT_KEYS,
                &mut extra,
            );
            if shape != form::anthropic_result_default(&parts) {
                extra.string(form::CONTENT, shape.name());
            }
            Ok(ContentBlock::ToolResult {
                tool_use_id: rstring(id),
                content: RVec::from(parts),
                is_error,
                extra_json: extra.finish(),
            })
        }
        other => {
            if other == "compaction" {
                found.boundary = true;
            } else if !KNOWN_BLOCKS.contains(&other) {
                found.opaque.push(format!("block:{other}"));
            }
            Ok(ContentBlock::Opaque {
                json: RString::from(raw.get()),
            })
        }
    }
}

/// Where a format keeps a tool result's content and how it names its text parts.
pub(super) struct ResultContent {
    /// The field: `content`, or Responses `output`.
    pub(super) key: &'static str,
    /// The type of a text part: `text`, or Responses `input_text`.
    pub(super) text_type: &'static str,
    /// What a part is called in errors.
    pub(super) noun: &'static str,
}

/// Anthropic `tool_result.content`.
pub(super) const RESULT_CONTENT: ResultContent = ResultContent {
    key: "content",
    text_type: "text",
    noun: "block",
};

/// Reads a tool result's content (Anthropic `tool_result.content`, OpenAI `tool` message
/// `content`, Responses `output`; `path` is its owner): a string, null, absent, or an array of
/// parts. A part that is exactly `{"type": <text type>, "text": ...}` is text; any other part
/// is kept opaque.
pub(super) fn parse_result_content(
    content: Option<Level<'_>>,
    path: &Path<'_>,
    shape: &ResultContent,
) -> Result<(Vec<ToolResultPart>, Form), WireError> {
    let Some(content) = content else {
        return Ok((Vec::new(), Form::Absent));
    };
    let (noun, text_type) = (shape.noun, shape.text_type);
    let content_path = path.key(shape.key);
    match content {
        Level::String(s) => Ok((
            vec![ToolResultPart::Text { text: rstring(s) }],
            Form::String,
        )),
        Level::Null => Ok((Vec::new(), Form::Null)),
        Level::Array(items) => {
            let mut parts = Vec::with_capacity(items.len());
            for (k, item) in items.iter().enumerate() {
                let part_path = content_path.index(k);
                let (fields, ty) = json::typed_object(item, &part_path, noun)?;
                let text = match field(&fields, "text") {
                    Some(text) if ty == text_type => Some(string(text, &part_path.key("text"))?),
                    None if ty == text_type => {
                        return Err(part_path.error(format!("{ty} without \"text\"")))
                    }
                    _ => None,
                };
                let plain = fields.len() == 2 && fields[0].0 == "type";
                parts.push(match text {
                    Some(text) if plain => ToolResultPart::Text {
                        text: rstring(text),
                    },
                    _ => ToolResultPart::Opaque {
                        json: RString::from(item.get()),
                    },
                });
            }
            Ok((parts, Form::Array))
        }
        other => Err(expected(
            &content_path,
            "a string or an array of content blocks",
            &other,
        )),
    }
}

// ---------------------------------------------------------------------------------------------
// Writing

/// The `system` field for the leading system messages, if any.
pub(super) fn system_out(system: &[Message]) -> Option<Out<'_>> {
    match system {
        [] => None,
        [only] => {
            let extra = Extra::parse(only.extra_json.as_str());
            Some(match written_blocks(only) {
                Cow::Borrowed(blocks) => content_out(&blocks.iter().collect::<Vec<_>>(), &extra),
                Cow::Owned(blocks) => {
                    content_out(&blocks.iter().collect::<Vec<_>>(), &extra).into_owned()
                }
            })
        }
        many => Some(Out::Array(
            many.iter().flat_map(|m| blocks_out(m, block_out)).collect(),
        )),
    }
}

/// Each written block of `message` through `write` (a summary's marker text is owned).
pub(super) fn blocks_out<'a>(
    message: &'a Message,
    write: impl Fn(&ContentBlock) -> Out<'_>,
) -> Vec<Out<'a>> {
    match written_blocks(message) {
        Cow::Borrowed(blocks) => blocks.iter().map(&write).collect(),
        Cow::Owned(blocks) => blocks.iter().map(|b| write(b).into_owned()).collect(),
    }
}

/// The wire messages for `messages`. Consecutive tool messages become one `user` message;
/// system messages are written in place with the role `system` (mid-conversation system
/// messages), consecutive ones as one (the API takes a system message only right after a
/// user turn; a summary keeps the system messages of its span after it, one after another);
/// an opaque unit is written as it came.
pub(super) fn messages_out(messages: &[Message]) -> Vec<Out<'_>> {
    let mut out = Vec::with_capacity(messages.len());
    let mut i = 0;
    while i < messages.len() {
        let m = &messages[i];
        if let Some(json) = super::raw_json(m) {
            out.push(Out::json_or_string(json));
            i += 1;
            continue;
        }
        if m.role == Role::Tool {
            let mut blocks = Vec::new();
            while i < messages.len() && messages[i].role == Role::Tool {
                blocks.extend(blocks_out(&messages[i], block_out));
                i += 1;
            }
            out.push(Out::Object(vec![
                ("role".into(), Out::str("user")),
                ("content".into(), Out::Array(blocks)),
            ]));
            continue;
        }
        // Not at the start of `messages`, where a client's leading system messages are
        // written back as they came.
        let system_run = messages[i..]
            .iter()
            .take_while(|n| n.role == Role::System && super::raw_json(n).is_none())
            .count();
        if system_run > 1 && !out.is_empty() {
            let blocks = messages[i..i + system_run]
                .iter()
                .flat_map(|n| blocks_out(n, block_out))
                .collect();
            let own = vec![
                ("role".into(), Out::str("system")),
                ("content".into(), Out::Array(blocks)),
            ];
            out.push(finish_object(own, &Extra::parse(m.extra_json.as_str())));
            i += system_run;
            continue;
        }
        let role = match m.role {
            Role::Assistant => "assistant",
            Role::System => "system",
            Role::User | Role::Tool => "user",
        };
        let extra = Extra::parse(m.extra_json.as_str());
        let content = match written_blocks(m) {
            Cow::Borrowed(blocks) => content_out(&blocks.iter().collect::<Vec<_>>(), &extra),
            Cow::Owned(blocks) => {
                content_out(&blocks.iter().collect::<Vec<_>>(), &extra).into_owned()
            }
        };
        let own = vec![("role".into(), Out::str(role)), ("content".into(), content)];
        out.push(finish_object(own, &extra));
        i += 1;
    }
    out
}

/// A message's `content`: a string or an array of blocks.
fn content_out<'a>(blocks: &[&'a ContentBlock], extra: &Extra<'_>) -> Out<'a> {
    let shape = form::choose(
        Form::from_marker(extra),
        form::anthropic_default(blocks),
        |shape| match shape {
            Form::String => form::is_single_plain_text(blocks),
            Form::Array => true,
            Form::Null | Form::Absent => false,
        },
    );
    match (shape, blocks) {
        (Form::String, [ContentBlock::Text { text, .. }]) => Out::str(text.as_str()),
        _ => Out::Array(blocks.iter().map(|b| block_out(b)).collect()),
    }
}

fn block_out(block: &ContentBlock) -> Out<'_> {
    match block {
        ContentBlock::Text { text, extra_json } => {
            let own = vec![
                ("type".into(), Out::str("text")),
                ("text".into(), Out::str(text.as_str())),
            ];
            finish_object(own, &Extra::parse(extra_json.as_str()))
        }
        ContentBlock::ToolUse {
            id,
            name,
            input_json,
            extra_json,
        } => {
            let input = if input_json.trim().is_empty() {
                Out::Object(Vec::new())
            } else {
                Out::compact_json_or_string(input_json.as_str())
            };
            let own = vec![
                ("type".into(), Out::str("tool_use")),
                ("id".into(), Out::str(id.as_str())),
                ("name".into(), Out::str(name.as_str())),
                ("input".into(), input),
            ];
            finish_object(own, &Extra::parse(extra_json.as_str()))
        }
        ContentBlock::ToolResult {
            tool_use_id,
            content,
            is_error,
            extra_json,
        } => {
            let extra = Extra::parse(extra_json.as_str());
            let mut own = vec![
                ("type".into(), Out::str("tool_result")),
                ("tool_use_id".into(), Out::str(tool_use_id.as_str())),
            ];
            let shape = form::choose(
                Form::from_marker(&extra),
                form::anthropic_result_default(content),
                |shape| match shape {
                    Form::String => matches!(&content[..], [ToolResultPart::Text { .. }]),
                    Form::Null | Form::Absent => content.is_empty(),
                    Form::Array => true,
                },
            );
            if let Some(value) = result_content_out(content, shape, "text") {
                own.push(("content".into(), value));
            }
            if *is_error || extra.get(form::IS_ERROR).is_some() {
                own.push(("is_error".into(), Out::Bool(*is_error)));
            }
            finish_object(own, &extra)
        }
        ContentBlock::Opaque { json } => Out::json_or_string(json.as_str()),
    }
}

/// A tool result's content in `shape` (`None`: no content field), text parts of type
/// `text_type`.
pub(super) fn result_content_out<'a>(
    parts: &'a [ToolResultPart],
    shape: Form,
    text_type: &'static str,
) -> Option<Out<'a>> {
    match (shape, parts) {
        (Form::Absent, _) => None,
        (Form::Null, _) => Some(Out::Null),
        (Form::String, [ToolResultPart::Text { text }]) => Some(Out::str(text.as_str())),
        (Form::String, []) => Some(Out::str("")),
        _ => Some(Out::Array(
            parts
                .iter()
                .map(|p| match p {
                    ToolResultPart::Text { text } => Out::Object(vec![
                        ("type".into(), Out::str(text_type)),
                        ("text".into(), Out::str(text.as_str())),
                    ]),
                    ToolResultPart::Opaque { json } => Out::json_or_string(json.as_str()),
                })
                .collect(),
        )),
    }
}
