//! The invariants every stage's output must keep; the chain rolls back a stage that breaks
//! one. Rule ids are the ones `docs/plugin-spec.md` defines.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::hash::{BuildHasher, RandomState};
use std::sync::OnceLock;

use xxhash_rust::xxh3::Xxh3Builder;

use tamp_plugin_api::rules::clearing::{cleared_page, parse_input_placeholder};
use tamp_plugin_api::rules::exchanges::units;
use tamp_plugin_api::rules::pinned;
use tamp_plugin_api::rules::protect::{compactable_range, protected_head};
use tamp_plugin_api::{ContentBlock, Message, Role, ToolResultPart};

use crate::wire::{check_tool_pairing, WireFormat};

/// An invariant, by its stable id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum Rule {
    /// TAMP-INV-01: every removed message is in a page a summary in the output refers to.
    NothingLost,
    /// TAMP-INV-02: no tool_use without its tool_result, no orphan tool_result.
    ToolExchangesIntact,
    /// TAMP-INV-03: the system prompt, the task (the user's opening turn) and the last
    /// `keep_recent` messages are untouched.
    ProtectedUntouched,
    /// TAMP-INV-04: kept messages stay in order; nothing new but summaries.
    OrderKept,
    /// TAMP-INV-06: a stage never makes the conversation larger.
    NoGrowth,
    /// TAMP-INV-10: a clearing changes only tool-result content and tool inputs, each to a
    /// placeholder naming the page of the original.
    ClearingKeepsStructure,
    /// TAMP-INV-11: a system message, wherever it stands, is never summarized, replaced or
    /// cleared (`rules::pinned`).
    InstructionsKept,
    /// TAMP-INV-12: an opaque unit (what the wire reader did not know) is never summarized,
    /// replaced or cleared.
    OpaqueKept,
    /// TAMP-INV-13: nothing up to the end of the unit holding the last compaction boundary is
    /// summarized, replaced or cleared.
    BoundaryKept,
}

impl Rule {
    /// The bare id, e.g. `TAMP-INV-01`.
    pub fn code(self) -> &'static str {
        match self {
            Rule::NothingLost => "TAMP-INV-01",
            Rule::ToolExchangesIntact => "TAMP-INV-02",
            Rule::ProtectedUntouched => "TAMP-INV-03",
            Rule::OrderKept => "TAMP-INV-04",
            Rule::NoGrowth => "TAMP-INV-06",
            Rule::ClearingKeepsStructure => "TAMP-INV-10",
            Rule::InstructionsKept => "TAMP-INV-11",
            Rule::OpaqueKept => "TAMP-INV-12",
            Rule::BoundaryKept => "TAMP-INV-13",
        }
    }

    /// The rule's short title, from the one table of rules (`rules::RULES`).
    pub fn title(self) -> &'static str {
        crate::rules::rule(self.code()).map_or("", |r| r.title)
    }

    /// The id and its short title, e.g. `TAMP-INV-01 nothing lost`.
    pub fn id(self) -> String {
        format!("{} {}", self.code(), self.title())
    }
}

/// A broken invariant: which rule, and where.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    pub rule: Rule,
    pub detail: String,
    /// The message at fault, by position, when the violation is about one: the first index
    /// `detail` names, in the list it names it in (the input, or the output).
    pub message_index: Option<usize>,
}

impl Violation {
    pub fn new(rule: Rule, detail: String) -> Self {
        Violation {
            rule,
            detail,
            message_index: None,
        }
    }

    /// The same violation, about message `index`.
    pub fn at_message(self, index: usize) -> Self {
        Violation {
            message_index: Some(index),
            ..self
        }
    }
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.rule.id(), self.detail)
    }
}

/// How the checks hash messages to match them up. A message is hashed whole (every text in it),
/// and on a large conversation the standard library's SipHash made this a noticeable part of
/// every compaction; XXH3 is several times faster on long texts. Seeded at random once per
/// process, so messages cannot be crafted to collide in every host; a hash match is always
/// confirmed by comparing the messages, so a collision costs time, never a wrong verdict.
fn message_hashing() -> Xxh3Builder {
    static SEED: OnceLock<u64> = OnceLock::new();
    let seed = *SEED.get_or_init(|| RandomState::new().hash_one(0x7a6d_7001_u64));
    Xxh3Builder::new().with_seed(seed)
}

fn violation(rule: Rule, detail: String) -> Result<(), Violation> {
    Err(Violation::new(rule, detail))
}

