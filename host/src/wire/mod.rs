//! Reading and writing conversations in the three wire formats agents use: Anthropic Messages
//! (`system` + content blocks), OpenAI Chat Completions (roles incl. `tool`, `tool_calls`) and
//! the OpenAI Responses API (`instructions` + `input` items, see `responses.rs`).
//!
//! [`parse_str`] / [`parse_value`] read a request body into the plugin-api [`Conversation`];
//! [`write`] (and [`to_string`] / [`to_string_pretty`]) write it back in a format (normally
//! the input's). What tamp does not model is carried through as its exact original text, never
//! through `serde_json::Value` (see `out.rs`):
//!
//! - top-level fields other than `system`/`messages` (`model`, `tools`, `max_tokens`, ...) go to
//!   [`Conversation::metadata_json`] in their order; a string `thread_id` also becomes
//!   [`Conversation::thread_id`], and a thread id set by the host is never written;
//! - unknown fields of messages and blocks go to their `extra_json`; blocks tamp does not
//!   interpret (images, documents, thinking, ...) become [`ContentBlock::Opaque`] with their
//!   exact original JSON text; an Anthropic `tool_use.input` is kept as its original text less
//!   the whitespace between tokens (`json::strip_whitespace`)
//!   and an OpenAI `arguments` string byte for byte.
//!
//! Details of the wire shape that the model does not hold (a string vs an array `content`, a
//! `developer` role, a `null` content, the order of top-level fields, ...) are recorded under
//! `extra_json` / `metadata_json` keys that start with `tamp:` — only when they differ from the
//! shape the writer would pick by default — and are stripped on output. So reading then
//! writing a request in its own format gives the same JSON. Keys starting with `tamp:` are
//! reserved: consumers of `extra_json` and `metadata_json` must ignore them.
//!
//! Summary messages are written as one text block (see [`summary_marker`]) and read back.
//!
//! Reading validates the request and names the offending place in [`WireError::path`]
//! (`messages[14].content[1]`), including the tool-pairing rules ([`check_tool_pairing`]).

use std::borrow::Cow;
use std::fmt;
use std::str::FromStr;

use abi_stable::std_types::{ROption, RString};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::plugin_api::{ContentBlock, Conversation, Message, Page};

mod anthropic;
mod form;
mod json;
mod openai;
mod out;
mod pairing;
mod responses;
mod shapes;
/// A compaction item of tamp's proxy, read back as the items it stands for.
pub use responses::{carries_own_compaction, OWN_COMPACTION};
pub mod summary_marker;

#[cfg(test)]
mod agents_tests;
#[cfg(test)]
mod passthrough_tests;
#[cfg(test)]
mod pinned_tests;
#[cfg(test)]
mod responses_tests;
#[cfg(test)]
mod tests;

use json::{Doc, Input, Level, ListKey, Messages, Msg, MsgField, Path, Raw, TopField};
use out::Out;

/// One of the three wire formats.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum WireFormat {
    /// Anthropic Messages: `{"system": ..., "messages": [...]}` with content blocks.
    Anthropic,
    /// OpenAI Chat Completions: `{"messages": [...]}` with `tool_calls` and `tool` messages.
    OpenAi,
    /// OpenAI Responses: `{"instructions": ..., "input": [...]}` with `message`,
    /// `function_call`, `function_call_output`, `reasoning`, ... items.
    Responses,
}

impl WireFormat {
    /// Every format, in the order tamp lists them.
    pub const ALL: [WireFormat; 3] = [
        WireFormat::Anthropic,
        WireFormat::OpenAi,
        WireFormat::Responses,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            WireFormat::Anthropic => "anthropic",
            WireFormat::OpenAi => "openai",
            WireFormat::Responses => "responses",
        }
    }

    /// The top-level field that holds the conversation (`messages`, or `input`).
    pub fn list_key(self) -> &'static str {
        match self {
            WireFormat::Anthropic | WireFormat::OpenAi => "messages",
            WireFormat::Responses => "input",
        }
    }

    /// The top-level field a leading system message goes to (`system`, `instructions`), if
    /// the format has one.
    fn system_key(self) -> Option<&'static str> {
        match self {
            WireFormat::Anthropic => Some("system"),
            WireFormat::OpenAi => None,
            WireFormat::Responses => Some("instructions"),
        }
    }
}

