//! The offline extractive summarizer: tamp's default provider, so everything runs without a key
//! or a server.
//!
//! It does not follow instructions. It summarizes the material of the prompt (the text in the
//! last `<content>` … `</content>` pair, see [`super::content_section`], or the whole prompt)
//! by picking its most informative sentences, and answers:
//!
//! ```text
//! [extractive summary: 7 of 120 sentences]
//! <the picked sentences and lines, one per line, in their original order>
//! Mentions: src/foo/bar.py, /etc/hosts, parse_config, HttpClient, 42, 3.5s
//! ```
//!
//! ## How it picks
//!
//! 1. **Units.** The material is split into lines; prose lines are split further at sentence
//!    ends (`. ! ?` followed by a capitalized word or a digit, not after an abbreviation or an
//!    initial; CJK `。！？`; an ellipsis `...` does not end a sentence). Code and log lines
//!    (indented, inside a ``` fence, ending in `{ } ; , ( [`, starting with a timestamp, a
//!    bracket, a log level, or heavy in symbols) are kept whole. Blank and symbol-only lines are
//!    dropped; units longer than 600 characters are cut, at whitespace when possible.
//! 2. **Score.** Each content word (lowercased; stop words, one-letter words and bare numbers
//!    out) weighs `ln(1 + tf) · ln((N + 1) / (df + 0.5))`: tf its count in the whole material, df
//!    the number of units it occurs in, N the number of units. A unit's base score is the sum of
//!    its distinct words' weights over √(max(distinct words, 4)) (so one rare word alone does not
//!    win), normalized to the best unit. Bonuses: file paths (+0.3, +0.4 for two or more),
//!    identifiers (snake_case, CamelCase, `foo.bar()`, `a::b`; +0.1 each up to 0.3), numbers
//!    (+0.05 each up to 0.15), error words (error, failed, exception, traceback, panic…; +0.35),
//!    first and last unit (+0.15). In a transcript as `sdk::render_messages` writes it, where a
//!    unit comes from counts too: what the user wrote +0.6, the assistant's own statements
//!    +0.25 (+0.5 with a word of decision, finding or plan: because, decided, fix, found, need,
//!    should, will…), an earlier summary +0.3, a tool call −0.25 and a tool's output −0.45; a
//!    numbered source line (`  221\t…`, as `cat -n` prints) −0.5 anywhere.
//! 3. **Pick.** Greedily by score (earlier unit wins ties) while the answer fits the budget of
//!    `max_output_tokens × 4` characters. A repeat of an already-picked unit (same text up to
//!    case, punctuation and the value of numbers) is skipped; a unit whose words overlap ≥ 50 %
//!    (Jaccard, estimated on 256-bit term signatures) with one of the last 32 picked is pushed
//!    back once with a lower score. Linear-ish: a heap, hashing and a bounded window, no
//!    all-pairs comparison. When not even one unit fits whole, the best one is cut (`…`).
//! 4. **Answer.** The header, the picked units in original order, one per line, and a
//!    `Mentions:` line with the distinct paths, identifiers and numbers of the whole material:
//!    paths first, then identifiers, then numbers; within each group by the best score of a unit
//!    they occur in, then frequency, then first appearance; one-digit numbers and items over 120
//!    characters left out. It is cut at whole items to what fits (`, …` marks a cut): up to a
//!    quarter of the budget is reserved for it, and whatever the sentences leave is also used.
//!    The header is always there when the budget holds it; a budget too small for it gets the
//!    header cut, with stop reason `max_tokens`.
//!
//! ## Structured requests
//!
//! A request with `response_schema_json` gets an *extractive fill* of the schema instead
//! ([`fill_schema`]): string properties get the best sentences, array-of-string properties
//! what their names ask for (file paths, decisions, questions, next steps), an empty array when
//! nothing fits; the text answer says `[extractive structured fill: …; nothing generated]`.
//!
//! Everything is counted in characters (`char`s), never bytes, and the result is deterministic.
//! The work is done synchronously when the future is polled: about 5 ms for 200 KB of material
//! in a release build.

use std::cmp::Ordering;
use std::collections::{BinaryHeap, HashSet, VecDeque};
use std::hash::Hasher;

use futures::future::BoxFuture;
// FxHash (as in rustc): fast and deterministic, for tables that live for one summary (not
// collision-resistant against crafted input, which costs only time here).
use rustc_hash::{FxHashMap, FxHashSet, FxHasher};
use tamp_plugin_api::{FfiOption, LlmRequest, LlmResponse, Usage};

use super::{content_section, estimate_tokens, Provider, ProviderError, ProviderErrorKind};

/// The provider name and the `model` of its responses.
pub const EXTRACTIVE_NAME: &str = "extractive";

/// The answer for material with nothing to pick from (empty, or only symbols and blank lines).
pub const NOTHING_TO_SUMMARIZE: &str = "[extractive summary: nothing to summarize]";

/// Characters per token assumed when turning `max_output_tokens` into a character budget.
pub const CHARS_PER_TOKEN: usize = 4;

/// Units longer than this many characters are cut (at whitespace when possible).
const MAX_UNIT_CHARS: usize = 600;
/// How many of the most recently picked units a candidate is compared with for near-duplicates.
const DUP_WINDOW: usize = 32;
/// Jaccard overlap of content words from which a candidate counts as a near-duplicate.
const NEAR_DUP_JACCARD: f64 = 0.5;
/// Mention items longer than this are left out of the `Mentions:` line.
const MAX_MENTION_CHARS: usize = 120;

/// The offline, deterministic extractive summarizer (provider name `extractive`).
///
/// A request with `response_schema_json` gets an *extractive fill* of the schema (see
/// [`fill_schema`]): only material copied from the prompt's content, never generated text; the
/// text answer says it is a fill. A schema it cannot fill (not an object of string and
/// array-of-string properties) fails with [`ProviderErrorKind::InvalidRequest`].
#[derive(Debug, Clone, Default)]
pub struct ExtractiveSummarizer {
    _private: (),
}

impl ExtractiveSummarizer {
    pub fn new() -> Self {
        ExtractiveSummarizer { _private: () }
    }

    /// Answers `request` synchronously (what [`Provider::complete`] does, without the future).
    ///
    /// `usage` is **estimated** from characters: input ≈ (system + prompt chars) / 4, output ≈
    /// answer chars / 4 (see [`super::estimate_tokens`]).
    pub fn answer(&self, request: &LlmRequest) -> Result<LlmResponse, ProviderError> {
        let material = content_section(request.prompt.as_str());
        let budget = (request.max_output_tokens as usize).saturating_mul(CHARS_PER_TOKEN);
        if let FfiOption::RSome(schema) = &request.response_schema_json {
            let fill = fill_schema(schema.as_str(), material, budget).map_err(|reason| {
                ProviderError::new(
                    EXTRACTIVE_NAME,
                    ProviderErrorKind::InvalidRequest,
                    format!(
                        "the extractive summarizer cannot fill this response schema: {reason}; \
                         configure an LLM provider for this stage"
                    ),
                )
            })?;
            let json = fill.value.to_string();
            let text = format!(
                "[extractive structured fill: {} of {} properties filled with text copied from \
                 the material; nothing generated]",
                fill.filled, fill.properties
            );
            let usage = Usage {
                input_tokens: estimate_tokens(request.system.as_str())
                    + estimate_tokens(request.prompt.as_str()),
                output_tokens: estimate_tokens(&json),
                ..Usage::default()
            };
            return Ok(LlmResponse {
                text: text.into(),
                structured_json: FfiOption::RSome(json.into()),
                usage,
                model: EXTRACTIVE_NAME.into(),
                stop_reason: "end_turn".into(),
            });
        }
        let summary = summarize(material, budget);
        let usage = Usage {
            input_tokens: estimate_tokens(request.system.as_str())
                + estimate_tokens(request.prompt.as_str()),
            output_tokens: estimate_tokens(&summary.text),
            ..Usage::default()
        };
        Ok(LlmResponse {
            text: summary.text.into(),
            structured_json: FfiOption::RNone,
            usage,
            model: EXTRACTIVE_NAME.into(),
            stop_reason: if summary.truncated {
                "max_tokens"
            } else {
                "end_turn"
            }
            .into(),
        })
    }
}

impl Provider for ExtractiveSummarizer {
    fn name(&self) -> &str {
        EXTRACTIVE_NAME
    }

    /// Local, deterministic and free: answering again costs less than a store round trip.
    fn cacheable(&self) -> bool {
        false
    }

    fn complete<'a>(
        &'a self,
        request: &'a LlmRequest,
    ) -> BoxFuture<'a, Result<LlmResponse, ProviderError>> {
        Box::pin(async move { self.answer(request) })
    }
}

/// The result of [`summarize`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Summary {
    /// The whole answer: header, picked units, `Mentions:` line.
    pub text: String,
    /// Units (sentences and lines) found in the material.
    pub units_total: usize,
    /// Units in the answer.
    pub units_kept: usize,
    /// The budget was too small even for the header, which was cut.
    pub truncated: bool,
}

