//! The token counter: one tokenizer for the whole chain.
//!
//! Budgets, triggers and stage reports all count with the same [`TokenCounter`], so numbers
//! agree across stages. Encodings:
//!
//! - `o200k_base`, `cl100k_base`: OpenAI's BPE vocabularies via `tiktoken-rs`, which embeds
//!   them, so counting works offline. Each vocabulary is built once per process (building
//!   takes a few hundred milliseconds) and shared by every counter.
//! - `chars_per_token:<N>`: a stated estimate for models whose tokenizer is unknown (e.g.
//!   Claude's): `ceil(chars / N)`, counting Unicode scalar values.
//!
//! ## What a message counts
//!
//! [`TokenCounter::count_message`] is [`MESSAGE_OVERHEAD_TOKENS`] plus its content: text
//! blocks, a tool_use block's name and input JSON, a tool_result's text parts, and a summary's
//! text (a summary message's text is in its text blocks). Tool-use ids, `extra_json` wire
//! fields and the summary's page ref are not sent to the model as content and are not counted.
//! Opaque blocks (images, documents, thinking blocks, ...) are not tokenized; see
//! [`estimate_opaque`].
//!
//! ## Performance
//!
//! The chain counts whole conversations after every stage, so `count_message` is memoized by
//! a 128-bit XXH3 hash of the message's texts: re-counting an unchanged conversation costs
//! hashing, not BPE. XXH3 hashes long texts at memory speed (several times faster than the
//! standard library's SipHash, which was a measurable share of a compaction of a large
//! conversation), and its 128 bits make an accidental collision (another message's count)
//! practically impossible.
//! Texts above [`LARGE_TEXT_BYTES`] are counted in pieces (see [`TokenCounter::count_text`]),
//! which keeps a multi-megabyte text to well under a second in a release build.

use std::collections::HashMap;
use std::fmt;
use std::hash::{BuildHasherDefault, Hasher};
use std::str::FromStr;
use std::sync::{Mutex, OnceLock, PoisonError};

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use tamp_plugin_api::{ContentBlock, Message, ToolResultPart};
use tiktoken_rs::CoreBPE;

/// Tokens added per message for its framing (role, start and end markers). OpenAI's chat
/// format spends 3 tokens per message on `<|start|>`, `<|message|>`/separator and `<|end|>`,
/// plus the role name (1 token); Anthropic's framing is similar in size.
pub const MESSAGE_OVERHEAD_TOKENS: u64 = 4;

/// The most an opaque block is estimated at. Opaque blocks are mostly images, whose JSON is
/// base64 that the model never sees as text: providers bill an image by its pixels (Anthropic:
/// `width * height / 750`, with images scaled down to about 1.15 megapixels, which is about
/// 1,600 tokens), not by the size of its encoding. Tokenizing megabytes of base64 would be slow
/// and hundreds of times too high.
pub const OPAQUE_BLOCK_MAX_TOKENS: u64 = 1_600;

/// Texts longer than this (in bytes) are counted in pieces of about [`CHUNK_BYTES`].
pub const LARGE_TEXT_BYTES: usize = 200 * 1024;

/// The size of the pieces a large text is counted in. Small pieces bound the cost of
/// pathological input: tiktoken's pre-tokenizer is super-linear on very long runs without
/// whitespace (or of whitespace), and fails outright on a run of about a megabyte of spaces.
pub const CHUNK_BYTES: usize = 8 * 1024;

/// Texts at least this long (in bytes) are counted on several threads.
pub const PARALLEL_TEXT_BYTES: usize = 1024 * 1024;

/// The most threads one text is counted on.
pub const MAX_COUNT_THREADS: usize = 4;

/// Estimated tokens of an opaque block from its JSON: `min(json_len / 4, 1_600)`. Small opaque
/// blocks (a thinking block, a short document reference) are roughly text at ~4 bytes per token;
/// big ones are images or files, capped at [`OPAQUE_BLOCK_MAX_TOKENS`].
pub fn estimate_opaque(json: &str) -> u64 {
    (json.len() as u64 / 4).min(OPAQUE_BLOCK_MAX_TOKENS)
}

/// The characters per token `chars_per_token:<N>` may state: far around any real tokenizer
/// (2 to 5), and narrow enough that the largest text tamp reads counts to a number of tokens
/// that fits its counters. 1e-300 made a count wrap to 0.
pub const CHARS_PER_TOKEN: std::ops::RangeInclusive<f64> = 0.01..=1000.0;

