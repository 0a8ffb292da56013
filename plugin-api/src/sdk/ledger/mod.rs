//! The ledger: what a summary must not paraphrase, carried verbatim across every compaction.
//!
//! A cheap summarizer keeps the gist and loses the facts an agent needs: what the user told
//! it, what it decided and why, which files it changed, which errors are still open. The
//! ledger takes those from the messages a summary replaces, word for word, and appends them
//! to the model's summary as a fixed section the model never writes:
//!
//! ```text
//! <the model's summary>
//!
//! Ledger (verbatim from the summarized messages, oldest first; mN: message N of the page above):
//! page pg_2f…:
//! - m3 user: Use Decimal for every amount, never float.
//! - m12 decision: Decision D-002: we will keep the CSV exporter on the old column order, because downstream consumers depend on it.
//! this summary's page:
//! - m4 file: src/reports/totals.py (sed -i)
//! - m9 error: bash({"command":"python -m pytest"}) failed: FAILED tests/test_reports.py
//! (6 older entries moved out to this summary's page or the pages before it)
//! ```
//!
//! - **What it holds** ([`extract`]): every user message's words (instructions and
//!   corrections), the sentences in which the assistant states a decision (with the reason
//!   when the same sentence gives it; read in the sentence's own language by
//!   [`crate::sdk::statements`], the extractive summarizer's statement detection), the files
//!   its tool calls write ([`writes`]), and the errors of calls no later call of the same
//!   input fixed. Each entry names the message it came from: `m12` is message 12 of the page
//!   named above it, `this summary's page` the page of the summary it is in. Where nothing
//!   is found, nothing is added.
//! - **Carried, never rewritten** ([`Ledger::for_span`]): a summary that replaces earlier
//!   summaries carries their ledgers first, each entry as it was written (their own group
//!   is named by their page from then on), then adds what is new, without what a summary
//!   before it already carries. An error a later call fixes leaves the ledger.
//! - **Bounded** ([`Ledger::bounded`]): past its cap (a share of the budget,
//!   [`LedgerConfig::max_share`]; shared by the summaries before it where they never fold,
//!   [`LedgerConfig::cap`]) the oldest errors move out to the pages, where their
//!   messages are; then the oldest of what the user said and what was decided are packed to
//!   their first [`PACKED_CHARS`] characters; then files move out, then the oldest
//!   decisions, and what the user said last, never silently (the note line counts what moved
//!   and what was packed). Open errors keep the newest [`MAX_OPEN_ERRORS`].
//! - **Not a prompt**: a strategy sends the model its prior summary's narrative only
//!   ([`narrative`]); the ledger never reaches a request, so requests stay as they were.
//!
//! The statements of an assistant that speaks a language [`crate::sdk::statements`] has no
//! decision words for are not guessed at: the note line counts them.

mod extract;
mod writes;

use std::collections::HashSet;
use std::ops::Range;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::conversation::Message;
use crate::error::PluginError;
use crate::host::Host;
use crate::page;
use crate::sdk::summary::cap_chars;

pub use extract::{call_signature, extract, one_line, Extracted};
pub use writes::{shell_writes, writes, Write};

/// The line that opens the ledger section.
pub const HEADER: &str =
    "Ledger (verbatim from the summarized messages, oldest first; mN: message N of the page above):";
/// The group of entries taken from this summary's own messages.
pub const THIS_PAGE: &str = "this summary's page:";
/// An entry's text is cut to this many characters (the rest is in the page).
pub const MAX_ENTRY_CHARS: usize = 300;
/// A failed call's input, in an error entry, is cut to this many characters (its error line
/// to [`MAX_ENTRY_CHARS`]).
pub const MAX_INPUT_CHARS: usize = 80;
/// Open errors kept; older ones move out like any entry past the cap.
pub const MAX_OPEN_ERRORS: usize = 5;
/// Past the cap, the oldest entries of what the user said and what was decided are packed to
/// this many characters (marked `…`; their messages, in the pages, hold the rest) before any
/// of them moves out: most of a fact is in its first words, and a packed entry is packed the
/// same way in every later summary.
pub const PACKED_CHARS: usize = 120;

/// The `[stage.config] ledger` table of the strategies that write one.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(crate = "serde", deny_unknown_fields, default)]
pub struct LedgerConfig {
    /// Append the ledger to every summary (`false`: summaries are the model's words alone).
    pub enabled: bool,
    /// The ledger's cap in tokens, as a share of the budget's `max_tokens`. Past it the
    /// oldest entries move out to the pages, and the summary says how many.
    #[schemars(range(min = 0.0, max = 1.0))]
    pub max_share: f64,
}

impl Default for LedgerConfig {
    fn default() -> Self {
        LedgerConfig {
            enabled: true,
            max_share: 0.25,
        }
    }
}

impl LedgerConfig {
    /// Checks the share; the error names the field.
    pub fn validate(&self) -> Result<(), PluginError> {
        crate::sdk::config::check_share("ledger.max_share", self.max_share)
    }

