//! Cutting long material into chunks an LLM call can take, and packing summaries into groups
//! for a reduce step. Shared by every strategy that summarizes more than fits in one call.
//!
//! # Chunking
//!
//! [`chunk_pieces`] (or [`chunk_text`] for one text) cuts material into chunks of at most
//! [`ChunkOptions::chunk_size`] tokens, each repeating about [`ChunkOptions::chunk_overlap`]
//! tokens from the end of the one before it so no passage loses the context it started in.
//! Tokens are counted by a function the caller supplies (`&|t: &str| host.count_tokens(t)`),
//! so chunks agree with the chain's one tokenizer.
//!
//! Where it cuts, in order of preference:
//!
//! 1. between the caller's **pieces** (say, one rendered message or tool exchange each): a piece
//!    that fits in a chunk is never cut;
//! 2. between **paragraphs** (blank lines);
//! 3. between **sentences** (`.` `!` `?` `…`, maybe followed by a closing quote or bracket, then
//!    whitespace; `。` `！` `？`);
//! 4. between **lines** (code and logs have lines but rarely sentences);
//! 5. between **words** (whitespace);
//! 6. between **characters**, for a run with none of the above (a minified file, base64).
//!
//! A piece too big for a chunk is cut at the first of levels 2–6 that has a boundary in it, and
//! each part that is still too big is cut at the next level, and so on. The separators (blank
//! lines, spaces) stay at the start of the part they precede, so appending text never changes
//! the parts before it.
//!
//! # Prefix stability
//!
//! Chunks are packed greedily from the start, and a chunk's extent depends only on the
//! material in it and on the part that follows it not fitting. Two rules make that hold:
//! a part that does not fit the rest of the current chunk starts a new chunk (it is not cut
//! to fill the gap), and a piece too big for any chunk always starts a new chunk. So if text
//! `B` starts with text `A`, every chunk of `A` except the last is also a chunk of `B`, with
//! the same text. A strategy that sends one request per chunk then sends the same requests
//! for the unchanged older part of a growing conversation (ARCHITECTURE invariant 5), which a
//! response cache keyed by the request turns into savings. The price is some room left unused
//! in the chunk before a big piece.
//!
//! # Token counts
//!
//! A chunk's count is the sum of its parts' counts. For BPE tokenizers, whose pre-tokenizer
//! splits at whitespace anyway, that is the count of the joined text or slightly above it, so a
//! chunk never exceeds `chunk_size` by the caller's own tokenizer. Counts are assumed to grow
//! with the text (a longer prefix never counts fewer tokens), which the searches for the
//! longest fitting prefix and suffix rely on.

use std::ops::Range;

/// How [`chunk_pieces`] sizes chunks, in tokens.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChunkOptions {
    /// The most tokens in a chunk, the repeated overlap included.
    pub chunk_size: u64,
    /// The most tokens a chunk repeats from the end of the previous one (0: no overlap).
    /// Must be at most half of `chunk_size`, so every chunk is at least half new material.
    pub chunk_overlap: u64,
}

impl ChunkOptions {
    /// The room every chunk has for new material whatever its overlap: a piece fits in a
    /// chunk when it has at most this many tokens.
    pub fn content_budget(&self) -> u64 {
        self.chunk_size.saturating_sub(self.chunk_overlap).max(1)
    }

    /// Checks the options' own rules; the error names the field.
    pub fn validate(&self) -> Result<(), String> {
        if self.chunk_size == 0 {
            return Err("chunk_size: must be at least 1".into());
        }
        if self.chunk_overlap > self.chunk_size / 2 {
            return Err(format!(
                "chunk_overlap: must be at most half of chunk_size ({} > {} / 2)",
                self.chunk_overlap, self.chunk_size
            ));
        }
        Ok(())
    }
}

/// One chunk of the document (the pieces joined, as given).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Chunk {
    /// The chunk's text: `document[range]`.
    pub text: String,
    /// Byte range of the chunk in the document, overlap included.
    pub range: Range<usize>,
    /// Where the chunk's new material starts. `range.start..new_start` repeats the end of the
    /// previous chunk; the new materials of all chunks, in order, make up the document.
    pub new_start: usize,
    /// Tokens of the whole chunk (overlap included): at most `chunk_size`, except by the
    /// whitespace at the document's ends (never a chunk of its own) or when a single
    /// character is bigger than the room for it.
    pub tokens: u64,
    /// Tokens of the overlap alone.
    pub overlap_tokens: u64,
}