/// The wire format whose pairing rules apply: OpenAI if any message is a `tool` message.
pub fn infer_format(messages: &[Message]) -> WireFormat {
    if messages.iter().any(|m| m.role == Role::Tool) {
        WireFormat::OpenAi
    } else {
        WireFormat::Anthropic
    }
}

/// Checks a stage's `output` against its `input`. `pages` holds the messages of every page a
/// summary in the output refers to (pages the stage archived, and older ones it kept).
/// Returns the first broken rule, in the order protected, order, nothing lost, pairing.
pub fn check_stage_output(
    input: &[Message],
    output: &[Message],
    keep_recent: usize,
    format: WireFormat,
    pages: &HashMap<String, Vec<Message>>,
) -> Result<(), Violation> {
    check_protected(input, output, keep_recent)?;
    let walk = check_order(input, output)?;
    check_pinned(input, &walk)?;
    check_nothing_lost(input, output, &walk, pages)?;
    check_pairing(output, format)
}

/// Every rule [`check_stage_output`] and [`check_no_growth`] check, each on its own: all the
/// rules the output breaks, not just the first (the conformance kit reports by rule). When
/// the order is broken, the removed messages are those of the input missing from the output.
pub fn stage_violations(
    input: &[Message],
    output: &[Message],
    keep_recent: usize,
    format: WireFormat,
    pages: &HashMap<String, Vec<Message>>,
    tokens: Option<(u64, u64)>,
) -> Vec<Violation> {
    let mut found = Vec::new();
    let repaired;
    let output = match check_protected(input, output, keep_recent) {
        Ok(()) => output,
        Err(v) => {
            found.push(v);
            // Judge the other rules as if the protected messages had been left alone, so
            // touching them is reported once, as what it is.
            repaired = restore_protected(input, output, keep_recent);
            &repaired
        }
    };
    let walk = match check_order(input, output) {
        Ok(walk) => walk,
        Err(v) => {
            found.push(v);
            Walk {
                removed: missing_from(input, output),
                cleared: Vec::new(),
            }
        }
    };
    if let Err(v) = check_pinned(input, &walk) {
        found.push(v);
    }
    if let Err(v) = check_nothing_lost(input, output, &walk, pages) {
        found.push(v);
    }
    if let Err(v) = check_pairing(output, format) {
        found.push(v);
    }
    if let Some((before, after)) = tokens {
        if let Err(v) = check_no_growth(before, after) {
            found.push(v);
        }
    }
    found
}

/// `output` with the input's leading system messages and protected tail put back in place
/// of as many messages at its ends (unchanged when it is too short for that).
fn restore_protected(input: &[Message], output: &[Message], keep_recent: usize) -> Vec<Message> {
    let head = protected_head(input);
    let tail_start = compactable_range(input, keep_recent).end;
    let tail = input.len() - tail_start;
    if output.len() < head + tail {
        return output.to_vec();
    }
    let mut repaired = input[..head].to_vec();
    repaired.extend_from_slice(&output[head..output.len() - tail]);
    repaired.extend_from_slice(&input[tail_start..]);
    repaired
}

/// TAMP-INV-03: the protected head (leading system messages and the task) and the protected
/// recent tail are unchanged.
pub fn check_protected(
    input: &[Message],
    output: &[Message],
    keep_recent: usize,
) -> Result<(), Violation> {
    let head = protected_head(input);
    if output.len() < head || output[..head] != input[..head] {
        let first = (0..head)
            .find(|&i| output.get(i) != Some(&input[i]))
            .unwrap_or(0);
        let what = if input[first].role == Role::System {
            "a leading system message"
        } else {
            "the task (the user's opening turn)"
        };
        return Err(Violation::new(
            Rule::ProtectedUntouched,
            format!("input message {first} is {what} but was changed or removed"),
        )
        .at_message(first));
    }
    let tail_start = compactable_range(input, keep_recent).end;
    let tail = &input[tail_start..];
    if output.len() < tail.len() || output[output.len() - tail.len()..] != *tail {
        let first_changed = (0..tail.len())
            .find(|&k| {
                output.len() < tail.len() - k || output[output.len() - (tail.len() - k)] != tail[k]
            })
            .unwrap_or(0);
        return Err(Violation::new(
            Rule::ProtectedUntouched,
            format!(
                "input message {} is in the protected recent tail (the last {} messages) but was changed or removed",
                tail_start + first_changed,
                tail.len()
            ),
        )
        .at_message(tail_start + first_changed));
    }
    Ok(())
}

