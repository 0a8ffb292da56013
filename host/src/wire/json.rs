//! Small JSON helpers for the wire readers and writers.
//!
//! The readers parse one level of JSON at a time into a [`Level`]: an object becomes its
//! `(key, raw value)` pairs and an array its raw elements, all borrowed from the input text. A
//! raw value is parsed further only where tamp interprets it; everything else (tool inputs,
//! opaque blocks, unknown fields) is kept as its exact original text.

use std::borrow::Cow;
use std::fmt;

use abi_stable::std_types::RString;
use serde::de::{
    self, Deserialize, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor,
};
use serde_json::value::RawValue;

use super::WireError;

/// The prefix of the marks a reader keeps among an object's fields (`wire::form`).
pub(crate) const MARK_PREFIX: &str = "tamp:";

/// A raw JSON value borrowed from the input text.
pub(crate) type Raw<'a> = &'a RawValue;

/// An object's fields read one level, in order: each key (unescaped) and its raw value.
pub(crate) type Fields<'a> = Vec<(Cow<'a, str>, Raw<'a>)>;

/// One level of a JSON value.
#[derive(Debug)]
pub(crate) enum Level<'a> {
    Object(Fields<'a>),
    Array(Vec<Raw<'a>>),
    String(Cow<'a, str>),
    Null,
    Bool(bool),
    Number,
}

impl<'a> Level<'a> {
    /// How the value is named in error messages ("found an object").
    pub(crate) fn kind(&self) -> &'static str {
        match self {
            Level::Object(_) => "an object",
            Level::Array(_) => "an array",
            Level::String(_) => "a string",
            Level::Null => "null",
            Level::Bool(_) => "a boolean",
            Level::Number => "a number",
        }
    }
}

/// A place in the request (`messages[14].content[1]`), rendered only for an error.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Path<'p> {
    Root,
    Key(&'p Path<'p>, &'p str),
    Index(&'p Path<'p>, usize),
}

impl<'p> Path<'p> {
    pub(crate) fn key(&'p self, key: &'p str) -> Path<'p> {
        Path::Key(self, key)
    }

    pub(crate) fn index(&'p self, index: usize) -> Path<'p> {
        Path::Index(self, index)
    }

    pub(crate) fn render(&self) -> String {
        let mut out = String::new();
        self.write(&mut out);
        out
    }

    fn write(&self, out: &mut String) {
        match self {
            Path::Root => {}
            Path::Key(parent, key) => {
                parent.write(out);
                if !out.is_empty() {
                    out.push('.');
                }
                out.push_str(key);
            }
            Path::Index(parent, index) => {
                parent.write(out);
                out.push('[');
                out.push_str(&index.to_string());
                out.push(']');
            }
        }
    }

    /// An error at this place.
    pub(crate) fn error(&self, message: impl Into<String>) -> WireError {
        WireError::new(self.render(), message)
    }
}

/// Parses one level of `raw`.
pub(crate) fn level<'a>(raw: Raw<'a>, path: &Path<'_>) -> Result<Level<'a>, WireError> {
    serde_json::from_str(raw.get()).map_err(|e| match lone_surrogate(raw.get()) {
        // serde_json words this after the escape that follows ("unexpected end of hex
        // escape" for `"a\ud800b"`): say what is wrong with the string.
        Some(escape) => path.error(format!(
            "invalid JSON: the string holds a lone surrogate escape ({escape}), which is no \
             text; tamp reads this string, so it must be valid Unicode (a surrogate pair, \
             or the character itself)"
        )),
        None => path.error(format!("invalid JSON: {e}")),
    })
}

/// The first `\uD800`–`\uDFFF` escape in `json` that is not half of a pair (a high
/// surrogate followed at once by a low one), as written.
fn lone_surrogate(json: &str) -> Option<&str> {
    let bytes = json.as_bytes();
    let escape_at = |i: usize| -> Option<u16> {
        let hex = json.get(i + 2..i + 6)?;
        (bytes.get(i) == Some(&b'\\') && bytes.get(i + 1) == Some(&b'u'))
            .then(|| u16::from_str_radix(hex, 16).ok())
            .flatten()
    };
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] != b'\\' {
            i += 1;
            continue;
        }
        let Some(unit) = escape_at(i) else {
            // `\\`, `\n`, ...: the escaped character is skipped with it.
            i += 2;
            continue;
        };
        match unit {
            0xD800..=0xDBFF if escape_at(i + 6).is_some_and(|n| (0xDC00..=0xDFFF).contains(&n)) => {
                i += 12;
            }
            0xD800..=0xDFFF => return json.get(i..i + 6),
            _ => i += 6,
        }
    }
    None
}