impl Chunk {
    /// The part repeated from the previous chunk (empty for the first chunk).
    pub fn overlap(&self) -> &str {
        &self.text[..self.new_start - self.range.start]
    }

    /// The part no earlier chunk holds.
    pub fn new_text(&self) -> &str {
        &self.text[self.new_start - self.range.start..]
    }

    pub fn has_overlap(&self) -> bool {
        self.new_start > self.range.start
    }
}

/// Cuts one text into chunks; see the [module docs](self) for where and how.
pub fn chunk_text(
    text: &str,
    options: &ChunkOptions,
    count_tokens: &dyn Fn(&str) -> u64,
) -> Vec<Chunk> {
    chunk_pieces(&[text], options, count_tokens)
}

/// Cuts the document made of `pieces` (joined as they are, without separators) into chunks.
///
/// A piece of at most [`ChunkOptions::content_budget`] tokens is never cut, so give each unit
/// that reads badly in halves (a message, a tool call with its result) as one piece, with the
/// separator it needs (a trailing newline) included. See the [module docs](self).
pub fn chunk_pieces<S: AsRef<str>>(
    pieces: &[S],
    options: &ChunkOptions,
    count_tokens: &dyn Fn(&str) -> u64,
) -> Vec<Chunk> {
    let document: String = pieces.iter().map(AsRef::as_ref).collect();
    let budget = options.content_budget();
    let mut atoms = Vec::new();
    let mut offset = 0;
    for piece in pieces {
        let len = piece.as_ref().len();
        if len > 0 {
            atomize(
                &document,
                offset..offset + len,
                0,
                budget,
                count_tokens,
                false,
                &mut atoms,
            );
        }
        offset += len;
    }
    pack(&document, &atoms, options, count_tokens)
}

/// Consecutive groups of items (given by their token counts) of at most `limit` tokens each,
/// packed greedily from the first item, as index ranges covering every item in order. An item
/// bigger than `limit` is a group of its own. For a reduce step: summarize each group.
///
/// Anchored at the start like the chunks: the groups of a list's first items do not depend on
/// what follows them.
pub fn pack_by_tokens(tokens: &[u64], limit: u64) -> Vec<Range<usize>> {
    let mut groups = Vec::new();
    let mut start = 0;
    let mut sum = 0u64;
    for (i, &t) in tokens.iter().enumerate() {
        if i > start && sum.saturating_add(t) > limit {
            groups.push(start..i);
            start = i;
            sum = 0;
        }
        sum = sum.saturating_add(t);
    }
    if start < tokens.len() {
        groups.push(start..tokens.len());
    }
    groups
}

/// The length in bytes of the longest prefix of `text` with at most `budget` tokens, cut at a
/// character boundary (0 when not even the first character fits). For capping LLM output to a
/// token bound.
pub fn longest_prefix_within(text: &str, budget: u64, count_tokens: &dyn Fn(&str) -> u64) -> usize {
    if count_tokens(text) <= budget {
        return text.len();
    }
    prefix_fitting(text, budget, count_tokens)
}

/// Boundary kinds below the caller's pieces, coarsest first (characters come after the last).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Level {
    Paragraph,
    Sentence,
    Line,
    Word,
}

const LEVELS: [Level; 4] = [Level::Paragraph, Level::Sentence, Level::Line, Level::Word];

/// Where new parts start in `text` at `level`: byte offsets strictly inside the text,
/// ascending. Each offset is at the separator, which goes with the part after it.
///
/// Trailing whitespace may become a part of its own. It is not glued to the part before it:
/// in a text that grows, that whitespace belongs to the next part, and the part before it must
/// stay the same for the chunks to stay the same. [`pack`] keeps such parts from becoming
/// chunks of their own.
fn boundaries(text: &str, level: Level) -> Vec<usize> {
    let mut starts = match level {
        Level::Paragraph => paragraph_starts(text),
        Level::Sentence => sentence_starts(text),
        Level::Line => run_starts(text, |c| c == '\n'),
        Level::Word => run_starts(text, char::is_whitespace),
    };
    starts.retain(|&p| p > 0 && p < text.len());
    starts
}