/// A tokenizer. Written in config files as `o200k_base`, `cl100k_base` or
/// `chars_per_token:<N>` (`chars/<N>` is accepted as a short form).
#[derive(Clone, Debug, PartialEq)]
pub enum Encoding {
    /// GPT-4o, GPT-4.1, o-series, GPT-5.
    O200kBase,
    /// GPT-4, GPT-3.5.
    Cl100kBase,
    /// `ceil(chars / N)`: a stated estimate where the model's tokenizer is unknown.
    CharsPerToken(f64),
}

impl fmt::Display for Encoding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Encoding::O200kBase => f.write_str("o200k_base"),
            Encoding::Cl100kBase => f.write_str("cl100k_base"),
            Encoding::CharsPerToken(n) => write!(f, "chars_per_token:{n}"),
        }
    }
}

impl FromStr for Encoding {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let s = s.trim();
        match s {
            "o200k_base" => return Ok(Encoding::O200kBase),
            "cl100k_base" => return Ok(Encoding::Cl100kBase),
            _ => {}
        }
        let ratio = s
            .strip_prefix("chars_per_token:")
            .or_else(|| s.strip_prefix("chars/"));
        let Some(ratio) = ratio else {
            return Err(format!(
                "unknown token encoding `{s}`: expected o200k_base, cl100k_base or \
                 chars_per_token:<N> (e.g. chars_per_token:4)"
            ));
        };
        let Ok(n) = ratio.trim().parse::<f64>() else {
            return Err(format!(
                "token encoding `{s}`: the characters per token must be a number, e.g. \
                 chars_per_token:4"
            ));
        };
        check_chars_per_token(n).map(Encoding::CharsPerToken)
    }
}

/// `n` as a characters-per-token ratio, within [`CHARS_PER_TOKEN`]; the error names the range.
fn check_chars_per_token(n: f64) -> Result<f64, String> {
    crate::bounded::scale(n, CHARS_PER_TOKEN)
        .map_err(|e| format!("token encoding chars_per_token:{n:?}: the characters per token {e}"))
}

impl Serialize for Encoding {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Encoding {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let s = <std::borrow::Cow<'de, str>>::deserialize(deserializer)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

impl schemars::JsonSchema for Encoding {
    fn schema_name() -> String {
        "TokenEncoding".to_owned()
    }