/// `{path}: expected {what}, found {kind}`.
pub(crate) fn expected(path: &Path<'_>, what: &str, found: &Level<'_>) -> WireError {
    expected_kind(path, what, found.kind())
}

/// `{path}: expected {what}, found {kind}`.
pub(crate) fn expected_kind(path: &Path<'_>, what: &str, kind: &str) -> WireError {
    path.error(format!("expected {what}, found {kind}"))
}

/// Parses `raw` as a string.
pub(crate) fn string<'a>(raw: Raw<'a>, path: &Path<'_>) -> Result<Cow<'a, str>, WireError> {
    match level(raw, path)? {
        Level::String(s) => Ok(s),
        other => Err(expected(path, "a string", &other)),
    }
}

/// Moves a parsed string into an `RString` (no copy when it was already owned).
pub(crate) fn rstring(s: Cow<'_, str>) -> RString {
    match s {
        Cow::Borrowed(b) => RString::from(b),
        Cow::Owned(o) => RString::from(o),
    }
}

/// Refuses an object in which a key tamp interprets appears more than once. Which of the two
/// a provider reads is not defined (JSON leaves it open; serde_json keeps the last, these
/// readers the first), so compacting either would silently change the request. A key tamp
/// does not interpret may repeat: it is passed through as written, both times.
///
/// Refuses a key that starts with `tamp:` too: the readers keep their marks among an
/// object's other fields under that prefix, and the writers leave every such key out, so a
/// client's own would be taken for a mark, or lost.
pub(crate) fn known_keys_once<'k>(
    keys: impl Iterator<Item = &'k str>,
    known: &[&str],
    path: &Path<'_>,
) -> Result<(), WireError> {
    let mut seen: Vec<&str> = Vec::new();
    for key in keys {
        if key.starts_with(MARK_PREFIX) {
            return Err(path.error(format!(
                "\"{key}\": keys starting with \"{MARK_PREFIX}\" are tamp's own marks and cannot \
                 come from a client"
            )));
        }
        if !known.contains(&key) {
            continue;
        }
        if seen.contains(&key) {
            return Err(path.error(format!(
                "\"{key}\" appears more than once; a provider may read either value, so tamp \
                 will not guess"
            )));
        }
        seen.push(key);
    }
    Ok(())
}

/// An object with a string `type` (a content block, a part, an item), read one level: its
/// fields and its type. `noun` names it in errors (`block without "type"`).
pub(crate) fn typed_object<'a>(
    raw: Raw<'a>,
    path: &Path<'_>,
    noun: &str,
) -> Result<(Fields<'a>, Cow<'a, str>), WireError> {
    let fields = match level(raw, path)? {
        Level::Object(fields) => fields,
        other => return Err(expected(path, "an object", &other)),
    };
    let Some(ty) = field(&fields, "type") else {
        return Err(path.error(format!("{noun} without \"type\"")));
    };
    let ty = string(ty, &path.key("type"))?;
    Ok((fields, ty))
}

/// The first raw value under `key` in `fields`.
pub(crate) fn field<'a>(fields: &[(Cow<'a, str>, Raw<'a>)], key: &str) -> Option<Raw<'a>> {
    fields.iter().find(|(k, _)| k == key).map(|(_, v)| *v)
}

/// Builds the text of a JSON object field by field (for `extra_json` and `metadata_json`).
#[derive(Default)]
pub(crate) struct ObjText {
    buf: String,
}

impl ObjText {
    pub(crate) fn new() -> Self {
        ObjText::default()
    }

