//! Seeded, reproducible conversations for the property checks, and the shrinker that makes a
//! failing one as small as it can while it still fails.
//!
//! A case is generated in the shape of its wire format (OpenAI and Responses tool results are
//! `tool` messages, Anthropic ones `user` blocks; Responses calls come with reasoning items),
//! written to that format's JSON and read back, so the plugin sees exactly what a real
//! caller's request would give it. Every case of at least four units also holds what a
//! strategy must leave where it stands (`sdk::pinned`): a mid-conversation system message, an
//! opaque unit (a role, item or block type no reader knows) and, where the format has one, a
//! provider's compaction boundary early in the conversation. Those are made by the wire
//! readers from the JSON a client would send, so the kit depends on no reader's internals.

use tamp_plugin_api::sdk::clearing::Clearing;
use tamp_plugin_api::sdk::{summary_message, units};
use tamp_plugin_api::{ContentBlock, Message, Role, SummaryStatus, ToolResultPart};

use tamp_host::store::page_id;
use tamp_host::wire::{self, WireFormat};

/// A small, fast, seedable generator (SplitMix64): the same seed gives the same cases on
/// every platform and in every version of this file's callers.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (`n > 0`).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }

    /// Uniform in `lo..=hi`.
    pub fn between(&mut self, lo: usize, hi: usize) -> usize {
        lo + self.below(hi - lo + 1)
    }

    /// True with probability `percent`/100.
    pub fn chance(&mut self, percent: usize) -> bool {
        self.below(100) < percent
    }

    pub fn pick<T: Copy>(&mut self, items: &[T]) -> T {
        items[self.below(items.len())]
    }
}

/// The seed of case `index` of a run seeded `seed` in `format`: every case can be rerun alone.
pub fn case_seed(seed: u64, format: WireFormat, index: usize) -> u64 {
    let salt = match format {
        WireFormat::Anthropic => 0xA17,
        WireFormat::OpenAi => 0x0A1,
        WireFormat::Responses => 0xB0B,
    };
    Rng::new(seed ^ (salt << 40) ^ index as u64).next_u64()
}

/// Which characters the text uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Text {
    Ascii,
    /// Right-to-left scripts, emoji (with ZWJ sequences), combining marks and CJK, with
    /// every message starting on a multi-byte character.
    Unicode,
}

/// How big a case is.
#[derive(Debug, Clone, Copy)]
pub struct Shape {
    pub min_units: usize,
    pub max_units: usize,
    pub text: Text,
}

impl Default for Shape {
    fn default() -> Self {
        Shape {
            min_units: 4,
            max_units: 22,
            text: Text::Ascii,
        }
    }
}

/// One generated conversation, as the plugin will receive it.
#[derive(Debug, Clone, PartialEq)]
pub struct Case {
    pub seed: u64,
    pub format: WireFormat,
    pub messages: Vec<Message>,
    pub keep_recent: u32,
    /// The pages the conversation's earlier summaries refer to (put in the store first).
    pub prior_pages: Vec<Vec<Message>>,
}

impl Case {
    /// The case as a request in its wire format.
    pub fn to_wire(&self) -> serde_json::Value {
        wire::to_value(
            &tamp_plugin_api::Conversation::new(self.messages.clone()),
            self.format,
        )
    }

    /// The same case with other messages, if they are a valid request in its format (written
    /// and read back, so the plugin sees what a caller would send).
    pub fn with_messages(&self, messages: Vec<Message>) -> Option<Case> {
        let messages = round_trip(messages, self.format)?;
        Some(Case {
            messages,
            ..self.clone()
        })
    }
}

/// Writes `messages` in `format` and reads them back; None if that is not a valid request.
pub fn round_trip(messages: Vec<Message>, format: WireFormat) -> Option<Vec<Message>> {
    let value = wire::to_value(&tamp_plugin_api::Conversation::new(messages), format);
    let (back, _) = wire::parse_value(value, Some(format)).ok()?;
    wire::check_tool_pairing(&back.messages, format).ok()?;
    Some(back.messages.into_vec())
}