    fn json_schema(gen: &mut schemars::gen::SchemaGenerator) -> schemars::schema::Schema {
        let mut schema = <String as schemars::JsonSchema>::json_schema(gen).into_object();
        schema.metadata().description = Some(
            "The chain's tokenizer: o200k_base, cl100k_base, or chars_per_token:<N> for a \
             stated characters-per-token estimate."
                .to_owned(),
        );
        schema.metadata().examples = vec![
            serde_json::json!("o200k_base"),
            serde_json::json!("cl100k_base"),
            serde_json::json!("chars_per_token:4"),
        ];
        schema.string().pattern = Some(
            r"^\s*(o200k_base|cl100k_base|(chars_per_token:|chars/)\s*[0-9]*\.?[0-9]+([eE][-+]?[0-9]+)?)\s*$"
                .to_owned(),
        );
        schema.into()
    }
}

/// Each BPE vocabulary, built at most once per process.
fn bpe(encoding: &Encoding) -> Result<Option<&'static CoreBPE>, String> {
    static O200K: OnceLock<Result<CoreBPE, String>> = OnceLock::new();
    static CL100K: OnceLock<Result<CoreBPE, String>> = OnceLock::new();
    let (cell, build): (_, fn() -> anyhow::Result<CoreBPE>) = match encoding {
        Encoding::O200kBase => (&O200K, tiktoken_rs::o200k_base),
        Encoding::Cl100kBase => (&CL100K, tiktoken_rs::cl100k_base),
        Encoding::CharsPerToken(_) => return Ok(None),
    };
    match cell.get_or_init(|| build().map_err(|e| e.to_string())) {
        Ok(bpe) => Ok(Some(bpe)),
        Err(e) => Err(format!("cannot load the {encoding} vocabulary: {e}")),
    }
}

const MEMO_SHARDS: usize = 16;
/// Entries per shard before the shard is cleared: at most 16 × 8,192 = 131,072 messages
/// remembered, a few megabytes.
const MEMO_SHARD_CAPACITY: usize = 8_192;

/// Counts of messages already counted, by a 128-bit hash of the message ([`message_hash`]).
///
/// A hash collision would return another message's count; with 128 bits and at most 131,072
/// entries the chance is below 1 in 10^33 per lookup (and the result is only a budget
/// estimate). The hash is not a secret-keyed one: someone who crafts two messages with the same
/// XXH3-128 can make one count as the other, which misstates a budget, nothing more.
struct Memo {
    shards: [Mutex<MemoShard>; MEMO_SHARDS],
}

/// The keys are hashes already: the map uses their low bits as they are.
type MemoShard = HashMap<u128, u64, BuildHasherDefault<KeyBits>>;

#[derive(Default)]
struct KeyBits(u64);

impl Hasher for KeyBits {
    fn write(&mut self, bytes: &[u8]) {
        // Only `write_u128` is expected; anything else is folded in, never lost.
        for chunk in bytes.chunks(8) {
            let mut word = [0u8; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            self.0 = self.0.rotate_left(5) ^ u64::from_le_bytes(word);
        }
    }

    fn write_u128(&mut self, key: u128) {
        self.0 = key as u64;
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

impl Memo {
    fn new() -> Self {
        Memo {
            shards: std::array::from_fn(|_| Mutex::new(MemoShard::default())),
        }
    }

    fn shard(&self, key: u128) -> std::sync::MutexGuard<'_, MemoShard> {
        // The high bits pick the shard; the map uses the low ones.
        let index = (key >> 124) as usize % MEMO_SHARDS;
        self.shards[index]
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    fn get(&self, key: u128) -> Option<u64> {
        self.shard(key).get(&key).copied()
    }

    fn insert(&self, key: u128, count: u64) {
        let mut shard = self.shard(key);
        if shard.len() >= MEMO_SHARD_CAPACITY {
            shard.clear();
        }
        shard.insert(key, count);
    }

    fn len(&self) -> usize {
        self.shards
            .iter()
            .map(|s| s.lock().unwrap_or_else(PoisonError::into_inner).len())
            .sum()
    }
}

/// Counts tokens for the whole chain. `Send + Sync`; share it in an `Arc`.
pub struct TokenCounter {
    encoding: Encoding,
    bpe: Option<&'static CoreBPE>,
    memo: Memo,
}

impl fmt::Debug for TokenCounter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TokenCounter")
            .field("encoding", &self.encoding)
            .field("memoized_messages", &self.memo.len())
            .finish()
    }
}

impl TokenCounter {
    /// A counter for `encoding`. The first counter of a BPE encoding in a process builds its
    /// vocabulary (a few hundred milliseconds); later ones reuse it.
    pub fn new(encoding: Encoding) -> Result<Self, String> {
        if let Encoding::CharsPerToken(n) = encoding {
            check_chars_per_token(n)?;
        }
        let bpe = bpe(&encoding)?;
        Ok(TokenCounter {
            encoding,
            bpe,
            memo: Memo::new(),
        })
    }

    pub fn encoding(&self) -> &Encoding {
        &self.encoding
    }

    /// The most tokens [`Self::count_text`] can give per byte of text, whatever the text: 1
    /// for the BPE encodings (every token stands for at least one byte: BPE merges bytes and
    /// never splits one; the pieces of a large text and the panic fallback's 4 bytes per
    /// token keep that), `max(1, 1 / N)` for `chars_per_token:N` (a character is at least a
    /// byte; the count's rounding up adds less than one token per text).
    pub fn max_tokens_per_byte(&self) -> f64 {
        match self.encoding {
            Encoding::O200kBase | Encoding::Cl100kBase => 1.0,
            Encoding::CharsPerToken(n) => (1.0 / n).max(1.0),
        }
    }

    /// Tokens in `text`, as plain text (special-token markers such as `<|endoftext|>` count as
    /// the ordinary text they are).
    ///
    /// Texts above [`LARGE_TEXT_BYTES`] are split into pieces of at most [`CHUNK_BYTES`],
    /// cut just before a whitespace character where one is near the cut (else at a character
    /// boundary), and the pieces' counts are summed (texts above [`PARALLEL_TEXT_BYTES`] on a
    /// few threads). Cutting before whitespace keeps BPE pieces intact (a word's leading space
    /// belongs to the word), so for prose the sum is exact or within a few tokens; a cut inside
    /// a word, a number or a whitespace run can split one token into two, so the sum may exceed
    /// the exact count by about a token per piece: negligible for text, up to ~2% for
    /// megabytes of a single repeated character (whose tokens are long).
    pub fn count_text(&self, text: &str) -> u64 {
        match (self.bpe, &self.encoding) {
            (Some(bpe), _) => {
                if text.len() <= LARGE_TEXT_BYTES {
                    bpe_count(bpe, text)
                } else {
                    count_large(bpe, text)
                }
            }
            (None, Encoding::CharsPerToken(ratio)) => chars_per_token(text, *ratio),
            (None, _) => unreachable!("BPE encodings always have a vocabulary"),
        }
    }