    fn key(&mut self, key: &str) {
        self.buf.push(if self.buf.is_empty() { '{' } else { ',' });
        push_json_string(&mut self.buf, key);
        self.buf.push(':');
    }

    /// Adds `key` with an already-serialized JSON value.
    pub(crate) fn raw(&mut self, key: &str, raw_json: &str) {
        self.key(key);
        self.buf.push_str(raw_json);
    }

    /// Adds `key` with a string value.
    pub(crate) fn string(&mut self, key: &str, value: &str) {
        self.key(key);
        push_json_string(&mut self.buf, value);
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }

    /// The object's text, or an empty string when it has no fields.
    pub(crate) fn finish(mut self) -> RString {
        if !self.buf.is_empty() {
            self.buf.push('}');
        }
        RString::from(self.buf)
    }
}

/// Appends `s` as a JSON string literal.
pub(crate) fn push_json_string(buf: &mut String, s: &str) {
    buf.push('"');
    let mut start = 0;
    for (i, b) in s.bytes().enumerate() {
        let esc: Option<&str> = match b {
            b'"' => Some("\\\""),
            b'\\' => Some("\\\\"),
            b'\n' => Some("\\n"),
            b'\r' => Some("\\r"),
            b'\t' => Some("\\t"),
            0x08 => Some("\\b"),
            0x0c => Some("\\f"),
            0..=0x1f => None,
            _ => continue,
        };
        buf.push_str(&s[start..i]);
        match esc {
            Some(e) => buf.push_str(e),
            None => {
                const HEX: &[u8; 16] = b"0123456789abcdef";
                buf.push_str("\\u00");
                buf.push(HEX[(b >> 4) as usize] as char);
                buf.push(HEX[(b & 0xf) as usize] as char);
            }
        }
        start = i + 1;
    }
    buf.push_str(&s[start..]);
    buf.push('"');
}

/// `text` (valid JSON) without the whitespace between its tokens; everything else (numbers,
/// escapes, key order, duplicate keys) stays exactly as written. A tool input read this way is
/// the same message however the client happened to indent it, so content hashes (page ids,
/// cache keys) agree between two sends of one conversation.
pub(crate) fn strip_whitespace(text: &str) -> Cow<'_, str> {
    let bytes = text.as_bytes();
    let is_space = |b: u8| matches!(b, b' ' | b'\t' | b'\n' | b'\r');
    if !bytes.iter().any(|&b| is_space(b)) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len());
    let mut in_string = false;
    let mut escaped = false;
    let mut start = 0;
    for (i, &b) in bytes.iter().enumerate() {
        if in_string {
            match (escaped, b) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => in_string = false,
                _ => {}
            }
        } else if b == b'"' {
            in_string = true;
        } else if is_space(b) {
            out.push_str(&text[start..i]);
            start = i + 1;
        }
    }
    out.push_str(&text[start..]);
    Cow::Owned(out)
}

/// The fields of an `extra_json` / `metadata_json` object, read back by a writer: wire fields
/// as their exact original text, and the `tamp:` markers a reader recorded. Empty or invalid
/// text (a plugin's) has no fields.
#[derive(Debug, Default)]
pub(crate) struct Extra<'a> {
    fields: Fields<'a>,
}

impl<'a> Extra<'a> {
    pub(crate) fn parse(text: &'a str) -> Extra<'a> {
        if text.is_empty() {
            return Extra::default();
        }
        match serde_json::from_str::<Level<'a>>(text) {
            Ok(Level::Object(fields)) => Extra { fields },
            _ => Extra::default(),
        }
    }

