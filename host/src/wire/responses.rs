//! OpenAI Responses: `{"instructions": str, "input": str | [items], ...}`.
//!
//! The model has messages with blocks; the Responses API has a flat list of items. The reader
//! groups items so that the rest of tamp (tool-exchange units, the pairing checks, every
//! strategy) sees what it sees in Chat Completions:
//!
//! - `instructions` is a leading system message (written back there when it is one plain
//!   text); a `message` item is a message of its role (`developer` is a system message
//!   marked `tamp:role`), its `input_text` / `output_text` parts text blocks, any other part
//!   an opaque block;
//! - an assistant `message` item and the `function_call` / `custom_tool_call` items right
//!   after it are one assistant message of text and tool calls, as Chat Completions has it
//!   (and as the writer writes such a message); consecutive calls with no message item before
//!   them are one assistant message of tool calls (`tamp:item` `items`: each block is an item
//!   of its own); each `function_call_output` / `custom_tool_call_output` is a tool message,
//!   paired by `call_id`;
//! - a `reasoning` item is an opaque block that travels with what it precedes: the first
//!   blocks of the calls message, or of the assistant message after it (`tamp:lead` counts
//!   them), or, between calls (and between a message item and its calls), the block before
//!   its call (`tamp:tail` counts a message's calls and their reasoning when it is needed). A
//!   span summarized takes it into the page with its call or message, a kept call keeps it.
//!   Reasoning followed by neither is an assistant message of its own;
//! - a `compaction` item is an opaque unit marked as a compaction boundary; an item of any
//!   other type, or a message of an unknown role, an opaque unit (`rules::pinned`). A
//!   `compaction` item tamp's proxy wrote ([`OWN_COMPACTION`]) is read as the items it stands
//!   for, where it stood;
//!
//! Writing walks the messages back into items in the same order, so reading then writing a
//! request gives the same items; a message from another format (an assistant message with
//! text and tool calls, a user message with tool results) becomes the items it stands for.

use std::borrow::Cow;

use abi_stable::std_types::{RString, RVec};

use crate::plugin_api::{ContentBlock, Conversation, Message, Role};

use super::anthropic::{parse_result_content, result_content_out, ResultContent};
use super::form::{self, Form};
use super::json::{
    self, expected, field, level, rstring, string, Extra, Level, ObjText, Path, Raw,
};
use super::out::{finish_object, Out};
use super::pairing::{self, Locator};
use super::{finish_message, written_blocks, List, Top, WireError, WireFormat};

/// The keys the writer puts first, in this order (see [`json::mark_key_order`]).
const MESSAGE_KEYS: &[&str] = &["type", "role", "content"];
const TEXT_KEYS: &[&str] = &["type", "text"];
const CALL_KEYS: &[&str] = &["type", "call_id", "name", "arguments"];
const CUSTOM_CALL_KEYS: &[&str] = &["type", "call_id", "name", "input"];
const OUTPUT_KEYS: &[&str] = &["type", "call_id", "output"];

/// An output item's `output`.
const OUTPUT: ResultContent = ResultContent {
    key: "output",
    text_type: "input_text",
    noun: "part",
};

/// The content part types tamp carries as opaque blocks within their message; a part of any
/// other type pins its message (`rules::pinned`).
pub(super) const KNOWN_PARTS: &[&str] = &[
    "input_text",
    "output_text",
    "input_image",
    "input_file",
    "input_audio",
    "refusal",
    "reasoning_text",
    "summary_text",
];

/// How an item reference (`{"id": ...}`, its `type` left out) is named as an opaque unit.
pub(super) const ITEM_REFERENCE: &str = "item:item_reference";

/// What an item is, as far as grouping goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    /// A `message` item of a role tamp reads.
    Message(Role, bool),
    Call {
        custom: bool,
    },
    Output {
        custom: bool,
    },
    Reasoning,
    Compaction,
    /// Anything else: an opaque unit.
    Other,
}

