//! JSON as the wire writers build it: a tree whose leaves may be exact original text.
//!
//! The writers never round-trip what tamp does not interpret through `serde_json::Value`:
//! unknown fields, opaque blocks and tool inputs are spliced in as the text the reader kept
//! ([`Out::Raw`]). So values `Value` cannot hold — nesting deeper than its recursion limit, a
//! lone surrogate escape such as `"\ud83d"`, integers wider than 64 bits, duplicate keys —
//! come out exactly as they came in.

use std::borrow::Cow;

use serde_json::value::RawValue;

use super::json::{push_json_string, Extra};

/// A JSON value being written.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Out<'a> {
    Null,
    Bool(bool),
    Str(Cow<'a, str>),
    /// Valid JSON text, written as it is.
    Raw(Cow<'a, str>),
    Array(Vec<Out<'a>>),
    /// Fields in order; a key may repeat (the input's duplicates are kept).
    Object(Vec<(Cow<'a, str>, Out<'a>)>),
}

impl<'a> Out<'a> {
    pub(crate) fn str(s: &'a str) -> Self {
        Out::Str(Cow::Borrowed(s))
    }

    /// `text` as raw JSON when it is valid JSON, else as a JSON string (a plugin may put any
    /// text in a tool input or an opaque block; the request must still be JSON).
    pub(crate) fn json_or_string(text: &'a str) -> Self {
        match serde_json::from_str::<&RawValue>(text) {
            Ok(raw) => Out::Raw(Cow::Borrowed(raw.get())),
            Err(_) => Out::Str(Cow::Borrowed(text)),
        }
    }

    /// [`Out::json_or_string`], JSON without the whitespace between its tokens: the form the
    /// Anthropic reader keeps a tool input in ([`super::json::strip_whitespace`]). An input that
    /// came as OpenAI `arguments` text (`"{\"a\": 1}"`) written as an Anthropic `input` then
    /// reads back as the text it was written as (found by tests/e2e/fuzz.rs).
    pub(crate) fn compact_json_or_string(text: &'a str) -> Self {
        match Self::json_or_string(text) {
            Out::Raw(_) => Out::Raw(super::json::strip_whitespace(text)),
            other => other,
        }
    }

    /// The same value, owning its text.
    pub(crate) fn into_owned(self) -> Out<'static> {
        fn own(s: Cow<'_, str>) -> Cow<'static, str> {
            Cow::Owned(s.into_owned())
        }
        match self {
            Out::Null => Out::Null,
            Out::Bool(b) => Out::Bool(b),
            Out::Str(s) => Out::Str(own(s)),
            Out::Raw(s) => Out::Raw(own(s)),
            Out::Array(items) => Out::Array(items.into_iter().map(Out::into_owned).collect()),
            Out::Object(fields) => Out::Object(
                fields
                    .into_iter()
                    .map(|(k, v)| (own(k), v.into_owned()))
                    .collect(),
            ),
        }
    }

    /// Compact JSON text.
    pub(crate) fn to_compact(&self) -> String {
        let mut buf = String::new();
        self.write(&mut buf, None);
        buf
    }

    /// JSON text indented by two spaces, as `serde_json::to_string_pretty` writes it; raw
    /// values keep their own spacing.
    pub(crate) fn to_pretty(&self) -> String {
        let mut buf = String::new();
        self.write(&mut buf, Some(0));
        buf
    }

    fn write(&self, buf: &mut String, indent: Option<usize>) {
        match self {
            Out::Null => buf.push_str("null"),
            Out::Bool(b) => buf.push_str(if *b { "true" } else { "false" }),
            Out::Str(s) => push_json_string(buf, s),
            Out::Raw(text) => buf.push_str(text),
            Out::Array(items) => write_seq(buf, indent, '[', ']', items, |buf, item, inner| {
                item.write(buf, inner)
            }),
            Out::Object(fields) => {
                write_seq(buf, indent, '{', '}', fields, |buf, (key, value), inner| {
                    push_json_string(buf, key);
                    buf.push_str(if inner.is_some() { ": " } else { ":" });
                    value.write(buf, inner);
                })
            }
        }
    }
}

fn write_seq<T>(
    buf: &mut String,
    indent: Option<usize>,
    open: char,
    close: char,
    items: &[T],
    mut item: impl FnMut(&mut String, &T, Option<usize>),
) {
    buf.push(open);
    if items.is_empty() {
        buf.push(close);
        return;
    }
    let inner = indent.map(|n| n + 1);
    for (i, it) in items.iter().enumerate() {
        if i > 0 {
            buf.push(',');
        }
        newline(buf, inner);
        item(buf, it, inner);
    }
    newline(buf, indent);
    buf.push(close);
}

fn newline(buf: &mut String, indent: Option<usize>) {
    if let Some(n) = indent {
        buf.push('\n');
        for _ in 0..n {
            buf.push_str("  ");
        }
    }
}

/// An object of `own` fields followed by the wire fields of `extra` that `own` does not
/// have, in the key order the reader recorded under `tamp:keys`, if any.
pub(crate) fn finish_object<'a>(own: Vec<(Cow<'a, str>, Out<'a>)>, extra: &Extra<'a>) -> Out<'a> {
    let mut fields = own;
    let own_len = fields.len();
    for (key, raw) in extra.wire_fields() {
        if !fields[..own_len].iter().any(|(k, _)| k == key) {
            fields.push((key.clone(), Out::Raw(Cow::Borrowed(raw.get()))));
        }
    }
    Out::Object(restore_key_order(
        fields,
        extra.key_order(super::form::KEYS),
    ))
}