/// The newline that ends each paragraph followed by a blank line.
fn paragraph_starts(text: &str) -> Vec<usize> {
    let bytes = text.as_bytes();
    let mut starts = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'\n' {
            let mut j = i + 1;
            while j < bytes.len() && matches!(bytes[j], b' ' | b'\t' | b'\r') {
                j += 1;
            }
            if j < bytes.len() && bytes[j] == b'\n' {
                starts.push(i);
                // The whole blank run is one separator.
                while j < bytes.len() && bytes[j].is_ascii_whitespace() {
                    j += 1;
                }
                i = j;
                continue;
            }
        }
        i += 1;
    }
    starts
}

/// The whitespace after each sentence end, and the position after each CJK full stop.
fn sentence_starts(text: &str) -> Vec<usize> {
    let mut starts = Vec::new();
    let mut after_terminal = false;
    for (i, c) in text.char_indices() {
        match c {
            c if c.is_whitespace() => {
                if after_terminal {
                    starts.push(i);
                }
                after_terminal = false;
            }
            '.' | '!' | '?' | '…' => after_terminal = true,
            // Closing quotes and brackets after a full stop still end the sentence.
            '"' | '\'' | ')' | ']' | '”' | '’' | '»' => {}
            '。' | '！' | '？' => {
                starts.push(i + c.len_utf8());
                after_terminal = false;
            }
            _ => after_terminal = false,
        }
    }
    starts
}

/// The start of each run of characters matching `separator`.
fn run_starts(text: &str, separator: impl Fn(char) -> bool) -> Vec<usize> {
    let mut starts = Vec::new();
    let mut in_run = false;
    for (i, c) in text.char_indices() {
        let sep = separator(c);
        if sep && !in_run {
            starts.push(i);
        }
        in_run = sep;
    }
    starts
}

/// A part no chunk boundary may fall inside.
struct Atom {
    range: Range<usize>,
    tokens: u64,
    /// The part begins a piece too big for a chunk, so it begins a chunk (prefix stability,
    /// see the module docs).
    fresh: bool,
}

/// Appends the atoms of `document[range]`, cutting it at `LEVELS[level..]` while too big.
fn atomize(
    document: &str,
    range: Range<usize>,
    level: usize,
    budget: u64,
    count_tokens: &dyn Fn(&str) -> u64,
    fresh: bool,
    out: &mut Vec<Atom>,
) {
    let text = &document[range.clone()];
    let tokens = count_tokens(text);
    if tokens <= budget {
        out.push(Atom {
            range,
            tokens,
            fresh,
        });
        return;
    }
    for (next, &kind) in LEVELS.iter().enumerate().skip(level) {
        let starts = boundaries(text, kind);
        if starts.is_empty() {
            continue;
        }
        let mut edges = Vec::with_capacity(starts.len() + 2);
        edges.push(0);
        edges.extend(starts);
        edges.push(text.len());
        for (k, edge) in edges.windows(2).enumerate() {
            let part = range.start + edge[0]..range.start + edge[1];
            atomize(document, part, next + 1, budget, count_tokens, k == 0, out);
        }
        return;
    }
    // No boundary of any kind: cut by characters, each part as long as fits.
    let mut start = 0;
    while start < text.len() {
        let rest = &text[start..];
        let mut len = prefix_fitting(rest, budget, count_tokens);
        if len == 0 {
            // Not even one character fits: take it anyway rather than loop forever.
            len = rest.chars().next().map_or(rest.len(), char::len_utf8);
        }
        out.push(Atom {
            range: range.start + start..range.start + start + len,
            tokens: count_tokens(&rest[..len]),
            fresh: start == 0,
        });
        start += len;
    }
}