/// One `input` item, its fields read one level.
struct Item<'a> {
    fields: Vec<(Cow<'a, str>, Raw<'a>)>,
    kind: Kind,
    /// For [`Kind::Other`]: the marker entry naming it (`item:web_search_call`, `role:x`).
    opaque: Option<String>,
}

impl Item<'_> {
    /// The item's JSON: its fields' text as it came.
    fn text(&self) -> String {
        json::object_text(
            self.fields
                .iter()
                .map(|(k, v)| (k.as_ref(), Cow::Borrowed(v.get()))),
        )
    }

    fn is_call(&self) -> bool {
        matches!(self.kind, Kind::Call { .. })
    }
}

fn classify<'a>(item: Level<'a>, path: &Path<'_>) -> Result<Item<'a>, WireError> {
    let fields = match item {
        Level::Object(fields) => fields,
        other => return Err(expected(path, "an object", &other)),
    };
    let ty = match field(&fields, "type") {
        Some(raw) => Some(string(raw, &path.key("type"))?),
        None => None,
    };
    let is_message = matches!(ty.as_deref(), Some("message") | None);
    let role = match field(&fields, "role") {
        Some(raw) if is_message => Some(string(raw, &path.key("role"))?),
        _ => None,
    };
    let mut opaque = None;
    let kind = match ty.as_deref() {
        // A message may leave out its `type` (`EasyInputMessage`).
        Some("message") | None => match role {
            Some(role) => match role.as_ref() {
                "user" => Kind::Message(Role::User, false),
                "assistant" => Kind::Message(Role::Assistant, false),
                "system" => Kind::Message(Role::System, false),
                "developer" => Kind::Message(Role::System, true),
                other => {
                    opaque = Some(format!("role:{other}"));
                    Kind::Other
                }
            },
            None if ty.is_some() => return Err(path.error("message without \"role\"")),
            // An `item_reference` may leave out its `type` too.
            None if field(&fields, "id").is_some() => {
                opaque = Some(ITEM_REFERENCE.to_string());
                Kind::Other
            }
            None => return Err(path.error("item without \"type\"")),
        },
        Some("function_call") => Kind::Call { custom: false },
        Some("custom_tool_call") => Kind::Call { custom: true },
        Some("function_call_output") => Kind::Output { custom: false },
        Some("custom_tool_call_output") => Kind::Output { custom: true },
        Some("reasoning") => Kind::Reasoning,
        Some("compaction") => Kind::Compaction,
        Some(other) => {
            opaque = Some(format!("item:{other}"));
            Kind::Other
        }
    };
    Ok(Item {
        fields,
        kind,
        opaque,
    })
}

pub(super) fn parse(top: Top<'_>) -> Result<Conversation, WireError> {
    let Top {
        list,
        system,
        thread_id,
        metadata_json,
    } = top;
    let root = Path::Root;
    let mut messages = Vec::new();
    let has_instructions = system.is_some();
    if let Some(raw) = system {
        let text = string(raw, &root.key("instructions"))?;
        messages.push(Message::text(Role::System, rstring(text)));
    }
    let input_path = root.key("input");
    let items = match list {
        List::Text(text) => {
            messages.push(Message::text(Role::User, rstring(text)));
            Vec::new()
        }
        List::Items(items) => items,
        List::Messages(_) => Vec::new(),
    };
    let items = items
        .into_iter()
        .enumerate()
        .map(|(i, item)| classify(item, &input_path.index(i)))
        .collect::<Result<Vec<_>, _>>()?;
    messages.reserve(items.len());
    read_items(&items, &input_path, &mut messages)?;
    pairing::check(
        &messages,
        WireFormat::Responses,
        Locator::responses_wire(has_instructions, item_index),
    )?;
    Ok(Conversation {
        thread_id,
        messages: RVec::from(messages),
        metadata_json,
    })
}

