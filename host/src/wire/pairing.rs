//! The tool-pairing rules of each wire format, checked on the plugin-api model.
//!
//! The model is the same for both formats, so a message list is checked as the format's writer
//! would write it:
//!
//! - **Anthropic**: leading system messages become `system`; a run of consecutive
//!   [`Role::Tool`] messages becomes one `user` message; any other message is one message (a
//!   later system message stays a `system` message, where no tool block may stand). Each `tool_use` (assistant messages only) is
//!   answered by a `tool_result` in the immediately following user message, every `tool_result`
//!   answers a `tool_use` of the immediately preceding assistant message, and `tool_result`
//!   blocks come before any other block of their message.
//! - **OpenAI**: every `tool_result` block becomes a `tool` message (placed before the rest of
//!   its message); tool calls (assistant messages only) are answered by the `tool` messages
//!   right after them, each once, before any other message; a `tool` message answers a call of
//!   the assistant message those `tool` messages follow.
//!
//! In both, tool-use ids are unique, and calls that are never answered are an error except in
//! the very last message (an agent may send a conversation whose last turn just called a tool).

use std::ops::Range;

use crate::plugin_api::{ContentBlock, Message, Role};

use super::{WireError, WireFormat};

/// Names messages and blocks in error paths.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Locator {
    format: WireFormat,
    paths: Paths,
}

#[derive(Clone, Copy, Debug)]
enum Paths {
    /// By position in the message list.
    Model,
    /// An Anthropic request whose `system` (when `true`) became message 0: message `i` is
    /// `messages[i - 1]`.
    AnthropicWire(bool),
    /// A Responses request whose `instructions` (when `true`) became message 0; the others
    /// are named by the `input` item they were read from, which `item_index` finds.
    ResponsesWire(bool, ItemIndex),
}

/// The index of the Responses `input` item that block `block` of message `message` went
/// into. Given by the Responses reader, so that this module needs nothing of it.
pub(crate) type ItemIndex = fn(messages: &[Message], message: usize, block: usize) -> usize;

impl Locator {
    /// Paths by position in the message list.
    pub(crate) fn model(format: WireFormat) -> Self {
        Locator {
            format,
            paths: Paths::Model,
        }
    }

    /// Paths in an Anthropic request whose `system` became message 0 (when `has_system`).
    pub(crate) fn anthropic_wire(has_system: bool) -> Self {
        Locator {
            format: WireFormat::Anthropic,
            paths: Paths::AnthropicWire(has_system),
        }
    }

    /// Paths in a Responses request's `input` (its `instructions` message 0 when
    /// `has_instructions`), items found by `item_index`.
    pub(crate) fn responses_wire(has_instructions: bool, item_index: ItemIndex) -> Self {
        Locator {
            format: WireFormat::Responses,
            paths: Paths::ResponsesWire(has_instructions, item_index),
        }
    }

    fn message(&self, i: usize) -> String {
        match self.paths {
            Paths::AnthropicWire(true) if i == 0 => "system".to_string(),
            Paths::AnthropicWire(true) => format!("messages[{}]", i - 1),
            _ => format!("messages[{i}]"),
        }
    }