impl fmt::Display for WireFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for WireFormat {
    type Err = WireError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "anthropic" => Ok(WireFormat::Anthropic),
            "openai" => Ok(WireFormat::OpenAi),
            "responses" => Ok(WireFormat::Responses),
            other => Err(WireError::new(
                "",
                format!(
                    "unknown wire format \"{other}\" (expected \"anthropic\", \"openai\" or \
                     \"responses\")"
                ),
            )),
        }
    }
}

/// A request that cannot be read, and where.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WireError {
    /// Where in the request, like `messages[14].content[1]`; empty for the whole request.
    pub path: String,
    pub message: String,
    /// The message at fault, by its position in the conversation's message list, when the
    /// error is about one (the tool-pairing checks set it; `path` may count from the wire's
    /// `messages` instead, which lacks an Anthropic `system`).
    pub message_index: Option<usize>,
}

impl WireError {
    pub fn new(path: impl Into<String>, message: impl Into<String>) -> Self {
        WireError {
            path: path.into(),
            message: message.into(),
            message_index: None,
        }
    }

    /// The same error, about message `index` of the message list.
    pub fn at_message(self, index: usize) -> Self {
        WireError {
            message_index: Some(index),
            ..self
        }
    }
}

impl fmt::Display for WireError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.path.is_empty() {
            f.write_str(&self.message)
        } else {
            write!(f, "{}: {}", self.path, self.message)
        }
    }
}

impl std::error::Error for WireError {}

/// Which format a request is in.
///
/// An `input` field and no `messages` means Responses. A top-level `system` field means
/// Anthropic; a `developer`/`tool` role, a
/// `tool_calls`/`tool_call_id` field, a `null` content or an OpenAI content part type
/// (`image_url`, ...) means OpenAI; an Anthropic block type (`tool_use`, `tool_result`,
/// `image`, `thinking`, ...) means Anthropic. The first message that tells decides. A request
/// with none of these (plain user/assistant text) reads the same in both formats; it is taken
/// as OpenAI. Errors only when the request is not an object with a `messages` array (or an
/// `input`).
pub fn detect(value: &Value) -> Result<WireFormat, WireError> {
    let Value::Object(top) = value else {
        return Err(shapes::not_an_object(value_kind(value)));
    };
    let messages = match top.get("messages") {
        None if top.contains_key("input") => return Ok(WireFormat::Responses),
        None => {
            return Err(shapes::no_conversation(
                "messages",
                top.keys().map(String::as_str),
            ))
        }
        Some(Value::Array(messages)) => messages,
        Some(other) => {
            return Err(WireError::new(
                "messages",
                format!("expected an array, found {}", value_kind(other)),
            ))
        }
    };
    if top.contains_key("system") {
        return Ok(WireFormat::Anthropic);
    }
    Ok(messages
        .iter()
        .find_map(classify_message)
        .unwrap_or(WireFormat::OpenAi))
}

/// Reads a request from JSON text. With `format: None` the format is detected ([`detect`]).
/// Returns the conversation and the format it was read in.
pub fn parse_str(
    text: &str,
    format: Option<WireFormat>,
) -> Result<(Conversation, WireFormat), WireError> {
    // With the format unknown, `input` is kept raw and read only if it is a Responses request.
    let key = match format {
        Some(WireFormat::Responses) => ListKey::Input,
        _ => ListKey::Messages,
    };
    if text.trim().is_empty() {
        return Err(shapes::empty());
    }
    let fields = match json::parse_doc(text, key)? {
        Doc::Object(fields) => fields,
        Doc::Other(kind) => return Err(shapes::not_an_object(kind)),
    };
    let format = match format {
        Some(format) => format,
        None => detect_doc(&fields)?,
    };
    let top = split_top(fields, format)?;
    let conversation = match format {
        WireFormat::Anthropic => anthropic::parse(top)?,
        WireFormat::OpenAi => openai::parse(top)?,
        WireFormat::Responses => responses::parse(top)?,
    };
    Ok((conversation, format))
}