    /// The raw value of the first field named `key`.
    pub(crate) fn get(&self, key: &str) -> Option<Raw<'a>> {
        field(&self.fields, key)
    }

    /// A string marker's value.
    pub(crate) fn marker(&self, key: &str) -> Option<Cow<'a, str>> {
        match serde_json::from_str::<Level<'a>>(self.get(key)?.get()) {
            Ok(Level::String(s)) => Some(s),
            _ => None,
        }
    }

    /// A key order recorded under `key` (a JSON array of key names).
    pub(crate) fn key_order(&self, key: &str) -> Option<Vec<String>> {
        serde_json::from_str(self.get(key)?.get()).ok()
    }

    /// The fields that are not `tamp:` markers, in order.
    pub(crate) fn wire_fields(&self) -> impl Iterator<Item = (&Cow<'a, str>, Raw<'a>)> {
        self.fields
            .iter()
            .filter(|(k, _)| !k.starts_with(MARK_PREFIX))
            .map(|(k, v)| (k, *v))
    }

    /// `text` (an `extra_json`) with its marker `key` set to the string `value`, or removed
    /// when `value` is `None`; every other field kept as its exact text, in order.
    pub(crate) fn with_marker(text: &str, key: &str, value: Option<&str>) -> RString {
        let extra = Extra::parse(text);
        let mut out = ObjText::new();
        for (name, raw) in extra.fields.iter().filter(|(name, _)| name != key) {
            out.raw(name, raw.get());
        }
        if let Some(value) = value {
            out.string(key, value);
        }
        out.finish()
    }

    /// Removes and returns the first wire field named `key`.
    pub(crate) fn take(&mut self, key: &str) -> Option<Raw<'a>> {
        let at = self.fields.iter().position(|(k, _)| k == key)?;
        Some(self.fields.remove(at).1)
    }
}

/// The JSON text of an object from its fields: every value's text as it came, the keys
/// escaped again, no whitespace between tokens (an opaque unit rebuilt from its first-pass
/// fields, which is the same JSON value as the original, exotic values included).
pub(crate) fn object_text<'v>(fields: impl Iterator<Item = (&'v str, Cow<'v, str>)>) -> String {
    let mut text = String::from("{");
    for (i, (key, value)) in fields.enumerate() {
        if i > 0 {
            text.push(',');
        }
        push_json_string(&mut text, key);
        text.push(':');
        text.push_str(&value);
    }
    text.push('}');
    text
}

/// The JSON text of a value parsed one level (see [`object_text`]); `None` for a number,
/// whose text the first pass does not keep.
pub(crate) fn level_text<'a>(level: &Level<'a>) -> Option<Cow<'a, str>> {
    Some(match level {
        Level::Object(fields) => Cow::Owned(object_text(
            fields
                .iter()
                .map(|(k, v)| (k.as_ref(), Cow::Borrowed(v.get()))),
        )),
        Level::Array(items) => {
            let mut text = String::from("[");
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    text.push(',');
                }
                text.push_str(item.get());
            }
            text.push(']');
            Cow::Owned(text)
        }
        Level::String(s) => {
            let mut text = String::new();
            push_json_string(&mut text, s);
            Cow::Owned(text)
        }
        Level::Null => Cow::Borrowed("null"),
        Level::Bool(b) => Cow::Borrowed(if *b { "true" } else { "false" }),
        Level::Number => return None,
    })
}

/// The JSON text of a first-pass message (see [`object_text`]), or where it cannot be
/// rebuilt: a `content` that is a number.
pub(crate) fn msg_text(
    fields: &[(Cow<'_, str>, MsgField<'_>)],
    path: &Path<'_>,
) -> Result<String, WireError> {
    let mut values = Vec::with_capacity(fields.len());
    for (key, value) in fields {
        values.push((
            key.as_ref(),
            match value {
                MsgField::Raw(raw) => Cow::Borrowed(raw.get()),
                MsgField::Content(level) => level_text(level).ok_or_else(|| {
                    path.key("content").error(
                        "a number, which tamp cannot carry through exactly in a message it does \
                         not know",
                    )
                })?,
            },
        ));
    }
    Ok(object_text(values.into_iter()))
}

/// The original key order of an object (a JSON array of its keys, to record under a marker)
/// when the writer would change it. Writers put the `canonical` keys first, in that order,
/// then the others in their original order.
pub(crate) fn key_order_marker<'k, I>(keys: I, canonical: &[&str]) -> Option<String>
where
    I: Iterator<Item = &'k str> + Clone,
{
    let present = canonical.iter().filter(|c| keys.clone().any(|k| k == **c));
    let others = keys.clone().filter(|k| !canonical.contains(k));
    let mut actual = keys.clone();
    let same = present.map(|c| &**c).all(|w| actual.next() == Some(w))
        && others.into_iter().all(|w| actual.next() == Some(w))
        && actual.next().is_none();
    if same {
        None
    } else {
        Some(string_array(keys))
    }
}

