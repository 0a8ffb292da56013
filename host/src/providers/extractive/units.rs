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

/// Words by which an assistant states a decision, a finding or a plan.
pub(super) const CUE_WORDS: &[&str] = &[
    "because", "cause", "caused", "decide", "decided", "fix", "fixed", "found", "instead", "issue",
    "must", "need", "needs", "plan", "problem", "should", "will",
];

/// Words by which an assistant states a decision taken, which a handover must keep over
/// plans and findings ("I will look at…" is said far more often than "we decided…").
pub(super) const DECISION_CUE_WORDS: &[&str] = &[
    "agreed", "chose", "chosen", "decided", "decision", "settled",
];

pub(super) fn has_word(unit: &str, words: &[&str]) -> bool {
    unit.split(|c: char| !c.is_alphanumeric())
        .any(|w| words.iter().any(|cue| cue.eq_ignore_ascii_case(w)))
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

/// Lines kept whole: code, logs, stack traces, tables.
pub(super) fn is_code_like(line: &str, trimmed: &str) -> bool {
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

pub(super) const ABBREVIATIONS: [&str; 14] = [
    "e.g", "i.e", "etc", "vs", "mr", "mrs", "ms", "dr", "st", "no", "fig", "cf", "approx", "al",
];

pub(super) fn split_sentences<'a>(line: &'a str, units: &mut Vec<&'a str>) {
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

pub(super) fn ends_with_abbreviation(before: &str) -> bool {
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
pub(super) fn push_unit<'a>(units: &mut Vec<&'a str>, text: &'a str) {
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