/// Reads a request from a JSON value; the same as [`parse_str`] on its text.
pub fn parse_value(
    value: Value,
    format: Option<WireFormat>,
) -> Result<(Conversation, WireFormat), WireError> {
    let format = match format {
        Some(format) => format,
        None => detect(&value)?,
    };
    // The readers borrow from JSON text (raw tool inputs, opaque blocks); one compact
    // serialization is cheaper than a second reader over `Value`.
    let text = value.to_string();
    drop(value);
    parse_str(&text, Some(format))
}

/// Writes `conversation` as a request in `format`.
///
/// Anthropic: leading system messages become `system` (unless they stood in `messages`);
/// consecutive tool messages become one `user` message; a later system message stays a
/// `system` message in place. OpenAI: tool results become `tool` messages placed before the
/// rest of their message. A message tamp did not know is written as it came. Tool inputs and
/// opaque blocks that are not valid JSON are written as JSON strings. What the reader kept as
/// text (unknown fields, opaque blocks, tool inputs) is written as that exact text.
pub fn write(conversation: &Conversation, format: WireFormat) -> Written<'_> {
    let messages = &conversation.messages[..];
    let (system, list) = match format {
        WireFormat::Anthropic => {
            let lead = lead_system(messages);
            (
                anthropic::system_out(&messages[..lead]),
                Out::Array(anthropic::messages_out(&messages[lead..])),
            )
        }
        WireFormat::OpenAi => (None, Out::Array(openai::messages_out(messages))),
        WireFormat::Responses => {
            let lead = lead_system(messages).min(1);
            let instructions = responses::instructions_out(&messages[..lead]);
            let lead = if instructions.is_some() { lead } else { 0 };
            let metadata = json::Extra::parse(conversation.metadata_json.as_str());
            let as_text = metadata.marker(form::INPUT).as_deref() == Some("string");
            (
                instructions,
                responses::input_out(&messages[lead..], as_text),
            )
        }
    };
    Written(assemble_top(conversation, format, system, list))
}

/// How many leading system messages a writer puts in the request's top-level field: those
/// that did not stand in the message list ([`form::SYSTEM`]) and are no opaque unit.
fn lead_system(messages: &[Message]) -> usize {
    messages
        .iter()
        .take_while(|m| {
            m.role == crate::plugin_api::Role::System
                && raw_json(m).is_none()
                && json::Extra::parse(m.extra_json.as_str())
                    .marker(form::SYSTEM)
                    .is_none()
        })
        .count()
}

/// `messages` as a JSON array of wire messages in `format` (for printing pages). Unlike
/// [`write`], system messages stay in the array, with the role `system`.
pub fn write_messages(messages: &[Message], format: WireFormat) -> Written<'_> {
    Written(Out::Array(match format {
        WireFormat::Anthropic => anthropic::messages_out(messages),
        WireFormat::OpenAi => openai::messages_out(messages),
        WireFormat::Responses => responses::items_out(messages),
    }))
}

/// A page as `tamp pages show` and `GET /v1/pages/{id}` print it: its fields, then its
/// messages in `format` (a wire format, or `internal` for plugin-api's own JSON).
pub fn page_view<'a>(page: &'a Page, format: &'a str) -> Result<Written<'a>, WireError> {
    let messages = if format == "internal" {
        Written::of(&page.messages)
    } else {
        let format: WireFormat = format.parse().map_err(|e: WireError| {
            WireError::new("format", format!("{} (or \"internal\")", e.message))
        })?;
        write_messages(&page.messages, format)
    };
    Ok(Written::object(vec![
        ("id", Written::of(&page.id.as_str())),
        (
            "thread_id",
            Written::of(&page.thread_id.as_ref().into_option().map(|t| t.as_str())),
        ),
        ("strategy", Written::of(&page.strategy.as_str())),
        ("created_at", Written::of(&page.created_at)),
        ("format", Written::of(&format)),
        ("metadata", Written::json_text(&page.metadata_json)),
        ("messages", messages),
    ]))
}

