//! OpenAI Chat Completions: `{"messages": [...], ...}` with roles `system`, `developer`,
//! `user`, `assistant` (`tool_calls`) and `tool`.

use std::borrow::Cow;

use abi_stable::std_types::{RString, RVec};

use crate::plugin_api::{ContentBlock, Conversation, Message, Role};

use super::anthropic::{parse_result_content, result_content_out, ResultContent};
use super::form::{self, Form};
use super::json::{
    self, expected, expected_kind, field, level, rstring, string, Extra, Level, Msg, MsgField,
    ObjText, Path, Raw,
};
use super::out::{finish_object, restore_key_order, Out};
use super::pairing::{self, Locator};
use super::{finish_message, written_blocks, Top, WireError, WireFormat};

/// A `tool` message's `content`.
const TOOL_CONTENT: ResultContent = ResultContent {
    key: "content",
    text_type: "text",
    noun: "part",
};

/// The keys the writer puts first, in this order (see [`json::mark_key_order`]).
const MESSAGE_KEYS: &[&str] = &["role", "content", "tool_calls"];
const TOOL_MESSAGE_KEYS: &[&str] = &["role", "tool_call_id", "content"];
const TEXT_KEYS: &[&str] = &["type", "text"];
const CALL_KEYS: &[&str] = &["id", "type", "function"];
const FUNCTION_KEYS: &[&str] = &["name", "arguments"];

pub(super) fn parse(top: Top<'_>) -> Result<Conversation, WireError> {
    let root = Path::Root;
    let messages_path = root.key("messages");
    let messages = top
        .list
        .into_messages()
        .into_iter()
        .enumerate()
        .map(|(i, msg)| parse_message(msg, &messages_path.index(i)))
        .collect::<Result<Vec<_>, _>>()?;
    pairing::check(
        &messages,
        WireFormat::OpenAi,
        Locator::model(WireFormat::OpenAi),
    )?;
    Ok(Conversation {
        thread_id: top.thread_id,
        messages: RVec::from(messages),
        metadata_json: top.metadata_json,
    })
}

fn parse_message(msg: Msg<'_>, path: &Path<'_>) -> Result<Message, WireError> {
    let fields = match msg {
        Msg::Object(fields) => fields,
        Msg::Other(kind) => return Err(expected_kind(path, "an object", kind)),
    };
    let Some(role) = Msg::raw(&fields, "role") else {
        return super::item_in_messages(&fields, path);
    };
    let role_path = path.key("role");
    let (role, developer) = match string(role, &role_path)?.as_ref() {
        "system" => (Role::System, false),
        "developer" => (Role::System, true),
        "user" => (Role::User, false),
        "assistant" => (Role::Assistant, false),
        "tool" => (Role::Tool, false),
        other => return super::opaque_message(&fields, path, &format!("role:{other}")),
    };
    let canonical = if role == Role::Tool {
        TOOL_MESSAGE_KEYS
    } else {
        MESSAGE_KEYS
    };
    json::known_keys_once(fields.iter().map(|(k, _)| k.as_ref()), canonical, path)?;
    let order = json::key_order_marker(fields.iter().map(|(k, _)| k.as_ref()), canonical);
    let mut content = None;
    let mut tool_calls = None;
    let mut tool_call_id = None;
    let mut extra = ObjText::new();
    for (key, value) in fields {
        match (key.as_ref(), value) {
            (_, MsgField::Content(level)) => content = Some(level),
            ("role", _) => {}
            ("tool_calls", MsgField::Raw(raw)) if role != Role::Tool => tool_calls = Some(raw),
            ("tool_call_id", MsgField::Raw(raw)) if role == Role::Tool => tool_call_id = Some(raw),
            (other, MsgField::Raw(raw)) => extra.raw(other, raw.get()),
        }
    }
    if let Some(order) = order {
        extra.raw(form::KEYS, &order);
    }
    if developer {
        extra.string(form::ROLE, "developer");
    }

    if role == Role::Tool {
        let Some(id) = tool_call_id else {
            return Err(path.error("tool message without \"tool_call_id\""));
        };
        let id = string(id, &path.key("tool_call_id"))?;
        let (parts, shape) = parse_result_content(content, path, &TOOL_CONTENT)?;
        let mut result_extra = ObjText::new();
        if shape != form::openai_result_default(&parts) {
            result_extra.string(form::CONTENT, shape.name());
        }
        let result = ContentBlock::ToolResult {
            tool_use_id: rstring(id),
            content: RVec::from(parts),
            is_error: false,
            extra_json: result_extra.finish(),
        };
        return Ok(finish_message(role, vec![result], extra));
    }

    let content_path = path.key("content");
    let (mut blocks, shape) = match content {
        None => (Vec::new(), Form::Absent),
        Some(Level::String(s)) => (vec![ContentBlock::text(rstring(s))], Form::String),
        Some(Level::Null) => (Vec::new(), Form::Null),
        Some(Level::Array(items)) => {
            let mut unknown = Vec::new();
            let blocks = items
                .iter()
                .enumerate()
                .map(|(j, part)| parse_part(part, &content_path.index(j), &mut unknown))
                .collect::<Result<Vec<_>, _>>()?;
            super::mark_opaque(&mut extra, &unknown);
            (blocks, Form::Array)
        }
        Some(other) => {
            return Err(expected(
                &content_path,
                "a string, null or an array of content parts",
                &other,
            ))
        }
    };
    let refs: Vec<&ContentBlock> = blocks.iter().collect();
    if shape != form::openai_default(&refs, role) {
        extra.string(form::CONTENT, shape.name());
    }
    if let Some(raw) = tool_calls {
        let calls_path = path.key("tool_calls");
        match level(raw, &calls_path)? {
            Level::Array(items) if items.is_empty() => extra.string(form::TOOL_CALLS, "empty"),
            Level::Array(items) => {
                for (k, item) in items.iter().enumerate() {
                    blocks.push(parse_call(item, &calls_path.index(k))?);
                }
            }
            Level::Null => extra.string(form::TOOL_CALLS, "null"),
            other => return Err(expected(&calls_path, "an array", &other)),
        }
    }
    Ok(finish_message(role, blocks, extra))
}

