//! The extractive fill of a JSON Schema: what a structured request gets from the offline
//! summarizer.

use super::*;
use tamp_plugin_api::sdk::lists::pack_oldest;

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

/// Words that make a sentence a next step.
pub(super) const NEXT_STEP_WORDS: &[&str] = &["next", "should", "todo", "will"];

/// Fills a JSON Schema of an object whose properties are strings or arrays of strings, with
/// text copied from `material` only:
///
/// - a string property gets the best extractive sentences (as [`summarize`] scores them) of
///   the statements (not tool calls or output, unless there is nothing else) within its
///   `maxLength`, or a share of `budget_chars`; one naming an aim (`intent`, `goal`, `task`,
///   `purpose`, `objective`) at most [`AIM_SENTENCES`] of them, the user's when there are;
/// - an array-of-string property is filled by what its name asks for: file paths for names
///   mentioning `file` or `path` (not in installed packages, not a shorter form of another
///   listed path); from statements only: sentences saying decide/decision for `decision`, then
///   those giving a reason (`because`) for something they commit to ([`COMMITMENT_WORDS`]);
///   questions (ending in `?`) for `question`; sentences (not questions, and not decisions
///   stated as such when the schema has a decisions list) saying next/todo/will/should for
///   `next`, `step` or `todo`; an empty array for any other name (nothing is guessed);
/// - `maxItems` and the items' `maxLength` are kept (entries cut with `…`); a decisions list
///   with more entries packs its oldest several to an entry (the SDK's [`pack_oldest`]),
///   other lists keep their first entries.
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
    // A stated decision goes to the decisions list only, not to the next steps too, when the
    // schema has one.
    let has_decisions = properties
        .keys()
        .any(|k| k.to_lowercase().contains("decision"));
    let mut out = Map::new();
    let mut filled = 0;
    for (name, property) in properties {
        let kind = property.get("type").and_then(Value::as_str);
        let items = property.get("items");
        let value = match kind {
            Some("string") => {
                let limit = max_len(property).unwrap_or(usize::MAX).min(string_share);
                Value::String(string_for(name, &units, &sources, limit))
            }
            Some("array")
                if items.and_then(|i| i.get("type")).and_then(Value::as_str) == Some("string") =>
            {
                let max_items = property
                    .get("maxItems")
                    .and_then(Value::as_u64)
                    .map_or(DEFAULT_MAX_ITEMS, |n| n as usize);
                let item_len = items.and_then(max_len).unwrap_or(MAX_UNIT_CHARS);
                let entries = list_for(name, material, &units, &sources, has_decisions);
                let mut seen = HashSet::new();
                let entries: Vec<String> = entries
                    .into_iter()
                    // Exact repeats only: entries differing in a number (`handler_1.rs`,
                    // `handler_2.rs`) are different facts.
                    .filter(|e| seen.insert(e.to_lowercase()))
                    .map(|e| cut_marked(e, item_len))
                    .collect();
                // Decisions are what a handover cannot rebuild: past `maxItems` the oldest are
                // packed several to an entry; other lists keep their first entries.
                let entries = if name.to_lowercase().contains("decision") {
                    pack_oldest(entries, max_items, item_len).entries
                } else {
                    entries.into_iter().take(max_items).collect()
                };
                Value::Array(entries.into_iter().map(Value::String).collect())
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

/// Whether a unit from `source` is a statement someone made (the user, the assistant, an
/// earlier summary, or material that is no transcript), as opposed to a tool call or a tool's
/// output: decisions, questions, next steps and a session's intent are taken from statements
/// only (a comment in a file the agent read that says "because" is no decision of the session).
pub(super) fn is_statement(source: Source) -> bool {
    matches!(
        source,
        Source::User | Source::Assistant | Source::Summary | Source::Unknown
    )
}

/// Property names of a string that states an aim ("session_intent", "goal", "task"): filled
/// with a few sentences, the user's first.
const AIM_NAMES: &[&str] = &["intent", "goal", "task", "purpose", "objective"];
/// Sentences an aim is filled with at most ("in a few sentences").
pub(super) const AIM_SENTENCES: usize = 3;
/// The units from sources `keep` accepts, with their sources.
fn units_from<'a>(
    units: &[&'a str],
    sources: &[Source],
    keep: fn(Source) -> bool,
) -> (Vec<&'a str>, Vec<Source>) {
    units
        .iter()
        .zip(sources)
        .filter(|(_, s)| keep(**s))
        .map(|(u, s)| (*u, *s))
        .unzip()
}

/// The text of a string property: the best statements (the user's first for an aim), or the
/// best units of any kind when the material has no statement.
fn string_for(name: &str, units: &[&str], sources: &[Source], limit: usize) -> String {
    let name = name.to_lowercase();
    if AIM_NAMES.iter().any(|w| name.contains(w)) {
        for keep in [|s| s == Source::User, is_statement] {
            let (u, s) = units_from(units, sources, keep);
            if !u.is_empty() {
                return best_few(&u, &s, limit, AIM_SENTENCES);
            }
        }
    } else {
        let (u, s) = units_from(units, sources, is_statement);
        if !u.is_empty() {
            return best_sentences(&u, &s, limit);
        }
    }
    best_sentences(units, sources, limit)
}

/// At most `max_units` of the best units (by the summary's scores; repeats skipped), in
/// their original order, joined by spaces, within `limit` characters.
pub(super) fn best_few(
    units: &[&str],
    sources: &[Source],
    limit: usize,
    max_units: usize,
) -> String {
    if units.is_empty() || limit == 0 {
        return String::new();
    }
    let analysis = analyze(units, sources);
    let mut order: Vec<usize> = (0..units.len()).collect();
    order.sort_by(|&a, &b| {
        analysis.scores[b]
            .total_cmp(&analysis.scores[a])
            .then(a.cmp(&b))
    });
    let mut chosen = Vec::new();
    let mut seen = HashSet::new();
    let mut used = 0;
    for i in order {
        if chosen.len() == max_units {
            break;
        }
        let len = units[i].chars().count() + usize::from(!chosen.is_empty());
        if used + len > limit || !seen.insert(units[i].to_lowercase()) {
            continue;
        }
        used += len;
        chosen.push(i);
    }
    if chosen.is_empty() {
        return best_sentences(units, sources, limit);
    }
    chosen.sort_unstable();
    let text: Vec<&str> = chosen.iter().map(|&i| units[i]).collect();
    text.join(" ")
}

/// The entries of a list property, chosen by its name: file paths from the whole material,
/// the rest from statements only (see [`is_statement`]).
pub(super) fn list_for<'a>(
    name: &str,
    material: &'a str,
    units: &[&'a str],
    sources: &[Source],
    has_decisions: bool,
) -> Vec<&'a str> {
    let name = name.to_lowercase();
    let (statements, _) = units_from(units, sources, is_statement);
    let is_question = |unit: &str| unit.trim_end_matches(['"', '\'', ')']).ends_with('?');
    // A decision stated as such is listed with the decisions, not again as a step.
    let not_a_decision = |unit: &&str| !(has_decisions && has_word(unit, DECISION_CUE_WORDS));
    if name.contains("file") || name.contains("path") {
        let paths: Vec<&str> = material
            .split(|c: char| c.is_whitespace() || c == ',')
            .map(trim_token)
            .filter_map(as_path)
            .filter(|p| looks_like_a_file(p) && !is_installed_code(p))
            .collect();
        without_shorter_forms(paths)
    } else if name.contains("decision") {
        // Decisions stated as such first (each group in order), then sentences that give a
        // reason for something they commit to: when the list is cut to `maxItems`, the
        // decisions stay.
        let (stated, reasons): (Vec<&str>, Vec<&str>) = statements
            .into_iter()
            .filter(|u| has_word(u, DECISION_WORDS))
            .partition(|u| has_word(u, DECISION_CUE_WORDS));
        let reasons = reasons
            .into_iter()
            .filter(|u| has_word(u, COMMITMENT_WORDS));
        stated.into_iter().chain(reasons).collect()
    } else if name.contains("question") {
        statements.into_iter().filter(|u| is_question(u)).collect()
    } else if name.contains("next") || name.contains("step") || name.contains("todo") {
        let steps: Vec<&str> = statements
            .into_iter()
            // A question saying "should" is open, not a step decided on.
            .filter(|u| has_word(u, NEXT_STEP_WORDS) && !is_question(u))
            .filter(not_a_decision)
            .collect();
        if !steps.is_empty() {
            return steps;
        }
        // No step said as such: where the work stood is the last thing the assistant said. A
        // summary without it reads as finished work, and a strategy that needs a next step
        // (the anchored summary's handover) would otherwise refuse the whole answer.
        let (said, _) = units_from(units, sources, |s| s == Source::Assistant);
        said.into_iter()
            .rev()
            .filter(not_a_decision)
            .find(|u| !is_question(u))
            .into_iter()
            .collect()
    } else {
        Vec::new()
    }
}
/// `paths` (in order, repeats allowed) without those that are only a shorter form of another:
/// a bare file name or relative tail when a longer path ending in it is listed too
/// (`modutils.py` beside `astroid/modutils.py`), and git's `a/` and `b/` diff prefixes.
pub(super) fn without_shorter_forms(paths: Vec<&str>) -> Vec<&str> {
    let paths: Vec<&str> = paths
        .into_iter()
        .map(
            |p| match p.strip_prefix("a/").or_else(|| p.strip_prefix("b/")) {
                Some(rest) if rest.contains('/') || rest.contains('.') => rest,
                _ => p,
            },
        )
        .collect();
    let distinct: HashSet<&str> = paths.iter().copied().collect();
    // Every proper tail (after a `/`) of every path: a path found here is a shorter form.
    let mut tails: HashSet<&str> = HashSet::new();
    for p in &distinct {
        let mut rest = *p;
        while let Some(i) = rest.find('/') {
            rest = &rest[i + 1..];
            if !rest.is_empty() {
                tails.insert(rest);
            }
        }
    }
    paths.into_iter().filter(|p| !tails.contains(p)).collect()
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