/// Which pinning rule a stage breaks by removing, replacing or clearing input message `index`
/// of `messages`, if any, and why (`rules::pinned`): TAMP-INV-13 when it lies before
/// `boundary` (the end of the unit holding the last compaction boundary,
/// `pinned::boundary_end`), else TAMP-INV-12 for an opaque unit, TAMP-INV-11 for a system
/// message. The protected head (TAMP-INV-03) is the caller's to check first.
pub fn pinning_rule(messages: &[Message], index: usize, boundary: usize) -> Option<(Rule, String)> {
    let message = &messages[index];
    if index < boundary {
        return Some((
            Rule::BoundaryKept,
            format!(
                "comes before the provider's compaction boundary (the conversation's compactable \
                 part begins at message {boundary})"
            ),
        ));
    }
    let opaque = pinned::opaque(message);
    if let Some(first) = opaque.first() {
        return Some((
            Rule::OpaqueKept,
            format!(
                "is an opaque unit ({} \"{}\" that tamp does not know, kept verbatim)",
                match first.kind {
                    pinned::OpaqueKind::Item => "an item of type",
                    pinned::OpaqueKind::Role => "a message of role",
                    pinned::OpaqueKind::Block => "a block of type",
                },
                first.name
            ),
        ));
    }
    (message.role == Role::System).then(|| {
        (
            Rule::InstructionsKept,
            "is a system message (instructions, kept wherever they stand)".to_string(),
        )
    })
}

/// TAMP-INV-11, -12 and -13: no input message the stage removed or cleared was pinned or
/// before the last compaction boundary; but a system message said again word for word may be
/// removed while a copy stays (`rules::pinned::repeated_later`: the host keeps the last). Which
/// of two identical messages the output keeps cannot be told from the output ([`check_order`]
/// matches the first), so any copy kept will do.
pub fn check_pinned(input: &[Message], walk: &Walk) -> Result<(), Violation> {
    let removed: std::collections::HashSet<usize> = walk.removed.iter().copied().collect();
    let copy_stays = |i: usize| {
        pinned::is_instructions(&input[i])
            && input
                .iter()
                .enumerate()
                .any(|(j, m)| j != i && m == &input[i] && !removed.contains(&j))
    };
    let touched = walk
        .removed
        .iter()
        .map(|&i| (i, "removed"))
        .chain(walk.cleared.iter().map(|(i, _)| (*i, "cleared")));
    let mut units_and_boundary = None;
    for (i, how) in touched {
        let (units, boundary) = units_and_boundary.get_or_insert_with(|| {
            let units = units(input);
            let boundary = pinned::boundary_end(input, &units);
            (units, boundary)
        });
        // A message cleared in place is judged with its unit: clearing the result of a call
        // tamp did not fully read changes a pinned exchange.
        let judged = match how {
            "cleared" => units
                .iter()
                .find(|u| u.range.contains(&i))
                .map_or(i..i + 1, |u| u.range.clone()),
            _ => i..i + 1,
        };
        for j in judged {
            if let Some((rule, what)) = pinning_rule(input, j, *boundary) {
                if rule == Rule::InstructionsKept && how == "removed" && copy_stays(j) {
                    continue;
                }
                let detail = if j == i {
                    format!("input message {i} {what}, but was {how}")
                } else {
                    format!(
                        "input message {i} was {how}, but its unit holds message {j}, which {what}"
                    )
                };
                return Err(Violation::new(rule, detail).at_message(i));
            }
        }
    }
    Ok(())
}

/// What [`check_order`] found: the input messages the output no longer has, and those it
/// has cleared in place, each with the page its placeholders name.
#[derive(Debug, Default)]
pub struct Walk {
    pub removed: Vec<usize>,
    pub cleared: Vec<(usize, String)>,
}

/// TAMP-INV-04 (and -10): walks the output against the input: each output message is the
/// next kept input message (in order), a summary that was not in the input, or a clearing of
/// a later input message that keeps its structure.
pub fn check_order(input: &[Message], output: &[Message]) -> Result<Walk, Violation> {
    let mut walk = Walk::default();
    let mut next = 0;
    for (j, message) in output.iter().enumerate() {
        if let Some(offset) = input[next..].iter().position(|m| m == message) {
            walk.removed.extend(next..next + offset);
            next += offset + 1;
        // Not after `next`: an input message only if it is one before. A scan, like the one
        // just made after `next`, rather than hashing the whole input for the few new
        // messages (summaries) an output has; most messages differ from it at their length.
        } else if input[..next].contains(message) {
            return Err(Violation::new(
                Rule::OrderKept,
                format!("output message {j} is an input message moved out of its original order"),
            )
            .at_message(j));
        } else if message.summary_info().is_some() {
            // A new summary.
        } else if let Some(k) = clearing_original(&input[next..], message).map(|k| next + k) {
            let page = check_clearing(&input[k], message).map_err(|e| {
                Violation::new(
                    Rule::ClearingKeepsStructure,
                    format!("output message {j}, a clearing of input message {k}: {e}"),
                )
                .at_message(j)
            })?;
            walk.removed.extend(next..k);
            walk.cleared.push((k, page.to_string()));
            next = k + 1;
        } else {
            return Err(Violation::new(
                Rule::OrderKept,
                format!(
                    "output message {j} is new but not a summary (a changed message, or one made up)"
                ),
            )
            .at_message(j));
        }
    }
    walk.removed.extend(next..input.len());
    Ok(walk)
}