/// The content part types of Chat Completions that tamp carries as opaque blocks within their
/// message; a part of any other type pins its message (`rules::pinned`).
pub(super) const KNOWN_PARTS: &[&str] = &["text", "image_url", "input_audio", "file", "refusal"];

/// A content part: `text` (other fields kept in `extra_json`), anything else opaque; the
/// types tamp does not know are added to `unknown` (`block:<type>`).
fn parse_part(
    raw: Raw<'_>,
    path: &Path<'_>,
    unknown: &mut Vec<String>,
) -> Result<ContentBlock, WireError> {
    let (fields, ty) = json::typed_object(raw, path, "part")?;
    let interpreted: &[&str] = if ty == "text" { TEXT_KEYS } else { &["type"] };
    json::known_keys_once(fields.iter().map(|(k, _)| k.as_ref()), interpreted, path)?;
    if ty != "text" {
        if !KNOWN_PARTS.contains(&ty.as_ref()) {
            unknown.push(format!("block:{ty}"));
        }
        return Ok(ContentBlock::Opaque {
            json: RString::from(raw.get()),
        });
    }
    let Some(text) = field(&fields, "text") else {
        return Err(path.error("text without \"text\""));
    };
    let text = string(text, &path.key("text"))?;
    let mut extra = ObjText::new();
    for (key, value) in &fields {
        if key != "type" && key != "text" {
            extra.raw(key, value.get());
        }
    }
    json::mark_key_order(&mut extra, &fields, TEXT_KEYS, form::KEYS);
    Ok(ContentBlock::Text {
        text: rstring(text),
        extra_json: extra.finish(),
    })
}