    /// What a model is shown of an earlier summary's `text`: its narrative, since [`finish`]
    /// carries the ledger (the whole text when the ledger is off).
    pub fn shown<'a>(&self, text: &'a str) -> &'a str {
        if self.enabled {
            narrative(text)
        } else {
            text
        }
    }

    /// The length to ask of the narrative of a summary whose ledger takes `ledger_tokens`
    /// (see [`tokens_found`]): the summary's `target` less what its ledger already says word
    /// for word, and never under half of it, for the narrative still tells the story. So a
    /// summary with its ledger is about as long as one without, and a context does not fill
    /// up sooner for carrying the facts verbatim. `target` itself when the ledger is off.
    pub fn narrative_target(&self, target: u32, ledger_tokens: u64) -> u32 {
        if !self.enabled {
            return target;
        }
        let left = u64::from(target).saturating_sub(ledger_tokens);
        u32::try_from(left).unwrap_or(target).max(target / 2)
    }

    /// The cap of the ledger of the summary that replaces `messages[span]`, for a budget of
    /// `max_tokens`, as `sharing` says the strategy's summaries share the cap: what to hand
    /// [`finish`]. The one place the cap's policy lives, so that every strategy bounds its
    /// ledgers the same way.
    pub fn cap(
        &self,
        host: &Host,
        messages: &[Message],
        span: &Range<usize>,
        max_tokens: u64,
        sharing: Sharing,
    ) -> u64 {
        let whole = self.cap_tokens(max_tokens);
        match sharing {
            Sharing::Folds => whole,
            Sharing::WithEarlier => whole.saturating_sub(tokens_in(&messages[..span.start], host)),
            Sharing::WithEarlierAndPlaced { placed } => whole
                .saturating_sub(tokens_in(&messages[..span.start], host))
                .saturating_sub(placed)
                .min(self.cap_tokens(host.count_message_tokens(&messages[span.clone()]))),
        }
    }

    /// The cap in tokens for `max_tokens` tokens.
    fn cap_tokens(&self, max_tokens: u64) -> u64 {
        (max_tokens as f64 * self.max_share) as u64
    }

    /// Whether summaries kept in place at the start of a span still fit: their narratives
    /// (what [`shown`](Self::shown) leaves, `count`ed) together in `narrative_limit` tokens,
    /// and their ledgers in the cap for a budget of `max_tokens`. Each kept summary's ledger
    /// holds what the ones before it do not, so together they are one ledger, and past its
    /// cap a fold bounds them as one. A strategy that keeps its earlier summaries in place
    /// (for the prefix they keep) folds them once they no longer fit.
    pub fn kept_summaries_fit(
        &self,
        summaries: &[&Message],
        narrative_limit: u64,
        max_tokens: u64,
        count: &dyn Fn(&str) -> u64,
    ) -> bool {
        let (mut narratives, mut ledgers) = (0, 0);
        for message in summaries {
            let text = message.joined_text();
            let narrative = count(self.shown(&text));
            narratives += narrative;
            ledgers += count(&text).saturating_sub(narrative);
        }
        narratives <= narrative_limit && ledgers <= self.cap_tokens(max_tokens)
    }
}

/// How the summaries of a strategy share the ledger's cap ([`LedgerConfig::cap`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sharing {
    /// Each summary has the whole cap: the summaries kept in place before it fold into one
    /// once their ledgers together pass it ([`LedgerConfig::kept_summaries_fit`]).
    Folds,
    /// The summaries before the span never fold: their ledgers and this one share the cap.
    WithEarlier,
    /// One of several summaries placed in one compaction: it shares the cap with the
    /// summaries before it and with the ledgers already placed (`placed` tokens), and takes
    /// at most the cap's share of its own span's tokens.
    WithEarlierAndPlaced { placed: u64 },
}

/// A summary's text with its ledger, from [`finish`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Finished {
    /// The narrative, then the ledger's section.
    pub text: String,
    /// The ledger as written (empty when the config turns it off).
    pub ledger: Ledger,
    /// The span's entries that the text neither lists nor counts: all of them when the cap
    /// leaves no room for even the note line that counts what moved out (0 otherwise), for
    /// the strategy to say elsewhere, since every one is in the page.
    pub unlisted: usize,
}

/// The text of a summary that replaces `messages[span]` with `narrative`: the span's ledger
/// ([`Ledger::for_span`]) after it, within `cap_tokens` (see [`LedgerConfig::cap`])
/// and within nine tenths of what the narrative leaves of the span's tokens, so the summary
/// stays smaller than what it replaces (the ledgers it carries are in the span already). The
/// narrative alone when the config turns the ledger off.
pub fn finish(
    config: &LedgerConfig,
    host: &Host,
    messages: &[Message],
    span: Range<usize>,
    narrative: &str,
    cap_tokens: u64,
) -> Finished {
    if !config.enabled {
        return Finished {
            text: narrative.to_string(),
            ledger: Ledger::default(),
            unlisted: 0,
        };
    }
    let count = |text: &str| host.count_tokens(text);
    let room = host
        .count_message_tokens(&messages[span.clone()])
        .saturating_sub(count(narrative))
        * 9
        / 10;
    let found = Ledger::for_span(messages, span);
    let entries = found.entries().count();
    let ledger = found.bounded(cap_tokens.min(room), &count);
    Finished {
        text: attach(narrative, &ledger),
        unlisted: if ledger.is_empty() { entries } else { 0 },
        ledger,
    }
}

/// The tokens that the entries found in `messages` take as ledger lines (`count` counts a
/// text): what a summary of them carries verbatim. Read from the messages alone, not less
/// what earlier summaries already carry, so that a request whose length follows it depends
/// on its material only (the same chunk, the same request: a cache hit).
pub fn tokens_found(messages: &[Message], count: &dyn Fn(&str) -> u64) -> u64 {
    extract(messages)
        .entries
        .iter()
        .map(|e| count(&e.line()))
        .sum()
}

/// The tokens of the ledgers in the summaries among `messages`.
pub fn tokens_in(messages: &[Message], host: &Host) -> u64 {
    tokens_in_by(messages, &|text| host.count_tokens(text))
}

/// [`tokens_in`], counted by `count` (the host's own counter, where there is no [`Host`]).
pub fn tokens_in_by(messages: &[Message], count: &dyn Fn(&str) -> u64) -> u64 {
    messages
        .iter()
        .filter(|m| m.is_summary())
        .map(|m| {
            let text = m.joined_text();
            let narrative = narrative(&text);
            // A summary without a ledger costs no count.
            if narrative.len() == text.len() {
                0
            } else {
                count(&text).saturating_sub(count(narrative))
            }
        })
        .sum()
}