/// A JSON array of strings.
pub(crate) fn string_array<'k>(items: impl Iterator<Item = &'k str>) -> String {
    let mut text = String::from("[");
    for (i, item) in items.enumerate() {
        if i > 0 {
            text.push(',');
        }
        push_json_string(&mut text, item);
    }
    text.push(']');
    text
}

/// Records [`key_order_marker`] of `fields` under `marker` in `extra`, if needed.
pub(crate) fn mark_key_order(
    extra: &mut ObjText,
    fields: &[(Cow<'_, str>, Raw<'_>)],
    canonical: &[&str],
    marker: &str,
) {
    if let Some(order) = key_order_marker(fields.iter().map(|(k, _)| k.as_ref()), canonical) {
        extra.raw(marker, &order);
    }
}

// ---------------------------------------------------------------------------------------------
// Deserialization of one level, borrowing from the input.

struct Key<'a>(Cow<'a, str>);

impl<'de> Deserialize<'de> for Key<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct KeyVisitor;
        impl<'de> Visitor<'de> for KeyVisitor {
            type Value = Key<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
                Ok(Key(Cow::Borrowed(v)))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
                Ok(Key(Cow::Owned(v.to_owned())))
            }
            fn visit_string<E: de::Error>(self, v: String) -> Result<Self::Value, E> {
                Ok(Key(Cow::Owned(v)))
            }
        }
        deserializer.deserialize_str(KeyVisitor)
    }
}

impl<'de> Deserialize<'de> for Level<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(LevelVisitor)
    }
}

struct LevelVisitor;

impl<'de> Visitor<'de> for LevelVisitor {
    type Value = Level<'de>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut fields = Vec::with_capacity(map.size_hint().unwrap_or(4));
        while let Some(Key(k)) = map.next_key::<Key<'de>>()? {
            let v: Raw<'de> = map.next_value()?;
            fields.push((k, v));
        }
        Ok(Level::Object(fields))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let mut items = Vec::with_capacity(seq.size_hint().unwrap_or(8));
        while let Some(v) = seq.next_element::<Raw<'de>>()? {
            items.push(v);
        }
        Ok(Level::Array(items))
    }

    fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
        Ok(Level::String(Cow::Borrowed(v)))
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
        Ok(Level::String(Cow::Owned(v.to_owned())))
    }

    fn visit_string<E: de::Error>(self, v: String) -> Result<Self::Value, E> {
        Ok(Level::String(Cow::Owned(v)))
    }

    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(Level::Null)
    }

    fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(Level::Null)
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Self::Value, E> {
        Ok(Level::Bool(v))
    }

    fn visit_i64<E: de::Error>(self, _: i64) -> Result<Self::Value, E> {
        Ok(Level::Number)
    }

    fn visit_u64<E: de::Error>(self, _: u64) -> Result<Self::Value, E> {
        Ok(Level::Number)
    }

    fn visit_f64<E: de::Error>(self, _: f64) -> Result<Self::Value, E> {
        Ok(Level::Number)
    }

    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
}

// ---------------------------------------------------------------------------------------------
// The first pass over a request

/// Which top-level field a request's conversation is in, and how far the first pass reads it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ListKey {
    /// `messages` (Anthropic, Chat Completions): down to each message's fields, `content`
    /// one level further.
    Messages,
    /// `input` (Responses): a string, or down to each item's fields.
    Input,
}

/// Parses a request in one pass down to its conversation's fields: every field is kept raw
/// except the list `key` names (see [`ListKey`]). Syntax errors carry their line and column.
pub(crate) fn parse_doc(text: &str, key: ListKey) -> Result<Doc<'_>, WireError> {
    let mut de = serde_json::Deserializer::from_str(text);
    DocSeed(key)
        .deserialize(&mut de)
        .and_then(|doc| de.end().map(|()| doc))
        .map_err(|e| {
            locate_error(text).unwrap_or_else(|| WireError::new("", format!("invalid JSON: {e}")))
        })
}