/// Puts `fields` in a recorded key order: each recorded key takes the first field left with
/// that key; fields the order does not name follow in their own order.
pub(crate) fn restore_key_order<'a>(
    fields: Vec<(Cow<'a, str>, Out<'a>)>,
    order: Option<Vec<String>>,
) -> Vec<(Cow<'a, str>, Out<'a>)> {
    let Some(order) = order else {
        return fields;
    };
    let mut left: Vec<Option<(Cow<'a, str>, Out<'a>)>> = fields.into_iter().map(Some).collect();
    let mut out = Vec::with_capacity(left.len());
    for key in &order {
        let slot = left
            .iter_mut()
            .find(|f| matches!(f, Some((k, _)) if k == key.as_str()));
        if let Some(slot) = slot {
            out.extend(slot.take());
        }
    }
    out.extend(left.into_iter().flatten());
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

    fn sample() -> Out<'static> {
        Out::Object(vec![
            ("a".into(), Out::Array(vec![Out::Null, Out::Bool(true)])),
            ("b".into(), Out::Object(Vec::new())),
            ("c".into(), Out::Array(Vec::new())),
            ("d\"".into(), Out::Str("x\ny".into())),
            ("e".into(), Out::Raw(r#"{"n": 1}"#.into())),
        ])
    }

    #[test]
    fn pretty_and_compact_text_match_serde_json() {
        let value: Value =
            json!({"a": [null, true], "b": {}, "c": [], "d\"": "x\ny", "e": {"n": 1}});
        assert_eq!(
            sample().to_compact(),
            r#"{"a":[null,true],"b":{},"c":[],"d\"":"x\ny","e":{"n": 1}}"#
        );
        let pretty = sample().to_pretty();
        // Raw text keeps its own spacing; everything else is laid out as serde_json does.
        assert_eq!(
            pretty.replace(r#"{"n": 1}"#, "{\n    \"n\": 1\n  }"),
            serde_json::to_string_pretty(&value).unwrap()
        );
        assert_eq!(sample().into_owned(), sample());
    }

    #[test]
    fn values_serde_json_cannot_hold_are_written_as_they_came() {
        let deep = format!("{}1{}", "[".repeat(300), "]".repeat(300));
        for text in [
            r#""\ud83d""#,
            "123456789012345678901234567890",
            deep.as_str(),
            r#"{"k":1,"k":2}"#,
        ] {
            assert_eq!(Out::json_or_string(text).to_compact(), text);
        }
        assert_eq!(
            Out::json_or_string("not json").to_compact(),
            r#""not json""#
        );
    }

    #[test]
    fn a_recorded_key_order_is_restored_with_duplicates() {
        let fields = vec![
            ("role".into(), Out::str("user")),
            ("x".into(), Out::Raw("1".into())),
            ("x".into(), Out::Raw("2".into())),
        ];
        let order = Some(vec!["x".to_string(), "role".to_string(), "x".to_string()]);
        let out = Out::Object(restore_key_order(fields, order));
        assert_eq!(out.to_compact(), r#"{"x":1,"role":"user","x":2}"#);
    }
}