/// Summarizes `material` into at most `budget_chars` characters (see the module docs).
pub fn summarize(material: &str, budget_chars: usize) -> Summary {
    let (units, sources) = split_units_with_sources(material);
    if units.is_empty() {
        let text = cut_chars(NOTHING_TO_SUMMARIZE, budget_chars);
        let truncated = text.len() < NOTHING_TO_SUMMARIZE.len();
        return Summary {
            text,
            units_total: 0,
            units_kept: 0,
            truncated,
        };
    }
    let n = units.len();
    let analysis = analyze(&units, &sources);

    let header_max_chars = header(n, n).chars().count();
    if budget_chars < header_max_chars + 1 {
        let text = cut_chars(&header(0, n), budget_chars);
        return Summary {
            text,
            units_total: n,
            units_kept: 0,
            truncated: true,
        };
    }
    // Room after the header line and its newline.
    let room = budget_chars - header_max_chars - 1;
    let mentions = analysis.mentions.ordered(&analysis.scores);
    let mentions_full = mentions_line(&mentions, usize::MAX).map(|l| l.chars().count() + 1);
    let reserve = mentions_full.unwrap_or(0).min(room / 4);
    let shown: Vec<std::borrow::Cow<str>> = units
        .iter()
        .zip(&sources)
        .map(|(unit, source)| match source.tag() {
            Some(tag) if Source::of_line(unit).is_none() => format!("{tag}{unit}").into(),
            _ => std::borrow::Cow::Borrowed(*unit),
        })
        .collect();
    let shown: Vec<&str> = shown.iter().map(|u| u.as_ref()).collect();
    let picked = pick(&shown, &analysis, room - reserve);

    let mut text = header(picked.len(), n);
    for unit in &picked {
        text.push('\n');
        text.push_str(unit);
    }
    let used = text.chars().count();
    // The mentions line takes its newline plus its characters.
    if let Some(line) = budget_chars
        .checked_sub(used + 1)
        .and_then(|avail| mentions_line(&mentions, avail))
    {
        text.push('\n');
        text.push_str(&line);
    }
    debug_assert!(text.chars().count() <= budget_chars);
    Summary {
        text,
        units_total: n,
        units_kept: picked.len(),
        truncated: false,
    }
}

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
const DEFAULT_MAX_ITEMS: usize = 20;

/// Words that make a sentence a decision, and a next step.
const DECISION_WORDS: &[&str] = &["because", "decide", "decided", "decides", "decision"];
const NEXT_STEP_WORDS: &[&str] = &["next", "should", "todo", "will"];

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
    let units: Vec<&str> = split_units(material)
        .into_iter()
        .map(strip_speaker)
        .filter(|u| !u.is_empty())
        .collect();
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
                let text = best_sentences(&units, limit);
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
fn strip_speaker(unit: &str) -> &str {
    let unit = unit.trim();
    for prefix in ["user: ", "assistant: ", "system: "] {
        if let Some(rest) = unit.strip_prefix(prefix) {
            return rest.trim();
        }
    }
    unit
}

/// The best units of `units` (in their original order, joined by spaces) within `limit`
/// characters.
fn best_sentences(units: &[&str], limit: usize) -> String {
    if units.is_empty() || limit == 0 {
        return String::new();
    }
    let analysis = analyze(units, &[]);
    // `pick` charges a newline per unit; the join uses a space, so the same count fits.
    let picked = pick(units, &analysis, limit.saturating_add(1));
    cut_marked(&picked.join(" "), limit)
}

/// The entries of a list property, chosen by its name.
fn list_for<'a>(name: &str, material: &'a str, units: &[&'a str]) -> Vec<&'a str> {
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
fn looks_like_a_file(path: &str) -> bool {
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
fn cut_marked(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        return s.to_string();
    }
    let mut out = cut_chars(s, max.saturating_sub(1));
    if max > 0 {
        out.push('…');
    }
    out
}

fn header(kept: usize, total: usize) -> String {
    let noun = if total == 1 { "sentence" } else { "sentences" };
    format!("[extractive summary: {kept} of {total} {noun}]")
}

/// The first `max` characters of `s`.
fn cut_chars(s: &str, max: usize) -> String {
    match s.char_indices().nth(max) {
        Some((i, _)) => s[..i].to_string(),
        None => s.to_string(),
    }
}

// ---------------------------------------------------------------------------------------------
// Units
// ---------------------------------------------------------------------------------------------

fn split_units(material: &str) -> Vec<&str> {
    split_units_with_sources(material).0
}

/// Where a unit comes from in a transcript as `sdk::render_messages` writes it (`user: …`,
/// `assistant: …`, `assistant called tool(…)`, `tool returned: …`, `summary of earlier
/// messages …`); a line without such a prefix continues the one before it. Material that is
/// no transcript is all `Unknown`, and scored as before.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Source {
    Unknown,
    User,
    Assistant,
    ToolCall,
    ToolOutput,
    Summary,
    /// The `Mentions:` line of an earlier extractive summary (a reduce step's material): its
    /// items count as mentions, the line itself is never worth picking.
    Mentions,
}

impl Source {
    /// The source a line starts, if it starts one.
    fn of_line(line: &str) -> Option<Source> {
        if line.starts_with("user: ") {
            return Some(Source::User);
        }
        if line.starts_with("assistant: ") {
            return Some(Source::Assistant);
        }
        if line.starts_with("summary of earlier messages") {
            return Some(Source::Summary);
        }
        let (head, _) = line.split_once(['(', ':'])?;
        let mut words = head.split(' ');
        match (words.next(), words.next(), words.next()) {
            (Some(_), Some("called"), Some(_)) => Some(Source::ToolCall),
            (Some(_), Some("returned" | "failed"), None) => Some(Source::ToolOutput),
            _ => None,
        }
    }

    /// How much more (or less) a person would keep a unit from here: what the user asked
    /// and the assistant's own statements over tool calls and their raw output.
    fn bonus(self, unit: &str) -> f64 {
        match self {
            Source::Unknown => 0.0,
            Source::User => 0.6,
            Source::Assistant if has_word(unit, DECISION_CUE_WORDS) => 0.9,
            Source::Assistant if has_word(unit, CUE_WORDS) => 0.5,
            Source::Assistant => 0.25,
            Source::Summary => 0.3,
            Source::ToolCall => -0.25,
            Source::ToolOutput => -0.45,
            Source::Mentions => -1.0,
        }
    }

    /// The transcript prefix a picked unit is written with when it lost it (a sentence after
    /// the first of a turn), so the summary still says who said it, and a later summary of
    /// summaries still scores it by where it came from.
    fn tag(self) -> Option<&'static str> {
        match self {
            Source::User => Some("user: "),
            Source::Assistant => Some("assistant: "),
            _ => None,
        }
    }
}

/// The first line of an extractive summary: `[extractive summary: 7 of 120 sentences]`.
fn is_summary_header(line: &str) -> bool {
    line.starts_with("[extractive summary:") && line.ends_with(']')
}

/// Words by which an assistant states a decision, a finding or a plan.
const CUE_WORDS: &[&str] = &[
    "because", "cause", "caused", "decide", "decided", "fix", "fixed", "found", "instead", "issue",
    "must", "need", "needs", "plan", "problem", "should", "will",
];

/// Words by which an assistant states a decision taken, which a handover must keep over
/// plans and findings ("I will look at…" is said far more often than "we decided…").
const DECISION_CUE_WORDS: &[&str] = &[
    "agreed", "chose", "chosen", "decided", "decision", "settled",
];

fn has_word(unit: &str, words: &[&str]) -> bool {
    unit.split(|c: char| !c.is_alphanumeric())
        .any(|w| words.iter().any(|cue| cue.eq_ignore_ascii_case(w)))
}

/// A numbered source line as `cat -n` or an editor view prints it (`  221\t  code`): output,
/// never a statement.
fn is_numbered_code(unit: &str) -> bool {
    // The first line of an output carries the transcript's prefix: `bash returned:   12\t…`.
    let body = unit
        .split_once("returned: ")
        .or_else(|| unit.split_once("failed: "))
        .map_or(unit, |(_, rest)| rest)
        .trim_start();
    let digits = body.bytes().take_while(u8::is_ascii_digit).count();
    digits > 0 && body[digits..].starts_with('\t')
}

/// The units of `material` and where each comes from.
fn split_units_with_sources(material: &str) -> (Vec<&str>, Vec<Source>) {
    let mut units = Vec::new();
    let mut sources = Vec::new();
    let mut source = Source::Unknown;
    let mut in_fence = false;
    for line in material.lines() {
        let trimmed = line.trim();
        // An earlier extractive summary in the material: its header says nothing, and its
        // mentions are not a sentence (before this, a reduce step picked them first, for
        // their paths and identifiers).
        if is_summary_header(trimmed) {
            source = Source::Unknown;
            continue;
        }
        if let Some(items) = trimmed.strip_prefix("Mentions: ") {
            push_unit(&mut units, items);
            sources.resize(units.len(), Source::Mentions);
            source = Source::Unknown;
            continue;
        }
        if let Some(starts) = Source::of_line(line) {
            source = starts;
        }
        if trimmed.starts_with("```") || trimmed.starts_with("~~~") {
            in_fence = !in_fence;
            continue;
        }
        if !trimmed.chars().any(char::is_alphanumeric) {
            continue;
        }
        if in_fence || is_code_like(line, trimmed) {
            push_unit(&mut units, trimmed);
        } else {
            split_sentences(trimmed, &mut units);
        }
        sources.resize(units.len(), source);
    }
    (units, sources)
}