/// Packs atoms greedily into chunks, each opening with the overlap from the previous one.
fn pack(
    document: &str,
    atoms: &[Atom],
    options: &ChunkOptions,
    count_tokens: &dyn Fn(&str) -> u64,
) -> Vec<Chunk> {
    struct Open {
        start: usize,
        new_start: usize,
        end: usize,
        tokens: u64,
        overlap_tokens: u64,
        /// The new material so far is only whitespace (a document that starts with some).
        blank: bool,
    }
    let close = |open: Open| Chunk {
        text: document[open.start..open.end].to_string(),
        range: open.start..open.end,
        new_start: open.new_start,
        tokens: open.tokens,
        overlap_tokens: open.overlap_tokens,
    };
    let mut chunks: Vec<Chunk> = Vec::new();
    let mut open: Option<Open> = None;
    for atom in atoms {
        let whitespace = document[atom.range.clone()].trim().is_empty();
        if let Some(current) = open.as_mut() {
            // Whitespace alone is never worth a chunk (and a request) of its own: it goes with
            // the chunk before it, or the chunk after it at the very start, even past
            // `chunk_size`.
            let fits = current.tokens + atom.tokens <= options.chunk_size;
            if whitespace || current.blank || (!atom.fresh && fits) {
                current.end = atom.range.end;
                current.tokens += atom.tokens;
                current.blank &= whitespace;
                continue;
            }
        }
        if let Some(done) = open.take() {
            chunks.push(close(done));
        }
        let (start, overlap_tokens) = match chunks.last() {
            Some(previous) => overlap_start(
                document,
                previous.new_start..previous.range.end,
                options.chunk_overlap,
                count_tokens,
            ),
            None => (atom.range.start, 0),
        };
        open = Some(Open {
            start,
            new_start: atom.range.start,
            end: atom.range.end,
            tokens: overlap_tokens + atom.tokens,
            overlap_tokens,
            blank: whitespace,
        });
    }
    if let Some(done) = open {
        chunks.push(close(done));
    }
    chunks
}

/// Where the overlap taken from `document[region]` (the previous chunk's new material) starts,
/// and its tokens: the longest suffix within `budget` tokens that starts at a paragraph,
/// sentence or line when that gives at least half the budget, else at a word, else at any
/// character; leading whitespace dropped.
fn overlap_start(
    document: &str,
    region: Range<usize>,
    budget: u64,
    count_tokens: &dyn Fn(&str) -> u64,
) -> (usize, u64) {
    if budget == 0 || region.is_empty() {
        return (region.end, 0);
    }
    let text = &document[region.clone()];
    // A suffix of nothing but whitespace would be no overlap at all.
    let content_end = text.trim_end().len();
    let mut coarse = vec![0];
    for level in [Level::Paragraph, Level::Sentence, Level::Line] {
        coarse.extend(boundaries(text, level));
    }
    coarse.retain(|&p| p < content_end);
    coarse.sort_unstable();
    coarse.dedup();
    let start = match longest_suffix(text, &coarse, budget, count_tokens) {
        Some((s, tokens)) if tokens >= budget.div_ceil(2) => s,
        _ => {
            let mut words = coarse;
            words.extend(boundaries(text, Level::Word));
            words.retain(|&p| p < content_end);
            words.sort_unstable();
            words.dedup();
            match longest_suffix(text, &words, budget, count_tokens) {
                Some((s, _)) => s,
                None => suffix_fitting(text, budget, count_tokens),
            }
        }
    };
    let trimmed = text.len() - text[start..].trim_start().len();
    if trimmed >= text.len() {
        return (region.end, 0);
    }
    let start = region.start + trimmed;
    (start, count_tokens(&document[start..region.end]))
}

/// The earliest of `starts` (ascending) whose suffix of `text` has at most `budget` tokens,
/// with that count.
fn longest_suffix(
    text: &str,
    starts: &[usize],
    budget: u64,
    count_tokens: &dyn Fn(&str) -> u64,
) -> Option<(usize, u64)> {
    // Fitting is monotone in the start: find the first index that fits.
    let (mut lo, mut hi) = (0, starts.len());
    let mut found = None;
    while lo < hi {
        let mid = (lo + hi) / 2;
        let tokens = count_tokens(&text[starts[mid]..]);
        if tokens <= budget {
            found = Some((starts[mid], tokens));
            hi = mid;
        } else {
            lo = mid + 1;
        }
    }
    found.filter(|(s, _)| *s < text.len())
}