const WORDS: &[&str] = &[
    "the", "build", "failed", "because", "parser", "returns", "an", "error", "on", "line",
    "config", "file", "user", "asked", "to", "refactor", "module", "tests", "pass", "after",
    "fixing", "cache", "key", "timeout", "request", "retry", "function", "value", "null", "check",
    "deploy", "branch", "merge", "review", "query", "index", "schema", "field", "version",
    "release",
];

const UNICODE_WORDS: &[&str] = &[
    "שלום",
    "עולם",
    "مرحبا",
    "بالعالم",
    "👩\u{200d}💻",
    "🚀",
    "🇺🇳",
    "e\u{301}te\u{301}",
    "Z\u{351}\u{353}a\u{36b}",
    "漢字",
    "かな",
    "Ωμέγα",
    "naïve",
    "\u{202e}txt.exe",
    "ﷺ",
];

const TOOLS: &[&str] = &["read_file", "bash", "search", "edit_file", "list_dir"];

/// Generates the case seeded `seed`.
pub fn generate(seed: u64, format: WireFormat, shape: Shape) -> Case {
    let mut g = Gen {
        rng: Rng::new(seed),
        text: shape.text,
        next_call: 0,
        format,
        prior_pages: Vec::new(),
    };
    let mut messages = Vec::new();
    if g.rng.chance(75) {
        messages.push(Message::text(Role::System, g.paragraph(2, 5)));
    }
    // About a third are long sessions, where strategies that wait for enough old tool
    // exchanges (or enough messages after them) act too.
    let units = if g.rng.chance(35) {
        g.rng.between(shape.max_units * 2, shape.max_units * 4)
    } else {
        g.rng.between(shape.min_units, shape.max_units)
    };
    let mut starts = Vec::with_capacity(units);
    for i in 0..units {
        starts.push(messages.len());
        g.unit(&mut messages, i == 0);
    }
    if units >= 4 {
        g.pinned(&mut messages, &starts);
    }
    let keep_recent = g.rng.between(1, 4) as u32;
    let case = Case {
        seed,
        format,
        messages: Vec::new(),
        keep_recent,
        prior_pages: g.prior_pages,
    };
    case.with_messages(messages)
        .expect("generated conversations are valid requests")
}

/// A case of about `messages` messages (whole units; at least that many), for measuring.
pub fn generate_messages(seed: u64, format: WireFormat, messages: usize) -> Case {
    let mut g = Gen {
        rng: Rng::new(seed),
        text: Text::Ascii,
        next_call: 0,
        format,
        prior_pages: Vec::new(),
    };
    let mut out = vec![Message::text(Role::System, g.paragraph(2, 5))];
    while out.len() < messages {
        g.unit(&mut out, false);
    }
    let case = Case {
        seed,
        format,
        messages: Vec::new(),
        keep_recent: 4,
        prior_pages: g.prior_pages,
    };
    case.with_messages(out)
        .expect("generated conversations are valid requests")
}

/// Appends `units` more units to `case` (the same conversation, grown at its end).
pub fn extend(case: &Case, units: usize, seed: u64) -> Case {
    let mut g = Gen {
        rng: Rng::new(seed),
        text: Text::Ascii,
        next_call: 1_000_000,
        format: case.format,
        prior_pages: Vec::new(),
    };
    let mut messages = case.messages.clone();
    for _ in 0..units {
        g.unit(&mut messages, false);
    }
    case.with_messages(messages)
        .expect("extended conversations are valid requests")
}

struct Gen {
    rng: Rng,
    text: Text,
    next_call: usize,
    format: WireFormat,
    prior_pages: Vec<Vec<Message>>,
}