/// Lines kept whole: code, logs, stack traces, tables.
fn is_code_like(line: &str, trimmed: &str) -> bool {
    if line.starts_with("    ") || line.starts_with('\t') {
        return true;
    }
    let first = trimmed.chars().next().unwrap_or(' ');
    if first.is_ascii_digit()
        && trimmed
            .chars()
            .take(12)
            .any(|c| matches!(c, ':' | '-' | '/'))
    {
        return true; // timestamps, dates
    }
    if matches!(
        first,
        '[' | '{' | '}' | '(' | ')' | '<' | '|' | '$' | '#' | '@'
    ) {
        return true;
    }
    if trimmed.ends_with(['{', '}', ';', ',', '(', '[', ')', ']', '\\']) {
        return true;
    }
    const LEVELS: [&str; 8] = [
        "ERROR",
        "WARN",
        "INFO",
        "DEBUG",
        "TRACE",
        "FATAL",
        "Traceback",
        "//",
    ];
    if LEVELS.iter().any(|l| trimmed.starts_with(l)) {
        return true;
    }
    let mut symbols = 0usize;
    let mut visible = 0usize;
    for c in trimmed.chars() {
        if c.is_whitespace() {
            continue;
        }
        visible += 1;
        if matches!(
            c,
            '{' | '}'
                | '['
                | ']'
                | '('
                | ')'
                | '<'
                | '>'
                | '='
                | ';'
                | '|'
                | '&'
                | '*'
                | '$'
                | '\\'
                | '"'
        ) {
            symbols += 1;
        }
    }
    symbols * 100 > visible * 12
}

const ABBREVIATIONS: [&str; 14] = [
    "e.g", "i.e", "etc", "vs", "mr", "mrs", "ms", "dr", "st", "no", "fig", "cf", "approx", "al",
];

fn split_sentences<'a>(line: &'a str, units: &mut Vec<&'a str>) {
    let mut start = 0;
    let mut iter = line.char_indices().peekable();
    while let Some((i, c)) = iter.next() {
        let cjk = matches!(c, '。' | '！' | '？');
        if !(cjk || matches!(c, '.' | '!' | '?')) {
            continue;
        }
        // Swallow further terminators and closing quotes/brackets.
        let mut end = i + c.len_utf8();
        let mut dots = usize::from(c == '.');
        while let Some(&(j, d)) = iter.peek() {
            if matches!(
                d,
                '.' | '!'
                    | '?'
                    | '…'
                    | '"'
                    | '\''
                    | ')'
                    | ']'
                    | '»'
                    | '”'
                    | '’'
                    | '。'
                    | '！'
                    | '？'
            ) {
                dots += usize::from(d == '.');
                end = j + d.len_utf8();
                iter.next();
            } else {
                break;
            }
        }
        if dots >= 2 {
            continue; // an ellipsis (`test x ... ok`, `Compiling...`), not a sentence end
        }
        let rest = &line[end..];
        let boundary = if cjk {
            true
        } else {
            let after = rest.trim_start();
            if after.len() == rest.len() {
                false // no whitespace after: `v1.2`, `foo.bar`, `src/x.py`
            } else {
                match after.chars().next() {
                    None => true,
                    Some(n) => {
                        (n.is_uppercase()
                            || n.is_ascii_digit()
                            || matches!(n, '"' | '\'' | '(' | '[' | '`' | '*' | '“'))
                            && !(c == '.' && ends_with_abbreviation(&line[start..i]))
                    }
                }
            }
        };
        if boundary {
            let sentence = line[start..end].trim();
            if sentence.chars().any(char::is_alphanumeric) {
                push_unit(units, sentence);
            }
            start = end;
        }
    }
    let tail = line[start..].trim();
    if tail.chars().any(char::is_alphanumeric) {
        push_unit(units, tail);
    }
}

fn ends_with_abbreviation(before: &str) -> bool {
    let word = before
        .rsplit(|c: char| c.is_whitespace() || c == '(')
        .next()
        .unwrap_or("");
    if word.chars().count() == 1 && word.chars().all(char::is_alphabetic) {
        return true; // an initial: "J. Smith"
    }
    ABBREVIATIONS.iter().any(|a| word.eq_ignore_ascii_case(a))
}

/// Pushes `text`, cut into pieces of at most [`MAX_UNIT_CHARS`] characters (at whitespace when
/// there is some in the last third of a piece).
fn push_unit<'a>(units: &mut Vec<&'a str>, text: &'a str) {
    let mut rest = text;
    loop {
        let Some((cut, _)) = rest.char_indices().nth(MAX_UNIT_CHARS) else {
            if !rest.is_empty() {
                units.push(rest);
            }
            return;
        };
        let piece = &rest[..cut];
        let min = piece
            .char_indices()
            .nth(MAX_UNIT_CHARS * 2 / 3)
            .map(|(i, _)| i)
            .unwrap_or(0);
        let split = piece[min..]
            .rfind(char::is_whitespace)
            .map(|j| min + j)
            .unwrap_or(cut);
        let head = rest[..split].trim_end();
        if head.chars().any(char::is_alphanumeric) {
            units.push(head);
        }
        rest = rest[split..].trim_start();
    }
}

// ---------------------------------------------------------------------------------------------
// Analysis: terms, features, mentions
// ---------------------------------------------------------------------------------------------

struct Analysis {
    /// A signature of each unit's distinct content terms, for the near-duplicate check.
    signatures: Vec<Signature>,
    scores: Vec<f64>,
    /// Whether a unit may be picked at all (an earlier summary's `Mentions:` line may not:
    /// it is only read for its mentions).
    pickable: Vec<bool>,
    mentions: Mentions,
}

/// A 256-bit set of a unit's content terms (one bit per term, by hash) and how many terms it
/// has: Jaccard overlap is estimated with popcounts, so the duplicate check is a few word
/// operations per pair whatever the units' lengths.
#[derive(Clone, Copy, Default)]
struct Signature {
    bits: [u64; 4],
    terms: u32,
}

impl Signature {
    fn of(ids: &[u32]) -> Self {
        let mut bits = [0u64; 4];
        for &id in ids {
            let h = id.wrapping_mul(0x9E37_79B1) >> 24; // 0..256
            bits[(h >> 6) as usize] |= 1 << (h & 63);
        }
        Signature {
            bits,
            terms: ids.len() as u32,
        }
    }

    /// Estimated Jaccard overlap; 0 when either unit has fewer than 3 terms.
    fn jaccard(&self, other: &Signature) -> f64 {
        if self.terms < 3 || other.terms < 3 {
            return 0.0;
        }
        let (mut and, mut or) = (0u32, 0u32);
        for k in 0..4 {
            and += (self.bits[k] & other.bits[k]).count_ones();
            or += (self.bits[k] | other.bits[k]).count_ones();
        }
        if or == 0 {
            0.0
        } else {
            and as f64 / or as f64
        }
    }
}

#[derive(Default)]
struct Features {
    paths: usize,
    identifiers: usize,
    numbers: usize,
    error: bool,
}

#[derive(Clone, Copy)]
struct TermInfo {
    tf: u32,
    df: u32,
    stop: bool,
    error: bool,
}