/// The input message `changed`, a message new to the output, looks made from in place (so that
/// it is judged as a clearing, by TAMP-INV-10, rather than as an invention), among `after`
/// (the input messages not yet matched): the first of the same role with a tool id in common;
/// else the first of the same role with tool ids and the same kinds of blocks in the same
/// order. The id comes first: when a span before the original was summarized, the first
/// message of that span can have the same kinds of blocks, and judging the clearing against
/// it would blame the plugin for a changed tool id it never changed.
fn clearing_original(after: &[Message], changed: &Message) -> Option<usize> {
    let eligible = |original: &Message| {
        original.role == changed.role && !original.is_summary() && !tool_ids(original).is_empty()
    };
    let changed_ids = tool_ids(changed);
    let shares_an_id =
        |original: &Message| tool_ids(original).iter().any(|id| changed_ids.contains(id));
    let same_kinds = |original: &Message| {
        original.content.len() == changed.content.len()
            && original
                .content
                .iter()
                .zip(changed.content.iter())
                .all(|(x, y)| std::mem::discriminant(x) == std::mem::discriminant(y))
    };
    after
        .iter()
        .position(|m| eligible(m) && shares_an_id(m))
        .or_else(|| after.iter().position(|m| eligible(m) && same_kinds(m)))
}

/// The ids of the tool calls a message makes and answers.
fn tool_ids(m: &Message) -> Vec<&str> {
    m.tool_use_ids().chain(m.tool_result_ids()).collect()
}

/// TAMP-INV-10: whether `cleared` is `original` with some tool results' content or tool
/// inputs replaced by placeholders, and nothing else changed. Returns the page the new
/// placeholders name (all name the same one), or what is wrong. That the page holds exactly
/// `original` is TAMP-INV-01, checked by the caller.
pub fn check_clearing<'a>(original: &Message, cleared: &'a Message) -> Result<&'a str, String> {
    if original.role != cleared.role {
        return Err(format!(
            "its role changed from {} to {}",
            original.role.as_str(),
            cleared.role.as_str()
        ));
    }
    if original.summary != cleared.summary || original.is_summary() {
        return Err("a summary cannot be cleared".into());
    }
    if original.extra_json != cleared.extra_json {
        return Err("the message's other wire fields changed".into());
    }
    if original.content.len() != cleared.content.len() {
        return Err(format!(
            "it had {} block(s) and has {}: a clearing keeps every block",
            original.content.len(),
            cleared.content.len()
        ));
    }
    let mut page: Option<&str> = None;
    for (b, (before, after)) in original
        .content
        .iter()
        .zip(cleared.content.iter())
        .enumerate()
    {
        if before == after {
            continue;
        }
        let named = match (before, after) {
            (
                ContentBlock::ToolResult {
                    tool_use_id: id0,
                    is_error: e0,
                    extra_json: x0,
                    ..
                },
                ContentBlock::ToolResult {
                    tool_use_id: id1,
                    is_error: e1,
                    extra_json: x1,
                    content,
                },
            ) => {
                if id0 != id1 {
                    return Err(format!("block {b}: the tool id changed from {id0} to {id1}"));
                }
                if e0 != e1 {
                    return Err(format!("block {b}: is_error changed"));
                }
                if x0 != x1 {
                    return Err(format!("block {b}: the block's other wire fields changed"));
                }
                if cleared_page(before).is_some() {
                    return Err(format!("block {b} was cleared already: it is cleared once"));
                }
                match content.as_slice() {
                    [ToolResultPart::Text { .. }] => cleared_page(after).ok_or_else(|| {
                        format!(
                            "block {b}: the tool result's content was replaced by text that is                              not a placeholder naming a page (sdk::clearing::result_placeholder)"
                        )
                    })?,
                    _ => {
                        return Err(format!(
                            "block {b}: the tool result's content changed, but not to one                              placeholder naming a page"
                        ))
                    }
                }
            }
            (
                ContentBlock::ToolUse {
                    id: id0,
                    name: n0,
                    input_json: input0,
                    extra_json: x0,
                },
                ContentBlock::ToolUse {
                    id: id1,
                    name: n1,
                    input_json,
                    extra_json: x1,
                },
            ) => {
                if id0 != id1 {
                    return Err(format!("block {b}: the tool id changed from {id0} to {id1}"));
                }
                if n0 != n1 {
                    return Err(format!("block {b}: the tool name changed from {n0} to {n1}"));
                }
                if x0 != x1 {
                    return Err(format!("block {b}: the block's other wire fields changed"));
                }
                if parse_input_placeholder(input0).is_some() {
                    return Err(format!("block {b}'s input was cleared already: it is cleared once"));
                }
                parse_input_placeholder(input_json).ok_or_else(|| {
                    format!(
                        "block {b}: the tool input was replaced by something that is not the                          placeholder naming a page (sdk::clearing::input_placeholder)"
                    )
                })?
            }
            _ => {
                return Err(format!(
                    "block {b} changed, and only a tool result's content or a tool call's input                      may be cleared (it was {}, it is {})",
                    block_kind(before),
                    block_kind(after)
                ))
            }
        };
        match page {
            Some(p) if p != named => {
                return Err(format!(
                    "its placeholders name two pages, {p} and {named}: one clearing, one page"
                ))
            }
            _ => page = Some(named),
        }
    }
    page.ok_or_else(|| "nothing in it was cleared".to_string())
}