/// What an entry records.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kind {
    /// What the user said: instructions, corrections, answers.
    User,
    /// A decision the assistant stated, with its reason when the sentence gives one.
    Decision,
    /// A file a tool call wrote: `path (how)`.
    File,
    /// A call that failed and was not fixed: `name(input) failed: line`.
    Error,
}

impl Kind {
    pub fn label(self) -> &'static str {
        match self {
            Kind::User => "user",
            Kind::Decision => "decision",
            Kind::File => "file",
            Kind::Error => "error",
        }
    }

    fn from_label(label: &str) -> Option<Kind> {
        [Kind::User, Kind::Decision, Kind::File, Kind::Error]
            .into_iter()
            .find(|k| k.label() == label)
    }
}

/// One fact, verbatim, and the message it came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    pub kind: Kind,
    /// Its message's index in the page of its group.
    pub message: usize,
    pub text: String,
}

impl Entry {
    /// `- m12 decision: …`
    pub fn line(&self) -> String {
        format!("- m{} {}: {}", self.message, self.kind.label(), self.text)
    }

    fn parse(line: &str) -> Option<Entry> {
        let rest = line.strip_prefix("- m")?;
        let (number, rest) = rest.split_once(' ')?;
        let (label, text) = rest.split_once(": ")?;
        Some(Entry {
            kind: Kind::from_label(label)?,
            message: number.parse().ok()?,
            text: text.to_string(),
        })
    }

    /// What makes two entries the same fact: a file by its path, an error by its call,
    /// anything else by its text (case and spacing aside).
    fn key(&self) -> (Kind, String) {
        let key = match self.kind {
            Kind::File => self.text.rsplit_once(" (").map_or(&*self.text, |(p, _)| p),
            Kind::Error => self.signature(),
            Kind::User | Kind::Decision => &self.text,
        };
        (self.kind, one_line(key, usize::MAX).to_lowercase())
    }

    /// An error's call (`name(input)`).
    fn signature(&self) -> &str {
        self.text
            .rsplit_once(" failed: ")
            .map_or(&*self.text, |(call, _)| call)
    }
}

/// The facts a ledger already tells: an entry is told again neither as written nor, for what
/// the user said or what was decided, packed to its first words ([`PACKED_CHARS`]) or whole
/// where it was told packed. Two unpacked entries are the same fact only when their texts are.
#[derive(Default)]
struct Seen {
    keys: HashSet<(Kind, String)>,
    /// The packed form's key of each packed entry, and of each entry long enough to be packed.
    packed: HashSet<(Kind, String)>,
    long: HashSet<(Kind, String)>,
}

impl Seen {
    /// Records `entry`; whether it was new.
    fn insert(&mut self, entry: &Entry) -> bool {
        if !self.keys.insert(entry.key()) {
            return false;
        }
        if !matches!(entry.kind, Kind::User | Kind::Decision) {
            return true;
        }
        let packed_form = Entry {
            text: cap_chars(&entry.text, PACKED_CHARS),
            ..entry.clone()
        };
        if packed_form.text == entry.text {
            // Short enough never to be packed, or packed already.
            let is_packed = entry.text.ends_with('…') && entry.text.chars().count() == PACKED_CHARS;
            if !is_packed {
                return true;
            }
            if self.long.contains(&entry.key()) {
                return false;
            }
            self.packed.insert(entry.key());
            return true;
        }
        let key = packed_form.key();
        if self.packed.contains(&key) {
            return false;
        }
        self.long.insert(key);
        true
    }
}

/// The entries taken from one page's messages.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Group {
    /// The page, or `None` for the page of the summary the ledger is in.
    pub page: Option<String>,
    pub entries: Vec<Entry>,
}

impl Group {
    fn header(&self) -> String {
        match &self.page {
            Some(page) => format!("page {page}:"),
            None => THIS_PAGE.to_string(),
        }
    }
}

/// A ledger: groups of entries, oldest first, and the counts its note line gives.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Ledger {
    pub groups: Vec<Group>,
    /// Entries moved out to the pages to stay within the cap.
    pub moved: usize,
    /// Entries packed to [`PACKED_CHARS`] to stay within the cap (the pages hold the rest).
    pub packed: usize,
    /// Errors listed once and fixed by a later call.
    pub fixed: usize,
    /// The assistant's statements in a language whose decisions are not read.
    pub unread: usize,
}

const MOVED_NOTE: &str = "older entries moved out to this summary's page or the pages before it";
const PACKED_NOTE: &str = "older entries packed to their first words (the pages hold the rest)";
const FIXED_NOTE: &str = "listed errors fixed later";
const UNREAD_NOTE: &str =
    "of the assistant's statements are in a language the ledger reads no decisions in";

impl Ledger {
    /// Whether it has nothing to say (no entry and nothing counted).
    pub fn is_empty(&self) -> bool {
        self.entries().next().is_none()
            && self.moved == 0
            && self.packed == 0
            && self.fixed == 0
            && self.unread == 0
    }

    /// Every entry, oldest first.
    pub fn entries(&self) -> impl Iterator<Item = &Entry> {
        self.groups.iter().flat_map(|g| g.entries.iter())
    }