fn analyze(units: &[&str], sources: &[Source]) -> Analysis {
    let mut ids: FxHashMap<String, u32> = FxHashMap::default();
    let mut info: Vec<TermInfo> = Vec::new();
    // Distinct content-term ids of every unit, one after the other; `spans[i]` is unit i's.
    let mut flat: Vec<u32> = Vec::new();
    let mut spans: Vec<(usize, usize)> = Vec::with_capacity(units.len());
    let mut features: Vec<Features> = Vec::with_capacity(units.len());
    let mut mentions = Mentions::default();
    let mut buf = String::new();

    for (index, unit) in units.iter().enumerate() {
        let start = flat.len();
        let mut error = false;
        for word in unit.split(|c: char| !(c.is_alphanumeric() || c == '_')) {
            if word.is_empty() || word.bytes().all(|b| b.is_ascii_digit() || b == b'_') {
                continue;
            }
            buf.clear();
            if word.is_ascii() {
                buf.push_str(word);
                buf.make_ascii_lowercase();
            } else {
                for c in word.chars() {
                    buf.extend(c.to_lowercase());
                }
            }
            let id = match ids.get(buf.as_str()) {
                Some(&id) => id,
                None => {
                    let id = info.len() as u32;
                    info.push(TermInfo {
                        tf: 0,
                        df: 0,
                        stop: buf.chars().nth(1).is_none() || is_stop_word(&buf),
                        error: is_error_word(&buf),
                    });
                    ids.insert(buf.clone(), id);
                    id
                }
            };
            let t = &mut info[id as usize];
            t.tf += 1;
            error |= t.error;
            if !t.stop {
                flat.push(id);
            }
        }
        flat[start..].sort_unstable();
        let mut write = start;
        for read in start..flat.len() {
            if read == start || flat[read] != flat[write - 1] {
                flat[write] = flat[read];
                write += 1;
            }
        }
        flat.truncate(write);
        for &id in &flat[start..] {
            info[id as usize].df += 1;
        }
        spans.push((start, flat.len()));
        let mut f = mentions.scan(unit, index as u32);
        f.error = error;
        features.push(f);
    }

    let n = units.len() as f64;
    let weight: Vec<f64> = info
        .iter()
        .map(|t| {
            if t.stop || t.df == 0 {
                0.0
            } else {
                (1.0 + t.tf as f64).ln() * ((n + 1.0) / (t.df as f64 + 0.5)).ln()
            }
        })
        .collect();
    let base: Vec<f64> = spans
        .iter()
        .map(|&(a, b)| {
            if a == b {
                0.0
            } else {
                flat[a..b]
                    .iter()
                    .map(|&id| weight[id as usize])
                    .sum::<f64>()
                    / ((b - a).max(4) as f64).sqrt()
            }
        })
        .collect();
    let max_base = base.iter().copied().fold(0.0f64, f64::max);
    let last = units.len() - 1;
    let scores = base
        .iter()
        .zip(&features)
        .enumerate()
        .map(|(i, (&b, f))| {
            let mut s = if max_base > 0.0 { b / max_base } else { 0.0 };
            s += match f.paths {
                0 => 0.0,
                1 => 0.3,
                _ => 0.4,
            };
            s += (0.1 * f.identifiers as f64).min(0.3);
            s += (0.05 * f.numbers as f64).min(0.15);
            if f.error {
                s += 0.35;
            }
            if i == 0 || i == last {
                s += 0.15;
            }
            s += sources.get(i).map_or(0.0, |src| src.bonus(units[i]));
            if is_numbered_code(units[i]) {
                s -= 0.5;
            }
            s
        })
        .collect();
    let signatures = spans
        .iter()
        .map(|&(a, b)| Signature::of(&flat[a..b]))
        .collect();
    let pickable = (0..units.len())
        .map(|i| sources.get(i) != Some(&Source::Mentions))
        .collect();
    Analysis {
        signatures,
        scores,
        pickable,
        mentions,
    }
}

/// English stop words plus the role words of rendered conversations; sorted for binary search.
const STOP_WORDS: [&str; 151] = [
    "a",
    "about",
    "above",
    "after",
    "again",
    "against",
    "all",
    "also",
    "am",
    "an",
    "and",
    "any",
    "are",
    "as",
    "assistant",
    "at",
    "be",
    "because",
    "been",
    "before",
    "being",
    "below",
    "between",
    "both",
    "but",
    "by",
    "called",
    "can",
    "could",
    "did",
    "do",
    "does",
    "doing",
    "done",
    "down",
    "during",
    "each",
    "even",
    "few",
    "for",
    "from",
    "further",
    "get",
    "got",
    "had",
    "has",
    "have",
    "having",
    "he",
    "her",
    "here",
    "hers",
    "herself",
    "him",
    "himself",
    "his",
    "how",
    "i",
    "if",
    "in",
    "into",
    "is",
    "it",
    "its",
    "itself",
    "just",
    "let",
    "like",
    "may",
    "me",
    "might",
    "more",
    "most",
    "much",
    "must",
    "my",
    "myself",
    "no",
    "nor",
    "not",
    "now",
    "of",
    "off",
    "ok",
    "okay",
    "on",
    "once",
    "only",
    "or",
    "other",
    "our",
    "ours",
    "ourselves",
    "out",
    "over",
    "own",
    "please",
    "returned",
    "same",
    "she",
    "should",
    "so",
    "some",
    "such",
    "sure",
    "than",
    "thanks",
    "that",
    "the",
    "their",
    "theirs",
    "them",
    "themselves",
    "then",
    "there",
    "these",
    "they",
    "this",
    "those",
    "through",
    "to",
    "too",
    "tool",
    "under",
    "until",
    "up",
    "us",
    "use",
    "user",
    "very",
    "was",
    "we",
    "were",
    "what",
    "when",
    "where",
    "which",
    "while",
    "who",
    "whom",
    "why",
    "will",
    "with",
    "would",
    "yes",
    "yet",
    "you",
    "your",
    "yours",
    "yourself",
    "yourselves",
];

fn is_stop_word(word: &str) -> bool {
    STOP_WORDS.binary_search(&word).is_ok()
}

fn is_error_word(word: &str) -> bool {
    matches!(
        word,
        "error"
            | "errors"
            | "err"
            | "failed"
            | "fails"
            | "failure"
            | "failures"
            | "exception"
            | "exceptions"
            | "traceback"
            | "panic"
            | "panicked"
            | "fatal"
            | "crash"
            | "crashed"
            | "segfault"
            | "aborted"
            | "timeout"
            | "denied"
            | "refused"
            | "errno"
            | "stacktrace"
    )
}

// ---------------------------------------------------------------------------------------------
// Mentions: paths, identifiers, numbers
// ---------------------------------------------------------------------------------------------

#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug)]
enum Category {
    Path,
    Identifier,
    Number,
}

struct MentionEntry {
    category: Category,
    count: u32,
    first: u32,
    call: bool,
    /// The units it occurs in, ascending.
    units: Vec<u32>,
}

#[derive(Default)]
struct Mentions {
    entries: FxHashMap<String, MentionEntry>,
}

impl Mentions {
    /// Records the mentions in unit number `unit` and returns its features (`error` left
    /// false).
    fn scan(&mut self, text: &str, unit: u32) -> Features {
        let mut f = Features::default();
        for raw in text.split_whitespace() {
            // Most tokens are plain words: skip them without looking further.
            let (mut pathish, mut special, mut prev_lower) = (false, false, false);
            for &b in raw.as_bytes() {
                match b {
                    b'/' | b'\\' | b'.' => {
                        pathish = true;
                        special = true;
                    }
                    b'0'..=b'9' | b'_' | b':' | b'(' => special = true,
                    b'A'..=b'Z' if prev_lower => special = true,
                    _ => {}
                }
                prev_lower = b.is_ascii_lowercase();
            }
            if !special {
                continue;
            }
            if !pathish {
                self.scan_token(trim_token(raw), unit, &mut f);
                continue;
            }
            // Paths may sit inside calls, quotes or assignments: `open("src/a.py")`,
            // `--config=/etc/x.toml`. Look for them in the pieces between such delimiters, and
            // for identifiers and numbers in what is left.
            let url = scheme_separator(raw).is_some();
            let mut scanned = 0;
            let mut start = 0;
            for (i, c) in raw.char_indices().chain(std::iter::once((raw.len(), ' '))) {
                let delimiter = matches!(
                    c,
                    ' ' | '('
                        | ')'
                        | '['
                        | ']'
                        | '{'
                        | '}'
                        | '<'
                        | '>'
                        | '"'
                        | '\''
                        | ','
                        | ';'
                        | '|'
                        | '`'
                ) || (c == '=' && !url);
                if !delimiter {
                    continue;
                }
                let piece = &raw[start..i];
                start = i + c.len_utf8();
                let token = trim_token(piece);
                if token.is_empty() {
                    continue;
                }
                if let Some(path) = as_path(token) {
                    let offset = token.as_ptr() as usize - raw.as_ptr() as usize;
                    self.scan_token(&raw[scanned..offset], unit, &mut f);
                    scanned = offset + token.len();
                    self.add(path, Category::Path, false, unit);
                    f.paths += 1;
                }
            }
            self.scan_token(trim_token(&raw[scanned..]), unit, &mut f);
        }
        f
    }

    fn add(&mut self, text: &str, category: Category, call: bool, unit: u32) {
        if text.len() > MAX_MENTION_CHARS && text.chars().count() > MAX_MENTION_CHARS {
            return;
        }
        if let Some(e) = self.entries.get_mut(text) {
            e.count += 1;
            e.call |= call;
            if e.units.last() != Some(&unit) {
                e.units.push(unit);
            }
            return;
        }
        let first = self.entries.len() as u32;
        self.entries.insert(
            text.to_string(),
            MentionEntry {
                category,
                count: 1,
                first,
                call,
                units: vec![unit],
            },
        );
    }

    /// Identifiers and numbers inside one whitespace-delimited token that is not a path.
    fn scan_token(&mut self, token: &str, unit: u32, f: &mut Features) {
        // Letters, digits, `_`, and any non-ASCII byte continue a word.
        let word_byte = |b: u8| b.is_ascii_alphanumeric() || b == b'_' || b >= 0x80;
        let bytes = token.as_bytes();
        let mut i = 0;
        while i < bytes.len() {
            let b = bytes[i];
            let prev = i.checked_sub(1).map(|p| bytes[p]);
            // After a backslash a letter is an escape (`\\nFoo`), not an identifier's start.
            if (b.is_ascii_alphabetic() || b == b'_')
                && !prev.is_some_and(|p| word_byte(p) || p == b'\\')
            {
                let end = ident_chain_end(bytes, i);
                let chain = &token[i..end];
                let call = bytes.get(end) == Some(&b'(');
                if is_identifier(chain, call) {
                    self.add(chain, Category::Identifier, call, unit);
                    f.identifiers += 1;
                }
                i = end;
                continue;
            }
            if b.is_ascii_digit() && !prev.is_some_and(|p| word_byte(p) || p == b'.') {
                let end = number_end(bytes, i);
                let number = &token[i..end];
                if number.len() >= 2 {
                    self.add(number, Category::Number, false, unit);
                    f.numbers += 1;
                }
                i = end;
                continue;
            }
            i += 1;
        }
    }