/// [`write`] as compact JSON text.
pub fn to_string(conversation: &Conversation, format: WireFormat) -> String {
    write(conversation, format).compact()
}

/// [`write`] as pretty-printed JSON text.
pub fn to_string_pretty(conversation: &Conversation, format: WireFormat) -> String {
    write(conversation, format).pretty()
}

/// [`write`] as a `serde_json::Value`, for tests and generated inputs. Lossy where `Value` is
/// (numbers wider than `f64`, lone surrogates, deep nesting, duplicate keys): output meant
/// for a client or a provider goes through [`write`] or [`to_string`].
pub fn to_value(conversation: &Conversation, format: WireFormat) -> Value {
    write(conversation, format).to_value()
}

/// JSON written by tamp: a request or a page in a wire format, or an answer that embeds one,
/// with every value the reader kept as text written as that exact text.
#[derive(Clone, Debug, PartialEq)]
pub struct Written<'a>(Out<'a>);

impl<'a> Written<'a> {
    /// Any value of tamp's own (a report, a format name), as serde writes it.
    pub fn of(value: &impl Serialize) -> Written<'static> {
        let text = serde_json::to_string(value).expect("tamp's own values serialize to JSON");
        Written(Out::Raw(Cow::Owned(text)))
    }

    /// JSON text that is already valid JSON (a stored page's metadata), or `null` if it is not.
    pub fn json_text(text: &'a str) -> Written<'a> {
        match Out::json_or_string(text) {
            raw @ Out::Raw(_) => Written(raw),
            _ => Written(Out::Null),
        }
    }

    /// An object of these fields, in this order.
    pub fn object(fields: Vec<(&'a str, Written<'a>)>) -> Written<'a> {
        Written(Out::Object(
            fields
                .into_iter()
                .map(|(k, v)| (Cow::Borrowed(k), v.0))
                .collect(),
        ))
    }

    /// Compact JSON text.
    pub fn compact(&self) -> String {
        self.0.to_compact()
    }

    /// JSON text indented by two spaces (values kept as text keep their own spacing).
    pub fn pretty(&self) -> String {
        self.0.to_pretty()
    }

    /// As a `serde_json::Value`; lossy where `Value` is (see [`to_value`]).
    pub fn to_value(&self) -> Value {
        serde_json::from_str(&self.compact()).unwrap_or(Value::Null)
    }
}

/// Checks the tool-pairing rules of `format` on `messages`, as [`write`] would write them:
/// every tool use is answered right after it (Anthropic: by a `tool_result` in the next
/// message; OpenAI: by the `tool` messages that follow) except in the very last message, every
/// tool result answers a call of the message right before, tool-use ids are unique, and tool
/// uses appear in assistant messages only. Error paths name positions in `messages`
/// (`messages[3].content[1]`; OpenAI: `messages[3].tool_calls[0]`, `messages[4]` for a tool
/// message).
pub fn check_tool_pairing(messages: &[Message], format: WireFormat) -> Result<(), WireError> {
    pairing::check(messages, format, pairing::Locator::model(format))
}

// ---------------------------------------------------------------------------------------------
// Top level

/// The top level of a request, split.
pub(crate) struct Top<'a> {
    pub(crate) list: List<'a>,
    /// Anthropic `system`, Responses `instructions` (not null).
    pub(crate) system: Option<Raw<'a>>,
    pub(crate) thread_id: ROption<RString>,
    pub(crate) metadata_json: RString,
}