    /// Tokens of one message: its content plus [`MESSAGE_OVERHEAD_TOKENS`]. Memoized.
    pub fn count_message(&self, message: &Message) -> u64 {
        let key = message_hash(message);
        if let Some(count) = self.memo.get(key) {
            return count;
        }
        let count = self.count_message_uncached(message);
        self.memo.insert(key, count);
        count
    }

    /// Tokens of messages as counted against a budget: the sum of [`Self::count_message`].
    pub fn count_messages(&self, messages: &[Message]) -> u64 {
        messages.iter().map(|m| self.count_message(m)).sum()
    }

    fn count_message_uncached(&self, message: &Message) -> u64 {
        let mut content = 0;
        for_each_counted_piece(message, |how, text| {
            content += match how {
                Counted::Text => self.count_text(text),
                Counted::Opaque => estimate_opaque(text),
            };
        });
        MESSAGE_OVERHEAD_TOKENS + content
    }

    #[cfg(test)]
    fn memo_len(&self) -> usize {
        self.memo.len()
    }
}

/// Calls `f` on each piece of a message its count is made of, in order: the texts of its
/// blocks (a tool call's name and input, a result's text parts) and its opaque JSON, each with
/// how it is counted. The count and the memo key both read a message through this, so the key
/// covers exactly what the count depends on. (A visitor, not an iterator: the key is computed
/// for every message of every compaction, and this allocates nothing.)
fn for_each_counted_piece<'a>(message: &'a Message, mut f: impl FnMut(Counted, &'a str)) {
    for block in message.content.iter() {
        match block {
            ContentBlock::Text { text, .. } => f(Counted::Text, text),
            ContentBlock::ToolUse {
                name, input_json, ..
            } => {
                f(Counted::Text, name);
                f(Counted::Text, input_json);
            }
            ContentBlock::ToolResult { content, .. } => {
                for part in content.iter() {
                    match part {
                        ToolResultPart::Text { text } => f(Counted::Text, text),
                        ToolResultPart::Opaque { json } => f(Counted::Opaque, json),
                    }
                }
            }
            ContentBlock::Opaque { json } => f(Counted::Opaque, json),
        }
    }
}

/// The memo key of a message: XXH3-128 over its counted pieces ([`for_each_counted_piece`];
/// not its role, ids or extra fields), unseeded, so the same message hashes the same in every
/// counter and run. This runs for every message of every compaction, so it is kept to one-shot
/// hashes: each text is hashed in one call, and the pieces are chained in order, the key so
/// far with the next piece's kind and hash making the next key (a streaming hasher's state
/// alone, set up per message, cost about as much as hashing a short text).
fn message_hash(message: &Message) -> u128 {
    let mut key = 0u128;
    for_each_counted_piece(message, |how, text| {
        let mut link = [0u8; 33];
        link[..16].copy_from_slice(&key.to_le_bytes());
        link[16] = how as u8;
        link[17..].copy_from_slice(&xxhash_rust::xxh3::xxh3_128(text.as_bytes()).to_le_bytes());
        key = xxhash_rust::xxh3::xxh3_128(&link);
    });
    key
}

/// How a piece of a message is counted: BPE for text, [`estimate_opaque`] for opaque JSON.
/// Part of the memo key.
#[derive(Clone, Copy)]
enum Counted {
    Text = 1,
    Opaque = 2,
}

fn chars_per_token(text: &str, ratio: f64) -> u64 {
    let chars = text.chars().count();
    if chars == 0 {
        0
    } else {
        (chars as f64 / ratio).ceil() as u64
    }
}

fn bpe_count(bpe: &CoreBPE, text: &str) -> u64 {
    // tiktoken panics when its pre-tokenizer regex gives up (e.g. on a megabyte-long run of
    // spaces). Pieces are small enough that this is not expected; should it happen anyway, the
    // piece is estimated at 4 bytes per token rather than taking the host down.
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| bpe.encode_ordinary(text))) {
        Ok(tokens) => tokens.len() as u64,
        Err(_) => {
            tracing::warn!(
                bytes = text.len(),
                "token counter: the tokenizer failed on a text; estimating it at 4 bytes per token"
            );
            (text.len() as u64).div_ceil(4)
        }
    }
}