/// Reads a Responses `input` kept raw by a first pass over `messages` (format detection).
pub(crate) fn parse_input(raw: Raw<'_>) -> Result<Input<'_>, WireError> {
    serde_json::from_str(raw.get())
        .map_err(|e| Path::Root.key("input").error(format!("invalid JSON: {e}")))
}

/// Where in the request a value the first pass could not read sits: the first pass decodes
/// message `content` strings as it goes, so a value it cannot decode (a lone surrogate
/// escape) fails the whole document; this slower walk, run only then, names the message.
pub(crate) fn locate_error(text: &str) -> Option<WireError> {
    let root = Path::Root;
    let Ok(Level::Object(top)) = serde_json::from_str::<Level<'_>>(text) else {
        return None;
    };
    let messages_path = root.key("messages");
    let Ok(Level::Array(messages)) = level(field(&top, "messages")?, &messages_path) else {
        return None;
    };
    for (i, message) in messages.iter().enumerate() {
        let path = messages_path.index(i);
        let fields = match level(message, &path) {
            Ok(Level::Object(fields)) => fields,
            Ok(_) => continue,
            Err(e) => return Some(e),
        };
        if let Some(content) = field(&fields, "content") {
            if let Err(e) = level(content, &path.key("content")) {
                return Some(e);
            }
        }
    }
    None
}

/// A request's top level.
pub(crate) enum Doc<'a> {
    Object(Vec<(Cow<'a, str>, TopField<'a>)>),
    /// Not an object: what it is.
    Other(&'static str),
}

pub(crate) enum TopField<'a> {
    Messages(Messages<'a>),
    Input(Input<'a>),
    Raw(Raw<'a>),
}

/// A Responses request's `input`: its items one level deep, or a string.
pub(crate) enum Input<'a> {
    Items(Vec<Level<'a>>),
    Text(Cow<'a, str>),
    Other(&'static str),
}

pub(crate) enum Messages<'a> {
    Array(Vec<Msg<'a>>),
    Other(&'static str),
}

pub(crate) enum Msg<'a> {
    Object(Vec<(Cow<'a, str>, MsgField<'a>)>),
    Other(&'static str),
}

pub(crate) enum MsgField<'a> {
    /// The `content` field, one level parsed.
    Content(Level<'a>),
    Raw(Raw<'a>),
}

impl<'a> Msg<'a> {
    /// The raw value of a field other than `content`.
    pub(crate) fn raw(fields: &[(Cow<'a, str>, MsgField<'a>)], key: &str) -> Option<Raw<'a>> {
        fields.iter().find_map(|(k, v)| match v {
            MsgField::Raw(raw) if k == key => Some(*raw),
            _ => None,
        })
    }
}

/// Visitor methods that report a value of an unexpected type as `$other(kind)`.
macro_rules! other_kinds {
    ($other:path, seq) => {
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
            while seq.next_element::<IgnoredAny>()?.is_some() {}
            Ok($other("an array"))
        }
        other_kinds!($other);
    };
    ($other:path, map) => {
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
            while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
            Ok($other("an object"))
        }
        other_kinds!($other);
    };
    ($other:path) => {
        fn visit_borrowed_str<E: de::Error>(self, _: &'de str) -> Result<Self::Value, E> {
            Ok($other("a string"))
        }
        fn visit_str<E: de::Error>(self, _: &str) -> Result<Self::Value, E> {
            Ok($other("a string"))
        }
        fn visit_bool<E: de::Error>(self, _: bool) -> Result<Self::Value, E> {
            Ok($other("a boolean"))
        }
        fn visit_i64<E: de::Error>(self, _: i64) -> Result<Self::Value, E> {
            Ok($other("a number"))
        }
        fn visit_u64<E: de::Error>(self, _: u64) -> Result<Self::Value, E> {
            Ok($other("a number"))
        }
        fn visit_f64<E: de::Error>(self, _: f64) -> Result<Self::Value, E> {
            Ok($other("a number"))
        }
        fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
            Ok($other("null"))
        }
    };
}

struct DocSeed(ListKey);

impl<'de> de::DeserializeSeed<'de> for DocSeed {
    type Value = Doc<'de>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        struct DocVisitor(ListKey);
        impl<'de> Visitor<'de> for DocVisitor {
            type Value = Doc<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut fields = Vec::new();
                while let Some(Key(k)) = map.next_key::<Key<'de>>()? {
                    let v = match (self.0, k.as_ref()) {
                        (ListKey::Messages, "messages") => TopField::Messages(map.next_value()?),
                        (ListKey::Input, "input") => TopField::Input(map.next_value()?),
                        _ => TopField::Raw(map.next_value()?),
                    };
                    fields.push((k, v));
                }
                Ok(Doc::Object(fields))
            }
            other_kinds!(Doc::Other, seq);
        }
        deserializer.deserialize_any(DocVisitor(self.0))
    }
}