    /// Distinct mentions, paths first, then identifiers, then numbers; within a group by the
    /// best score of a unit they occur in, then frequency, then first appearance.
    fn ordered(&self, scores: &[f64]) -> Vec<String> {
        let mut all: Vec<(&String, &MentionEntry, f64)> = self
            .entries
            .iter()
            .map(|(text, e)| {
                let best = e
                    .units
                    .iter()
                    .map(|&u| scores[u as usize])
                    .fold(0.0f64, f64::max);
                (text, e, best)
            })
            .collect();
        all.sort_by(|a, b| {
            a.1.category
                .cmp(&b.1.category)
                .then(b.2.total_cmp(&a.2))
                .then(b.1.count.cmp(&a.1.count))
                .then(a.1.first.cmp(&b.1.first))
        });
        all.into_iter()
            .map(|(text, e, _)| {
                if e.call {
                    format!("{text}()")
                } else {
                    text.clone()
                }
            })
            .collect()
    }
}

/// `Mentions: a, b, c` in at most `max_chars` characters, cut at whole items (`, …` marks the
/// cut); `Mentions: none` when there are none; `None` when not even one item fits.
fn mentions_line(items: &[String], max_chars: usize) -> Option<String> {
    const PREFIX: &str = "Mentions: ";
    const MORE: &str = ", …";
    if items.is_empty() {
        let line = format!("{PREFIX}none");
        return (line.chars().count() <= max_chars).then_some(line);
    }
    let mut line = String::from(PREFIX);
    let mut len = PREFIX.chars().count();
    for (k, item) in items.iter().enumerate() {
        let item_len = item.chars().count() + if k == 0 { 0 } else { 2 };
        // Room for `, …` unless this is the last item.
        let more = if k + 1 == items.len() {
            0
        } else {
            MORE.chars().count()
        };
        if len + item_len + more > max_chars {
            if k == 0 {
                return None;
            }
            line.push_str(MORE);
            return Some(line);
        }
        if k > 0 {
            line.push_str(", ");
        }
        line.push_str(item);
        len += item_len;
    }
    Some(line)
}

/// Strips punctuation around a token: quotes, brackets, trailing sentence punctuation.
fn trim_token(raw: &str) -> &str {
    let t = raw.trim_start_matches(['(', '[', '{', '"', '\'', '`', '<', '*', '“', '‘']);
    let t = t.trim_end_matches([
        '.', ',', ';', ':', '!', '?', '"', '\'', '`', '>', '*', '”', '’',
    ]);
    // Trailing `)`, `]`, `}` only when unbalanced, so `foo()` keeps its parentheses.
    let mut t = t;
    while let Some(last) = t.chars().last() {
        let open = match last {
            ')' => '(',
            ']' => '[',
            '}' => '{',
            _ => break,
        };
        if t.matches(open).count() >= t.matches(last).count() {
            break;
        }
        t = &t[..t.len() - 1];
        t = t.trim_end_matches(['.', ',', ';', ':', '!', '?', '"', '\'', '`']);
    }
    t
}

/// Where `://` starts in `s`, if it has one.
fn scheme_separator(s: &str) -> Option<usize> {
    let mut from = 0;
    while let Some(i) = s[from..].find(':') {
        let at = from + i;
        if s[at..].starts_with("://") {
            return Some(at);
        }
        from = at + 1;
    }
    None
}

const FILE_EXTENSIONS: [&str; 62] = [
    "bash", "c", "cc", "cfg", "cjs", "conf", "cpp", "cs", "css", "csv", "dart", "db", "dll",
    "dylib", "env", "erl", "ex", "exs", "go", "gradle", "gz", "h", "hpp", "hs", "html", "ini",
    "ipynb", "java", "jpg", "js", "json", "jsonl", "jsx", "kt", "lock", "log", "lua", "md", "mjs",
    "ml", "php", "pl", "png", "proto", "py", "rb", "rs", "scala", "sh", "so", "sql", "svg",
    "swift", "tar", "toml", "ts", "tsx", "txt", "wasm", "xml", "yaml", "yml",
];

/// The path in `token` (without a `:line:col` suffix), if the token is one: URLs, absolute and
/// `./ ../ ~/` paths, relative paths with two slashes or a file extension, Windows paths, and
/// bare file names with a known extension.
fn as_path(token: &str) -> Option<&str> {
    if !token.chars().any(|c| c.is_alphabetic()) {
        return None;
    }
    if let Some(scheme_end) = scheme_separator(token) {
        let scheme = &token[..scheme_end];
        if !scheme.is_empty()
            && scheme
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '+')
        {
            return Some(token);
        }
        return None;
    }
    // Strip a `:12` or `:12:5` suffix.
    let mut path = token;
    for _ in 0..2 {
        if let Some(colon) = path.rfind(':') {
            let tail = &path[colon + 1..];
            if !tail.is_empty() && tail.bytes().all(|b| b.is_ascii_digit()) {
                path = &path[..colon];
            }
        }
    }
    let valid = path.chars().all(|c| {
        c.is_alphanumeric()
            || matches!(
                c,
                '/' | '\\' | '.' | '_' | '-' | '~' | '@' | '+' | '%' | ':'
            )
    });
    if !valid || path.len() < 2 {
        return None;
    }
    let has_ext = |p: &str| {
        let name = p.rsplit(['/', '\\']).next().unwrap_or(p);
        match name.rsplit_once('.') {
            Some((stem, ext)) if !stem.is_empty() || name.starts_with('.') => {
                let ext = ext.to_ascii_lowercase();
                FILE_EXTENSIONS.binary_search(&ext.as_str()).is_ok()
            }
            _ => false,
        }
    };
    let windows_drive = {
        let b = path.as_bytes();
        b.len() > 3 && b[0].is_ascii_alphabetic() && b[1] == b':' && b[2] == b'\\'
    };
    if windows_drive {
        return Some(path);
    }
    if path.contains(':') {
        return None;
    }
    let slashes = path.matches('/').count();
    let is_path = if let Some(rest) = path.strip_prefix('/') {
        rest.chars()
            .next()
            .is_some_and(|c| c.is_alphanumeric() || c == '.' || c == '_')
    } else if path.starts_with("./") || path.starts_with("../") || path.starts_with("~/") {
        true
    } else if slashes > 0 {
        (slashes >= 2 || has_ext(path)) && !path.contains("//")
    } else if path.contains('\\') {
        has_ext(path)
    } else {
        // A bare file name: `Cargo.toml`, `main.rs`, `.env`.
        path.contains('.')
            && has_ext(path)
            && path
                .chars()
                .next()
                .is_some_and(|c| c.is_alphanumeric() || c == '.')
    };
    is_path.then_some(path)
}

/// End of an identifier chain starting at `start`: segments `[A-Za-z_][A-Za-z0-9_]*` joined by
/// `.` or `::`.
fn ident_chain_end(bytes: &[u8], start: usize) -> usize {
    let word = |b: u8| b.is_ascii_alphanumeric() || b == b'_';
    let mut i = start;
    loop {
        while i < bytes.len() && word(bytes[i]) {
            i += 1;
        }
        let sep = if bytes[i..].starts_with(b"::") {
            2
        } else if bytes.get(i) == Some(&b'.') {
            1
        } else {
            0
        };
        if sep > 0
            && bytes
                .get(i + sep)
                .is_some_and(|&b| b.is_ascii_alphabetic() || b == b'_')
        {
            i += sep;
        } else {
            return i;
        }
    }
}

fn is_identifier(chain: &str, call: bool) -> bool {
    if !chain.bytes().any(|b| b.is_ascii_alphabetic()) {
        return false;
    }
    if call || chain.contains("::") {
        return true;
    }
    chain.split(['.', ':']).any(|seg| {
        let b = seg.as_bytes();
        let snake = b
            .windows(3)
            .any(|w| w[1] == b'_' && w[0].is_ascii_alphanumeric() && w[2].is_ascii_alphanumeric());
        let camel = b
            .windows(2)
            .any(|w| w[0].is_ascii_lowercase() && w[1].is_ascii_uppercase());
        snake || camel
    })
}

/// End of a number starting at `start`: digits with `.` `,` `:` `-` between digits, then an
/// optional unit suffix of up to three letters or `%` (`200ms`, `3.5s`, `50%`).
fn number_end(bytes: &[u8], start: usize) -> usize {
    let mut i = start;
    while i < bytes.len() {
        let b = bytes[i];
        let separator = matches!(b, b'.' | b',' | b':' | b'-')
            && bytes.get(i + 1).is_some_and(u8::is_ascii_digit);
        if b.is_ascii_digit() || separator {
            i += 1;
        } else {
            break;
        }
    }
    if bytes.get(i) == Some(&b'%') {
        return i + 1;
    }
    let mut j = i;
    while j < bytes.len() && j - i < 4 && bytes[j].is_ascii_alphabetic() {
        j += 1;
    }
    let ordinal = matches!(&bytes[i..j], b"st" | b"nd" | b"rd" | b"th");
    if j > i
        && j - i <= 3
        && !ordinal
        && !bytes
            .get(j)
            .is_some_and(|b| b.is_ascii_alphanumeric() || *b == b'_')
    {
        j
    } else {
        i
    }
}