/// A request's conversation, as the first pass read it.
pub(crate) enum List<'a> {
    /// `messages`.
    Messages(Vec<Msg<'a>>),
    /// Responses `input` items.
    Items(Vec<Level<'a>>),
    /// Responses `input` given as a string.
    Text(Cow<'a, str>),
}

impl<'a> List<'a> {
    /// The messages of a `messages` list (none for a Responses input).
    pub(crate) fn into_messages(self) -> Vec<Msg<'a>> {
        match self {
            List::Messages(messages) => messages,
            List::Items(_) | List::Text(_) => Vec::new(),
        }
    }
}

fn split_top<'a>(
    fields: Vec<(Cow<'a, str>, TopField<'a>)>,
    format: WireFormat,
) -> Result<Top<'a>, WireError> {
    let root = Path::Root;
    let list_key = format.list_key();
    let system_key = format.system_key();
    let known = [Some(list_key), system_key, Some("thread_id")];
    let known: Vec<&str> = known.into_iter().flatten().collect();
    json::known_keys_once(fields.iter().map(|(k, _)| k.as_ref()), &known, &root)?;
    let mut list = None;
    let mut system = None;
    let mut thread_id = ROption::RNone;
    let mut metadata = json::ObjText::new();
    // The keys in their order, and which of them the writer places itself.
    let mut keys: Vec<(Cow<'a, str>, bool)> = Vec::with_capacity(fields.len());
    for (key, value) in fields {
        let special = match (key.as_ref(), value) {
            ("messages", TopField::Messages(m)) if list_key == "messages" => {
                list = Some(match m {
                    Messages::Array(messages) => List::Messages(messages),
                    Messages::Other(kind) => {
                        return Err(json::expected_kind(&root.key("messages"), "an array", kind))
                    }
                });
                true
            }
            ("input", value @ (TopField::Input(_) | TopField::Raw(_))) if list_key == "input" => {
                // Read raw when the format was detected from a first pass over `messages`.
                let input = match value {
                    TopField::Input(input) => input,
                    TopField::Raw(raw) => json::parse_input(raw)?,
                    TopField::Messages(_) => unreachable!("matched above"),
                };
                list = Some(match input {
                    Input::Items(items) => List::Items(items),
                    Input::Text(text) => {
                        metadata.string(form::INPUT, "string");
                        List::Text(text)
                    }
                    Input::Other(kind) => {
                        return Err(json::expected_kind(
                            &root.key("input"),
                            "a string or an array of items",
                            kind,
                        ))
                    }
                });
                true
            }
            (k, TopField::Raw(raw)) if Some(k) == system_key && raw.get() != "null" => {
                system = Some(raw);
                true
            }
            // Read, and passed through like any field: a thread id the host sets (from the
            // API body or --thread-id) is never written into a request for the provider.
            ("thread_id", TopField::Raw(raw)) if raw.get() != "null" => {
                thread_id =
                    ROption::RSome(json::rstring(json::string(raw, &root.key("thread_id"))?));
                metadata.raw("thread_id", raw.get());
                false
            }
            (other, TopField::Raw(raw)) => {
                metadata.raw(other, raw.get());
                false
            }
            (_, TopField::Messages(_) | TopField::Input(_)) => false,
        };
        keys.push((key, special));
    }
    let Some(list) = list else {
        return Err(shapes::no_conversation(
            list_key,
            keys.iter().map(|(k, _)| k.as_ref()),
        ));
    };
    let is_special = |k: &str| keys.iter().any(|(key, special)| *special && key == k);
    let default_order = [system_key, Some(list_key)]
        .into_iter()
        .flatten()
        .filter(|k| is_special(k))
        .chain(keys.iter().filter(|(_, s)| !s).map(|(k, _)| k.as_ref()));
    if !default_order.eq(keys.iter().map(|(k, _)| k.as_ref())) {
        let order = json::string_array(keys.iter().map(|(k, _)| k.as_ref()));
        metadata.raw(form::ORDER, &order);
    }
    Ok(Top {
        list,
        system,
        thread_id,
        metadata_json: metadata.finish(),
    })
}

