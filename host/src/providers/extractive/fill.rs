//! The extractive fill of a JSON Schema: what a structured request gets from the offline
//! summarizer.

use super::*;

/// The result of [`fill_schema`].
#[derive(Debug, Clone, PartialEq)]
pub struct SchemaFill {
    /// The JSON object answering the schema.
    pub value: serde_json::Value,
    /// Properties in the schema, and how many got something other than `""` or `[]`.
    pub properties: usize,
    pub filled: usize,
}

/// List entries when the schema sets no `maxItems`.
pub(super) const DEFAULT_MAX_ITEMS: usize = 20;

/// Words that make a sentence a decision, and a next step.
pub(super) const DECISION_WORDS: &[&str] = &["because", "decide", "decided", "decides", "decision"];
pub(super) const NEXT_STEP_WORDS: &[&str] = &["next", "should", "todo", "will"];

/// Fills a JSON Schema of an object whose properties are strings or arrays of strings, with
/// text copied from `material` only:
///
/// - a string property gets the best extractive sentences (as [`summarize`] picks them) within
///   its `maxLength`, or a share of `budget_chars`;
/// - an array-of-string property is filled by what its name asks for: file paths for names
///   mentioning `file` or `path`; sentences saying decide/decision/because for `decision`;
///   questions (ending in `?`) for `question`; sentences (not questions) saying
///   next/todo/will/should for `next`, `step` or `todo`; an empty array for any other name (nothing is guessed);
/// - `maxItems` and the items' `maxLength` are kept (entries cut with `…`).
///
/// Other property types are an error when required, and left out otherwise.
pub fn fill_schema(
    schema: &str,
    material: &str,
    budget_chars: usize,
) -> Result<SchemaFill, String> {
    use serde_json::{Map, Value};
    let schema: Value = serde_json::from_str(schema).map_err(|e| format!("not JSON: {e}"))?;
    let properties = schema
        .get("properties")
        .and_then(Value::as_object)
        .filter(|_| schema.get("type").and_then(Value::as_str) == Some("object"))
        .ok_or("not an object schema with `properties`")?;
    let required: HashSet<&str> = schema
        .get("required")
        .and_then(Value::as_array)
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let (units, sources) = split_units_with_sources(material);
    // A string is picked as a summary is, by where each unit comes from (the user's requests
    // and the assistant's statements over tool calls and their output); list entries are
    // matched by their words, without the speaker.
    let (units, sources): (Vec<&str>, Vec<Source>) = units
        .into_iter()
        .zip(sources)
        .map(|(unit, source)| (strip_speaker(unit), source))
        .filter(|(unit, _)| !unit.is_empty())
        .unzip();
    let max_len = |p: &Value| {
        p.get("maxLength")
            .and_then(Value::as_u64)
            .map(|n| n as usize)
    };
    let string_share = budget_chars / properties.len().max(1);
    let mut out = Map::new();
    let mut filled = 0;
    for (name, property) in properties {
        let kind = property.get("type").and_then(Value::as_str);
        let items = property.get("items");
        let value = match kind {
            Some("string") => {
                let limit = max_len(property).unwrap_or(usize::MAX).min(string_share);
                let text = best_sentences(&units, &sources, limit);
                Value::String(text)
            }
            Some("array")
                if items.and_then(|i| i.get("type")).and_then(Value::as_str) == Some("string") =>
            {
                let max_items = property
                    .get("maxItems")
                    .and_then(Value::as_u64)
                    .map_or(DEFAULT_MAX_ITEMS, |n| n as usize);
                let item_len = items.and_then(max_len).unwrap_or(MAX_UNIT_CHARS);
                let entries = list_for(name, material, &units);
                let mut seen = HashSet::new();
                Value::Array(
                    entries
                        .into_iter()
                        // Exact repeats only: entries differing in a number (`handler_1.rs`,
                        // `handler_2.rs`) are different facts.
                        .filter(|e| seen.insert(e.to_lowercase()))
                        .take(max_items)
                        .map(|e| Value::String(cut_marked(e, item_len)))
                        .collect(),
                )
            }
            other if required.contains(name.as_str()) => {
                return Err(format!(
                    "required property `{name}` has type {}, not string or array of strings",
                    other.unwrap_or("(none)")
                ))
            }
            _ => continue,
        };
        let empty = match &value {
            Value::String(s) => s.is_empty(),
            Value::Array(a) => a.is_empty(),
            _ => false,
        };
        if !empty {
            filled += 1;
        }
        out.insert(name.clone(), value);
    }
    Ok(SchemaFill {
        value: Value::Object(out),
        properties: properties.len(),
        filled,
    })
}