/// Groups `items` into messages (see the module's documentation), appended to `messages`.
fn read_items(
    items: &[Item<'_>],
    input_path: &Path<'_>,
    messages: &mut Vec<Message>,
) -> Result<(), WireError> {
    // Reasoning items waiting for what they precede.
    let mut pending: Vec<ContentBlock> = Vec::new();
    let flush = |pending: &mut Vec<ContentBlock>, messages: &mut Vec<Message>| {
        if !pending.is_empty() {
            messages.push(items_message(std::mem::take(pending)));
        }
    };
    let mut i = 0;
    while i < items.len() {
        let item = &items[i];
        let path = input_path.index(i);
        match item.kind {
            Kind::Reasoning => {
                pending.push(opaque_block(item));
                i += 1;
            }
            Kind::Message(role, developer) => {
                let lead = if role == Role::Assistant {
                    std::mem::take(&mut pending)
                } else {
                    flush(&mut pending, messages);
                    Vec::new()
                };
                let leading = messages.iter().all(|m| m.role == Role::System);
                i += 1;
                // The calls an assistant message item is followed by (and the reasoning items
                // before each) are the same message, as in Chat Completions: the writer writes
                // an assistant message with text and calls as these items.
                let mut tail = Vec::new();
                if role == Role::Assistant {
                    let next = next_non_reasoning(items, i);
                    if next < items.len() && items[next].is_call() {
                        tail.extend(items[i..next].iter().map(opaque_block));
                        i = read_calls(items, next, input_path, &mut tail)?;
                    }
                }
                let message = Parts {
                    lead,
                    tail,
                    leading,
                };
                messages.push(parse_message(item, role, developer, message, &path)?);
            }
            Kind::Call { .. } => {
                let mut blocks = std::mem::take(&mut pending);
                i = read_calls(items, i, input_path, &mut blocks)?;
                messages.push(items_message(blocks));
            }
            Kind::Output { custom } => {
                flush(&mut pending, messages);
                messages.push(parse_output(item, custom, &path)?);
                i += 1;
            }
            Kind::Compaction => {
                flush(&mut pending, messages);
                match own_compaction(item, &path)? {
                    Some(inner) => read_own_compaction(&inner, &path, messages)?,
                    None => {
                        messages.push(super::opaque_unit(item.text(), None, Some("compaction")))
                    }
                }
                i += 1;
            }
            Kind::Other => {
                flush(&mut pending, messages);
                messages.push(super::opaque_unit(
                    item.text(),
                    item.opaque.as_deref(),
                    None,
                ));
                i += 1;
            }
        }
    }
    flush(&mut pending, messages);
    Ok(())
}

/// The index of the first item at or after `from` that is not a reasoning item.
fn next_non_reasoning(items: &[Item<'_>], from: usize) -> usize {
    items[from..]
        .iter()
        .position(|it| it.kind != Kind::Reasoning)
        .map_or(items.len(), |k| from + k)
}

/// Reads the run of calls starting at `items[i]` (a call) into `blocks`, with the reasoning
/// items between them, or after the last one at the very end of `input`; returns the index of
/// the item after the run.
fn read_calls(
    items: &[Item<'_>],
    mut i: usize,
    input_path: &Path<'_>,
    blocks: &mut Vec<ContentBlock>,
) -> Result<usize, WireError> {
    loop {
        blocks.push(parse_call(&items[i], &input_path.index(i))?);
        i += 1;
        // Reasoning items before the next call, or at the very end, go with the calls.
        let next = next_non_reasoning(items, i);
        if next < items.len() && !items[next].is_call() {
            return Ok(i);
        }
        blocks.extend(items[i..next].iter().map(opaque_block));
        i = next;
        if i == items.len() {
            return Ok(i);
        }
    }
}

/// How the `encrypted_content` of a `compaction` item that tamp's proxy wrote starts (in
/// place of OpenAI's server-side compaction, for an upstream that lacks it: see
/// `proxy::server_compaction`); the items the compaction stands for follow, as a JSON array.
/// The reader reads those items where the compaction item stood, so no upstream sees it.
pub const OWN_COMPACTION: &str = "tamp:v1:";

/// Whether a Responses request's text may hold a compaction item of tamp's (a cheap test: a
/// request with one must be written anew, never forwarded as it came).
pub fn carries_own_compaction(text: &str) -> bool {
    text.contains("\"tamp:v1:")
}

/// The items a compaction item of tamp's stands for (the JSON text after
/// [`OWN_COMPACTION`]), or None for any other compaction item.
fn own_compaction(item: &Item<'_>, path: &Path<'_>) -> Result<Option<String>, WireError> {
    let Some(raw) = field(&item.fields, "encrypted_content") else {
        return Ok(None);
    };
    // OpenAI's own contents are long: decoded only when the prefix is tamp's.
    if !raw.get().starts_with(&format!("\"{OWN_COMPACTION}")) {
        return Ok(None);
    }
    let content = string(raw, &path.key("encrypted_content"))?;
    Ok(content.strip_prefix(OWN_COMPACTION).map(str::to_string))
}

/// Reads the items of a compaction item of tamp's (`inner`, a JSON array) into `messages`.
fn read_own_compaction(
    inner: &str,
    path: &Path<'_>,
    messages: &mut Vec<Message>,
) -> Result<(), WireError> {
    let inner_path = path.key("encrypted_content");
    let raws: Vec<Raw<'_>> = serde_json::from_str(inner).map_err(|e| {
        inner_path.error(format!(
            "a compaction item of tamp's whose items are not a JSON array: {e}"
        ))
    })?;
    let items = raws
        .iter()
        .enumerate()
        .map(|(k, raw)| {
            let item_path = inner_path.index(k);
            classify(level(raw, &item_path)?, &item_path)
        })
        .collect::<Result<Vec<_>, _>>()?;
    read_items(&items, &inner_path, messages)
}

fn opaque_block(item: &Item<'_>) -> ContentBlock {
    ContentBlock::Opaque {
        json: RString::from(item.text()),
    }
}

/// An assistant message whose every block is an item of its own (calls, reasoning items).
fn items_message(blocks: Vec<ContentBlock>) -> Message {
    let mut extra = ObjText::new();
    extra.string(form::ITEM, "items");
    finish_message(Role::Assistant, blocks, extra)
}

/// What a `message` item's message holds besides its own parts.
struct Parts {
    /// The reasoning items before it (an assistant message's).
    lead: Vec<ContentBlock>,
    /// The items after it that are the same message: the calls an assistant message item is
    /// followed by, with the reasoning items before each.
    tail: Vec<ContentBlock>,
    /// Whether only system messages come before it.
    leading: bool,
}

fn parse_message(
    item: &Item<'_>,
    role: Role,
    developer: bool,
    around: Parts,
    path: &Path<'_>,
) -> Result<Message, WireError> {
    let Parts {
        lead,
        tail,
        leading,
    } = around;
    let fields = &item.fields;
    json::known_keys_once(fields.iter().map(|(k, _)| k.as_ref()), MESSAGE_KEYS, path)?;
    let mut extra = ObjText::new();
    for (key, value) in fields {
        if !MESSAGE_KEYS.contains(&key.as_ref()) {
            extra.raw(key, value.get());
        }
    }
    json::mark_key_order(&mut extra, fields, MESSAGE_KEYS, form::KEYS);
    if field(fields, "type").is_none() {
        extra.string(form::CALL_TYPE, "absent");
    }
    if developer {
        extra.string(form::ROLE, "developer");
    }
    let Some(content) = field(fields, "content") else {
        return Err(path.error("message without \"content\""));
    };
    let content_path = path.key("content");
    let mut blocks = lead;
    let lead = blocks.len();
    let mut unknown = Vec::new();
    match level(content, &content_path)? {
        Level::String(s) => {
            blocks.push(ContentBlock::text(rstring(s)));
            extra.string(form::CONTENT, Form::String.name());
        }
        Level::Array(parts) => {
            for (j, part) in parts.iter().enumerate() {
                blocks.push(parse_part(
                    part,
                    role,
                    &content_path.index(j),
                    &mut unknown,
                )?);
            }
        }
        other => {
            return Err(expected(
                &content_path,
                "a string or an array of content parts",
                &other,
            ))
        }
    }
    super::mark_opaque(&mut extra, &unknown);
    if lead > 0 {
        extra.string(form::LEAD, &lead.to_string());
    }
    // The writer writes the message item, then every call: a tail that is only calls after a
    // message item with parts needs no marker (so the message is the one Chat Completions
    // reads), any other does.
    let only_calls = tail
        .iter()
        .all(|b| matches!(b, ContentBlock::ToolUse { .. }));
    if !tail.is_empty() && (!only_calls || blocks.len() == lead) {
        extra.string(form::TAIL, &tail.len().to_string());
    }
    blocks.extend(tail);
    if role == Role::System && leading {
        extra.string(form::SYSTEM, "inline");
    }
    Ok(finish_message(role, blocks, extra))
}

/// The type of a text part a writer gives a message of `role` by default.
fn default_text_type(role: Role) -> &'static str {
    if role == Role::Assistant {
        "output_text"
    } else {
        "input_text"
    }
}