fn assemble_top<'a>(
    conversation: &'a Conversation,
    format: WireFormat,
    system: Option<Out<'a>>,
    list: Out<'a>,
) -> Out<'a> {
    let mut metadata = json::Extra::parse(conversation.metadata_json.as_str());
    let order = metadata.key_order(form::ORDER).unwrap_or_default();
    let mut own = [
        (format.system_key().unwrap_or("system"), system),
        (format.list_key(), Some(list)),
    ];
    let mut fields: Vec<(Cow<'a, str>, Out<'a>)> = Vec::new();
    // The recorded order first: each name takes tamp's own field of that name, or else the
    // first metadata field left with that name (duplicate keys are kept).
    for key in &order {
        if let Some((name, value)) = own.iter_mut().find(|(name, v)| name == key && v.is_some()) {
            fields.push((Cow::Borrowed(*name), value.take().expect("checked")));
        } else if !key.starts_with("tamp:") {
            if let Some(raw) = metadata.take(key) {
                fields.push((Cow::Owned(key.clone()), Out::Raw(Cow::Borrowed(raw.get()))));
            }
        }
    }
    for (name, value) in &mut own {
        if let Some(value) = value.take() {
            fields.push((Cow::Borrowed(*name), value));
        }
    }
    for (key, raw) in metadata.wire_fields() {
        fields.push((key.clone(), Out::Raw(Cow::Borrowed(raw.get()))));
    }
    Out::Object(fields)
}

// ---------------------------------------------------------------------------------------------
// Detection

fn detect_doc(fields: &[(Cow<'_, str>, TopField<'_>)]) -> Result<WireFormat, WireError> {
    let messages = fields.iter().find_map(|(_, v)| match v {
        TopField::Messages(m) => Some(m),
        TopField::Raw(_) | TopField::Input(_) => None,
    });
    let messages = match messages {
        None if fields.iter().any(|(k, _)| k == "input") => return Ok(WireFormat::Responses),
        None => {
            return Err(shapes::no_conversation(
                "messages",
                fields.iter().map(|(k, _)| k.as_ref()),
            ))
        }
        Some(Messages::Other(kind)) => {
            return Err(json::expected_kind(
                &Path::Root.key("messages"),
                "an array",
                kind,
            ))
        }
        Some(Messages::Array(messages)) => messages,
    };
    if fields.iter().any(|(k, _)| k == "system") {
        return Ok(WireFormat::Anthropic);
    }
    Ok(messages
        .iter()
        .find_map(classify_msg)
        .unwrap_or(WireFormat::OpenAi))
}

/// Message fields only OpenAI has.
const OPENAI_FIELDS: [&str; 4] = ["tool_calls", "tool_call_id", "function_call", "refusal"];

/// A `system` role says nothing since Anthropic accepts mid-conversation system messages.
fn classify_role(role: &str) -> Option<WireFormat> {
    matches!(role, "developer" | "tool").then_some(WireFormat::OpenAi)
}

fn classify_part_type(ty: &str) -> Option<WireFormat> {
    match ty {
        "image_url" | "input_audio" | "file" | "refusal" => Some(WireFormat::OpenAi),
        "tool_use" | "tool_result" | "image" | "document" | "thinking" | "redacted_thinking"
        | "search_result" | "container_upload" => Some(WireFormat::Anthropic),
        t if t.ends_with("_tool_use") || t.ends_with("_tool_result") => Some(WireFormat::Anthropic),
        _ => None,
    }
}

/// What one message (a JSON value) says about the format, if anything.
fn classify_message(message: &Value) -> Option<WireFormat> {
    let message = message.as_object()?;
    if let Some(f) = message
        .get("role")
        .and_then(Value::as_str)
        .and_then(classify_role)
    {
        return Some(f);
    }
    if OPENAI_FIELDS.iter().any(|k| message.contains_key(*k)) {
        return Some(WireFormat::OpenAi);
    }
    match message.get("content")? {
        Value::Null => Some(WireFormat::OpenAi),
        Value::Array(parts) => parts
            .iter()
            .find_map(|part| classify_part_type(part.get("type")?.as_str()?)),
        _ => None,
    }
}

/// What one message (first pass) says about the format, if anything; as [`classify_message`].
fn classify_msg(message: &Msg<'_>) -> Option<WireFormat> {
    let Msg::Object(fields) = message else {
        return None;
    };
    let root = Path::Root;
    let role = Msg::raw(fields, "role").and_then(|raw| json::string(raw, &root).ok());
    if let Some(f) = role.as_deref().and_then(classify_role) {
        return Some(f);
    }
    if fields
        .iter()
        .any(|(k, _)| OPENAI_FIELDS.contains(&k.as_ref()))
    {
        return Some(WireFormat::OpenAi);
    }
    let content = fields.iter().find_map(|(_, v)| match v {
        MsgField::Content(level) => Some(level),
        MsgField::Raw(_) => None,
    })?;
    match content {
        Level::Null => Some(WireFormat::OpenAi),
        Level::Array(parts) => parts.iter().find_map(|part| {
            let Level::Object(fields) = json::level(part, &root).ok()? else {
                return None;
            };
            let ty = json::string(json::field(&fields, "type")?, &root).ok()?;
            classify_part_type(&ty)
        }),
        _ => None,
    }
}