impl<'de> Deserialize<'de> for Input<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct InputVisitor;
        impl<'de> Visitor<'de> for InputVisitor {
            type Value = Input<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a string or an array of items")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
                let mut items = Vec::with_capacity(seq.size_hint().unwrap_or(64));
                while let Some(item) = seq.next_element::<Level<'de>>()? {
                    items.push(item);
                }
                Ok(Input::Items(items))
            }
            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
                Ok(Input::Text(Cow::Borrowed(v)))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
                Ok(Input::Text(Cow::Owned(v.to_owned())))
            }
            fn visit_string<E: de::Error>(self, v: String) -> Result<Self::Value, E> {
                Ok(Input::Text(Cow::Owned(v)))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
                Ok(Input::Other("an object"))
            }
            fn visit_bool<E: de::Error>(self, _: bool) -> Result<Self::Value, E> {
                Ok(Input::Other("a boolean"))
            }
            fn visit_i64<E: de::Error>(self, _: i64) -> Result<Self::Value, E> {
                Ok(Input::Other("a number"))
            }
            fn visit_u64<E: de::Error>(self, _: u64) -> Result<Self::Value, E> {
                Ok(Input::Other("a number"))
            }
            fn visit_f64<E: de::Error>(self, _: f64) -> Result<Self::Value, E> {
                Ok(Input::Other("a number"))
            }
            fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
                Ok(Input::Other("null"))
            }
        }
        deserializer.deserialize_any(InputVisitor)
    }
}

impl<'de> Deserialize<'de> for Messages<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct MessagesVisitor;
        impl<'de> Visitor<'de> for MessagesVisitor {
            type Value = Messages<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an array of messages")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
                let mut items = Vec::with_capacity(seq.size_hint().unwrap_or(64));
                while let Some(m) = seq.next_element::<Msg<'de>>()? {
                    items.push(m);
                }
                Ok(Messages::Array(items))
            }
            other_kinds!(Messages::Other, map);
        }
        deserializer.deserialize_any(MessagesVisitor)
    }
}