/// A unit without the `user: ` / `assistant: ` prefix rendered conversations carry.
pub(super) fn strip_speaker(unit: &str) -> &str {
    let unit = unit.trim();
    for prefix in ["user: ", "assistant: ", "system: "] {
        if let Some(rest) = unit.strip_prefix(prefix) {
            return rest.trim();
        }
    }
    unit
}

/// The best units of `units` (in their original order, joined by spaces) within `limit`
/// characters; `sources[i]` says where unit i comes from.
pub(super) fn best_sentences(units: &[&str], sources: &[Source], limit: usize) -> String {
    if units.is_empty() || limit == 0 {
        return String::new();
    }
    let analysis = analyze(units, sources);
    // `pick` charges a newline per unit; the join uses a space, so the same count fits.
    let picked = pick(units, &[], &analysis, limit.saturating_add(1));
    cut_marked(&picked.join(" "), limit)
}

/// The entries of a list property, chosen by its name.
pub(super) fn list_for<'a>(name: &str, material: &'a str, units: &[&'a str]) -> Vec<&'a str> {
    let name = name.to_lowercase();
    let is_question = |unit: &str| unit.trim_end_matches(['"', '\'', ')']).ends_with('?');
    let has_word = |unit: &str, words: &[&str]| {
        unit.split(|c: char| !c.is_alphanumeric())
            .any(|w| words.contains(&w.to_lowercase().as_str()))
    };
    if name.contains("file") || name.contains("path") {
        material
            .split(|c: char| c.is_whitespace() || c == ',')
            .map(trim_token)
            .filter_map(as_path)
            .filter(|p| looks_like_a_file(p))
            .collect()
    } else if name.contains("decision") {
        // Decisions stated as such first (each group in order), then sentences that only
        // give a reason: when the list is cut to `maxItems`, the decisions stay.
        let (stated, reasons): (Vec<&str>, Vec<&str>) = units
            .iter()
            .copied()
            .filter(|u| has_word(u, DECISION_WORDS))
            .partition(|u| has_word(u, DECISION_CUE_WORDS));
        stated.into_iter().chain(reasons).collect()
    } else if name.contains("question") {
        units.iter().copied().filter(|u| is_question(u)).collect()
    } else if name.contains("next") || name.contains("step") || name.contains("todo") {
        units
            .iter()
            .copied()
            // A question saying "should" is open, not a step decided on.
            .filter(|u| has_word(u, NEXT_STEP_WORDS) && !is_question(u))
            .collect()
    } else {
        Vec::new()
    }
}

/// Whether a path [`as_path`] found names a file: not a URL, not a one-segment absolute path
/// without an extension (`</error>` reads as `/error`), not a drive letter before an escape
/// (`e:\n` inside quoted JSON).
pub(super) fn looks_like_a_file(path: &str) -> bool {
    if path.contains("://") {
        return false;
    }
    if let Some(rest) = path.strip_prefix('/') {
        if !rest.contains('/') && !rest.contains('.') {
            return false;
        }
    }
    !(path.contains('\\') && path.chars().count() < 6)
}

/// `s` cut to at most `max` characters, the cut marked with `…`.
pub(super) fn cut_marked(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        return s.to_string();
    }
    let mut out = cut_chars(s, max.saturating_sub(1));
    if max > 0 {
        out.push('…');
    }
    out
}