    /// The ledger of a summary that replaces `messages[span]`: the ledgers of the summaries
    /// in the span, carried as written (their own groups named by their pages), without the
    /// errors the span's calls fixed; then what the span's other messages say ([`extract`]),
    /// less what those or any summary before the span already carry.
    pub fn for_span(messages: &[Message], span: Range<usize>) -> Ledger {
        let mut known = Seen::default();
        for message in messages[..span.start].iter().filter(|m| m.is_summary()) {
            if let (_, Some(earlier)) = split(&message.joined_text()) {
                for entry in earlier.entries() {
                    known.insert(entry);
                }
            }
        }
        let mut ledger = Ledger::default();
        for message in messages[span.clone()].iter() {
            let Some(info) = message.summary_info() else {
                continue;
            };
            if let (_, Some(carried)) = split(&message.joined_text()) {
                for mut group in carried.groups {
                    group
                        .page
                        .get_or_insert_with(|| page::short_ref(&info.page_ref).to_string());
                    group.entries.retain(|e| known.insert(e));
                    if !group.entries.is_empty() {
                        ledger.groups.push(group);
                    }
                }
                // Counts read from a summary's text, which a client can write: saturating.
                ledger.moved = ledger.moved.saturating_add(carried.moved);
                ledger.packed = ledger.packed.saturating_add(carried.packed);
                ledger.fixed = ledger.fixed.saturating_add(carried.fixed);
                ledger.unread = ledger.unread.saturating_add(carried.unread);
            }
        }
        let found = extract(&messages[span]);
        for group in &mut ledger.groups {
            let before = group.entries.len();
            group.entries.retain(|e| {
                e.kind != Kind::Error || !found.succeeded.iter().any(|s| s == e.signature())
            });
            ledger.fixed = ledger.fixed.saturating_add(before - group.entries.len());
        }
        ledger.groups.retain(|g| !g.entries.is_empty());
        let new: Vec<Entry> = found
            .entries
            .into_iter()
            .filter(|e| known.insert(e))
            .collect();
        if !new.is_empty() {
            ledger.groups.push(Group {
                page: None,
                entries: new,
            });
        }
        ledger.unread = ledger.unread.saturating_add(found.unread);
        ledger
    }

    /// Within `cap_tokens` (as `count` counts the rendering's lines): past
    /// [`MAX_OPEN_ERRORS`] open errors the oldest move out, and past the cap the ledger is
    /// brought to three quarters of it (so the next few summaries need not touch it, and keep
    /// their ledgers' prefix): the oldest errors move out first, then the oldest of what the
    /// user said and what was decided are packed ([`PACKED_CHARS`]), then the oldest files
    /// move out, then the oldest decisions, and what the user said last. A re-run and the
    /// repository tell an error and a file again; nothing tells again what the user said or
    /// what was decided, so those are shortened before any of them goes; and an agent's
    /// decisions follow from what its user told it, so the user's words outlast them. Moved
    /// and packed entries are counted.
    pub fn bounded(mut self, cap_tokens: u64, count: &dyn Fn(&str) -> u64) -> Ledger {
        let errors = self.entries().filter(|e| e.kind == Kind::Error).count();
        self.move_out(Kind::Error, errors.saturating_sub(MAX_OPEN_ERRORS));
        let entry_count = self.entries().count();
        let fixed_cost = count(HEADER)
            + self.groups.iter().map(|g| count(&g.header())).sum::<u64>()
            + count(&self.note_with(
                self.moved.saturating_add(entry_count),
                self.packed.saturating_add(entry_count),
            ));
        let mut total = fixed_cost + self.entries().map(|e| count(&e.line())).sum::<u64>();
        if total <= cap_tokens {
            return self;
        }
        if fixed_cost > cap_tokens {
            // Not even the groups' headers fit (a span barely larger than its summary):
            // every entry moves out, and the note alone says how many.
            return self.all_moved_out(cap_tokens, count);
        }
        let target = cap_tokens * 3 / 4;
        total = self.move_out_until(&[Kind::Error], total, target, count);
        total = self.pack_until(total, target, count);
        total = self.move_out_until(&[Kind::File], total, target, count);
        total = self.move_out_until(&[Kind::Decision], total, target, count);
        self.move_out_until(&[Kind::User], total, target, count);
        self
    }

    /// Moves the oldest entries of `kinds` out while `total` (the rendering's tokens) is above
    /// `target`; the total after.
    fn move_out_until(
        &mut self,
        kinds: &[Kind],
        mut total: u64,
        target: u64,
        count: &dyn Fn(&str) -> u64,
    ) -> u64 {
        let mut n = 0;
        for entry in self.entries().filter(|e| kinds.contains(&e.kind)) {
            if total <= target {
                break;
            }
            total -= count(&entry.line());
            n += 1;
        }
        self.move_out_of(kinds, n);
        total
    }

    /// Packs the oldest entries of what the user said and what was decided to
    /// [`PACKED_CHARS`] while `total` is above `target`; the total after.
    fn pack_until(&mut self, mut total: u64, target: u64, count: &dyn Fn(&str) -> u64) -> u64 {
        for group in &mut self.groups {
            for entry in &mut group.entries {
                if total <= target {
                    return total;
                }
                if !matches!(entry.kind, Kind::User | Kind::Decision) {
                    continue;
                }
                let packed = cap_chars(&entry.text, PACKED_CHARS);
                if packed.len() >= entry.text.len() {
                    continue;
                }
                let before = count(&entry.line());
                entry.text = packed;
                total = total.saturating_sub(before) + count(&entry.line());
                self.packed = self.packed.saturating_add(1);
            }
        }
        total
    }

    /// Every entry moved out: the ledger is its header and the note that counts them, so the
    /// summary still says how many entries its page holds. Only a cap too small for those two
    /// lines leaves no ledger at all (the page holds every message either way).
    fn all_moved_out(mut self, cap_tokens: u64, count: &dyn Fn(&str) -> u64) -> Ledger {
        let n = self.entries().count();
        self.move_out_of(&[Kind::Error, Kind::File, Kind::User, Kind::Decision], n);
        if count(HEADER) + count(&self.note_with(self.moved, self.packed)) > cap_tokens {
            return Ledger::default();
        }
        self
    }