fn value_kind(value: &Value) -> &'static str {
    match value {
        Value::Object(_) => "an object",
        Value::Array(_) => "an array",
        Value::String(_) => "a string",
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
    }
}

// ---------------------------------------------------------------------------------------------
// Shared by both formats

/// A wire message or item tamp does not know (a role, a Responses item type), as an opaque
/// unit: a system message (pinned, `rules::pinned`) holding the whole of it, `json`, as one
/// opaque block, written back as it came (`tamp:item` `raw`). `opaque` names it for the report
/// (`item:web_search_call`, `role:critic`); `boundary` marks a provider's compaction
/// boundary.
pub(crate) fn opaque_unit(json: String, opaque: Option<&str>, boundary: Option<&str>) -> Message {
    let mut extra = json::ObjText::new();
    extra.string(form::ITEM, "raw");
    if let Some(entry) = opaque {
        extra.raw(form::OPAQUE, &json::string_array(std::iter::once(entry)));
    }
    if let Some(what) = boundary {
        extra.string(form::BOUNDARY, what);
    }
    Message {
        role: crate::plugin_api::Role::System,
        content: abi_stable::std_types::RVec::from(vec![ContentBlock::Opaque {
            json: RString::from(json),
        }]),
        summary: ROption::RNone,
        extra_json: extra.finish(),
    }
}

/// A first-pass message of `messages` as an opaque unit named `entry` (see [`opaque_unit`]).
pub(crate) fn opaque_message(
    fields: &[(Cow<'_, str>, MsgField<'_>)],
    path: &Path<'_>,
    entry: &str,
) -> Result<Message, WireError> {
    Ok(opaque_unit(
        json::msg_text(fields, path)?,
        Some(entry),
        None,
    ))
}

/// An entry of `messages` without a `role`: an item (a Responses item a conversion carried
/// over: a `type`, or an `id` alone, an item reference) is an opaque unit; anything else an
/// error.
pub(crate) fn item_in_messages(
    fields: &[(Cow<'_, str>, MsgField<'_>)],
    path: &Path<'_>,
) -> Result<Message, WireError> {
    let ty = Msg::raw(fields, "type").and_then(|t| json::string(t, path).ok());
    match ty {
        Some(ty) => opaque_message(fields, path, &format!("item:{ty}")),
        None if Msg::raw(fields, "id").is_some() => {
            opaque_message(fields, path, responses::ITEM_REFERENCE)
        }
        None => Err(path.error("message without \"role\"")),
    }
}

/// The wire JSON of a message written as it came ([`opaque_unit`]), if it is one.
pub(crate) fn raw_json(message: &Message) -> Option<&str> {
    let [ContentBlock::Opaque { json }] = &message.content[..] else {
        return None;
    };
    let raw = message.role == crate::plugin_api::Role::System
        && message.extra_json.contains(form::ITEM)
        && json::Extra::parse(message.extra_json.as_str())
            .marker(form::ITEM)
            .as_deref()
            == Some("raw");
    raw.then_some(json.as_str())
}

/// Records in `extra` what a message held that tamp does not know (`rules::pinned::OPAQUE`).
pub(crate) fn mark_opaque(extra: &mut json::ObjText, entries: &[String]) {
    if !entries.is_empty() {
        extra.raw(
            form::OPAQUE,
            &json::string_array(entries.iter().map(String::as_str)),
        );
    }
}