// ---------------------------------------------------------------------------------------------
// Picking
// ---------------------------------------------------------------------------------------------

#[derive(PartialEq)]
struct Candidate {
    score: f64,
    index: usize,
}

impl Eq for Candidate {}

impl Ord for Candidate {
    fn cmp(&self, other: &Self) -> Ordering {
        self.score
            .total_cmp(&other.score)
            .then_with(|| other.index.cmp(&self.index))
    }
}

impl PartialOrd for Candidate {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// Picks units into `budget` characters, each costing its length plus a newline; returns their
/// texts in original order.
fn pick(units: &[&str], analysis: &Analysis, budget: usize) -> Vec<String> {
    let lens: Vec<usize> = units.iter().map(|u| u.chars().count()).collect();
    let min_cost = lens.iter().map(|l| l + 1).min().unwrap_or(usize::MAX);
    let mut heap: BinaryHeap<Candidate> = analysis
        .scores
        .iter()
        .enumerate()
        .map(|(index, &score)| Candidate { score, index })
        .collect();
    let mut penalized = vec![false; units.len()];
    let mut seen: FxHashSet<u64> = FxHashSet::default();
    let mut window: VecDeque<usize> = VecDeque::with_capacity(DUP_WINDOW);
    let mut chosen: Vec<usize> = Vec::new();
    let mut remaining = budget;

    while remaining >= min_cost {
        let Some(Candidate { score, index }) = heap.pop() else {
            break;
        };
        let cost = lens[index] + 1;
        if cost > remaining || !analysis.pickable[index] {
            continue;
        }
        let key = normalized_hash(units[index]);
        if seen.contains(&key) {
            continue;
        }
        if !penalized[index] {
            let sim = window
                .iter()
                .map(|&j| analysis.signatures[index].jaccard(&analysis.signatures[j]))
                .fold(0.0f64, f64::max);
            if sim >= NEAR_DUP_JACCARD {
                penalized[index] = true;
                heap.push(Candidate {
                    score: score * (1.0 - sim) * 0.5,
                    index,
                });
                continue;
            }
        }
        seen.insert(key);
        if window.len() == DUP_WINDOW {
            window.pop_front();
        }
        window.push_back(index);
        chosen.push(index);
        remaining -= cost;
    }

    if chosen.is_empty() {
        // Nothing fits whole: cut the best unit to the room left, if that room is worth it.
        if budget < 17 {
            return Vec::new();
        }
        let best = analysis
            .scores
            .iter()
            .enumerate()
            .filter(|(i, _)| analysis.pickable[*i])
            .max_by(|a, b| a.1.total_cmp(b.1).then_with(|| b.0.cmp(&a.0)))
            .map(|(i, _)| i)
            .unwrap_or(0);
        let mut cut = cut_chars(units[best], budget - 2).trim_end().to_string();
        cut.push('…');
        return vec![cut];
    }
    chosen.sort_unstable();
    chosen.into_iter().map(|i| units[i].to_string()).collect()
}

/// A hash of the unit's letters, lowercased, with every run of digits that is a number as
/// one `0`: equal for repeats that differ only in case, numbers, spacing or punctuation. Digits
/// that belong to a name (`HAT268`, `D-017`, `parse_v2`: after a letter or `_`, or after a `-`
/// that follows a letter) are kept: two decisions or reservations are not repeats of each
/// other.
fn normalized_hash(unit: &str) -> u64 {
    let mut h = FxHasher::default();
    let mut in_number = false;
    let mut in_name = false;
    let (mut before, mut last) = (' ', ' ');
    for c in unit.chars() {
        if c.is_ascii_digit() {
            if !in_number && !in_name {
                in_name =
                    last.is_alphabetic() || last == '_' || (last == '-' && before.is_alphabetic());
            }
            if in_name {
                h.write_u32(c as u32);
            } else if !in_number {
                h.write_u8(b'0');
            }
            in_number = true;
        } else {
            in_number = false;
            in_name = false;
            if c.is_ascii_alphabetic() {
                h.write_u32(c.to_ascii_lowercase() as u32);
            } else if !c.is_ascii() && c.is_alphanumeric() {
                for l in c.to_lowercase() {
                    h.write_u32(l as u32);
                }
            }
        }
        before = last;
        last = c;
    }
    h.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::providers::wrap_content;

    pub(super) fn material() -> String {
        let mut s = String::new();
        s.push_str("user: The deploy script keeps failing on the staging cluster.\n");
        s.push_str("assistant: Let me look at the deploy configuration first.\n");
        s.push_str("assistant called read_file({\"path\": \"deploy/config/staging.yaml\"})\n");
        s.push_str("read_file returned: replicas: 3\n");
        for i in 0..40 {
            s.push_str(&format!(
                "The weather today is nice and sunny number {i}. Nothing else happened here.\n"
            ));
        }
        s.push_str("ERROR 2024-05-01 deploy failed: connection refused to db.internal port 5432\n");
        s.push_str("    at DeployRunner.connect(src/deploy/runner.py:88)\n");
        s.push_str(
            "The fix was to raise max_connections to 250 in /etc/postgresql/postgresql.conf.\n",
        );
        s.push_str("user: Great, the staging deploy works now.\n");
        s
    }

    fn request(prompt: &str, max_tokens: u32) -> LlmRequest {
        LlmRequest::new("You summarize.", prompt, max_tokens)
    }

    #[test]
    fn tables_are_sorted() {
        assert!(STOP_WORDS.windows(2).all(|w| w[0] < w[1]));
        assert!(FILE_EXTENSIONS.windows(2).all(|w| w[0] < w[1]));
    }

    #[test]
    fn deterministic() {
        let m = material();
        let a = summarize(&m, 800);
        for _ in 0..5 {
            assert_eq!(summarize(&m, 800), a);
        }
        let p = ExtractiveSummarizer::new();
        let r1 = p.answer(&request(&m, 200)).unwrap();
        let r2 = p.answer(&request(&m, 200)).unwrap();
        assert_eq!(r1, r2);
    }

    #[test]
    fn header_and_mentions_present() {
        let s = summarize(&material(), 1200);
        let first = s.text.lines().next().unwrap();
        assert_eq!(
            first,
            format!(
                "[extractive summary: {} of {} sentences]",
                s.units_kept, s.units_total
            )
        );
        assert!(s.units_kept > 0 && s.units_kept < s.units_total);
        let last = s.text.lines().last().unwrap();
        assert!(last.starts_with("Mentions: "), "{last}");
    }

    #[test]
    fn within_budget_for_many_budgets() {
        let m = material();
        for tokens in [0u32, 1, 5, 10, 11, 12, 20, 50, 100, 300, 1000, 100_000] {
            let r = ExtractiveSummarizer::new()
                .answer(&request(&m, tokens))
                .unwrap();
            let budget = tokens as usize * 4;
            let chars = r.text.chars().count();
            assert!(
                chars <= budget,
                "{tokens} tokens: {chars} chars > {budget}\n{}",
                r.text
            );
        }
        for budget in 0..400 {
            let s = summarize(&m, budget);
            assert!(
                s.text.chars().count() <= budget,
                "budget {budget}: {}",
                s.text
            );
        }
    }

    #[test]
    fn big_budget_keeps_everything_once() {
        let m = material();
        let s = summarize(&m, 1_000_000);
        // The 40 weather lines differ only in a number: one of them is kept.
        assert_eq!(s.text.matches("The weather today").count(), 1, "{}", s.text);
        assert!(s.text.contains("max_connections"));
    }

    #[test]
    fn keeps_paths_numbers_and_errors() {
        // Small budget: the answer still carries a path and a number of the material.
        let s = summarize(&material(), 600);
        assert!(
            s.text.contains("/etc/postgresql/postgresql.conf"),
            "{}",
            s.text
        );
        assert!(s.text.contains("5432"), "{}", s.text);
        // The error line and the fix outrank the weather.
        assert!(
            s.text.contains("deploy failed: connection refused"),
            "{}",
            s.text
        );
        assert!(s.text.contains("max_connections to 250"), "{}", s.text);

        // With room, the mentions line lists them all, paths first.
        let s = summarize(&material(), 1500);
        let mentions = s.text.lines().last().unwrap();
        for item in [
            "/etc/postgresql/postgresql.conf",
            "src/deploy/runner.py",
            "deploy/config/staging.yaml",
            "5432",
            "250",
            "max_connections",
            "DeployRunner.connect()",
            "read_file()",
        ] {
            assert!(mentions.contains(item), "{item}: {mentions}");
        }
        let items: Vec<&str> = mentions
            .trim_start_matches("Mentions: ")
            .split(", ")
            .collect();
        assert!(items[..3].iter().all(|i| i.contains('/')), "{mentions}");
        // Numbers of the error line rank before the weather's.
        let pos = |x: &str| items.iter().position(|i| *i == x).unwrap();
        assert!(pos("5432") < pos("17"), "{mentions}");
    }

    #[test]
    fn the_user_and_the_assistants_statements_beat_tool_output() {
        let material = "user: The nightly report is wrong; do not touch the billing module.\n\
            assistant: Let me look at the report code.\n\
            assistant called bash({\"command\":\"cat -n src/report.py\"})\n\
            bash returned:   12\ttotal = round(sum(rows), 2) + adjustment_factor\n\
            \x20 13\treturn total_rows_formatted_for_output\n\
            \x20 14\tdef aggregate_rows(rows, adjustment_factor, currency_code):\n\
            assistant: I found the cause: the rounding happens before the adjustment, so I will fix the order.\n";
        let summary = summarize(material, 330);
        let text = summary.text;
        assert!(text.contains("do not touch the billing module"), "{text}");
        assert!(text.contains("I found the cause"), "{text}");
        assert!(!text.contains("14\tdef aggregate_rows"), "{text}");
        // The same material without its transcript prefixes is scored as before: no unit is
        // told apart by where it comes from.
        let (_, sources) = split_units_with_sources("plain text. More text.\n");
        assert!(sources.iter().all(|s| *s == Source::Unknown));
        assert_eq!(
            Source::of_line("bash returned: x"),
            Some(Source::ToolOutput)
        );
        assert_eq!(
            Source::of_line("assistant called read_file({})"),
            Some(Source::ToolCall)
        );
        assert_eq!(Source::of_line("the tool returned: x"), None);
    }

    #[test]
    fn a_decision_taken_beats_plans_and_keeps_who_said_it() {
        let material = "assistant: I will look at the aggregation module next, since the totals are computed there.\n\
            assistant: I will need to check the fixtures as well because they may be stale.\n\
            assistant: The totals are off by a cent. Decision D-007: we decided to store amounts as integer cents.\n";
        let text = summarize(material, 150).text;
        assert!(
            text.contains("assistant: Decision D-007: we decided to store amounts"),
            "{text}"
        );
        assert!(
            !text.contains("fixtures") && !text.contains("aggregation"),
            "{text}"
        );
        // A sentence after the first of a turn is written with its speaker.
        let text = summarize(
            "user: Hello. Keep the CSV exporter as it is, please.\n",
            400,
        )
        .text;
        assert!(text.contains("\nuser: Keep the CSV exporter"), "{text}");
    }

    #[test]
    fn repeats_differ_in_numbers_not_in_names() {
        let same = |a: &str, b: &str| normalized_hash(a) == normalized_hash(b);
        assert!(same("Attempt 1 failed.", "attempt 12 FAILED"));
        assert!(same("took 3.5s at 12:00", "took 4.25s at 13:01"));
        assert!(!same("Booked HAT268.", "Booked HAT270."));
        assert!(!same("Decision D-017: cache.", "Decision D-018: cache."));
        assert!(!same("call parse_v2()", "call parse_v3()"));
    }

    #[test]
    fn a_summary_of_summaries_skips_their_headers_and_mention_lines() {
        let part = |n: usize| {
            format!(
                "[extractive summary: 3 of 40 sentences]\n\
                 assistant: Decision D-0{n}: we decided to batch the queries of part {n}.\n\
                 user: Part {n} is done when the tests pass.\n\
                 Mentions: src/part_{n}/a.rs, src/part_{n}/b.rs, src/part_{n}/c.rs, parse_rows_{n}, \
                 RowReader{n}, 2024-05-{n:02}"
            )
        };
        let material = format!("{}\n\n{}", part(1), part(2));
        let text = summarize(&material, 600).text;
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines[0].starts_with("[extractive summary:"), "{text}");
        assert_eq!(
            lines
                .iter()
                .filter(|l| l.starts_with("[extractive"))
                .count(),
            1,
            "{text}"
        );
        assert_eq!(
            lines.iter().filter(|l| l.starts_with("Mentions:")).count(),
            1,
            "{text}"
        );
        assert!(text.contains("D-01:") && text.contains("D-02:"), "{text}");
        // The parts' mentions are still the summary's.
        let mentions = lines.last().unwrap();
        assert!(mentions.contains("src/part_1/a.rs"), "{text}");
    }