    /// Moves the oldest `n` entries of `kind` out (counted in `moved`).
    fn move_out(&mut self, kind: Kind, n: usize) {
        self.move_out_of(&[kind], n);
    }

    /// Moves the oldest `n` entries whose kind is one of `kinds` out (counted in `moved`).
    fn move_out_of(&mut self, kinds: &[Kind], n: usize) {
        let mut left = n;
        for group in &mut self.groups {
            group.entries.retain(|e| {
                let out = left > 0 && kinds.contains(&e.kind);
                left -= usize::from(out);
                !out
            });
        }
        self.moved = self.moved.saturating_add(n - left);
        self.groups.retain(|g| !g.entries.is_empty());
    }

    /// The note line for `moved` entries moved out and `packed` packed (and the other
    /// counts as they are).
    fn note_with(&self, moved: usize, packed: usize) -> String {
        let mut parts = Vec::new();
        if moved > 0 {
            parts.push(format!("{moved} {MOVED_NOTE}"));
        }
        if packed > 0 {
            parts.push(format!("{packed} {PACKED_NOTE}"));
        }
        if self.fixed > 0 {
            parts.push(format!("{} {FIXED_NOTE}", self.fixed));
        }
        if self.unread > 0 {
            parts.push(format!("{} {UNREAD_NOTE}", self.unread));
        }
        if parts.is_empty() {
            String::new()
        } else {
            format!("({})", parts.join("; "))
        }
    }

    /// The section: [`HEADER`], each group's header and entries, and the note line when it
    /// has something to count. Empty for an empty ledger.
    pub fn render(&self) -> String {
        if self.is_empty() {
            return String::new();
        }
        let mut out = String::from(HEADER);
        for group in &self.groups {
            out.push('\n');
            out.push_str(&group.header());
            for entry in &group.entries {
                out.push('\n');
                out.push_str(&entry.line());
            }
        }
        let note = self.note_with(self.moved, self.packed);
        if !note.is_empty() {
            out.push('\n');
            out.push_str(&note);
        }
        out
    }

    /// Reads a section [`render`](Self::render) wrote (from its header on). Lines it cannot
    /// read (a summary cut inside its ledger) are skipped.
    pub fn parse(section: &str) -> Ledger {
        let mut ledger = Ledger::default();
        for line in section.lines().skip(1) {
            let line = line.trim_end();
            if line == THIS_PAGE {
                ledger.groups.push(Group {
                    page: None,
                    entries: Vec::new(),
                });
            } else if let Some(page) = line.strip_prefix("page ").and_then(|p| p.strip_suffix(':'))
            {
                ledger.groups.push(Group {
                    page: Some(page.to_string()),
                    entries: Vec::new(),
                });
            } else if let Some(entry) = Entry::parse(line) {
                if let Some(group) = ledger.groups.last_mut() {
                    group.entries.push(entry);
                }
            } else if let Some(note) = line.strip_prefix('(').and_then(|l| l.strip_suffix(')')) {
                for part in note.split("; ") {
                    let Some((number, what)) = part.split_once(' ') else {
                        continue;
                    };
                    let Ok(n) = number.parse::<usize>() else {
                        continue;
                    };
                    match what {
                        MOVED_NOTE => ledger.moved = n,
                        PACKED_NOTE => ledger.packed = n,
                        FIXED_NOTE => ledger.fixed = n,
                        UNREAD_NOTE => ledger.unread = n,
                        _ => {}
                    }
                }
            }
        }
        ledger.groups.retain(|g| !g.entries.is_empty());
        ledger
    }
}

/// Where the ledger section of a summary's text starts, if it has one: the first line that is
/// [`HEADER`] and nothing else, as [`attach`] writes it. Anything else that holds those words
/// is quoted text: an entry is one line that starts `- m` (what the user said, quoting the
/// header, is one), and a narrative line that would read as the header was lowercased by
/// [`attach`]. So a quote can neither hide the section nor start one.
fn section_start(text: &str) -> Option<usize> {
    let mut at = 0;
    for line in text.split_inclusive('\n') {
        if line
            .strip_suffix('\n')
            .unwrap_or(line)
            .trim_end_matches('\r')
            == HEADER
        {
            return Some(at);
        }
        at += line.len();
    }
    None
}

/// A summary's text taken apart: the model's part (trimmed at its end) and its ledger.
pub fn split(text: &str) -> (&str, Option<Ledger>) {
    match section_start(text) {
        Some(at) => (text[..at].trim_end(), Some(Ledger::parse(&text[at..]))),
        None => (text, None),
    }
}

/// A summary's text without its ledger: what a strategy shows the model of a prior summary.
pub fn narrative(text: &str) -> &str {
    match section_start(text) {
        Some(at) => text[..at].trim_end(),
        None => text,
    }
}