/// A content part: `input_text` / `output_text` (other fields kept in `extra_json`), anything
/// else opaque; types tamp does not know are added to `unknown`.
fn parse_part(
    raw: Raw<'_>,
    role: Role,
    path: &Path<'_>,
    unknown: &mut Vec<String>,
) -> Result<ContentBlock, WireError> {
    let (fields, ty) = json::typed_object(raw, path, "part")?;
    let is_text = ty == "input_text" || ty == "output_text";
    let interpreted: &[&str] = if is_text { TEXT_KEYS } else { &["type"] };
    json::known_keys_once(fields.iter().map(|(k, _)| k.as_ref()), interpreted, path)?;
    if !is_text {
        if !KNOWN_PARTS.contains(&ty.as_ref()) {
            unknown.push(format!("block:{ty}"));
        }
        return Ok(ContentBlock::Opaque {
            json: RString::from(raw.get()),
        });
    }
    let Some(text) = field(&fields, "text") else {
        return Err(path.error(format!("{ty} without \"text\"")));
    };
    let text = string(text, &path.key("text"))?;
    let mut extra = ObjText::new();
    for (key, value) in &fields {
        if key != "type" && key != "text" {
            extra.raw(key, value.get());
        }
    }
    json::mark_key_order(&mut extra, &fields, TEXT_KEYS, form::KEYS);
    if ty != default_text_type(role) {
        extra.string(form::PART, &ty);
    }
    Ok(ContentBlock::Text {
        text: rstring(text),
        extra_json: extra.finish(),
    })
}