    #[test]
    fn output_in_original_order() {
        let s = summarize(&material(), 2000);
        let body: Vec<&str> = s
            .text
            .lines()
            .skip(1)
            .filter(|l| !l.starts_with("Mentions:"))
            .collect();
        let m = material();
        let positions: Vec<usize> = body.iter().map(|l| m.find(l).expect(l)).collect();
        assert!(positions.windows(2).all(|w| w[0] < w[1]), "{body:?}");
    }

    #[test]
    fn empty_material_is_not_an_error() {
        let p = ExtractiveSummarizer::new();
        for prompt in [
            "",
            "   \n\n",
            "---\n***\n",
            "Summarize:\n<content>\n</content>",
        ] {
            let r = p.answer(&request(prompt, 100)).unwrap();
            assert_eq!(r.text.as_str(), NOTHING_TO_SUMMARIZE, "{prompt:?}");
            assert_eq!(r.stop_reason.as_str(), "end_turn");
        }
    }

    #[test]
    fn unicode_does_not_panic_and_counts_chars() {
        let mut m = String::new();
        for i in 0..60 {
            m.push_str(&format!(
                "مرحبا بالعالم هذا نص تجريبي {i}. 🎉🚀 emoji line number {i} with café and ñ and e\u{301}\u{302} marks.\n"
            ));
            m.push_str("日本語の文です。これは二番目の文です！もう一つ？\n");
            m.push_str("👨‍👩‍👧‍👦 family 🏳️‍🌈 flags ש\u{5B8}לוֹם עולם src/ユニコード/ファイル.rs\n");
        }
        for budget in [0, 1, 5, 30, 41, 42, 43, 60, 100, 400, 1000, 5000] {
            let s = summarize(&m, budget);
            assert!(s.text.chars().count() <= budget, "{budget}: {}", s.text);
        }
        let s = summarize(&m, 400);
        assert!(
            s.text.len() > 400,
            "bytes {} should exceed the char budget",
            s.text.len()
        );
        assert!(s.units_kept > 0);
        // Cuts of a single long unit fall on char boundaries too.
        let long = "é".repeat(5000);
        for budget in [20, 50, 100, 700] {
            let s = summarize(&long, budget);
            assert!(s.text.chars().count() <= budget, "{budget}: {}", s.text);
        }
    }

    #[test]
    fn only_last_content_section_is_used() {
        let prompt = format!(
            "Instructions mention pancakes.\n{}\nMore instructions.\n{}\nEnd.",
            wrap_content("The first section talks about bananas and src/banana.rs."),
            wrap_content("The second section talks about oranges and src/orange.rs.")
        );
        let r = ExtractiveSummarizer::new()
            .answer(&request(&prompt, 200))
            .unwrap();
        assert!(r.text.contains("oranges"), "{}", r.text);
        assert!(r.text.contains("src/orange.rs"));
        assert!(!r.text.contains("banana"), "{}", r.text);
        assert!(!r.text.contains("pancakes"), "{}", r.text);
        assert!(
            r.text.starts_with("[extractive summary: 1 of 1 sentence]"),
            "{}",
            r.text
        );
    }