impl Gen {
    fn word(&mut self) -> &'static str {
        match self.text {
            Text::Unicode if self.rng.chance(40) => self.rng.pick(UNICODE_WORDS),
            _ => self.rng.pick(WORDS),
        }
    }

    fn sentence(&mut self) -> String {
        let n = self.rng.between(4, 14);
        let mut s = String::new();
        if self.text == Text::Unicode {
            s.push_str(self.rng.pick(UNICODE_WORDS));
        }
        for _ in 0..n {
            if !s.is_empty() {
                s.push(' ');
            }
            s.push_str(self.word());
        }
        s.push('.');
        s
    }

    fn paragraph(&mut self, lo: usize, hi: usize) -> String {
        let n = self.rng.between(lo, hi);
        (0..n)
            .map(|_| self.sentence())
            .collect::<Vec<_>>()
            .join(" ")
    }

    fn unit(&mut self, out: &mut Vec<Message>, first: bool) {
        match self.rng.below(100) {
            0..=24 => {
                let text = self.paragraph(1, 4);
                out.push(Message::text(Role::User, text));
            }
            25..=44 => {
                let text = self.paragraph(1, 6);
                out.push(Message::text(Role::Assistant, text));
            }
            45..=84 => self.exchange(out),
            85..=92 if !first => self.prior_summary(out),
            _ => {
                // A long paste: what compaction is for.
                let text = self.paragraph(20, 60);
                out.push(Message::text(Role::User, text));
            }
        }
    }

    fn exchange(&mut self, out: &mut Vec<Message>) {
        let calls = if self.rng.chance(30) {
            self.rng.between(2, 3)
        } else {
            1
        };
        let mut blocks = Vec::new();
        if self.rng.chance(40) {
            blocks.push(ContentBlock::text(self.sentence()));
        }
        let mut ids = Vec::new();
        for _ in 0..calls {
            self.next_call += 1;
            let id = format!("call_{:06}", self.next_call);
            let input = serde_json::json!({"path": format!("src/{}.rs", self.rng.pick(WORDS)), "n": self.rng.below(100)});
            blocks.push(ContentBlock::ToolUse {
                id: id.as_str().into(),
                name: self.rng.pick(TOOLS).into(),
                input_json: input.to_string().into(),
                extra_json: Default::default(),
            });
            ids.push(id);
        }
        let mut call = Message::new(Role::Assistant, blocks);
        // Responses: reasoning items (encrypted) before the calls, grouped with them.
        if self.format == WireFormat::Responses && self.rng.chance(50) {
            call = self.with_reasoning(&call);
        }
        // Some exchanges were cleared by an earlier stage: their outputs (and now and then the
        // call's inputs) are placeholders naming pages in the store.
        let cleared_earlier = self.rng.chance(15);
        if cleared_earlier && self.rng.chance(30) {
            call = self.cleared(call);
        }
        let results: Vec<ContentBlock> = ids
            .iter()
            .map(|id| ContentBlock::ToolResult {
                tool_use_id: id.as_str().into(),
                content: vec![ToolResultPart::Text {
                    text: self.paragraph(1, 24).into(),
                }]
                .into(),
                is_error: self.rng.chance(10),
                extra_json: Default::default(),
            })
            .collect();
        out.push(call);
        let messages = match self.format {
            WireFormat::Anthropic => vec![Message::new(Role::User, results)],
            WireFormat::OpenAi | WireFormat::Responses => results
                .into_iter()
                .map(|r| Message::new(Role::Tool, vec![r]))
                .collect(),
        };
        for m in messages {
            let m = if cleared_earlier { self.cleared(m) } else { m };
            out.push(m);
        }
    }

    /// `call` (an assistant message of tool calls) as a Responses client sends it after a
    /// reasoning model's turn: a `reasoning` item with encrypted content before the calls,
    /// read by the Responses reader (which keeps it with the calls).
    fn with_reasoning(&mut self, call: &Message) -> Message {
        let mut items = vec![serde_json::json!({
            "type": "reasoning",
            "id": format!("rs_{:06}", self.next_call),
            "summary": [],
            "encrypted_content": format!("gAAAAB{}", self.rng.next_u64()),
        })];
        for block in call.content.iter() {
            if let ContentBlock::ToolUse {
                id,
                name,
                input_json,
                ..
            } = block
            {
                items.push(serde_json::json!({
                    "type": "function_call",
                    "call_id": id.as_str(),
                    "name": name.as_str(),
                    "arguments": input_json.as_str(),
                }));
            }
        }
        read(self.format, items)
            .pop()
            .unwrap_or_else(|| call.clone())
    }

    /// Inserts what no strategy may touch into `messages`, whose units start at `starts`: a
    /// mid-conversation system message after a user turn (and the same again after a later
    /// one, as Claude Code repeats its reminders: the earlier copy may go into a page, never
    /// both), an opaque unit, and a compaction boundary after the first unit where the format
    /// has one.
    fn pinned(&mut self, messages: &mut Vec<Message>, starts: &[usize]) {
        let after_user: Vec<usize> = starts[1..]
            .iter()
            .copied()
            .filter(|&at| messages[at - 1].role == Role::User)
            .collect();
        let mut inserts: Vec<(usize, Vec<Message>)> = Vec::new();
        let system_at = match after_user.len() {
            0 => messages.len(),
            n => after_user[self.rng.below(n)],
        };
        let instructions = format!("Reminder: {}", self.sentence());
        inserts.push((
            system_at,
            vec![Message::text(Role::System, instructions.clone())],
        ));
        let opaque_at = starts[self.rng.between(1, starts.len() - 1)];
        let opaque = self.opaque_unit();
        inserts.push((opaque_at, opaque));
        // After a user turn of its own, so that no system message follows another.
        if let Some(&again) = after_user
            .iter()
            .find(|&&at| at > system_at && at != opaque_at && at != starts[1])
        {
            inserts.push((again, vec![Message::text(Role::System, instructions)]));
        }
        if let Some(boundary) = self.boundary() {
            inserts.push((starts[1], boundary));
        }
        // From the end, so the earlier positions stay right.
        inserts.sort_by_key(|(at, _)| std::cmp::Reverse(*at));
        for (at, new) in inserts {
            messages.splice(at..at, new);
        }
    }

    /// A message or item no reader knows, as a client of the format would send it.
    fn opaque_unit(&mut self) -> Vec<Message> {
        let text = self.sentence();
        let item = match (self.format, self.rng.below(2)) {
            (WireFormat::Responses, 0) => serde_json::json!({
                "type": "web_search_call",
                "id": format!("ws_{}", self.rng.next_u64()),
                "status": "completed",
                "action": {"type": "search", "query": text},
            }),
            (_, 0) => serde_json::json!({"role": "critic", "content": text}),
            (WireFormat::Anthropic, _) => serde_json::json!({"role": "user", "content": [
                {"type": "text", "text": text}, {"type": "hologram", "frames": [1, 2, 3]}]}),
            (WireFormat::OpenAi, _) => serde_json::json!({"role": "user", "content": [
                {"type": "text", "text": text}, {"type": "video_url", "video_url": {"url": "https://example.com/v.mp4"}}]}),
            (WireFormat::Responses, _) => {
                serde_json::json!({"type": "message", "role": "user", "content": [
                {"type": "input_text", "text": text}, {"type": "input_video", "video_url": "https://example.com/v.mp4"}]})
            }
        };
        read(self.format, vec![item])
    }

    /// A provider's compaction boundary (none in Chat Completions).
    fn boundary(&mut self) -> Option<Vec<Message>> {
        let summary = self.paragraph(1, 2);
        let item = match self.format {
            WireFormat::Anthropic => serde_json::json!({"role": "assistant", "content": [
                {"type": "compaction", "content": summary, "encrypted_content": format!("enc{}", self.rng.next_u64())},
                {"type": "text", "text": "Continuing from the summary."}]}),
            WireFormat::Responses => serde_json::json!({
                "type": "compaction",
                "id": format!("cmp_{}", self.rng.next_u64()),
                "encrypted_content": format!("enc{}", self.rng.next_u64()),
            }),
            WireFormat::OpenAi => return None,
        };
        Some(read(self.format, vec![item]))
    }

    /// `message` with every tool result and tool input in it cleared, its original put among
    /// the prior pages.
    fn cleared(&mut self, message: Message) -> Message {
        let mut clearing = Clearing::new(&message, 0);
        for b in 0..message.content.len() {
            clearing.clear_result(b, "Output cleared by an earlier stage.");
            clearing.clear_input(b);
        }
        let cleared = clearing.message().clone();
        self.prior_pages.push(vec![message]);
        cleared
    }

    fn prior_summary(&mut self, out: &mut Vec<Message>) {
        let page = vec![
            Message::text(Role::User, self.paragraph(1, 3)),
            Message::text(Role::Assistant, self.paragraph(1, 3)),
        ];
        let id = page_id(&page);
        let text = self.paragraph(1, 2);
        out.push(summary_message(
            &text,
            &id,
            "earlier-stage",
            SummaryStatus::Final,
        ));
        self.prior_pages.push(page);
    }
}