fn block_kind(block: &ContentBlock) -> &'static str {
    match block {
        ContentBlock::Text { .. } => "a text",
        ContentBlock::ToolUse { .. } => "a tool call",
        ContentBlock::ToolResult { .. } => "a tool result",
        ContentBlock::Opaque { .. } => "an opaque block",
    }
}

/// Input messages (by index) that the output does not contain, counting duplicates.
fn missing_from(input: &[Message], output: &[Message]) -> Vec<usize> {
    let mut present: HashMap<&Message, usize, _> = HashMap::with_hasher(message_hashing());
    for m in output {
        *present.entry(m).or_default() += 1;
    }
    (0..input.len())
        .filter(|&i| match present.get_mut(&input[i]) {
            Some(n) if *n > 0 => {
                *n -= 1;
                false
            }
            _ => true,
        })
        .collect()
}

/// TAMP-INV-01: every removed input message (by index) is in a page that a summary in the
/// output refers to, and every cleared one is, alone, the page its placeholders name.
pub fn check_nothing_lost(
    input: &[Message],
    output: &[Message],
    walk: &Walk,
    pages: &HashMap<String, Vec<Message>>,
) -> Result<(), Violation> {
    for (i, page) in &walk.cleared {
        if pages.get(page).map(Vec::as_slice) != Some(std::slice::from_ref(&input[*i])) {
            return Err(Violation::new(
                Rule::NothingLost,
                format!(
                    "input message {i} was cleared, but page {page}, which its placeholders \
                     name, does not hold it"
                ),
            )
            .at_message(*i));
        }
    }
    let removed = &walk.removed;
    let referenced: HashSet<&str> = output
        .iter()
        .filter_map(|m| m.summary_info().map(|s| s.page_ref.as_str()))
        .collect();
    // A summary may be rewritten (a pending one finalized) while its page stays referenced.
    let mut unarchived: Vec<usize> = removed
        .iter()
        .copied()
        .filter(|&i| match input[i].summary_info() {
            Some(info) => !referenced.contains(info.page_ref.as_str()),
            None => true,
        })
        .collect();
    // Pages are nearly always runs of the removed messages, as they were: each page found so
    // accounts for its run at the cost of one comparison, without hashing megabytes of text.
    // Taking a page for a run leaves the rest of the question unchanged (both have the same
    // messages), so only what is left goes to the general check below.
    let mut left: Vec<&[Message]> = referenced
        .iter()
        .filter_map(|id| pages.get(*id).map(Vec::as_slice))
        .filter(|page| !page.is_empty())
        .collect();
    left.retain(|page| !take_run(input, &mut unarchived, page));
    if unarchived.is_empty() {
        return Ok(());
    }
    let mut archived: HashMap<&Message, usize, _> = HashMap::with_hasher(message_hashing());
    for m in left.into_iter().flatten() {
        *archived.entry(m).or_default() += 1;
    }
    for i in unarchived {
        let message = &input[i];
        match archived.get_mut(message) {
            Some(n) if *n > 0 => *n -= 1,
            _ => {
                return Err(Violation::new(
                    Rule::NothingLost,
                    format!("input message {i} ({}) was removed but is in no page a summary in the output refers to", message.role.as_str()),
                )
                .at_message(i))
            }
        }
    }
    Ok(())
}

