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
//! 1. **Units.** The material, less what an agent's harness wrote into it (Claude Code's
//!    `<system-reminder>`, Codex's `<environment_context>`: `sdk::harness`), is split into lines; prose lines are split further at sentence
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
//!    should, will…; +1.7 for a decision stated as such: decided, decision, chose, agreed,
//!    settled, so that it outranks a tool call full of paths), an earlier summary +0.3, a tool
//!    call −0.25 and a tool's output −0.45; a numbered source line (`  221\t…`, as `cat -n`
//!    prints) −0.5 anywhere.
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
//! ([`fill_schema`]): string properties get the best statements (an aim such as
//! `session_intent` a few of the user's sentences), array-of-string properties what their
//! names ask for (file paths, and from statements only, never tool calls or output:
//! decisions, questions, next steps), an empty array when nothing fits; a decisions list past
//! `maxItems` packs its oldest entries several to an entry instead of losing them; the text
//! answer says `[extractive structured fill: …; nothing generated]`.
//!
//! One file per step: `units.rs` (1), `score.rs` (2), `pick.rs` (3), `mentions.rs` (the
//! `Mentions:` line of 4); `fill.rs` for structured requests; this file, the provider and the
//! answer's assembly.
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
// Sentences, decision words and paths: the SDK's, which the ledger reads with too.
use tamp_plugin_api::sdk::harness::without_harness_context;
use tamp_plugin_api::sdk::statements::{
    as_path, has_word, is_code_like, is_installed_code, looks_like_a_file, push_unit,
    scheme_separator, split_sentences, trim_token, COMMITMENT_WORDS, CUE_WORDS, DECISION_CUE_WORDS,
    DECISION_WORDS, MAX_UNIT_CHARS, STOP_WORDS,
};
use tamp_plugin_api::{FfiOption, LlmRequest, LlmResponse, Usage};

use super::{content_section, estimate_tokens, Provider, ProviderError, ProviderErrorKind};

mod fill;
mod mentions;
mod pick;
mod score;
mod units;

pub use fill::{fill_schema, SchemaFill};
use mentions::*;
use pick::*;
use score::*;
use units::*;

/// The provider name and the `model` of its responses.
pub const EXTRACTIVE_NAME: &str = "extractive";

/// The answer for material with nothing to pick from (empty, or only symbols and blank lines).
pub const NOTHING_TO_SUMMARIZE: &str = "[extractive summary: nothing to summarize]";

/// Characters per token assumed when turning `max_output_tokens` into a character budget.
pub const CHARS_PER_TOKEN: usize = 4;

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
        // What an agent's harness wrote into the transcript (Claude Code's `<system-reminder>`)
        // is no one's statement, and in a user's turn it would score as what the user wrote.
        let material = without_harness_context(content_section(request.prompt.as_str()));
        let material = material.as_ref();
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
    let tags: Vec<&str> = units
        .iter()
        .zip(&sources)
        .map(|(unit, source)| match source.tag() {
            Some(tag) if Source::of_line(unit).is_none() => tag,
            _ => "",
        })
        .collect();
    let picked = pick(&units, &tags, &analysis, room - reserve);

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

#[cfg(test)]
mod tests;