/// The messages the reader of `format` makes of a request holding `list` (its `messages`, or
/// its Responses `input`).
fn read(format: WireFormat, list: Vec<serde_json::Value>) -> Vec<Message> {
    let mut request = serde_json::Map::new();
    request.insert(
        format.list_key().to_string(),
        serde_json::Value::Array(list),
    );
    let (conversation, _) = wire::parse_value(serde_json::Value::Object(request), Some(format))
        .expect("the generator's own requests are valid");
    conversation.messages.into_vec()
}

/// A user message of `bytes` bytes of ASCII prose, inserted as the first message of the
/// compactable range (well inside it).
pub fn with_huge_message(case: &Case, bytes: usize) -> Case {
    let mut rng = Rng::new(case.seed);
    let mut text = String::with_capacity(bytes + 16);
    while text.len() < bytes {
        text.push_str(rng.pick(WORDS));
        text.push(if rng.chance(8) { '\n' } else { ' ' });
    }
    text.truncate(bytes);
    // After the system prompt, the task and any compaction boundary, where a stage may
    // summarize it.
    let at =
        tamp_plugin_api::sdk::compactable_range(&case.messages, case.keep_recent as usize).start;
    let mut messages = case.messages.clone();
    messages.insert(at, Message::text(Role::User, text));
    case.with_messages(messages)
        .expect("a case with a long message is a valid request")
}