/// The longest prefix of `text` within `budget` tokens, in bytes; `text` as a whole is known
/// not to fit (or is not checked). Searches outwards from a guess so a long text is not
/// counted whole again and again.
fn prefix_fitting(text: &str, budget: u64, count_tokens: &dyn Fn(&str) -> u64) -> usize {
    let ends: Vec<usize> = text.char_indices().map(|(i, c)| i + c.len_utf8()).collect();
    let fits = |chars: usize| chars == 0 || count_tokens(&text[..ends[chars - 1]]) <= budget;
    search_longest(ends.len(), budget, fits)
        .checked_sub(1)
        .map_or(0, |k| ends[k])
}

/// The start of the longest suffix of `text` within `budget` tokens, at a character boundary.
fn suffix_fitting(text: &str, budget: u64, count_tokens: &dyn Fn(&str) -> u64) -> usize {
    let starts: Vec<usize> = text.char_indices().map(|(i, _)| i).collect();
    let n = starts.len();
    let fits = |chars: usize| chars == 0 || count_tokens(&text[starts[n - chars]..]) <= budget;
    match search_longest(n, budget, fits) {
        0 => text.len(),
        chars => starts[n - chars],
    }
}

/// The largest `k` in `0..=n` with `fits(k)`, for a `fits` true up to some point and false
/// after it. Probes from about 4 characters per token upwards before bisecting.
fn search_longest(n: usize, budget: u64, fits: impl Fn(usize) -> bool) -> usize {
    let mut lo = 0;
    let guess = usize::try_from(budget.saturating_mul(4)).unwrap_or(usize::MAX);
    let mut hi = guess.max(16).min(n);
    while fits(hi) {
        if hi == n {
            return n;
        }
        lo = hi;
        hi = hi.saturating_mul(2).min(n);
    }
    // fits(lo) and !fits(hi).
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        if fits(mid) {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    lo
}

#[cfg(test)]
mod tests {
    use super::*;

    /// ⌈chars / 4⌉: a stand-in tokenizer whose count of a joined text is at most the sum of
    /// its parts' counts, like a BPE tokenizer's.
    fn quarter(text: &str) -> u64 {
        text.chars().count().div_ceil(4) as u64
    }

    /// One token per whitespace-separated word.
    fn words(text: &str) -> u64 {
        text.split_whitespace().count() as u64
    }

    fn options(chunk_size: u64, chunk_overlap: u64) -> ChunkOptions {
        ChunkOptions {
            chunk_size,
            chunk_overlap,
        }
    }

    /// What every chunking must satisfy: chunks within size, new materials making up the
    /// document in order, overlaps repeating the previous chunk's end.
    fn check_invariants(
        document: &str,
        chunks: &[Chunk],
        opts: &ChunkOptions,
        count: &dyn Fn(&str) -> u64,
    ) {
        let mut rebuilt = String::new();
        for (i, c) in chunks.iter().enumerate() {
            assert_eq!(c.text, document[c.range.clone()], "chunk {i}");
            // Only trailing whitespace may go past the size.
            let trailing = &c.text[c.text.trim_end().len()..];
            assert!(
                c.tokens <= opts.chunk_size + count(trailing),
                "chunk {i}: {} tokens",
                c.tokens
            );
            assert!(!c.new_text().trim().is_empty(), "chunk {i} is whitespace");
            assert!(count(&c.text) <= c.tokens, "chunk {i}: count above the sum");
            assert!(c.overlap_tokens <= opts.chunk_overlap, "chunk {i}");
            assert!(!c.new_text().is_empty(), "chunk {i} has no new material");
            rebuilt.push_str(c.new_text());
            if i > 0 {
                let previous = &chunks[i - 1];
                assert_eq!(
                    c.new_start, previous.range.end,
                    "chunk {i} is not contiguous"
                );
                assert!(
                    previous.new_text().ends_with(c.overlap()),
                    "chunk {i}'s overlap is not the end of the previous chunk"
                );
            }
        }
        assert_eq!(rebuilt, document);
    }

    fn paragraph(n: usize, sentences: usize) -> String {
        (0..sentences)
            .map(|s| format!("Paragraph {n} sentence {s} says something about item {s}."))
            .collect::<Vec<_>>()
            .join(" ")
    }

    #[test]
    fn cuts_between_paragraphs_when_they_fit() {
        let doc = (0..30)
            .map(|p| paragraph(p, 3))
            .collect::<Vec<_>>()
            .join("\n\n");
        let opts = options(200, 30);
        let chunks = chunk_text(&doc, &opts, &quarter);
        check_invariants(&doc, &chunks, &opts, &quarter);
        assert!(chunks.len() > 3);
        for c in &chunks {
            // New material starts at a paragraph (its separator) and ends where one ends.
            let new = c.new_text();
            assert!(c.new_start == 0 || new.starts_with("\n\n"), "{new:?}");
            assert!(new.ends_with('.'), "{new:?}");
        }
    }

    #[test]
    fn a_long_paragraph_is_cut_between_sentences() {
        let doc = paragraph(1, 80);
        let opts = options(120, 20);
        let chunks = chunk_text(&doc, &opts, &quarter);
        check_invariants(&doc, &chunks, &opts, &quarter);
        assert!(chunks.len() > 5);
        for c in &chunks {
            assert!(c.new_text().trim_end().ends_with('.'), "{:?}", c.new_text());
            assert!(
                c.new_start == 0 || c.new_text().starts_with(" Paragraph"),
                "{:?}",
                c.new_text()
            );
        }
    }

    #[test]
    fn a_30_kb_code_block_without_punctuation_is_cut_between_lines() {
        let mut code = String::new();
        let mut i = 0;
        while code.len() < 30 * 1024 {
            code.push_str(&format!(
                "    let value_{i} = compute value_{i} with input_{i}\n"
            ));
            i += 1;
        }
        let doc = format!("Here is the file\n\n{code}");
        let opts = options(512, 64);
        let chunks = chunk_text(&doc, &opts, &quarter);
        check_invariants(&doc, &chunks, &opts, &quarter);
        assert!(chunks.len() >= 15, "{}", chunks.len());
        for c in &chunks[1..] {
            // Cut at line starts: new material begins with the newline ending the line before.
            assert!(c.new_text().starts_with('\n'), "{:?}", &c.new_text()[..20]);
        }
        for c in &chunks[2..] {
            // The overlap starts at a line too (its newline dropped).
            assert!(c.overlap().starts_with("let value_"), "{:?}", c.overlap());
        }
    }

    #[test]
    fn a_30_kb_run_without_any_boundary_is_cut_between_characters() {
        let blob: String = (0..30 * 1024)
            .map(|i| char::from(b'a' + (i % 26) as u8))
            .collect();
        let doc = format!("Before the blob.\n\n{blob}é\n\nAfter the blob.");
        let opts = options(1000, 100);
        let chunks = chunk_text(&doc, &opts, &quarter);
        check_invariants(&doc, &chunks, &opts, &quarter);
        // 30 KiB at 4 characters a token is 7,680 tokens: at least 8 chunks of ≤ 900 new.
        assert!(chunks.len() >= 9, "{}", chunks.len());
        // The blob starts its own chunk and every cut inside it uses the whole room.
        let first_blob = chunks
            .iter()
            .position(|c| c.new_text().contains("abcdefgh"))
            .unwrap();
        assert!(chunks[first_blob].new_text().starts_with("\n\nabc"));
        for c in &chunks[first_blob + 1..chunks.len() - 2] {
            assert_eq!(c.overlap_tokens, 100);
            assert_eq!(c.tokens, 1000, "{}", c.text.len());
        }
    }

    #[test]
    fn every_boundary_has_an_overlap_within_the_limit() {
        let doc = (0..40)
            .map(|p| paragraph(p, 1 + p % 7))
            .collect::<Vec<_>>()
            .join("\n\n");
        for (size, overlap) in [(100, 20), (300, 60), (300, 150), (1000, 200)] {
            let opts = options(size, overlap);
            for count in [&quarter as &dyn Fn(&str) -> u64, &words] {
                let chunks = chunk_text(&doc, &opts, count);
                check_invariants(&doc, &chunks, &opts, count);
                assert!(chunks.len() > 1, "{size}/{overlap}");
                for (i, c) in chunks.iter().enumerate().skip(1) {
                    assert!(
                        c.has_overlap(),
                        "{size}/{overlap}: chunk {i} has no overlap"
                    );
                    // Sentences are ~10 words, ~15 tokens: the overlap gets at least half its
                    // room, or all of the previous chunk's new material.
                    let available = count(chunks[i - 1].new_text().trim());
                    assert!(
                        c.overlap_tokens * 2 >= overlap.min(available),
                        "{size}/{overlap}: chunk {i}: overlap of {} tokens",
                        c.overlap_tokens
                    );
                    assert!(!c.overlap().starts_with(char::is_whitespace));
                }
            }
        }
        // Without overlap, chunks only touch.
        let chunks = chunk_text(&doc, &options(100, 0), &quarter);
        assert!(chunks.iter().all(|c| !c.has_overlap()));
    }

    #[test]
    fn pieces_that_fit_are_never_cut() {
        let pieces: Vec<String> = (0..50)
            .map(|i| {
                // A tool exchange rendered with a paragraph break inside.
                format!(
                    "assistant called read_file({{\"path\":\"src/{i}.rs\"}})\nread_file returned: line one.\n\nline two {}\n",
                    "word ".repeat(i % 13)
                )
            })
            .collect();
        let opts = options(150, 30);
        let chunks = chunk_pieces(&pieces, &opts, &quarter);
        let doc = pieces.concat();
        check_invariants(&doc, &chunks, &opts, &quarter);
        let mut piece_starts = vec![0];
        for p in &pieces {
            piece_starts.push(piece_starts.last().unwrap() + p.len());
        }
        for c in &chunks {
            assert!(piece_starts.contains(&c.new_start), "cut inside a piece");
            assert!(piece_starts.contains(&c.range.end), "cut inside a piece");
        }
    }

    #[test]
    fn a_text_that_grows_at_its_end_keeps_its_earlier_chunks() {
        let mut doc = String::new();
        for p in 0..25 {
            doc.push_str(&paragraph(p, 1 + (p * 7) % 23));
            doc.push_str("\n\n");
            if p % 6 == 5 {
                doc.push_str(&"x".repeat(900 + p * 13));
                doc.push('\n');
                for l in 0..40 {
                    doc.push_str(&format!("    line {l} of code {p}\n"));
                }
                doc.push('\n');
            }
        }
        let opts = options(200, 40);
        let full = chunk_text(&doc, &opts, &quarter);
        check_invariants(&doc, &full, &opts, &quarter);
        // Cuts anywhere, and in particular just after separators (where the text's trailing
        // whitespace is a separator that, in the longer text, goes with the next part).
        let cuts: Vec<usize> = doc
            .char_indices()
            .map(|(i, _)| i)
            .filter(|&i| i % 97 == 0 || doc[..i].ends_with(". ") || doc[..i].ends_with("\n\n"))
            .collect();
        for cut in cuts {
            let prefix = &doc[..cut];
            let chunks = chunk_text(prefix, &opts, &quarter);
            check_invariants(prefix, &chunks, &opts, &quarter);
            let settled = chunks.len().saturating_sub(1);
            assert_eq!(
                chunks[..settled],
                full[..settled],
                "prefix of {cut} bytes: an earlier chunk changed"
            );
        }
    }

    #[test]
    fn trailing_whitespace_of_a_growing_text_does_not_move_earlier_chunks() {
        // One paragraph too long for a chunk, cut between sentences of varied lengths. A text
        // cut just after a sentence's space must chunk like the longer text up to its last
        // chunk, whatever the chunk size.
        let doc: String = (0..40)
            .map(|i| format!("S{i} {}. ", "ab ".repeat(i % 5)))
            .collect();
        let cuts: Vec<usize> = (1..doc.len())
            .filter(|&i| doc[..i].ends_with(". "))
            .collect();
        for size in 20..40 {
            let opts = options(size, 4);
            let full = chunk_text(&doc, &opts, &quarter);
            for &cut in &cuts {
                let chunks = chunk_text(&doc[..cut], &opts, &quarter);
                let settled = chunks.len().saturating_sub(1);
                assert_eq!(chunks[..settled], full[..settled], "size {size}, cut {cut}");
            }
        }
    }

    #[test]
    fn same_input_same_chunks() {
        let doc = (0..20)
            .map(|p| paragraph(p, 4))
            .collect::<Vec<_>>()
            .join("\n\n");
        let a = chunk_text(&doc, &options(100, 25), &quarter);
        let b = chunk_text(&doc, &options(100, 25), &quarter);
        assert_eq!(a, b);
    }

    #[test]
    fn small_and_empty_inputs() {
        assert!(chunk_text("", &options(10, 2), &quarter).is_empty());
        // Whitespace is never a chunk of its own, at either end.
        let blob = "x".repeat(100);
        let chunks = chunk_pieces(&["  \n", &blob, "\n\n "], &options(10, 2), &quarter);
        assert!(chunks.len() > 3);
        assert!(chunks.iter().all(|c| !c.new_text().trim().is_empty()));
        assert!(chunks[0].text.starts_with("  \nxxx"));
        assert!(chunks.last().unwrap().text.ends_with("x\n\n "));
        let one = chunk_text("short text", &options(10, 2), &quarter);
        assert_eq!(one.len(), 1);
        assert_eq!(one[0].text, "short text");
        assert!(!one[0].has_overlap());
    }

    #[test]
    fn boundaries_of_each_level() {
        let text = "One. Two! \"Three?\" Four\nfive\n\n\nSix 七。八";
        assert_eq!(boundaries(text, Level::Paragraph), vec![28]);
        let sentence_cuts: Vec<&str> = boundaries(text, Level::Sentence)
            .into_iter()
            .map(|p| &text[p..])
            .collect();
        assert_eq!(
            sentence_cuts,
            vec![
                " Two! \"Three?\" Four\nfive\n\n\nSix 七。八",
                " \"Three?\" Four\nfive\n\n\nSix 七。八",
                " Four\nfive\n\n\nSix 七。八",
                "八"
            ]
        );
        assert_eq!(boundaries(text, Level::Line), vec![23, 28]);
        assert_eq!(boundaries("a  b\tc   ", Level::Word), vec![1, 4, 6]);
        // Trailing whitespace is a part, which packing keeps with the chunk before it.
        assert_eq!(boundaries("end.\n\n  ", Level::Paragraph), vec![4]);
        let chunks = chunk_text("end.\n\n  ", &options(1, 0), &quarter);
        assert_eq!(chunks.len(), 1);
        assert_eq!(chunks[0].text, "end.\n\n  ");
    }

    #[test]
    fn packs_groups_greedily_from_the_start() {
        assert_eq!(pack_by_tokens(&[], 10), Vec::<Range<usize>>::new());
        assert_eq!(pack_by_tokens(&[4, 4, 4, 4, 4], 10), vec![0..2, 2..4, 4..5]);
        assert_eq!(pack_by_tokens(&[3, 20, 3, 3], 10), vec![0..1, 1..2, 2..4]);
        assert_eq!(pack_by_tokens(&[10, 10], 10), vec![0..1, 1..2]);
        assert_eq!(pack_by_tokens(&[5, 5], 10), vec![0..2]);
        // Anchored: adding items never changes the groups before the last.
        let grown = pack_by_tokens(&[4, 4, 4, 4, 4, 1, 9], 10);
        assert_eq!(grown[..2], pack_by_tokens(&[4, 4, 4, 4, 4], 10)[..2]);
    }

    #[test]
    fn longest_prefix_respects_characters_and_budget() {
        assert_eq!(longest_prefix_within("abcdefgh", 100, &quarter), 8);
        assert_eq!(longest_prefix_within("abcdefgh", 1, &quarter), 4);
        let text = "ééééé";
        let cut = longest_prefix_within(text, 1, &quarter);
        assert_eq!(&text[..cut], "éééé");
        assert_eq!(longest_prefix_within("abc", 0, &quarter), 0);
        let long = "word ".repeat(10_000);
        let cut = longest_prefix_within(&long, 777, &words);
        assert_eq!(words(&long[..cut]), 777);
        assert_eq!(words(&long[..cut + 1]), 778);
    }

    #[test]
    fn validate_names_the_field() {
        assert!(options(2048, 200).validate().is_ok());
        assert!(options(0, 0).validate().unwrap_err().contains("chunk_size"));
        assert!(options(100, 51)
            .validate()
            .unwrap_err()
            .contains("chunk_overlap"));
    }
}