/// A `function_call` (`{type, call_id, name, arguments}`) or `custom_tool_call`
/// (`{type, call_id, name, input}`) as a tool call; other fields are kept in `extra_json`.
fn parse_call(item: &Item<'_>, path: &Path<'_>) -> Result<ContentBlock, WireError> {
    let custom = item.kind == Kind::Call { custom: true };
    let (keys, input_key) = if custom {
        (CUSTOM_CALL_KEYS, "input")
    } else {
        (CALL_KEYS, "arguments")
    };
    let fields = &item.fields;
    json::known_keys_once(fields.iter().map(|(k, _)| k.as_ref()), keys, path)?;
    let required = |key: &str| {
        field(fields, key).ok_or_else(|| {
            let ty = if custom {
                "custom_tool_call"
            } else {
                "function_call"
            };
            path.error(format!("{ty} without \"{key}\""))
        })
    };
    let id = string(required("call_id")?, &path.key("call_id"))?;
    let name = string(required("name")?, &path.key("name"))?;
    let input = required(input_key)?;
    let mut extra = ObjText::new();
    let input_json = match level(input, &path.key(input_key))? {
        Level::String(s) => rstring(s),
        _ => {
            extra.string(form::ARGUMENTS, "json");
            RString::from(input.get())
        }
    };
    for (key, value) in fields {
        if !keys.contains(&key.as_ref()) {
            extra.raw(key, value.get());
        }
    }
    json::mark_key_order(&mut extra, fields, keys, form::KEYS);
    if custom {
        extra.string(form::CALL, "custom");
    }
    Ok(ContentBlock::ToolUse {
        id: rstring(id),
        name: rstring(name),
        input_json,
        extra_json: extra.finish(),
    })
}