/// Smaller variants of `case`, most promising first: each unit removed (a tool exchange goes
/// whole, so pairing stays valid), then each text halved. Invalid variants are left out.
pub fn shrink_candidates(case: &Case) -> Vec<Case> {
    let mut out = Vec::new();
    let all = units(&case.messages);
    // Big steps first: the first or second half of the units.
    if all.len() >= 4 {
        let mid = all[all.len() / 2].range.start;
        for keep in [mid..case.messages.len(), 0..mid] {
            let messages = case.messages[keep].to_vec();
            out.extend(case.with_messages(messages));
        }
    }
    for unit in all.iter().rev() {
        let mut messages = case.messages.clone();
        messages.drain(unit.range.clone());
        out.extend(case.with_messages(messages));
    }
    for (i, message) in case.messages.iter().enumerate() {
        for (b, block) in message.content.iter().enumerate() {
            let shorter = match block {
                ContentBlock::Text { text, extra_json } if text.chars().count() > 12 => {
                    ContentBlock::Text {
                        text: halve(text).into(),
                        extra_json: extra_json.clone(),
                    }
                }
                ContentBlock::ToolResult {
                    tool_use_id,
                    content,
                    is_error,
                    extra_json,
                } => match content.first() {
                    Some(ToolResultPart::Text { text }) if text.chars().count() > 12 => {
                        ContentBlock::ToolResult {
                            tool_use_id: tool_use_id.clone(),
                            content: vec![ToolResultPart::Text {
                                text: halve(text).into(),
                            }]
                            .into(),
                            is_error: *is_error,
                            extra_json: extra_json.clone(),
                        }
                    }
                    _ => continue,
                },
                _ => continue,
            };
            let mut messages = case.messages.clone();
            messages[i].content[b] = shorter;
            out.extend(case.with_messages(messages));
        }
    }
    if case.keep_recent > 1 {
        out.push(Case {
            keep_recent: 1,
            ..case.clone()
        });
    }
    out
}