    const ANCHORED_SCHEMA: &str = r#"{"type": "object",
        "required": ["session_intent", "files_modified", "decisions_made", "open_questions",
                     "next_steps", "owners"],
        "properties": {
            "session_intent": {"type": "string", "maxLength": 200},
            "files_modified": {"type": "array", "items": {"type": "string"}, "maxItems": 2},
            "decisions_made": {"type": "array", "items": {"type": "string", "maxLength": 40}},
            "open_questions": {"type": "array", "items": {"type": "string"}},
            "next_steps": {"type": "array", "items": {"type": "string"}},
            "owners": {"type": "array", "items": {"type": "string"}}
        }}"#;

    fn structured_request(material: &str, schema: &str) -> LlmRequest {
        let prompt = format!("Fill the schema.\n{}", wrap_content(material));
        let mut req = request(&prompt, 500);
        req.response_schema_json = FfiOption::RSome(schema.into());
        req
    }

    #[test]
    fn a_cut_decisions_list_keeps_the_decisions_stated_as_such() {
        let schema = r#"{"type": "object", "required": ["decisions"], "properties": {
            "decisions": {"type": "array", "maxItems": 1, "items": {"type": "string"}}}}"#;
        let material = "assistant: The test fails because the fixture is stale.\n\
            assistant: We decided to regenerate the fixtures.\n";
        let fill = fill_schema(schema, material, 400).unwrap();
        let decisions = fill.value["decisions"].as_array().unwrap();
        assert_eq!(decisions.len(), 1);
        assert!(
            decisions[0]
                .as_str()
                .unwrap()
                .contains("decided to regenerate"),
            "{decisions:?}"
        );
    }

    #[test]
    fn schema_is_filled_from_the_material_only() {
        let material = "user: Please fix the flaky deploy in deploy/run.sh and src/app/main.py.\n\
            assistant: We decided to pin the image because latest broke the build.\n\
            assistant: I edited deploy/run.sh and config/app.toml.\n\
            user: Should we also pin the base image?\n\
            assistant: Next I will rerun the pipeline.\n";
        let r = ExtractiveSummarizer::new()
            .answer(&structured_request(material, ANCHORED_SCHEMA))
            .unwrap();
        assert!(
            r.text.starts_with("[extractive structured fill: 5 of 6"),
            "{}",
            r.text
        );
        let FfiOption::RSome(json) = &r.structured_json else {
            panic!("no structured answer")
        };
        let v: serde_json::Value = serde_json::from_str(json).unwrap();
        let intent = v["session_intent"].as_str().unwrap();
        assert!(
            !intent.is_empty() && intent.chars().count() <= 200,
            "{intent}"
        );
        assert!(
            material.contains(intent.split(". ").next().unwrap()),
            "{intent}"
        );
        // maxItems 2 and duplicates removed.
        assert_eq!(
            v["files_modified"],
            serde_json::json!(["deploy/run.sh", "src/app/main.py"])
        );
        let decision = v["decisions_made"][0].as_str().unwrap();
        assert_eq!(decision.chars().count(), 40);
        assert!(decision.starts_with("We decided to pin the image") && decision.ends_with('…'));
        assert_eq!(
            v["open_questions"],
            serde_json::json!(["Should we also pin the base image?"])
        );
        assert_eq!(
            v["next_steps"],
            serde_json::json!(["Next I will rerun the pipeline."])
        );
        // Nothing in the material says who owns what: an empty list, never a guess.
        assert_eq!(v["owners"], serde_json::json!([]));
    }

    #[test]
    fn tags_escapes_and_urls_are_not_files() {
        for not_a_file in ["/error", "e:\\n", "https://example.com/a/b.html"] {
            assert!(!looks_like_a_file(not_a_file), "{not_a_file}");
        }
        for file in [
            "/etc/hosts",
            "/setup.py",
            "src/a.rs",
            "C:\\work\\main.rs",
            "Cargo.toml",
        ] {
            assert!(looks_like_a_file(file), "{file}");
        }
    }

    #[test]
    fn lists_stay_empty_when_nothing_fits() {
        let r = ExtractiveSummarizer::new()
            .answer(&structured_request(
                "user: The sky is blue today.\n",
                ANCHORED_SCHEMA,
            ))
            .unwrap();
        let FfiOption::RSome(json) = &r.structured_json else {
            panic!("no structured answer")
        };
        let v: serde_json::Value = serde_json::from_str(json).unwrap();
        assert_eq!(v["session_intent"], "The sky is blue today.");
        for list in [
            "files_modified",
            "decisions_made",
            "open_questions",
            "next_steps",
        ] {
            assert_eq!(v[list], serde_json::json!([]), "{list}");
        }
    }

    #[test]
    fn unfillable_schemas_are_refused() {
        for schema in [
            r#"{"type":"object"}"#,
            r#"{"type":"object","required":["n"],"properties":{"n":{"type":"integer"}}}"#,
            "not json",
        ] {
            let err = ExtractiveSummarizer::new()
                .answer(&structured_request("hello world", schema))
                .unwrap_err();
            assert_eq!(err.kind, ProviderErrorKind::InvalidRequest);
            assert_eq!(err.provider, "extractive");
            assert!(err.message.contains("cannot fill"), "{err}");
        }
        // An optional property of another type is left out rather than refused.
        let schema =
            r#"{"type":"object","properties":{"n":{"type":"integer"},"s":{"type":"string"}}}"#;
        let r = ExtractiveSummarizer::new()
            .answer(&structured_request("Hello world.", schema))
            .unwrap();
        assert_eq!(
            r.structured_json,
            FfiOption::RSome(r#"{"s":"Hello world."}"#.into())
        );
    }

    #[test]
    fn usage_and_metadata() {
        let prompt = "x".repeat(400);
        let r = ExtractiveSummarizer::new()
            .answer(&LlmRequest::new("abcd", prompt, 100))
            .unwrap();
        assert_eq!(r.usage.input_tokens, 101);
        assert_eq!(r.usage.output_tokens, estimate_tokens(&r.text));
        assert_eq!(r.model.as_str(), "extractive");
        assert_eq!(r.stop_reason.as_str(), "end_turn");
        assert!(matches!(r.structured_json, FfiOption::RNone));
    }

    #[test]
    fn sentence_splitting() {
        let mut units = Vec::new();
        split_sentences(
            "It failed, e.g. on v1.2 in src/x.py. Then we fixed it! Was it J. Smith? yes it was. 42 tests pass.",
            &mut units,
        );
        assert_eq!(
            units,
            [
                "It failed, e.g. on v1.2 in src/x.py.",
                "Then we fixed it!",
                "Was it J. Smith? yes it was.",
                "42 tests pass."
            ]
        );
        let units = split_units(
            "```\nfn main() { println!(\"Hi. There.\"); }\n```\n    let x = 1. Also y;\n",
        );
        assert_eq!(
            units,
            [
                "fn main() { println!(\"Hi. There.\"); }",
                "let x = 1. Also y;"
            ]
        );
    }

    #[test]
    fn long_units_are_cut() {
        let line = "word ".repeat(1000);
        let units = split_units(&line);
        assert!(units.len() >= 8);
        assert!(units.iter().all(|u| u.chars().count() <= MAX_UNIT_CHARS));
        let no_space = "x".repeat(1500);
        let units = split_units(&no_space);
        assert_eq!(
            units.iter().map(|u| u.len()).collect::<Vec<_>>(),
            [600, 600, 300]
        );
    }

    #[test]
    fn mention_detection() {
        let mut m = Mentions::default();
        m.scan(
            "see src/foo/bar.py:12:3, Runner.run(lib/x.py:88) open(\"data/in.csv\") --config=/etc/x.toml /etc/hosts and Cargo.toml (or ./run.sh) at https://x.io/a?b=1 \
             or C:\\Users\\me\\file.txt; and/or 3/4 e.g. v1.2.3 call foo.bar(x) HashMap std::mem::take \
             parse_config MAX_LEN plain Word took 200ms 3.14 7 2nd 50% 0x1f utf8",
            0,
        );
        let got = m.ordered(&[1.0]);
        assert_eq!(
            got,
            [
                "src/foo/bar.py",
                "lib/x.py",
                "data/in.csv",
                "/etc/x.toml",
                "/etc/hosts",
                "Cargo.toml",
                "./run.sh",
                "https://x.io/a?b=1",
                "C:\\Users\\me\\file.txt",
                "Runner.run()",
                "open()",
                "foo.bar()",
                "HashMap",
                "std::mem::take",
                "parse_config",
                "MAX_LEN",
                "200ms",
                "3.14",
                "50%",
            ]
        );
    }

    #[test]
    fn mentions_line_cuts_whole_items() {
        let items: Vec<String> = ["src/a.rs", "src/b.rs", "foo_bar"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        assert_eq!(
            mentions_line(&items, 1000).unwrap(),
            "Mentions: src/a.rs, src/b.rs, foo_bar"
        );
        assert_eq!(
            mentions_line(&items, 31).unwrap(),
            "Mentions: src/a.rs, src/b.rs, …"
        );
        assert_eq!(mentions_line(&items, 25).unwrap(), "Mentions: src/a.rs, …");
        assert_eq!(mentions_line(&items, 15), None);
        assert_eq!(mentions_line(&[], 100).unwrap(), "Mentions: none");
        assert_eq!(mentions_line(&[], 5), None);
    }

    #[test]
    fn large_input_is_fast() {
        const WORDS: [&str; 24] = [
            "cache", "parser", "socket", "thread", "buffer", "config", "request", "response",
            "worker", "queue", "token", "stream", "index", "schema", "record", "session", "client",
            "server", "bucket", "shard", "lease", "commit", "replica", "ledger",
        ];
        let mut m = String::new();
        let mut i = 0u64;
        while m.len() < 200_000 {
            i += 1;
            let x = i.wrapping_mul(2654435761);
            let w = |k: u64| WORDS[((x >> (k * 5)) % 24) as usize];
            m.push_str(&format!(
                "Step {i}: the {} {} handled the {} {} for {} in src/{}/{}.rs with status {}. ",
                w(1),
                w(2),
                w(3),
                w(4),
                w(5),
                w(6),
                w(7),
                if matches!(x % 17, 0) {
                    "error: timeout"
                } else {
                    "ok"
                }
            ));
            if matches!(i % 5, 0) {
                m.push('\n');
            }
        }
        let start = std::time::Instant::now();
        let s = summarize(&m, 4_000);
        let small = start.elapsed();
        let start = std::time::Instant::now();
        let all = summarize(&m, 1_000_000);
        let big = start.elapsed();
        assert!(s.text.chars().count() <= 4_000);
        assert!(all.units_kept > 100);
        // Loose bounds so that debug builds on slow machines pass; release takes a few ms.
        assert!(small.as_millis() < 2_000, "{small:?}");
        assert!(big.as_millis() < 2_000, "{big:?}");
    }

    #[tokio::test]
    async fn provider_trait() {
        let p = ExtractiveSummarizer::new();
        assert_eq!(p.name(), "extractive");
        let req = request(&wrap_content(&material()), 150);
        let r = p.complete(&req).await.unwrap();
        assert!(r.text.starts_with("[extractive summary: "));
        assert!(r.text.chars().count() <= 600);
    }
}