/// A `function_call_output` or `custom_tool_call_output` as a tool message holding one tool
/// result; the item's other fields are kept in the message's `extra_json`.
fn parse_output(item: &Item<'_>, custom: bool, path: &Path<'_>) -> Result<Message, WireError> {
    let fields = &item.fields;
    json::known_keys_once(fields.iter().map(|(k, _)| k.as_ref()), OUTPUT_KEYS, path)?;
    let Some(id) = field(fields, "call_id") else {
        return Err(path.error(format!(
            "{} without \"call_id\"",
            if custom {
                "custom_tool_call_output"
            } else {
                "function_call_output"
            }
        )));
    };
    let id = string(id, &path.key("call_id"))?;
    let output = match field(fields, "output") {
        Some(raw) => Some(level(raw, &path.key("output"))?),
        None => None,
    };
    let (parts, shape) = parse_result_content(output, path, &OUTPUT)?;
    let mut result_extra = ObjText::new();
    if shape != form::openai_result_default(&parts) {
        result_extra.string(form::CONTENT, shape.name());
    }
    let mut extra = ObjText::new();
    for (key, value) in fields {
        if !OUTPUT_KEYS.contains(&key.as_ref()) {
            extra.raw(key, value.get());
        }
    }
    json::mark_key_order(&mut extra, fields, OUTPUT_KEYS, form::KEYS);
    if custom {
        extra.string(form::ITEM, "custom_tool_call_output");
    }
    let result = ContentBlock::ToolResult {
        tool_use_id: rstring(id),
        content: RVec::from(parts),
        is_error: false,
        extra_json: result_extra.finish(),
    };
    Ok(finish_message(Role::Tool, vec![result], extra))
}

// ---------------------------------------------------------------------------------------------
// Writing

/// `instructions` for the leading system message in `lead` (at most one), when it is one
/// plain text; else `None`, and it is written as an input item.
pub(super) fn instructions_out(lead: &[Message]) -> Option<Out<'_>> {
    match lead {
        [m] if m.summary_info().is_none() => match &m.content[..] {
            [ContentBlock::Text { text, extra_json }] if form::plain_empty(extra_json) => {
                Some(Out::str(text.as_str()))
            }
            _ => None,
        },
        _ => None,
    }
}

/// `input` for `messages`: a string when the request sent one (`as_text`) and it is still
/// one plain user message; else the items.
pub(super) fn input_out(messages: &[Message], as_text: bool) -> Out<'_> {
    if as_text {
        if let [m] = messages {
            let plain = m.role == Role::User
                && m.summary_info().is_none()
                && form::plain_empty(&m.extra_json);
            if let (true, [ContentBlock::Text { text, extra_json }]) = (plain, &m.content[..]) {
                if form::plain_empty(extra_json) {
                    return Out::str(text.as_str());
                }
            }
        }
    }
    Out::Array(items_out(messages))
}

/// The items for `messages`, in order.
pub(super) fn items_out(messages: &[Message]) -> Vec<Out<'_>> {
    let mut out = Vec::with_capacity(messages.len());
    for m in messages {
        write_message(m, &mut out, None);
    }
    out
}

/// Appends the items of `m`. With `positions`, also records for each block of `m` the index in
/// `out` of the item it went into (the pairing checks name items by it).
fn write_message<'a>(m: &'a Message, out: &mut Vec<Out<'a>>, positions: Option<&mut Vec<usize>>) {
    if let Some(json) = super::raw_json(m) {
        if let Some(p) = positions {
            p.push(out.len());
        }
        out.push(Out::json_or_string(json));
        return;
    }
    match written_blocks(m) {
        Cow::Borrowed(blocks) => write_blocks(m, blocks, out, positions),
        Cow::Owned(blocks) => {
            let mut owned: Vec<Out<'_>> = Vec::new();
            let base = out.len();
            let mut local = Vec::new();
            write_blocks(m, &blocks, &mut owned, Some(&mut local));
            if let Some(p) = positions {
                p.extend(local.into_iter().map(|k| base + k));
            }
            out.extend(owned.into_iter().map(|o| o.into_owned()));
        }
    }
}