/// If `page` is, message for message, the input at consecutive indices of `unarchived` (sorted),
/// removes those indices and says so.
fn take_run(input: &[Message], unarchived: &mut Vec<usize>, page: &[Message]) -> bool {
    let fits = |k: usize| {
        let run = &unarchived[k..k + page.len()];
        run[page.len() - 1] - run[0] == page.len() - 1
            && input[run[0]..=run[page.len() - 1]] == *page
    };
    let start = (0..unarchived.len().saturating_sub(page.len() - 1))
        .find(|&k| input[unarchived[k]] == page[0] && fits(k));
    match start {
        Some(k) => {
            unarchived.drain(k..k + page.len());
            true
        }
        None => false,
    }
}

/// TAMP-INV-02: the output keeps the tool-pairing rules of `format`.
pub fn check_pairing(output: &[Message], format: WireFormat) -> Result<(), Violation> {
    check_tool_pairing(output, format).map_err(|e| Violation {
        rule: Rule::ToolExchangesIntact,
        detail: e.to_string(),
        message_index: e.message_index,
    })
}

/// TAMP-INV-06: the output has no more tokens than the input.
pub fn check_no_growth(tokens_before: u64, tokens_after: u64) -> Result<(), Violation> {
    if tokens_after > tokens_before {
        return violation(
            Rule::NoGrowth,
            format!(
                "the output has {tokens_after} tokens, more than the {tokens_before} it received"
            ),
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use tamp_plugin_api::sdk::summary_message;
    use tamp_plugin_api::SummaryStatus;

    /// A system prompt, then assistant and user messages in turn: no task message, so every
    /// message but the system prompt is compactable (the task rule has its own test).
    fn msgs(n: usize) -> Vec<Message> {
        let mut v = vec![Message::text(Role::System, "sys")];
        v.extend((1..n).map(|i| {
            Message::text(
                if i % 2 == 1 {
                    Role::Assistant
                } else {
                    Role::User
                },
                format!("m{i}"),
            )
        }));
        v
    }

    fn pages(entries: &[(&str, &[Message])]) -> HashMap<String, Vec<Message>> {
        entries
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_vec()))
            .collect()
    }

    #[test]
    fn every_rule_the_chain_checks_is_in_the_table_of_rules() {
        for r in [
            Rule::NothingLost,
            Rule::ToolExchangesIntact,
            Rule::ProtectedUntouched,
            Rule::OrderKept,
            Rule::NoGrowth,
            Rule::ClearingKeepsStructure,
            Rule::InstructionsKept,
            Rule::OpaqueKept,
            Rule::BoundaryKept,
        ] {
            assert!(!r.title().is_empty(), "{}", r.code());
            assert!(crate::rules::rule(r.code()).is_some(), "{}", r.code());
        }
    }

    #[test]
    fn a_correct_replacement_passes() {
        let input = msgs(8);
        let summary = summary_message("s", "pg_1", "t", SummaryStatus::Final);
        let mut output = vec![input[0].clone(), summary];
        output.extend_from_slice(&input[4..]);
        let p = pages(&[("pg_1", &input[1..4])]);
        check_stage_output(&input, &output, 2, WireFormat::Anthropic, &p).unwrap();
    }

    #[test]
    fn pinned_messages_and_the_boundary_are_reported_by_their_own_rules() {
        let summarized = |input: &[Message], span: std::ops::Range<usize>| {
            let mut output = input[..span.start].to_vec();
            output.push(summary_message("s", "pg_1", "t", SummaryStatus::Final));
            output.extend_from_slice(&input[span.end..]);
            let p = pages(&[("pg_1", &input[span])]);
            check_stage_output(input, &output, 1, WireFormat::Anthropic, &p)
        };
        let mut input = msgs(8);
        input[3] = Message::text(Role::System, "mid-conversation instructions");
        let v = summarized(&input, 2..5).unwrap_err();
        assert_eq!(
            (v.rule, v.message_index),
            (Rule::InstructionsKept, Some(3)),
            "{v}"
        );
        summarized(&input, 4..6).expect("after it");
        input[3] = Message::text(Role::User, "sent with a block tamp does not know");
        input[3].extra_json = r#"{"tamp:opaque":["block:fancy"]}"#.into();
        let v = summarized(&input, 3..4).unwrap_err();
        assert_eq!(v.rule, Rule::OpaqueKept, "{v}");
        input[3].extra_json = r#"{"tamp:boundary":"compaction"}"#.into();
        let v = summarized(&input, 1..3).unwrap_err();
        assert_eq!(v.rule, Rule::BoundaryKept, "{v}");
        let all = stage_violations(
            &input,
            &input[4..],
            1,
            WireFormat::Anthropic,
            &HashMap::new(),
            None,
        );
        assert!(all.iter().any(|v| v.rule == Rule::BoundaryKept), "{all:?}");
        summarized(&input, 4..6).expect("after the boundary");
    }

    #[test]
    fn the_task_is_protected_like_the_system_prompt() {
        let mut input = msgs(8);
        input[1] = Message::text(Role::User, "the task: do not touch the billing module");
        // The reply that closes the opening turn (the task alone).
        input[2] = Message::text(Role::Assistant, "on it");
        let summary = summary_message("s", "pg_1", "t", SummaryStatus::Final);
        let mut output = vec![input[0].clone(), summary];
        output.extend_from_slice(&input[4..]);
        let p = pages(&[("pg_1", &input[1..4])]);
        let v = check_stage_output(&input, &output, 2, WireFormat::Anthropic, &p).unwrap_err();
        assert_eq!(v.rule, Rule::ProtectedUntouched);
        assert!(v.detail.contains("input message 1 is the task"), "{v}");
        // Summarizing after it is fine.
        let mut output = vec![
            input[0].clone(),
            input[1].clone(),
            summary_message("s", "pg_2", "t", SummaryStatus::Final),
        ];
        output.extend_from_slice(&input[4..]);
        let p = pages(&[("pg_2", &input[2..4])]);
        check_stage_output(&input, &output, 2, WireFormat::Anthropic, &p).unwrap();
    }

    #[test]
    fn unarchived_removal_is_nothing_lost() {
        let input = msgs(8);
        let summary = summary_message("s", "pg_1", "t", SummaryStatus::Final);
        let mut output = vec![input[0].clone(), summary];
        output.extend_from_slice(&input[4..]);
        let p = pages(&[("pg_1", &input[1..3])]);
        let v = check_stage_output(&input, &output, 2, WireFormat::Anthropic, &p).unwrap_err();
        assert_eq!(v.rule, Rule::NothingLost);
        assert!(v.detail.contains("input message 3"), "{v}");
    }

    #[test]
    fn a_violation_carries_the_index_of_the_message_at_fault() {
        let input = msgs(8);
        let p = pages(&[]);
        // The system prompt changed: input message 0.
        let mut output = input.clone();
        output[0] = Message::text(Role::System, "other");
        let v = check_stage_output(&input, &output, 2, WireFormat::Anthropic, &p).unwrap_err();
        assert_eq!(
            (v.rule, v.message_index),
            (Rule::ProtectedUntouched, Some(0))
        );
        // Two messages swapped: output message 3 comes before its turn.
        let mut output = input.clone();
        output.swap(2, 3);
        let v = check_stage_output(&input, &output, 2, WireFormat::Anthropic, &p).unwrap_err();
        assert_eq!((v.rule, v.message_index), (Rule::OrderKept, Some(3)), "{v}");
        // Removed without a page: input message 1, the first of them.
        let mut output = input.clone();
        output.drain(1..3);
        let v = check_stage_output(&input, &output, 2, WireFormat::Anthropic, &p).unwrap_err();
        assert_eq!(
            (v.rule, v.message_index),
            (Rule::NothingLost, Some(1)),
            "{v}"
        );
        assert!(v.detail.contains("input message 1 "), "{v}");
        // No message to name.
        assert_eq!(check_no_growth(1, 2).unwrap_err().message_index, None);
    }

    #[test]
    fn a_pairing_violation_carries_the_index_of_the_message_at_fault() {
        let mut output = msgs(4);
        output.push(Message::new(
            Role::User,
            vec![ContentBlock::ToolResult {
                tool_use_id: "nobody".into(),
                content: Default::default(),
                is_error: false,
                extra_json: Default::default(),
            }],
        ));
        let v = check_pairing(&output, WireFormat::Anthropic).unwrap_err();
        assert_eq!(v.rule, Rule::ToolExchangesIntact);
        assert_eq!(v.message_index, Some(4), "{v}");
    }

    #[test]
    fn pages_that_are_not_runs_of_the_removed_messages_are_checked_as_a_whole() {
        let mut input = msgs(12);
        // Two equal messages: which page holds which copy does not matter, how many does.
        input[3] = input[2].clone();
        let s1 = summary_message("a", "pg_1", "t", SummaryStatus::Final);
        let s2 = summary_message("b", "pg_2", "t", SummaryStatus::Final);
        let mut output = vec![input[0].clone(), s1, s2];
        output.extend_from_slice(&input[9..]);
        let mut shuffled = input[4..9].to_vec();
        shuffled.reverse();
        // A run (pg_1), and a page of the other removed messages in another order and with
        // one of the duplicates (pg_2): nothing is lost.
        let mut rest = shuffled.clone();
        rest.push(input[3].clone());
        let p = pages(&[("pg_1", &input[1..3]), ("pg_2", &rest)]);
        check_stage_output(&input, &output, 2, WireFormat::Anthropic, &p).unwrap();
        // The same page without the second copy: message 3 is lost, though its twin is in a
        // page.
        let p = pages(&[("pg_1", &input[1..3]), ("pg_2", &shuffled)]);
        let v = check_stage_output(&input, &output, 2, WireFormat::Anthropic, &p).unwrap_err();
        assert_eq!(v.rule, Rule::NothingLost);
        assert!(v.detail.contains("input message 3"), "{v}");
        // A page holding a run and more: the run is not taken alone, the whole still counts.
        let mut wide = input[1..9].to_vec();
        wide.push(Message::text(Role::User, "extra"));
        let p = pages(&[("pg_1", &wide), ("pg_2", &[])]);
        check_stage_output(&input, &output, 2, WireFormat::Anthropic, &p).unwrap();
    }

    #[test]
    fn touching_the_tail_or_system_is_caught() {
        let input = msgs(6);
        let mut output = input.clone();
        output[5] = Message::text(Role::Assistant, "changed");
        let v = check_stage_output(&input, &output, 2, WireFormat::Anthropic, &HashMap::new())
            .unwrap_err();
        assert_eq!(v.rule, Rule::ProtectedUntouched);
        let mut output = input.clone();
        output[0] = Message::text(Role::System, "other");
        let v = check_stage_output(&input, &output, 2, WireFormat::Anthropic, &HashMap::new())
            .unwrap_err();
        assert_eq!(v.rule, Rule::ProtectedUntouched);
    }

    #[test]
    fn reordering_and_invented_messages_are_caught() {
        let input = msgs(8);
        let mut output = input.clone();
        output.swap(1, 2);
        let v = check_stage_output(&input, &output, 2, WireFormat::Anthropic, &HashMap::new())
            .unwrap_err();
        assert_eq!(v.rule, Rule::OrderKept);
        let mut output = input.clone();
        output[2] = Message::text(Role::Assistant, "made up");
        let v = check_stage_output(&input, &output, 2, WireFormat::Anthropic, &HashMap::new())
            .unwrap_err();
        assert_eq!(v.rule, Rule::OrderKept);
    }

    #[test]
    fn a_finalized_pending_summary_keeps_its_page() {
        let mut input = msgs(6);
        input[1] = summary_message("pending", "pg_9", "b", SummaryStatus::Pending);
        let mut output = input.clone();
        output[1] = summary_message("final text", "pg_9", "b", SummaryStatus::Final);
        check_stage_output(&input, &output, 2, WireFormat::Anthropic, &HashMap::new()).unwrap();
    }

    #[test]
    fn all_violations_are_reported_each_by_its_rule() {
        let input = msgs(8);
        // Swapped and one dropped: order broken, and message 1 is lost.
        let mut output = input.clone();
        output.swap(2, 3);
        output.remove(1);
        let found = stage_violations(
            &input,
            &output,
            2,
            WireFormat::Anthropic,
            &HashMap::new(),
            Some((10, 11)),
        );
        let rules: Vec<Rule> = found.iter().map(|v| v.rule).collect();
        assert_eq!(
            rules,
            [Rule::OrderKept, Rule::NothingLost, Rule::NoGrowth],
            "{found:?}"
        );
        assert!(found[1].detail.contains("input message 1"), "{}", found[1]);
        assert!(stage_violations(
            &input,
            &input,
            2,
            WireFormat::Anthropic,
            &HashMap::new(),
            Some((5, 5))
        )
        .is_empty());
    }

    #[test]
    fn touching_a_protected_message_is_reported_once_as_what_it_is() {
        let input = msgs(6);
        let mut output = input.clone();
        output[5] = Message::text(Role::Assistant, "changed");
        let found = stage_violations(
            &input,
            &output,
            2,
            WireFormat::Anthropic,
            &HashMap::new(),
            None,
        );
        let rules: Vec<Rule> = found.iter().map(|v| v.rule).collect();
        assert_eq!(rules, [Rule::ProtectedUntouched], "{found:?}");
        assert!(found[0].detail.contains("input message 5"), "{}", found[0]);
        assert_eq!(Rule::NothingLost.code(), "TAMP-INV-01");
    }
}
