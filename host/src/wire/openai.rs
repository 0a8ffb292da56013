//! OpenAI Chat Completions: `{"messages": [...], ...}` with roles `system`, `developer`,
//! `user`, `assistant` (`tool_calls`) and `tool`.

use abi_stable::std_types::{RString, RVec};
use serde_json::{Map, Value};

use crate::plugin_api::{ContentBlock, Conversation, Message, Role, ToolResultPart};

use super::anthropic::{finish_object, parse_result_content, result_content_value};
use super::form::{self, Form};
use super::json::{
    self, expected, expected_kind, field, level, rstring, string, Level, Msg, MsgField, ObjText,
    Path, Raw,
};
use super::pairing::{self, Locator};
use super::{finish_message, written_blocks, Top, WireError, WireFormat};

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
        .messages
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
        return Err(path.error("message without \"role\""));
    };
    let role_path = path.key("role");
    let (role, developer) = match string(role, &role_path)?.as_ref() {
        "system" => (Role::System, false),
        "developer" => (Role::System, true),
        "user" => (Role::User, false),
        "assistant" => (Role::Assistant, false),
        "tool" => (Role::Tool, false),
        other => return Err(role_path.error(format!("unknown role \"{other}\""))),
    };
    let canonical = if role == Role::Tool {
        TOOL_MESSAGE_KEYS
    } else {
        MESSAGE_KEYS
    };
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
        let (parts, shape) = parse_result_content(content, path, "part")?;
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
            let blocks = items
                .iter()
                .enumerate()
                .map(|(j, part)| parse_part(part, &content_path.index(j)))
                .collect::<Result<Vec<_>, _>>()?;
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

/// A content part: `text` (other fields kept in `extra_json`), anything else opaque.
fn parse_part(raw: Raw<'_>, path: &Path<'_>) -> Result<ContentBlock, WireError> {
    let fields = match level(raw, path)? {
        Level::Object(fields) => fields,
        other => return Err(expected(path, "an object", &other)),
    };
    let Some(ty) = field(&fields, "type") else {
        return Err(path.error("part without \"type\""));
    };
    let ty = string(ty, &path.key("type"))?;
    if ty != "text" {
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
pub(super) fn messages_value(messages: &[Message]) -> Vec<Value> {
    let mut out = Vec::with_capacity(messages.len());
    for m in messages {
        let blocks = written_blocks(m);
        let mut extra = Some(json::parse_object(m.extra_json.as_str()));
        let mut has_results = false;
        for block in blocks.iter() {
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
            continue;
        }
        let extra = extra.unwrap_or_default();
        let role = match m.role {
            Role::System if extra.get(form::ROLE).and_then(Value::as_str) == Some("developer") => {
                "developer"
            }
            Role::System => "system",
            Role::Assistant => "assistant",
            Role::User | Role::Tool => "user",
        };
        let mut obj = Map::new();
        obj.insert("role".into(), Value::from(role));
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
            (Form::Null, _) => {
                obj.insert("content".into(), Value::Null);
            }
            (Form::String, [ContentBlock::Text { text, .. }]) => {
                obj.insert("content".into(), Value::from(text.as_str()));
            }
            _ => {
                let parts = parts.iter().map(|b| part_value(b)).collect();
                obj.insert("content".into(), Value::Array(parts));
            }
        }
        if !calls.is_empty() {
            let calls = calls.iter().map(|b| call_value(b)).collect();
            obj.insert("tool_calls".into(), Value::Array(calls));
        } else {
            match extra.get(form::TOOL_CALLS).and_then(Value::as_str) {
                Some("empty") => {
                    obj.insert("tool_calls".into(), Value::Array(Vec::new()));
                }
                Some("null") => {
                    obj.insert("tool_calls".into(), Value::Null);
                }
                _ => {}
            }
        }
        out.push(finish_object(obj, extra));
    }
    out
}

fn tool_message(block: &ContentBlock, own: Option<Map<String, Value>>) -> Value {
    let ContentBlock::ToolResult {
        tool_use_id,
        content,
        extra_json,
        ..
    } = block
    else {
        return Value::Null;
    };
    let markers = json::parse_object(extra_json.as_str());
    let shape = form::choose(
        Form::from_marker(&markers),
        form::openai_result_default(content),
        |shape| match shape {
            Form::String => {
                content.len() <= 1 && !matches!(&content[..], [ToolResultPart::Opaque { .. }])
            }
            Form::Null | Form::Absent => content.is_empty(),
            Form::Array => true,
        },
    );
    let mut obj = Map::new();
    obj.insert("role".into(), Value::from("tool"));
    obj.insert("tool_call_id".into(), Value::from(tool_use_id.as_str()));
    if let Some(value) = result_content_value(content, shape) {
        obj.insert("content".into(), value);
    }
    finish_object(obj, own.unwrap_or_default())
}

fn part_value(block: &ContentBlock) -> Value {
    match block {
        ContentBlock::Text { text, extra_json } => {
            let mut obj = Map::new();
            obj.insert("type".into(), Value::from("text"));
            obj.insert("text".into(), Value::from(text.as_str()));
            finish_object(obj, json::parse_object(extra_json.as_str()))
        }
        ContentBlock::Opaque { json } => json::value_of(json.as_str()),
        // Not reached: tool blocks are written as tool calls and tool messages.
        _ => Value::Null,
    }
}

fn call_value(block: &ContentBlock) -> Value {
    let ContentBlock::ToolUse {
        id,
        name,
        input_json,
        extra_json,
    } = block
    else {
        return Value::Null;
    };
    let mut extra = json::parse_object(extra_json.as_str());
    let mut function = Map::new();
    function.insert("name".into(), Value::from(name.as_str()));
    let arguments = if extra.get(form::ARGUMENTS).and_then(Value::as_str) == Some("json") {
        json::value_of(input_json.as_str())
    } else {
        Value::from(input_json.as_str())
    };
    function.insert("arguments".into(), arguments);
    if let Some(Value::Object(more)) = extra.shift_remove(form::FUNCTION) {
        json::append_extra(&mut function, more);
    }
    let function = json::restore_key_order(function, extra.get(form::FUNCTION_KEYS));
    let mut obj = Map::new();
    obj.insert("id".into(), Value::from(id.as_str()));
    if extra.get(form::CALL_TYPE).and_then(Value::as_str) != Some("absent") {
        obj.insert("type".into(), Value::from("function"));
    }
    obj.insert("function".into(), Value::Object(function));
    finish_object(obj, extra)
}
