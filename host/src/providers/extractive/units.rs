//! Splitting the material into units (lines, sentences; code and log lines whole) and where
//! each comes from in a transcript.

use super::*;

/// The units alone (the tests' view of the split).
#[cfg(test)]
pub(super) fn split_units(material: &str) -> Vec<&str> {
    split_units_with_sources(material).0
}

/// Where a unit comes from in a transcript as `sdk::render_messages` writes it (`user: …`,
/// `assistant: …`, `assistant called tool(…)`, `tool returned: …`, `summary of earlier
/// messages …`); a line without such a prefix continues the one before it. Material that is
/// no transcript is all `Unknown`, and scored as before.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Source {
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
    pub(super) fn of_line(line: &str) -> Option<Source> {
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
    pub(super) fn bonus(self, unit: &str) -> f64 {
        match self {
            Source::Unknown => 0.0,
            Source::User => 0.6,
            Source::Assistant if has_word(unit, DECISION_CUE_WORDS) => 1.7,
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
    pub(super) fn tag(self) -> Option<&'static str> {
        match self {
            Source::User => Some("user: "),
            Source::Assistant => Some("assistant: "),
            _ => None,
        }
    }
}

/// The first line of an extractive summary: `[extractive summary: 7 of 120 sentences]`.
pub(super) fn is_summary_header(line: &str) -> bool {
    line.starts_with("[extractive summary:") && line.ends_with(']')
}
/// A numbered source line as `cat -n` or an editor view prints it (`  221\t  code`): output,
/// never a statement.
pub(super) fn is_numbered_code(unit: &str) -> bool {
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
pub(super) fn split_units_with_sources(material: &str) -> (Vec<&str>, Vec<Source>) {
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