fn halve(text: &str) -> String {
    let n = text.chars().count() / 2;
    text.chars().take(n).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_seed_gives_the_same_case_and_cases_are_valid() {
        for format in WireFormat::ALL {
            for i in 0..20 {
                let seed = case_seed(7, format, i);
                let a = generate(seed, format, Shape::default());
                let b = generate(seed, format, Shape::default());
                assert_eq!(a, b);
                wire::check_tool_pairing(&a.messages, format).unwrap();
                if format == WireFormat::OpenAi {
                    assert!(a
                        .messages
                        .iter()
                        .all(|m| m.role != Role::User || m.tool_result_ids().next().is_none()));
                }
            }
        }
        let a = generate(1, WireFormat::Anthropic, Shape::default());
        let b = generate(2, WireFormat::Anthropic, Shape::default());
        assert_ne!(a.messages, b.messages);
    }

    #[test]
    fn cases_hold_pinned_messages_and_boundaries_where_the_format_has_them() {
        use tamp_plugin_api::sdk::pinned;
        for format in WireFormat::ALL {
            let mut reasoning = false;
            let mut repeated = 0;
            for i in 0..12 {
                let case = generate(case_seed(1, format, i), format, Shape::default());
                let m = &case.messages;
                let lead = m.iter().take_while(|m| m.role == Role::System).count();
                assert!(
                    m[lead..]
                        .iter()
                        .any(|m| m.role == Role::System && pinned::opaque(m).is_empty()),
                    "{format} {i}: a mid-conversation system message"
                );
                assert!(
                    m.iter().any(|m| !pinned::opaque(m).is_empty()),
                    "{format} {i}: an opaque unit"
                );
                assert_eq!(
                    m.iter().any(pinned::is_boundary),
                    format != WireFormat::OpenAi,
                    "{format} {i}: a compaction boundary"
                );
                repeated += usize::from(pinned::repeated_later(m).contains(&true));
                reasoning |= m.iter().any(|m| {
                    m.content
                        .iter()
                        .any(|b| matches!(b, ContentBlock::Opaque { json } if json.contains("\"reasoning\"")))
                });
            }
            assert_eq!(reasoning, format == WireFormat::Responses, "{format}");
            assert!(
                repeated >= 6,
                "{format}: {repeated} of 12 cases repeat their reminder"
            );
        }
    }

    #[test]
    fn unicode_cases_start_every_sentence_on_a_multibyte_character() {
        let shape = Shape {
            text: Text::Unicode,
            ..Shape::default()
        };
        let case = generate(3, WireFormat::OpenAi, shape);
        let texts: Vec<String> = case.messages.iter().map(Message::joined_text).collect();
        assert!(texts
            .iter()
            .filter(|t| !t.is_empty())
            .all(|t| !t.is_ascii()));
    }

    #[test]
    fn shrinking_offers_only_valid_smaller_cases() {
        let case = generate(11, WireFormat::Anthropic, Shape::default());
        let size = |c: &Case| serde_json::to_string(&c.messages).unwrap().len();
        let candidates = shrink_candidates(&case);
        assert!(!candidates.is_empty());
        for c in candidates {
            wire::check_tool_pairing(&c.messages, c.format).unwrap();
            assert!(size(&c) < size(&case) || c.keep_recent < case.keep_recent);
        }
    }

    #[test]
    fn a_huge_message_has_the_size_asked() {
        let case = generate(5, WireFormat::OpenAi, Shape::default());
        let big = with_huge_message(&case, 100_000);
        assert!(big
            .messages
            .iter()
            .any(|m| m.joined_text().len() == 100_000));
    }
}