    fn block(&self, messages: &[Message], i: usize, j: usize) -> String {
        match self.paths {
            Paths::AnthropicWire(true) if i == 0 => return format!("system[{j}]"),
            Paths::ResponsesWire(instructions, item_index) => {
                let skip = usize::from(instructions);
                if i < skip {
                    return "instructions".to_string();
                }
                let k = item_index(&messages[skip..], i - skip, j);
                return format!("input[{k}]");
            }
            _ => {}
        }
        let message = &messages[i];
        match (self.format, &message.content[j]) {
            (WireFormat::OpenAi, ContentBlock::ToolUse { .. }) => {
                let k = message.content[..j]
                    .iter()
                    .filter(|b| matches!(b, ContentBlock::ToolUse { .. }))
                    .count();
                format!("{}.tool_calls[{k}]", self.message(i))
            }
            (WireFormat::OpenAi, ContentBlock::ToolResult { .. })
                if message.role == Role::Tool && message.content.len() == 1 =>
            {
                self.message(i)
            }
            _ => format!("{}.content[{j}]", self.message(i)),
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Side {
    System,
    User,
    Assistant,
    Tool,
}

impl Side {
    /// "a user message", "an assistant message", ...
    fn a_message(self) -> &'static str {
        match self {
            Side::System => "a system message",
            Side::User => "a user message",
            Side::Assistant => "an assistant message",
            Side::Tool => "a tool message",
        }
    }
}

/// One wire message as the format's writer would write it: its `(message, block)` positions
/// are `Turns::items[items]`.
struct Turn {
    side: Side,
    items: Range<usize>,
}

/// A message list as wire messages. The positions of all turns share one vector: a check runs
/// on every compaction's input, and a vector per turn was most of its cost.
struct Turns {
    turns: Vec<Turn>,
    items: Vec<(usize, usize)>,
}

impl Turns {
    fn with_capacity(messages: &[Message]) -> Self {
        Turns {
            turns: Vec::with_capacity(messages.len()),
            items: Vec::with_capacity(messages.iter().map(|m| m.content.len()).sum()),
        }
    }

    /// Ends the turn opened at `from` (an index into `items`).
    fn push(&mut self, side: Side, from: usize) {
        let items = from..self.items.len();
        self.turns.push(Turn { side, items });
    }

    fn add_blocks(&mut self, messages: &[Message], i: usize) {
        self.items
            .extend((0..messages[i].content.len()).map(move |j| (i, j)));
    }

    fn items(&self, turn: &Turn) -> &[(usize, usize)] {
        &self.items[turn.items.clone()]
    }
}

fn anthropic_turns(messages: &[Message]) -> Turns {
    let n = messages.len();
    let mut turns = Turns::with_capacity(messages);
    let mut i = 0;
    while i < n && messages[i].role == Role::System {
        let from = turns.items.len();
        turns.add_blocks(messages, i);
        turns.push(Side::System, from);
        i += 1;
    }
    while i < n {
        let from = turns.items.len();
        if messages[i].role == Role::Tool {
            while i < n && messages[i].role == Role::Tool {
                turns.add_blocks(messages, i);
                i += 1;
            }
            turns.push(Side::User, from);
            continue;
        }
        let side = match messages[i].role {
            Role::Assistant => Side::Assistant,
            Role::System => Side::System,
            Role::User | Role::Tool => Side::User,
        };
        turns.add_blocks(messages, i);
        turns.push(side, from);
        i += 1;
    }
    turns
}

fn openai_turns(messages: &[Message]) -> Turns {
    let mut turns = Turns::with_capacity(messages);
    let mut rest = Vec::new();
    for (i, m) in messages.iter().enumerate() {
        rest.clear();
        let mut had_results = false;
        for (j, b) in m.content.iter().enumerate() {
            if matches!(b, ContentBlock::ToolResult { .. }) {
                had_results = true;
                let from = turns.items.len();
                turns.items.push((i, j));
                turns.push(Side::Tool, from);
            } else {
                rest.push((i, j));
            }
        }
        let side = match m.role {
            Role::System => Side::System,
            Role::Assistant => Side::Assistant,
            Role::User | Role::Tool => Side::User,
        };
        if !rest.is_empty() || (!had_results && m.role != Role::Tool) {
            let from = turns.items.len();
            turns.items.extend_from_slice(&rest);
            turns.push(side, from);
        }
    }
    turns
}

/// Checks the pairing rules of `format` on `messages`; paths come from `loc`.
pub(crate) fn check(
    messages: &[Message],
    format: WireFormat,
    loc: Locator,
) -> Result<(), WireError> {
    match format {
        WireFormat::Anthropic => check_anthropic(messages, &anthropic_turns(messages), loc),
        WireFormat::OpenAi => check_openai(messages, &openai_turns(messages), loc),
        WireFormat::Responses => check_responses(messages, loc),
    }
}

/// "a user message", "an assistant message", ...
fn a_message(role: Role) -> &'static str {
    match role {
        Role::System => Side::System,
        Role::User => Side::User,
        Role::Assistant => Side::Assistant,
        Role::Tool => Side::Tool,
    }
    .a_message()
}

/// Responses: items stand on their own, so an output need not follow its call at once; it
/// answers a call made before it, once. Calls are made in assistant messages only, outputs
/// stand in no assistant or system message, `call_id`s are unique, and a call is answered
/// unless it is in the very last message.
fn check_responses(messages: &[Message], loc: Locator) -> Result<(), WireError> {
    let err = |at: (usize, usize), message: String| {
        Err(WireError::new(loc.block(messages, at.0, at.1), message).at_message(at.0))
    };
    // Each call's place and whether it was answered, by id.
    let mut calls: foldhash::HashMap<&str, ((usize, usize), bool)> = Default::default();
    for (i, m) in messages.iter().enumerate() {
        for (j, b) in m.content.iter().enumerate() {
            match b {
                ContentBlock::ToolUse { id, .. } => {
                    if m.role != Role::Assistant {
                        return err((i, j), format!("function_call in {}", a_message(m.role)));
                    }
                    if calls.insert(id.as_str(), ((i, j), false)).is_some() {
                        return err((i, j), format!("duplicate call_id \"{id}\""));
                    }
                }
                ContentBlock::ToolResult { tool_use_id, .. } => {
                    let id = tool_use_id.as_str();
                    if matches!(m.role, Role::Assistant | Role::System) {
                        return err(
                            (i, j),
                            format!("function_call_output in {}", a_message(m.role)),
                        );
                    }
                    match calls.get_mut(id) {
                        Some((_, answered)) if *answered => {
                            return err(
                                (i, j),
                                format!("duplicate function_call_output for call_id \"{id}\""),
                            )
                        }
                        Some((_, answered)) => *answered = true,
                        None => {
                            return err(
                                (i, j),
                                format!("function_call_output for unknown call_id \"{id}\""),
                            )
                        }
                    }
                }
                _ => {}
            }
        }
    }
    let last = messages.len().saturating_sub(1);
    let unanswered = calls
        .iter()
        .filter(|(_, (at, answered))| !answered && at.0 != last)
        .min_by_key(|(_, (at, _))| *at);
    match unanswered {
        Some((id, (at, _))) => err(
            *at,
            format!("function_call \"{id}\" has no function_call_output"),
        ),
        None => Ok(()),
    }
}

fn block(messages: &[Message], (i, j): (usize, usize)) -> &ContentBlock {
    &messages[i].content[j]
}

fn check_anthropic(messages: &[Message], all: &Turns, loc: Locator) -> Result<(), WireError> {
    let err = |at: (usize, usize), message: String| {
        Err(WireError::new(loc.block(messages, at.0, at.1), message).at_message(at.0))
    };
    let mut seen_uses: foldhash::HashSet<&str> = foldhash::HashSet::default();
    let turns = &all.turns;
    for (ti, turn) in turns.iter().enumerate() {
        let prev = ti
            .checked_sub(1)
            .map(|p| &turns[p])
            .filter(|p| p.side == Side::Assistant);
        let prev_uses = || {
            prev.into_iter().flat_map(|p| {
                all.items(p)
                    .iter()
                    .filter_map(|&at| match block(messages, at) {
                        ContentBlock::ToolUse { id, .. } => Some((at, id.as_str())),
                        _ => None,
                    })
            })
        };
        let mut answered: Vec<&str> = Vec::new();
        let mut seen_other = false;
        for &at in all.items(turn) {
            match block(messages, at) {
                ContentBlock::ToolUse { id, .. } => {
                    seen_other = true;
                    if turn.side != Side::Assistant {
                        return err(at, format!("tool_use in {}", turn.side.a_message()));
                    }
                    if !seen_uses.insert(id.as_str()) {
                        return err(at, format!("duplicate tool_use id \"{id}\""));
                    }
                }
                ContentBlock::ToolResult { tool_use_id, .. } => {
                    let id = tool_use_id.as_str();
                    if turn.side != Side::User {
                        return err(at, format!("tool_result in {}", turn.side.a_message()));
                    }
                    if seen_other {
                        return err(
                            at,
                            "tool_result after other content (tool_result blocks must come \
                             first in their message)"
                                .to_string(),
                        );
                    }
                    if !prev_uses().any(|(_, use_id)| use_id == id) {
                        return err(at, format!("tool_result for unknown tool_use_id \"{id}\""));
                    }
                    if answered.contains(&id) {
                        return err(
                            at,
                            format!("duplicate tool_result for tool_use_id \"{id}\""),
                        );
                    }
                    answered.push(id);
                }
                _ => seen_other = true,
            }
        }
        for (at, id) in prev_uses() {
            if !answered.contains(&id) {
                return err(
                    at,
                    format!("tool_use \"{id}\" has no tool_result in the next message"),
                );
            }
        }
    }
    Ok(())
}

struct Pending<'a> {
    turn: usize,
    calls: Vec<((usize, usize), &'a str, bool)>,
}

fn check_openai(messages: &[Message], all: &Turns, loc: Locator) -> Result<(), WireError> {
    let err = |at: (usize, usize), message: String| {
        Err(WireError::new(loc.block(messages, at.0, at.1), message).at_message(at.0))
    };
    let unanswered = |pending: &Pending| -> Result<(), WireError> {
        match pending.calls.iter().find(|c| !c.2) {
            Some(&(at, id, _)) => err(at, format!("tool call \"{id}\" has no tool message")),
            None => Ok(()),
        }
    };
    let mut seen_uses: foldhash::HashSet<&str> = foldhash::HashSet::default();
    let mut pending: Option<Pending> = None;
    let turns = &all.turns;
    for (ti, turn) in turns.iter().enumerate() {
        if turn.side == Side::Tool {
            let at = all.items(turn)[0];
            let ContentBlock::ToolResult { tool_use_id, .. } = block(messages, at) else {
                continue;
            };
            let id = tool_use_id.as_str();
            let call = pending
                .as_mut()
                .and_then(|p| p.calls.iter_mut().find(|c| c.1 == id));
            match call {
                Some(call) if call.2 => {
                    return err(
                        at,
                        format!("duplicate tool message for tool_call_id \"{id}\""),
                    );
                }
                Some(call) => call.2 = true,
                None => {
                    return err(
                        at,
                        format!("tool message for unknown tool_call_id \"{id}\""),
                    );
                }
            }
            continue;
        }
        if let Some(p) = pending.take() {
            unanswered(&p)?;
        }
        let mut calls = Vec::new();
        for &at in all.items(turn) {
            if let ContentBlock::ToolUse { id, .. } = block(messages, at) {
                if turn.side != Side::Assistant {
                    return err(at, format!("tool call in {}", turn.side.a_message()));
                }
                if !seen_uses.insert(id.as_str()) {
                    return err(at, format!("duplicate tool call id \"{id}\""));
                }
                calls.push((at, id.as_str(), false));
            }
        }
        if !calls.is_empty() {
            pending = Some(Pending { turn: ti, calls });
        }
    }
    match pending {
        // Calls in the very last message may still be waiting for their results.
        Some(p) if p.turn + 1 == turns.len() => Ok(()),
        Some(p) => unanswered(&p),
        None => Ok(()),
    }
}