/// One entry of `tool_calls`: `{id, type: "function", function: {name, arguments}}`.
fn parse_call(raw: Raw<'_>, path: &Path<'_>) -> Result<ContentBlock, WireError> {
    let fields = match level(raw, path)? {
        Level::Object(fields) => fields,
        other => return Err(expected(path, "an object", &other)),
    };
    json::known_keys_once(fields.iter().map(|(k, _)| k.as_ref()), CALL_KEYS, path)?;
    let Some(id) = field(&fields, "id") else {
        return Err(path.error("tool call without \"id\""));
    };
    let id = string(id, &path.key("id"))?;
    let mut extra = ObjText::new();
    match field(&fields, "type") {
        None => extra.string(form::CALL_TYPE, "absent"),
        Some(ty) => {
            let ty_path = path.key("type");
            let ty = string(ty, &ty_path)?;
            if ty != "function" {
                return Err(ty_path.error(format!("unsupported tool call type \"{ty}\"")));
            }
        }
    }
    let Some(function) = field(&fields, "function") else {
        return Err(path.error("tool call without \"function\""));
    };
    let function_path = path.key("function");
    let function = match level(function, &function_path)? {
        Level::Object(fields) => fields,
        other => return Err(expected(&function_path, "an object", &other)),
    };
    json::known_keys_once(
        function.iter().map(|(k, _)| k.as_ref()),
        FUNCTION_KEYS,
        &function_path,
    )?;
    let Some(name) = field(&function, "name") else {
        return Err(function_path.error("function without \"name\""));
    };
    let name = string(name, &function_path.key("name"))?;
    let Some(arguments) = field(&function, "arguments") else {
        return Err(function_path.error("function without \"arguments\""));
    };
    let input_json = match level(arguments, &function_path.key("arguments"))? {
        Level::String(s) => rstring(s),
        _ => {
            extra.string(form::ARGUMENTS, "json");
            RString::from(arguments.get())
        }
    };
    let mut function_extra = ObjText::new();
    for (key, value) in &function {
        if key != "name" && key != "arguments" {
            function_extra.raw(key, value.get());
        }
    }
    if !function_extra.is_empty() {
        extra.raw(form::FUNCTION, function_extra.finish().as_str());
    }
    json::mark_key_order(&mut extra, &function, FUNCTION_KEYS, form::FUNCTION_KEYS);
    for (key, value) in &fields {
        if !matches!(key.as_ref(), "id" | "type" | "function") {
            extra.raw(key, value.get());
        }
    }
    json::mark_key_order(&mut extra, &fields, CALL_KEYS, form::KEYS);
    Ok(ContentBlock::ToolUse {
        id: rstring(id),
        name: rstring(name),
        input_json,
        extra_json: extra.finish(),
    })
}

// ---------------------------------------------------------------------------------------------
// Writing

/// The wire messages for `messages`. A tool result becomes a `tool` message, placed before the
/// rest of the message that held it.
pub(super) fn messages_out(messages: &[Message]) -> Vec<Out<'_>> {
    let mut out = Vec::with_capacity(messages.len());
    for m in messages {
        if let Some(json) = super::raw_json(m) {
            out.push(Out::json_or_string(json));
            continue;
        }
        match written_blocks(m) {
            Cow::Borrowed(blocks) => write_message(m, blocks, &mut out),
            Cow::Owned(blocks) => {
                let mut owned: Vec<Out<'_>> = Vec::new();
                write_message(m, &blocks, &mut owned);
                out.extend(owned.into_iter().map(|o| o.into_owned()));
            }
        }
    }
    out
}