/// Appends the items of `m`, whose written blocks are `blocks`.
fn write_blocks<'a>(
    m: &'a Message,
    blocks: &'a [ContentBlock],
    out: &mut Vec<Out<'a>>,
    mut positions: Option<&mut Vec<usize>>,
) {
    let mut at = |block: usize, item: usize| {
        if let Some(p) = positions.as_deref_mut() {
            if p.len() <= block {
                p.resize(block + 1, item);
            }
            p[block] = item;
        }
    };
    let extra = Extra::parse(m.extra_json.as_str());
    let mode = extra.marker(form::ITEM);
    let custom_output = mode.as_deref() == Some("custom_tool_call_output");
    let all_items = mode.as_deref() == Some("items");
    let count = |key: &str, room: usize| {
        extra
            .marker(key)
            .and_then(|n| n.parse::<usize>().ok())
            .map_or(0, |n| n.min(room))
    };
    let (lead, tail) = if all_items {
        (blocks.len(), 0)
    } else {
        let lead = count(form::LEAD, blocks.len());
        (lead, count(form::TAIL, blocks.len() - lead))
    };
    // A tool message's own fields (`id`, `status`, ...) go on its (first) output; any other
    // message's on its message item.
    let (mut output_extra, mut message_extra) = if m.role == Role::Tool {
        (Some(extra), None)
    } else {
        (None, Some(extra))
    };
    for (b, block) in blocks[..lead].iter().enumerate() {
        at(b, out.len());
        out.push(item_of_its_own(m, block));
    }
    if all_items {
        return;
    }
    let rest = &blocks[lead..blocks.len() - tail];
    // Results first, as in Chat Completions (a user message of Anthropic's results).
    for (b, block) in rest.iter().enumerate() {
        if matches!(block, ContentBlock::ToolResult { .. }) {
            at(lead + b, out.len());
            out.push(output_item(block, output_extra.take(), custom_output));
        }
    }
    let parts: Vec<&ContentBlock> = rest
        .iter()
        .filter(|b| {
            !matches!(
                b,
                ContentBlock::ToolResult { .. } | ContentBlock::ToolUse { .. }
            )
        })
        .collect();
    let has_results = rest
        .iter()
        .any(|b| matches!(b, ContentBlock::ToolResult { .. }));
    let has_calls = rest
        .iter()
        .any(|b| matches!(b, ContentBlock::ToolUse { .. }));
    if !parts.is_empty() || tail > 0 || !(has_calls || has_results || m.role == Role::Tool) {
        let item = out.len();
        for (b, block) in rest.iter().enumerate() {
            if !matches!(
                block,
                ContentBlock::ToolResult { .. } | ContentBlock::ToolUse { .. }
            ) {
                at(lead + b, item);
            }
        }
        let extra = message_extra.take().unwrap_or_default();
        out.push(message_item(m, &parts, &extra));
    }
    for (b, block) in rest.iter().enumerate() {
        if matches!(block, ContentBlock::ToolUse { .. }) {
            at(lead + b, out.len());
            out.push(call_item(block));
        }
    }
    let first_of_tail = blocks.len() - tail;
    for (b, block) in blocks[first_of_tail..].iter().enumerate() {
        at(first_of_tail + b, out.len());
        out.push(item_of_its_own(m, block));
    }
}

/// A block of `m` that is an item of its own (a reasoning item, a call) as that item.
fn item_of_its_own<'a>(m: &Message, block: &'a ContentBlock) -> Out<'a> {
    match block {
        ContentBlock::Opaque { json } => Out::json_or_string(json.as_str()),
        ContentBlock::ToolUse { .. } => call_item(block),
        ContentBlock::ToolResult { .. } => output_item(block, None, false),
        ContentBlock::Text { .. } => message_item(m, &[block], &Extra::default()),
    }
}