impl<'de> Deserialize<'de> for Msg<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct MsgVisitor;
        impl<'de> Visitor<'de> for MsgVisitor {
            type Value = Msg<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a message")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut fields = Vec::with_capacity(4);
                while let Some(Key(k)) = map.next_key::<Key<'de>>()? {
                    let v = if k == "content" {
                        MsgField::Content(map.next_value()?)
                    } else {
                        MsgField::Raw(map.next_value()?)
                    };
                    fields.push((k, v));
                }
                Ok(Msg::Object(fields))
            }
            other_kinds!(Msg::Other, seq);
        }
        deserializer.deserialize_any(MsgVisitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    fn one_level(text: &str) -> Level<'_> {
        serde_json::from_str(text).unwrap()
    }

    #[test]
    fn levels_borrow_and_name_their_kind() {
        let text =
            r#"{"a": [1, "x"], "b\n": "plain", "c": "esc\"aped", "d": null, "e": true, "f": 1.5}"#;
        let Level::Object(fields) = one_level(text) else {
            panic!("not an object")
        };
        let keys: Vec<&str> = fields.iter().map(|(k, _)| k.as_ref()).collect();
        assert_eq!(keys, ["a", "b\n", "c", "d", "e", "f"]);
        assert!(matches!(fields[0].0, Cow::Borrowed(_)));
        assert_eq!(fields[0].1.get(), r#"[1, "x"]"#);
        let root = Path::Root;
        let Level::Array(items) = level(fields[0].1, &root).unwrap() else {
            panic!("not an array")
        };
        assert_eq!(items.len(), 2);
        assert_eq!(level(items[0], &root).unwrap().kind(), "a number");
        assert!(
            matches!(string(fields[2].1, &root).unwrap(), Cow::Owned(ref s) if s == "esc\"aped")
        );
        assert!(matches!(
            string(fields[1].1, &root).unwrap(),
            Cow::Borrowed("plain")
        ));
        assert_eq!(level(fields[3].1, &root).unwrap().kind(), "null");
        assert_eq!(level(fields[4].1, &root).unwrap().kind(), "a boolean");
        let x = root.key("x");
        let err = string(fields[5].1, &x.key("f")).unwrap_err();
        assert_eq!(err.to_string(), "x.f: expected a string, found a number");
    }

    #[test]
    fn paths_render_keys_and_indices() {
        let root = Path::Root;
        let messages = root.key("messages");
        let m = messages.index(14);
        let content = m.key("content");
        let block = content.index(1);
        assert_eq!(block.render(), "messages[14].content[1]");
        assert_eq!(block.key("text").render(), "messages[14].content[1].text");
        assert_eq!(root.render(), "");
        assert_eq!(root.key("system").index(0).render(), "system[0]");
    }

    #[test]
    fn the_first_pass_stops_at_message_fields() {
        let text = r#"{"model": "m", "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}], "name": {"x": 1}}, 7]}"#;
        let Doc::Object(fields) = parse_doc(text, ListKey::Messages).unwrap() else {
            panic!("not an object")
        };
        assert!(
            matches!(&fields[0], (k, TopField::Raw(raw)) if k == "model" && raw.get() == "\"m\"")
        );
        let TopField::Messages(Messages::Array(messages)) = &fields[1].1 else {
            panic!("no messages")
        };
        let Msg::Object(m) = &messages[0] else {
            panic!("not an object")
        };
        assert!(matches!(&m[1].1, MsgField::Content(Level::Array(blocks))
            if blocks[0].get() == r#"{"type": "text", "text": "hi"}"#));
        assert_eq!(Msg::raw(m, "name").unwrap().get(), r#"{"x": 1}"#);
        assert!(matches!(messages[1], Msg::Other("a number")));
        assert!(matches!(
            parse_doc("[1, [2]]", ListKey::Messages).unwrap(),
            Doc::Other("an array")
        ));
        let Doc::Object(fields) =
            parse_doc(r#"{"messages": {"a": [1]}}"#, ListKey::Messages).unwrap()
        else {
            panic!("not an object")
        };
        assert!(matches!(
            fields[0].1,
            TopField::Messages(Messages::Other("an object"))
        ));
    }

    #[test]
    fn syntax_errors_carry_line_and_column() {
        let err = parse_doc("{\n \"a\": [1,\n}", ListKey::Messages)
            .err()
            .unwrap();
        assert_eq!(err.path, "");
        assert!(err.message.contains("line 3 column 1"), "{}", err.message);
    }

    #[test]
    fn object_text_escapes_keys_and_strings() {
        let mut o = ObjText::new();
        assert!(o.is_empty());
        o.raw("a\"b", "[1, 2]");
        o.string("c", "line\nbreak \u{1} \\ \"q\" é");
        let text = o.finish();
        let v: Value = serde_json::from_str(text.as_str()).unwrap();
        assert_eq!(v["a\"b"], serde_json::json!([1, 2]));
        assert_eq!(v["c"], "line\nbreak \u{1} \\ \"q\" é");
        assert_eq!(ObjText::new().finish().as_str(), "");
    }
}