/// Appends the wire messages of `m`, whose written blocks are `blocks`.
fn write_message<'a>(m: &'a Message, blocks: &'a [ContentBlock], out: &mut Vec<Out<'a>>) {
    let mut extra = Some(Extra::parse(m.extra_json.as_str()));
    let mut has_results = false;
    for block in blocks {
        if let ContentBlock::ToolResult { .. } = block {
            has_results = true;
            // A tool message's own fields (`name`, ...) go on its (first) result.
            let own = if m.role == Role::Tool {
                extra.take()
            } else {
                None
            };
            out.push(tool_message(block, own));
        }
    }
    let parts: Vec<&ContentBlock> = blocks
        .iter()
        .filter(|b| {
            !matches!(
                b,
                ContentBlock::ToolResult { .. } | ContentBlock::ToolUse { .. }
            )
        })
        .collect();
    let calls: Vec<&ContentBlock> = blocks
        .iter()
        .filter(|b| matches!(b, ContentBlock::ToolUse { .. }))
        .collect();
    let rest = !parts.is_empty() || !calls.is_empty();
    if !(rest || (!has_results && m.role != Role::Tool)) {
        return;
    }
    let extra = extra.unwrap_or_default();
    let role = match m.role {
        Role::System if extra.marker(form::ROLE).as_deref() == Some("developer") => "developer",
        Role::System => "system",
        Role::Assistant => "assistant",
        Role::User | Role::Tool => "user",
    };
    let mut own = vec![("role".into(), Out::str(role))];
    let shape = form::choose(
        Form::from_marker(&extra),
        form::openai_default(&parts, m.role),
        |shape| match shape {
            Form::String => form::is_single_plain_text(&parts),
            Form::Null | Form::Absent => parts.is_empty(),
            Form::Array => true,
        },
    );
    match (shape, &parts[..]) {
        (Form::Absent, _) => {}
        (Form::Null, _) => own.push(("content".into(), Out::Null)),
        (Form::String, [ContentBlock::Text { text, .. }]) => {
            own.push(("content".into(), Out::str(text.as_str())));
        }
        _ => {
            let parts = parts.iter().map(|b| part_out(b)).collect();
            own.push(("content".into(), Out::Array(parts)));
        }
    }
    if !calls.is_empty() {
        let calls = calls.iter().map(|b| call_out(b)).collect();
        own.push(("tool_calls".into(), Out::Array(calls)));
    } else {
        match extra.marker(form::TOOL_CALLS).as_deref() {
            Some("empty") => own.push(("tool_calls".into(), Out::Array(Vec::new()))),
            Some("null") => own.push(("tool_calls".into(), Out::Null)),
            _ => {}
        }
    }
    out.push(finish_object(own, &extra));
}

fn tool_message<'a>(block: &'a ContentBlock, own_extra: Option<Extra<'a>>) -> Out<'a> {
    let ContentBlock::ToolResult {
        tool_use_id,
        content,
        extra_json,
        ..
    } = block
    else {
        return Out::Null;
    };
    let shape = form::openai_result_shape(content, &Extra::parse(extra_json.as_str()));
    let mut own = vec![
        ("role".into(), Out::str("tool")),
        ("tool_call_id".into(), Out::str(tool_use_id.as_str())),
    ];
    if let Some(value) = result_content_out(content, shape, "text") {
        own.push(("content".into(), value));
    }
    finish_object(own, &own_extra.unwrap_or_default())
}

fn part_out(block: &ContentBlock) -> Out<'_> {
    match block {
        ContentBlock::Text { text, extra_json } => {
            let own = vec![
                ("type".into(), Out::str("text")),
                ("text".into(), Out::str(text.as_str())),
            ];
            finish_object(own, &Extra::parse(extra_json.as_str()))
        }
        ContentBlock::Opaque { json } => Out::json_or_string(json.as_str()),
        // Not reached: tool blocks are written as tool calls and tool messages.
        _ => Out::Null,
    }
}

fn call_out(block: &ContentBlock) -> Out<'_> {
    let ContentBlock::ToolUse {
        id,
        name,
        input_json,
        extra_json,
    } = block
    else {
        return Out::Null;
    };
    let mut extra = Extra::parse(extra_json.as_str());
    let arguments = if extra.marker(form::ARGUMENTS).as_deref() == Some("json") {
        Out::json_or_string(input_json.as_str())
    } else {
        Out::str(input_json.as_str())
    };
    let mut function = vec![
        ("name".into(), Out::str(name.as_str())),
        ("arguments".into(), arguments),
    ];
    if let Some(more) = extra.take(form::FUNCTION) {
        let more = Extra::parse(more.get());
        for (key, raw) in more.wire_fields() {
            if !function.iter().any(|(k, _)| k == key) {
                function.push((key.clone(), Out::Raw(Cow::Borrowed(raw.get()))));
            }
        }
    }
    let function = restore_key_order(function, extra.key_order(form::FUNCTION_KEYS));
    let mut own = vec![("id".into(), Out::str(id.as_str()))];
    if extra.marker(form::CALL_TYPE).as_deref() != Some("absent") {
        own.push(("type".into(), Out::str("function")));
    }
    own.push(("function".into(), Out::Object(function)));
    finish_object(own, &extra)
}