/// Counts a text above [`LARGE_TEXT_BYTES`] piece by piece; texts above
/// [`PARALLEL_TEXT_BYTES`] on up to [`MAX_COUNT_THREADS`] threads.
fn count_large(bpe: &CoreBPE, text: &str) -> u64 {
    let pieces: Vec<&str> = split_for_counting(text, CHUNK_BYTES).collect();
    let count = |group: &[&str]| -> u64 { group.iter().map(|p| bpe_count(bpe, p)).sum() };
    let threads = if text.len() >= PARALLEL_TEXT_BYTES {
        std::thread::available_parallelism()
            .map_or(1, |n| n.get())
            .min(MAX_COUNT_THREADS)
    } else {
        1
    };
    if threads <= 1 {
        return count(&pieces);
    }
    let per_thread = pieces.len().div_ceil(threads);
    std::thread::scope(|scope| {
        let mut groups = pieces.chunks(per_thread);
        let mine = groups.next().unwrap_or_default();
        let spawned: Vec<_> = groups
            .map(|group| {
                let handle = std::thread::Builder::new()
                    .name("tamp-token-count".to_owned())
                    .spawn_scoped(scope, move || count(group));
                (group, handle)
            })
            .collect();
        let mut total = count(mine);
        for (group, handle) in spawned {
            // A thread that could not start (or died) leaves its share to this one.
            total += match handle.map(|h| h.join()) {
                Ok(Ok(n)) => n,
                _ => count(group),
            };
        }
        total
    })
}