/// A `message` item of `m`'s role holding `parts`, with the wire fields of `extra`.
fn message_item<'a>(m: &Message, parts: &[&'a ContentBlock], extra: &Extra<'a>) -> Out<'a> {
    let role = match m.role {
        Role::System if extra.marker(form::ROLE).as_deref() == Some("developer") => "developer",
        Role::System => "system",
        Role::Assistant => "assistant",
        Role::User | Role::Tool => "user",
    };
    let mut own = Vec::with_capacity(3);
    if extra.marker(form::CALL_TYPE).as_deref() != Some("absent") {
        own.push(("type".into(), Out::str("message")));
    }
    own.push(("role".into(), Out::str(role)));
    let shape = form::choose(Form::from_marker(extra), Form::Array, |shape| match shape {
        Form::String => form::is_single_plain_text(parts),
        Form::Array => true,
        Form::Null | Form::Absent => false,
    });
    let content = match (shape, parts) {
        (Form::String, [ContentBlock::Text { text, .. }]) => Out::str(text.as_str()),
        _ => Out::Array(parts.iter().map(|b| part_out(b, m.role)).collect()),
    };
    own.push(("content".into(), content));
    finish_object(own, extra)
}

fn part_out(block: &ContentBlock, role: Role) -> Out<'_> {
    match block {
        ContentBlock::Text { text, extra_json } => {
            let extra = Extra::parse(extra_json.as_str());
            let ty = match extra.marker(form::PART) {
                Some(Cow::Borrowed(ty)) => Out::str(ty),
                Some(Cow::Owned(ty)) => Out::Str(Cow::Owned(ty)),
                None => Out::str(default_text_type(role)),
            };
            let own = vec![
                ("type".into(), ty),
                ("text".into(), Out::str(text.as_str())),
            ];
            finish_object(own, &extra)
        }
        ContentBlock::Opaque { json } => Out::json_or_string(json.as_str()),
        // Not reached: tool blocks are written as items of their own.
        _ => Out::Null,
    }
}

fn call_item(block: &ContentBlock) -> Out<'_> {
    let ContentBlock::ToolUse {
        id,
        name,
        input_json,
        extra_json,
    } = block
    else {
        return Out::Null;
    };
    let extra = Extra::parse(extra_json.as_str());
    let custom = extra.marker(form::CALL).as_deref() == Some("custom");
    let input = if extra.marker(form::ARGUMENTS).as_deref() == Some("json") {
        Out::json_or_string(input_json.as_str())
    } else {
        Out::str(input_json.as_str())
    };
    let (ty, input_key) = if custom {
        ("custom_tool_call", "input")
    } else {
        ("function_call", "arguments")
    };
    let own = vec![
        ("type".into(), Out::str(ty)),
        ("call_id".into(), Out::str(id.as_str())),
        ("name".into(), Out::str(name.as_str())),
        (input_key.into(), input),
    ];
    finish_object(own, &extra)
}

fn output_item<'a>(block: &'a ContentBlock, own_extra: Option<Extra<'a>>, custom: bool) -> Out<'a> {
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
    let ty = if custom {
        "custom_tool_call_output"
    } else {
        "function_call_output"
    };
    let mut own = vec![
        ("type".into(), Out::str(ty)),
        ("call_id".into(), Out::str(tool_use_id.as_str())),
    ];
    if let Some(value) = result_content_out(content, shape, OUTPUT.text_type) {
        own.push(("output".into(), value));
    }
    finish_object(own, &own_extra.unwrap_or_default())
}

/// The `input` index of the item block `block` of message `message` went into, `messages`
/// being a request's messages after its `instructions` (for error paths).
fn item_index(messages: &[Message], message: usize, block: usize) -> usize {
    let mut out = Vec::new();
    for m in &messages[..message] {
        write_message(m, &mut out, None);
    }
    let before = out.len();
    let mut positions = Vec::new();
    write_message(&messages[message], &mut out, Some(&mut positions));
    positions.get(block).copied().unwrap_or(before)
}