/// A parsed message: its blocks and recorded extras, read back as a summary if its text is a
/// `<tamp-summary>` marker (its MAC kept in the `tamp:mac` marker). Both wire readers end each
/// message here.
pub(crate) fn finish_message(
    role: crate::plugin_api::Role,
    blocks: Vec<ContentBlock>,
    mut extra: json::ObjText,
) -> Message {
    let mut message = Message {
        role,
        content: abi_stable::std_types::RVec::from(blocks),
        summary: ROption::RNone,
        extra_json: RString::new(),
    };
    if let Some(read) = read_summary(&mut message) {
        if let Some(mac) = &read.mac {
            extra.string(form::MAC, mac);
        }
        if !read.recall_line {
            // Written back as it came: the writer leaves the line out.
            extra.string(form::NO_RECALL_LINE, "absent");
        }
    }
    message.extra_json = extra.finish();
    message
}

/// What a summary's marker carried besides its info and body.
struct ReadSummary {
    mac: Option<String>,
    recall_line: bool,
}

/// Makes `message` a summary when its one text block is a marker; what else the marker
/// carried (its MAC, its recall line).
fn read_summary(message: &mut Message) -> Option<ReadSummary> {
    let [ContentBlock::Text { text, .. }] = &mut message.content[..] else {
        return None;
    };
    if !summary_marker::looks_like_marker(text.as_str()) {
        return None;
    }
    let marker = summary_marker::read(text.as_str())?;
    let read = ReadSummary {
        mac: marker.mac.map(str::to_owned),
        recall_line: marker.recall_line,
    };
    let body = RString::from(marker.body);
    message.summary = ROption::RSome(marker.info);
    *text = body;
    Some(read)
}

/// Whether a summary message is written with its recall line: unless it was read without one.
fn has_recall_line(message: &Message) -> bool {
    json::Extra::parse(message.extra_json.as_str())
        .marker(form::NO_RECALL_LINE)
        .is_none()
}

/// The MAC a summary message is written with (its `tamp:mac` marker): the one its marker
/// carried when read, or one set by [`set_summary_mac`].
pub fn summary_mac(message: &Message) -> Option<String> {
    json::Extra::parse(message.extra_json.as_str())
        .marker(form::MAC)
        .map(Cow::into_owned)
}

/// Sets the MAC a summary message is written with, or removes it (`None`).
pub fn set_summary_mac(message: &mut Message, mac: Option<&str>) {
    if mac.is_none() && !message.extra_json.contains(form::MAC) {
        return;
    }
    message.extra_json = json::Extra::with_marker(message.extra_json.as_str(), form::MAC, mac);
}

/// A summary message made the ordinary message its wire text is: one text block holding its
/// marker (MAC included) as the writer would write it, no summary. Written back, it is the
/// same text; read by a strategy, it is text like any other.
pub fn summary_as_text(message: &mut Message) {
    let Some(info) = message.summary.take().into_option() else {
        return;
    };
    let mac = summary_mac(message);
    let text = summary_marker::write(
        &info,
        mac.as_deref(),
        &message.joined_text(),
        has_recall_line(message),
    );
    let extra_json = first_text_extra(message);
    message.content = vec![ContentBlock::Text {
        text: RString::from(text),
        extra_json,
    }]
    .into();
    set_summary_mac(message, None);
}

/// The `extra_json` of a message's first text block (empty when it has none).
fn first_text_extra(message: &Message) -> RString {
    message
        .content
        .iter()
        .find_map(|b| match b {
            ContentBlock::Text { extra_json, .. } => Some(extra_json.clone()),
            _ => None,
        })
        .unwrap_or_default()
}

/// The content a writer writes for `message`: a summary becomes its marker text (keeping the
/// first text block's `extra_json`).
fn written_blocks(message: &Message) -> Cow<'_, [ContentBlock]> {
    match message.summary_info() {
        None => Cow::Borrowed(&message.content[..]),
        Some(info) => {
            let extra_json = first_text_extra(message);
            let mac = summary_mac(message);
            let text = summary_marker::write(
                info,
                mac.as_deref(),
                &message.joined_text(),
                has_recall_line(message),
            );
            Cow::Owned(vec![ContentBlock::Text {
                text: RString::from(text),
                extra_json,
            }])
        }
    }
}