/// Consecutive pieces of `text`, each at most `max_bytes` long (at least 4, so that any
/// character fits), that concatenate to `text`. A piece ends just before the last whitespace
/// character in its final quarter when there is one, else at the last character boundary.
pub(crate) fn split_for_counting(text: &str, max_bytes: usize) -> impl Iterator<Item = &str> {
    let max_bytes = max_bytes.max(4);
    let mut rest = text;
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        if rest.len() <= max_bytes {
            return Some(std::mem::take(&mut rest));
        }
        let mut end = max_bytes;
        while !rest.is_char_boundary(end) {
            end -= 1;
        }
        let mut window = end.saturating_sub(max_bytes / 4);
        while !rest.is_char_boundary(window) {
            window += 1;
        }
        if let Some(pos) = rest[window..end].rfind(char::is_whitespace) {
            if window + pos > 0 {
                end = window + pos;
            }
        }
        let (piece, tail) = rest.split_at(end);
        rest = tail;
        Some(piece)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::time::{Duration, Instant};
    use tamp_plugin_api::{ContentBlock, Role, ToolResultPart};

    fn o200k() -> TokenCounter {
        TokenCounter::new(Encoding::O200kBase).unwrap()
    }

    fn cl100k() -> TokenCounter {
        TokenCounter::new(Encoding::Cl100kBase).unwrap()
    }

    #[test]
    fn known_counts_o200k_base() {
        let c = o200k();
        assert_eq!(c.count_text(""), 0);
        assert_eq!(c.count_text("hello world"), 2);
        assert_eq!(c.count_text("Hello, world!"), 4);
        assert_eq!(
            c.count_text("The quick brown fox jumps over the lazy dog."),
            10
        );
        assert_eq!(c.count_text("👋🌍"), 4);
        assert_eq!(c.count_text("مرحبا بالعالم"), 4);
    }

    #[test]
    fn known_counts_cl100k_base() {
        let c = cl100k();
        assert_eq!(c.count_text(""), 0);
        assert_eq!(c.count_text("hello world"), 2);
        assert_eq!(c.count_text("Hello, world!"), 4);
        assert_eq!(
            c.count_text("The quick brown fox jumps over the lazy dog."),
            10
        );
        assert_eq!(c.count_text("👋🌍"), 6);
        assert_eq!(c.count_text("مرحبا بالعالم"), 10);
    }

    #[test]
    fn special_token_markers_count_as_text() {
        let c = cl100k();
        assert!(c.count_text("<|endoftext|>") > 1);
    }

    #[test]
    fn unicode_counts_are_positive() {
        for c in [
            o200k(),
            cl100k(),
            TokenCounter::new(Encoding::CharsPerToken(4.0)).unwrap(),
        ] {
            for text in [
                "😀",
                "👨‍👩‍👧‍👦",
                "שלום עולם",
                "مرحبا",
                "e\u{301}",
                "\u{301}\u{302}\u{303}",
                "Z̤͔ͧ̑̓ä͖̭̈̇lͮ̒ͫǧ̗͚̚o̙̔ͮ̇͐̇",
                "日本語のテキスト",
                "\u{200f}\u{202e}",
            ] {
                assert!(
                    c.count_text(text) > 0,
                    "{} counts {text:?} as 0",
                    c.encoding()
                );
            }
        }
    }

    #[test]
    fn chars_per_token_arithmetic() {
        let c = TokenCounter::new(Encoding::CharsPerToken(4.0)).unwrap();
        assert_eq!(c.count_text(""), 0);
        assert_eq!(c.count_text("a"), 1);
        assert_eq!(c.count_text("abcd"), 1);
        assert_eq!(c.count_text("abcde"), 2);
        assert_eq!(c.count_text(&"x".repeat(400)), 100);
        // Characters, not bytes: four 4-byte emoji are one token.
        assert_eq!(c.count_text("😀😀😀😀"), 1);
        let c = TokenCounter::new(Encoding::CharsPerToken(3.5)).unwrap();
        assert_eq!(c.count_text(&"x".repeat(7)), 2);
        assert_eq!(c.count_text(&"x".repeat(8)), 3);
        let m = Message::text(Role::User, "abcdefgh");
        assert_eq!(c.count_message(&m), 3 + MESSAGE_OVERHEAD_TOKENS);
    }

    #[test]
    fn encoding_parses_displays_and_serializes() {
        for (text, encoding) in [
            ("o200k_base", Encoding::O200kBase),
            ("cl100k_base", Encoding::Cl100kBase),
            ("chars_per_token:4", Encoding::CharsPerToken(4.0)),
            ("chars_per_token:3.5", Encoding::CharsPerToken(3.5)),
        ] {
            let parsed: Encoding = text.parse().unwrap();
            assert_eq!(parsed, encoding);
            assert_eq!(parsed.to_string(), text);
            let json = serde_json::to_string(&parsed).unwrap();
            assert_eq!(json, format!("\"{text}\""));
            let back: Encoding = serde_json::from_str(&json).unwrap();
            assert_eq!(back, encoding);
        }
        assert_eq!(
            "chars/4".parse::<Encoding>().unwrap(),
            Encoding::CharsPerToken(4.0)
        );
        for bad in [
            "",
            "gpt2",
            "chars_per_token:",
            "chars_per_token:0",
            "chars_per_token:-1",
            "chars/nan",
            "chars/inf",
            "chars_per_token:1e-300",
            "chars_per_token:1e-16",
            "chars_per_token:1e300",
        ] {
            let err = bad.parse::<Encoding>().unwrap_err();
            assert!(err.contains("token encoding"), "{bad}: {err}");
        }
        assert!(serde_json::from_str::<Encoding>("\"p50k\"").is_err());
        assert_eq!(
            "chars_per_token:1e-300".parse::<Encoding>().unwrap_err(),
            "token encoding chars_per_token:1e-300: the characters per token must be a number \
             from 0.01 to 1000, got 1e-300"
        );
        assert!(TokenCounter::new(Encoding::CharsPerToken(1e-300)).is_err());
        assert!(TokenCounter::new(Encoding::CharsPerToken(0.0)).is_err());
        assert!(TokenCounter::new(Encoding::CharsPerToken(f64::NAN)).is_err());
    }

    #[test]
    fn encoding_schema_is_a_string() {
        let schema = schemars::schema_for!(Encoding);
        let json = serde_json::to_value(&schema).unwrap();
        assert_eq!(json["type"], "string");
        let pattern = json["pattern"].as_str().unwrap();
        assert!(pattern.contains("o200k_base"));
    }

    #[test]
    fn opaque_blocks_are_estimated_not_tokenized() {
        assert_eq!(estimate_opaque(""), 0);
        assert_eq!(estimate_opaque(&"x".repeat(400)), 100);
        assert_eq!(estimate_opaque(&"x".repeat(4 * 1_600)), 1_600);
        assert_eq!(
            estimate_opaque(&"x".repeat(3_000_000)),
            OPAQUE_BLOCK_MAX_TOKENS
        );

        let c = o200k();
        let image = format!(
            r#"{{"type":"image","source":{{"type":"base64","data":"{}"}}}}"#,
            "iVBORw0KGgo".repeat(300_000)
        );
        let m = Message::new(
            Role::User,
            vec![ContentBlock::Opaque {
                json: image.as_str().into(),
            }],
        );
        assert_eq!(c.count_message(&m), MESSAGE_OVERHEAD_TOKENS + 1_600);
        let small = r#"{"type":"thinking","thinking":"abc"}"#;
        let m = Message::new(
            Role::Assistant,
            vec![ContentBlock::Opaque { json: small.into() }],
        );
        assert_eq!(
            c.count_message(&m),
            MESSAGE_OVERHEAD_TOKENS + small.len() as u64 / 4
        );
    }

    #[test]
    fn message_counts_content_and_overhead() {
        let c = o200k();
        assert_eq!(
            c.count_message(&Message::text(Role::User, "hello world")),
            2 + MESSAGE_OVERHEAD_TOKENS
        );
        assert_eq!(
            c.count_message(&Message::new(Role::User, vec![])),
            MESSAGE_OVERHEAD_TOKENS
        );
        let tool_use = Message::new(
            Role::Assistant,
            vec![
                ContentBlock::text("hello world"),
                ContentBlock::ToolUse {
                    id: "toolu_01XYZ_not_counted".into(),
                    name: "read_file".into(),
                    input_json: r#"{"path":"/etc/hosts"}"#.into(),
                    extra_json: r#"{"cache_control":{"type":"ephemeral"}}"#.into(),
                },
            ],
        );
        assert_eq!(
            c.count_message(&tool_use),
            MESSAGE_OVERHEAD_TOKENS
                + 2
                + c.count_text("read_file")
                + c.count_text(r#"{"path":"/etc/hosts"}"#)
        );
        let opaque = r#"{"type":"image","data":"AAAAAAAA"}"#;
        let tool_result = Message::new(
            Role::User,
            vec![ContentBlock::ToolResult {
                tool_use_id: "toolu_1".into(),
                content: vec![
                    ToolResultPart::Text {
                        text: "hello world".into(),
                    },
                    ToolResultPart::Opaque {
                        json: opaque.into(),
                    },
                ]
                .into(),
                is_error: false,
                extra_json: Default::default(),
            }],
        );
        assert_eq!(
            c.count_message(&tool_result),
            MESSAGE_OVERHEAD_TOKENS + 2 + estimate_opaque(opaque)
        );
        let summary = tamp_plugin_api::sdk::summary_message(
            "hello world",
            "pg_0123",
            "anchored-structured",
            tamp_plugin_api::SummaryStatus::Final,
        );
        assert_eq!(
            c.count_message(&summary),
            MESSAGE_OVERHEAD_TOKENS + c.count_text(&summary.joined_text())
        );
        let all = [tool_use.clone(), tool_result.clone()];
        assert_eq!(
            c.count_messages(&all),
            c.count_message(&tool_use) + c.count_message(&tool_result)
        );
        assert_eq!(c.count_messages(&[]), 0);
    }

    #[test]
    fn memo_gives_the_same_answer() {
        let c = o200k();
        let messages: Vec<Message> = (0..1_000)
            .map(|i| Message::text(Role::User, format!("message number {i}: some words here")))
            .collect();
        let first = c.count_messages(&messages);
        assert_eq!(c.memo_len(), 1_000);
        let second = c.count_messages(&messages);
        assert_eq!(first, second);
        assert_eq!(c.memo_len(), 1_000);
        let uncached: u64 = messages.iter().map(|m| c.count_message_uncached(m)).sum();
        assert_eq!(first, uncached);
        // A changed message is a different key, not a stale hit.
        let mut changed = messages[0].clone();
        changed.content = vec![ContentBlock::text("message number 0: some words here!")].into();
        assert_eq!(
            c.count_message(&changed),
            c.count_message_uncached(&changed)
        );
    }

    #[test]
    fn the_memo_key_tells_pieces_their_order_and_kind_apart() {
        let texts = |pieces: &[&str]| {
            Message::new(
                Role::Assistant,
                pieces.iter().map(|t| ContentBlock::text(*t)).collect(),
            )
        };
        let keys = [
            message_hash(&texts(&["ab", "c"])),
            message_hash(&texts(&["a", "bc"])),
            message_hash(&texts(&["bc", "a"])),
            message_hash(&texts(&["abc"])),
            message_hash(&Message::new(
                Role::Assistant,
                vec![ContentBlock::Opaque { json: "abc".into() }],
            )),
        ];
        for (i, a) in keys.iter().enumerate() {
            for b in &keys[i + 1..] {
                assert_ne!(a, b);
            }
        }
        // Not the role: the count does not depend on it.
        assert_eq!(
            message_hash(&Message::text(Role::User, "abc")),
            message_hash(&texts(&["abc"]))
        );
    }

    #[test]
    fn memo_is_bounded() {
        let c = TokenCounter::new(Encoding::CharsPerToken(4.0)).unwrap();
        for i in 0..(MEMO_SHARDS * MEMO_SHARD_CAPACITY + 5_000) {
            c.count_message(&Message::text(Role::User, i.to_string()));
        }
        assert!(c.memo_len() <= MEMO_SHARDS * MEMO_SHARD_CAPACITY);
    }

    #[test]
    fn counter_is_shareable_across_threads() {
        fn assert_send_sync<T: Send + Sync>() {}
        assert_send_sync::<TokenCounter>();
        let c = Arc::new(o200k());
        let message = Message::text(Role::User, "hello world");
        let handles: Vec<_> = (0..8)
            .map(|_| {
                let c = Arc::clone(&c);
                let m = message.clone();
                std::thread::spawn(move || c.count_message(&m))
            })
            .collect();
        for h in handles {
            assert_eq!(h.join().unwrap(), 2 + MESSAGE_OVERHEAD_TOKENS);
        }
    }

    #[test]
    fn split_for_counting_pieces() {
        let pieces: Vec<&str> = split_for_counting("", 8).collect();
        assert!(pieces.is_empty());

        // Cuts land just before whitespace.
        let text = "aaaa bbbb cccc dddd";
        let pieces: Vec<&str> = split_for_counting(text, 12).collect();
        assert_eq!(pieces, vec!["aaaa bbbb", " cccc dddd"]);

        // No whitespace: cut at character boundaries, never inside a character.
        let text = "😀".repeat(10) + &"é".repeat(7);
        for max in [4, 5, 6, 7, 9, 13] {
            let pieces: Vec<&str> = split_for_counting(&text, max).collect();
            assert_eq!(pieces.concat(), text);
            assert!(pieces.iter().all(|p| !p.is_empty() && p.len() <= max));
        }

        // A whitespace run.
        let text = " ".repeat(100);
        let pieces: Vec<&str> = split_for_counting(&text, 16).collect();
        assert_eq!(pieces.concat(), text);
        assert!(pieces.iter().all(|p| !p.is_empty() && p.len() <= 16));

        // Whitespace outside the last quarter is ignored: the cut is at the limit.
        let text = format!("a {}", "b".repeat(30));
        let pieces: Vec<&str> = split_for_counting(&text, 16).collect();
        assert_eq!(pieces[0].len(), 16);
    }

    #[test]
    fn chunked_count_is_close_to_exact() {
        let c = o200k();
        let bpe = c.bpe.unwrap();
        let text = "The quick brown fox jumps over the lazy dog. ".repeat(5_000);
        assert!(text.len() > LARGE_TEXT_BYTES);
        let chunked = c.count_text(&text);
        let exact = bpe.encode_ordinary(&text).len() as u64;
        assert_eq!(chunked, exact, "cuts before spaces keep words whole");

        let no_spaces = "abcdefghij0123456789".repeat(12_000);
        let chunked = c.count_text(&no_spaces);
        let exact = bpe.encode_ordinary(&no_spaces).len() as u64;
        let pieces = split_for_counting(&no_spaces, CHUNK_BYTES).count() as u64;
        assert!(
            chunked >= exact && chunked <= exact + 2 * pieces,
            "{chunked} vs {exact}"
        );
    }

    /// 5 MB texts of the tokenizer's worst cases (no whitespace, or only whitespace). Each
    /// takes about a second or less in a release build, but tens of seconds unoptimized, so
    /// this runs on request: `cargo test --release -p tamp-host --lib tokens -- --ignored`.
    #[test]
    #[ignore = "slow without optimizations; run with --release -- --ignored"]
    fn five_megabyte_pathological_texts_count_quickly() {
        let c = o200k();
        let n = 5 * 1024 * 1024;
        for text in [
            "a".repeat(n),
            " ".repeat(n),
            "\n".repeat(n),
            "Zm9vYmFy".repeat(n / 8),
            "1234567890".repeat(n / 10),
        ] {
            let started = Instant::now();
            let count = c.count_text(&text);
            let took = started.elapsed();
            assert!(count > 0);
            assert!(took < Duration::from_secs(5), "took {took:?}");
        }
    }

    /// About a megabyte of spaces in one call makes tiktoken's pre-tokenizer give up (it
    /// panics); counted in pieces it works and the count is the real one, not the fallback.
    #[test]
    fn long_whitespace_run_is_counted_in_pieces() {
        let c = o200k();
        let text = " ".repeat(1_100_000);
        let count = c.count_text(&text);
        // o200k has tokens of up to 128 spaces; the 4-bytes-per-token fallback would be 275,000.
        assert!(count > 0 && count < 20_000, "{count}");
    }

    #[test]
    fn five_megabyte_message_counts() {
        let c = cl100k();
        let text: String = "lorem ipsum dolor sit amet, consectetur adipiscing elit\n"
            .repeat(5 * 1024 * 1024 / 56);
        let m = Message::text(Role::User, text);
        let started = Instant::now();
        let n = c.count_message(&m);
        assert!(n > 500_000, "{n}");
        assert!(started.elapsed() < Duration::from_secs(60));
        // The second count is a memo hit.
        let started = Instant::now();
        assert_eq!(c.count_message(&m), n);
        assert!(started.elapsed() < Duration::from_secs(2));
    }
}