/// The summary's text: the model's `narrative`, then the ledger's section after a blank line
/// (nothing when the ledger is empty). A line of the narrative that would read as a ledger's
/// header is lowercased first, so the section found later is this one.
pub fn attach(narrative: &str, ledger: &Ledger) -> String {
    let section = ledger.render();
    let narrative = narrative.trim_end();
    let narrative = if narrative.contains(HEADER) {
        std::borrow::Cow::Owned(narrative.replace(HEADER, &HEADER.to_lowercase()))
    } else {
        std::borrow::Cow::Borrowed(narrative)
    };
    match (narrative.is_empty(), section.is_empty()) {
        (_, true) => narrative.into_owned(),
        (true, false) => section,
        (false, false) => format!("{narrative}\n\n{section}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conversation::{ContentBlock, Role, SummaryStatus};
    use crate::sdk::summary::summary_message;

    fn words(text: &str) -> u64 {
        text.split_whitespace().count() as u64
    }

    fn decision(n: usize) -> String {
        format!("Decision D-{n:03}: we will keep the exporter on order {n}, because tests pin it.")
    }

    /// A session: a user instruction, then turns each stating a decision.
    fn session(from: usize, to: usize) -> Vec<Message> {
        let mut messages = vec![Message::text(Role::User, format!("Instruction {from}."))];
        for n in from..to {
            messages.push(Message::text(Role::Assistant, decision(n)));
        }
        messages
    }

    #[test]
    fn a_narrative_is_asked_for_what_its_ledger_does_not_say_and_at_least_half() {
        let on = LedgerConfig::default();
        // Instruction 1, then two decisions: three lines of 5, 17 and 17 words.
        let found = tokens_found(&session(1, 3), &words);
        assert_eq!(found, 5 + 17 + 17);
        assert_eq!(on.narrative_target(300, found), 300 - found as u32);
        assert_eq!(on.narrative_target(60, found), 30);
        assert_eq!(on.narrative_target(300, 0), 300);
        assert_eq!(on.narrative_target(300, u64::MAX), 150);
        let off = LedgerConfig {
            enabled: false,
            ..LedgerConfig::default()
        };
        assert_eq!(off.narrative_target(60, found), 60);
        // A summary in the messages is carried, not found again.
        let mut messages = session(1, 3);
        messages.insert(
            0,
            summary_message("Earlier.", "pg_1", "s", SummaryStatus::Final),
        );
        assert_eq!(tokens_found(&messages, &words), found);
    }

    #[test]
    fn a_fact_carried_packed_is_not_told_again_whole() {
        let long = format!("Please keep the exporter as it is; {}", "x ".repeat(100));
        let packed = Ledger {
            groups: vec![Group {
                page: Some("pg_1".into()),
                entries: vec![Entry {
                    kind: Kind::User,
                    message: 2,
                    text: cap_chars(&long, PACKED_CHARS),
                }],
            }],
            packed: 1,
            ..Ledger::default()
        };
        let other = format!("Please keep the exporter as it is; {}", "y ".repeat(100));
        let mut messages = vec![summary_message(
            &attach("Earlier.", &packed),
            "pg_2",
            "s",
            SummaryStatus::Final,
        )];
        messages.push(Message::text(Role::User, long.clone()));
        messages.push(Message::text(Role::User, other.clone()));
        let ledger = Ledger::for_span(&messages, 1..3);
        let texts: Vec<&str> = ledger.entries().map(|e| e.text.as_str()).collect();
        // The same words again are the packed fact; words that differ past the packed part
        // are another one.
        assert_eq!(texts, [other.trim_end()]);
        // And the other way: a packed twin of an entry told whole adds nothing.
        let mut seen = Seen::default();
        let whole = Entry {
            kind: Kind::Decision,
            message: 1,
            text: long.clone(),
        };
        assert!(seen.insert(&whole));
        assert!(!seen.insert(&Entry {
            text: cap_chars(&long, PACKED_CHARS),
            ..whole.clone()
        }));
        assert!(seen.insert(&Entry {
            text: other,
            ..whole
        }));
    }

    #[test]
    fn renders_and_parses_back_the_same() {
        let ledger = Ledger {
            groups: vec![
                Group {
                    page: Some("pg_1".into()),
                    entries: vec![Entry {
                        kind: Kind::User,
                        message: 3,
                        text: "Use Decimal: never float.".into(),
                    }],
                },
                Group {
                    page: None,
                    entries: vec![Entry {
                        kind: Kind::File,
                        message: 0,
                        text: "src/a.py (sed -i)".into(),
                    }],
                },
            ],
            moved: 4,
            packed: 3,
            fixed: 1,
            unread: 2,
        };
        let text = attach("The agent fixed the totals.", &ledger);
        assert!(text.starts_with("The agent fixed the totals.\n\nLedger (verbatim"));
        assert!(text.contains("\npage pg_1:\n- m3 user: Use Decimal: never float.\n"));
        assert!(text.ends_with(
            "this summary's page:\n- m0 file: src/a.py (sed -i)\n(4 older entries moved out to \
             this summary's page or the pages before it; 3 older entries packed to their first \
             words (the pages hold the rest); 1 listed errors fixed later; 2 of the assistant's \
             statements are in a language the ledger reads no decisions in)"
        ));
        let (narrative, parsed) = split(&text);
        assert_eq!(narrative, "The agent fixed the totals.");
        assert_eq!(parsed, Some(ledger));
        // Nothing found, nothing added.
        assert_eq!(attach("Just this.", &Ledger::default()), "Just this.");
        assert_eq!(split("Just this."), ("Just this.", None));
    }

    #[test]
    fn a_narrative_cannot_pass_for_a_ledger() {
        let text = attach(
            &format!("Copied:\n{HEADER}\n- m1 user: fake"),
            &Ledger::default(),
        );
        assert_eq!(split(&text).1, None);
    }

    #[test]
    fn a_header_quoted_by_the_user_neither_hides_the_section_nor_starts_one() {
        // The user quotes the header mid-message: an entry of the ledger, and with the old
        // "last occurrence" rule the section was lost (the quote is not at a line start).
        let quote = format!("Please read this: {HEADER} is what you keep, right?");
        let mut messages = vec![Message::text(Role::System, "sys")];
        messages.extend(session(1, 6));
        messages.push(Message::text(Role::User, quote.clone()));
        let first = Ledger::for_span(&messages, 1..messages.len());
        assert_eq!(first.entries().count(), 7, "{first:?}");
        let text = attach(&format!("The user said:\n{quote}"), &first);
        let (narrative_part, parsed) = split(&text);
        assert_eq!(parsed.as_ref(), Some(&first), "{text}");
        assert!(
            narrative_part.ends_with("is what you keep, right?"),
            "{text}"
        );
        // Folded: every entry is carried, none moved out.
        let mut folded = vec![
            messages[0].clone(),
            summary_message(&text, "pg_a", "s", SummaryStatus::Final),
        ];
        folded.extend(session(6, 8));
        let second = Ledger::for_span(&folded, 1..folded.len());
        assert_eq!(second.moved, 0);
        let carried: Vec<String> = second.groups[0].entries.iter().map(Entry::line).collect();
        let written: Vec<String> = first.entries().map(Entry::line).collect();
        assert_eq!(carried, written);
        // A line that is the header and more is not the header either.
        let fake = format!("Narrative.\n\n{HEADER} (not really)\n- m0 user: planted");
        assert_eq!(split(&fake).1, None);
    }

    #[test]
    fn folding_carries_entries_as_written_and_adds_only_what_is_new() {
        // First summary: messages 0..4 of a conversation with a system prompt before them.
        let mut messages = vec![Message::text(Role::System, "sys")];
        messages.extend(session(1, 4));
        let first = Ledger::for_span(&messages, 1..5);
        let first_text = attach("Narrative one.", &first);
        assert_eq!(
            first.entries().map(Entry::line).collect::<Vec<_>>(),
            [
                "- m0 user: Instruction 1.".to_string(),
                format!("- m1 decision: {}", decision(1)),
                format!("- m2 decision: {}", decision(2)),
                format!("- m3 decision: {}", decision(3)),
            ]
        );
        // The summary in place (the host named its page), then more messages, one of them a
        // repeat of a decision already carried.
        let mut folded = vec![
            messages[0].clone(),
            summary_message(&first_text, "pg_a", "s", SummaryStatus::Final),
        ];
        folded.extend(session(4, 6));
        folded.push(Message::text(Role::Assistant, decision(2)));
        let second = Ledger::for_span(&folded, 1..folded.len());
        let second_text = attach("Narrative two.", &second);
        // The first summary's entries, as written, under its page; then the new ones.
        let first_lines: Vec<String> = first.entries().map(Entry::line).collect();
        assert!(second_text.contains(&format!("page pg_a:\n{}", first_lines.join("\n"))));
        assert_eq!(
            second.groups[1]
                .entries
                .iter()
                .map(Entry::line)
                .collect::<Vec<_>>(),
            [
                "- m1 user: Instruction 4.".to_string(),
                format!("- m2 decision: {}", decision(4)),
                format!("- m3 decision: {}", decision(5)),
            ]
        );
        assert_eq!(narrative(&second_text), "Narrative two.");
        // A summary kept before the span: what it carries is not listed again.
        let mut kept = folded[..2].to_vec();
        kept.extend(session(1, 3));
        let after = Ledger::for_span(&kept, 2..kept.len());
        assert!(after.is_empty(), "{after:?}");
    }

    #[test]
    fn past_the_cap_the_oldest_move_out_and_are_counted() {
        let messages = session(1, 41);
        let ledger = Ledger::for_span(&messages, 0..messages.len());
        assert_eq!(ledger.entries().count(), 41);
        let all = words(&ledger.render());
        let bounded = ledger.clone().bounded(all / 2, &words);
        let kept = bounded.entries().count();
        assert!(words(&bounded.render()) <= all / 2 * 3 / 4 + 1);
        assert_eq!(bounded.moved, 41 - kept);
        // The user's instruction and the newest decisions stay, and those that stay read as
        // they did: the oldest decisions moved out.
        let last = bounded.entries().last().unwrap();
        assert_eq!(last.text, decision(40));
        let kept_lines: Vec<String> = bounded.entries().map(Entry::line).collect();
        let all_lines: Vec<String> = ledger.entries().map(Entry::line).collect();
        assert_eq!(kept_lines[0], all_lines[0]);
        assert_eq!(kept_lines[1..], all_lines[41 - kept + 1..]);
        assert!(bounded
            .render()
            .contains(&format!("({} older entries moved out", 41 - kept)));
        // Within the cap, nothing moves.
        assert_eq!(ledger.clone().bounded(all + 100, &words), ledger);
    }

    /// One group of entries of `kinds` (entry N from message N), brought within a cap of 7
    /// tokens with a line a token: the header, the group's, the note and five entries make 8,
    /// so entries move out until 5 lines are left (two entries). What stays, and how many
    /// moved.
    fn kept_of_five_within_seven(kinds: [Kind; 5]) -> (Vec<(Kind, usize)>, usize) {
        let entries = kinds
            .into_iter()
            .enumerate()
            .map(|(message, kind)| Entry {
                kind,
                message,
                text: format!("entry number {message} of its kind"),
            })
            .collect();
        let ledger = Ledger {
            groups: vec![Group {
                page: None,
                entries,
            }],
            ..Ledger::default()
        };
        let bounded = ledger.bounded(7, &|_: &str| 1);
        let kept = bounded.entries().map(|e| (e.kind, e.message)).collect();
        (kept, bounded.moved)
    }

    #[test]
    fn past_the_cap_errors_and_files_move_out_before_words_and_decisions() {
        use Kind::*;
        // The error, then both files.
        let (kept, moved) = kept_of_five_within_seven([Decision, File, Error, User, File]);
        assert_eq!(kept, [(Decision, 0), (User, 3)]);
        assert_eq!(moved, 3);
    }

    #[test]
    fn past_the_cap_decisions_move_out_before_what_the_user_said() {
        use Kind::*;
        // The oldest user entry is older than every decision, and still outlasts them.
        let (kept, moved) = kept_of_five_within_seven([User, Decision, User, Decision, Decision]);
        assert_eq!(kept, [(User, 0), (User, 2)]);
        assert_eq!(moved, 3);
    }

    #[test]
    fn past_the_cap_the_oldest_words_are_packed_before_files_move_out() {
        let long = |n: usize| {
            format!(
                "Instruction {n}: {}",
                "keep the totals in Decimal ".repeat(20)
            )
        };
        let mut entries: Vec<Entry> = (0..4)
            .map(|n| Entry {
                kind: if n % 2 == 0 {
                    Kind::User
                } else {
                    Kind::Decision
                },
                message: n,
                text: long(n),
            })
            .collect();
        entries.push(Entry {
            kind: Kind::File,
            message: 4,
            text: "src/a.py (sed -i)".into(),
        });
        let ledger = Ledger {
            groups: vec![Group {
                page: None,
                entries,
            }],
            ..Ledger::default()
        };
        let all = words(&ledger.render());
        // Packing the two oldest is enough to come under three quarters of this cap.
        let bounded = ledger.clone().bounded(all - 10, &words);
        assert!(
            words(&bounded.render()) <= (all - 10) * 3 / 4,
            "{}",
            bounded.render()
        );
        assert_eq!((bounded.packed, bounded.moved), (2, 0));
        let texts: Vec<&str> = bounded.entries().map(|e| e.text.as_str()).collect();
        assert_eq!(texts[0], cap_chars(&long(0), PACKED_CHARS));
        assert!(texts[0].ends_with('…') && texts[0].chars().count() == PACKED_CHARS);
        assert_eq!(
            texts[2..],
            [long(2).as_str(), &long(3), "src/a.py (sed -i)"]
        );
        // Carried into a later summary, a packed entry reads the same and stays counted.
        let summary = attach("n", &bounded);
        let later = vec![summary_message(&summary, "pg_p", "s", SummaryStatus::Final)];
        let carried = Ledger::for_span(&later, 0..1);
        assert_eq!(carried.packed, 2);
        assert_eq!(carried.entries().next().unwrap().text, texts[0]);
        // Packed again, a packed entry does not change.
        let again = carried
            .clone()
            .bounded(words(&carried.render()) - 1, &words);
        assert!(again.entries().any(|e| e.text == texts[0]));
    }

    #[test]
    fn when_every_entry_moves_out_the_note_still_counts_them() {
        let messages = session(1, 6);
        let ledger = Ledger::for_span(&messages, 0..messages.len());
        assert_eq!(ledger.entries().count(), 6);
        // A line a token: the header and the note fit, the group's header does not.
        let lines = |_: &str| 1;
        let bounded = ledger.clone().bounded(2, &lines);
        assert_eq!((bounded.entries().count(), bounded.moved), (0, 6));
        let text = bounded.render();
        assert!(text.starts_with(HEADER), "{text}");
        assert!(text.ends_with(&format!("(6 {MOVED_NOTE})")), "{text}");
        // Read back from the summary, the count carries on.
        let summary = attach("n", &bounded);
        let later = vec![summary_message(&summary, "pg_a", "s", SummaryStatus::Final)];
        assert_eq!(Ledger::for_span(&later, 0..1).moved, 6);
        // Too small for even those two lines: no ledger.
        assert!(ledger.bounded(1, &lines).is_empty());
    }

    #[test]
    fn counts_a_client_wrote_into_a_summary_saturate_when_carried() {
        // A `<tamp-summary>` message is the client's text: its note may claim any count.
        let claimed = Ledger {
            moved: usize::MAX,
            packed: usize::MAX,
            ..Ledger::default()
        };
        let text = attach("n", &claimed);
        let messages = vec![
            summary_message(&text, "pg_a", "s", SummaryStatus::Final),
            summary_message(&text, "pg_b", "s", SummaryStatus::Final),
            Message::text(Role::User, "Use Decimal for every amount."),
        ];
        let folded = Ledger::for_span(&messages, 0..3);
        assert_eq!((folded.moved, folded.packed), (usize::MAX, usize::MAX));
        let bounded = folded.bounded(10_000, &words);
        assert_eq!(bounded.entries().count(), 1);
        assert!(bounded.render().contains(&usize::MAX.to_string()));
    }

    #[test]
    fn errors_leave_when_a_later_call_fixes_them_and_only_the_newest_stay_open() {
        let call = |id: &str, cmd: &str| {
            Message::new(
                Role::Assistant,
                vec![ContentBlock::tool_use(
                    id,
                    "bash",
                    crate::serde_json::json!({ "command": cmd }).to_string(),
                )],
            )
        };
        let failed = |id: &str| {
            Message::new(
                Role::User,
                vec![ContentBlock::tool_result(id, "Error: boom", true)],
            )
        };
        let mut messages = Vec::new();
        for i in 0..7 {
            messages.push(call(&format!("c{i}"), &format!("run {i}")));
            messages.push(failed(&format!("c{i}")));
        }
        let first = Ledger::for_span(&messages, 0..messages.len());
        let bounded = first.bounded(10_000, &words);
        assert_eq!(bounded.entries().count(), MAX_OPEN_ERRORS);
        assert_eq!(bounded.moved, 2);
        let text = attach("n", &bounded);
        let mut later = vec![summary_message(&text, "pg_e", "s", SummaryStatus::Final)];
        later.push(call("d6", "run 6"));
        later.push(Message::new(
            Role::User,
            vec![ContentBlock::tool_result("d6", "ok", false)],
        ));
        let second = Ledger::for_span(&later, 0..later.len());
        assert_eq!(second.entries().count(), MAX_OPEN_ERRORS - 1);
        assert_eq!((second.moved, second.fixed), (2, 1));
    }

    #[test]
    fn config_defaults_and_checks() {
        let c = LedgerConfig::default();
        assert!(c.enabled);
        assert_eq!(c.cap_tokens(8_000), 2_000);
        assert!(LedgerConfig {
            max_share: 1.5,
            ..c
        }
        .validate()
        .unwrap_err()
        .message
        .starts_with("ledger.max_share"));
    }
}
