//! The paths, identifiers and numbers of the material, for the `Mentions:` line.

use super::*;

#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug)]
pub(super) enum Category {
    Path,
    Identifier,
    Number,
}

pub(super) struct MentionEntry {
    pub(super) category: Category,
    pub(super) count: u32,
    pub(super) first: u32,
    pub(super) call: bool,
    /// The units it occurs in, ascending.
    pub(super) units: Vec<u32>,
}

#[derive(Default)]
pub(super) struct Mentions {
    pub(super) entries: FxHashMap<String, MentionEntry>,
}

impl Mentions {
    /// Records the mentions in unit number `unit` and returns its features (`error` left
    /// false).
    pub(super) fn scan(&mut self, text: &str, unit: u32) -> Features {
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

    pub(super) fn add(&mut self, text: &str, category: Category, call: bool, unit: u32) {
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
    pub(super) fn scan_token(&mut self, token: &str, unit: u32, f: &mut Features) {
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
    pub(super) fn ordered(&self, scores: &[f64]) -> Vec<String> {
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
pub(super) fn mentions_line(items: &[String], max_chars: usize) -> Option<String> {
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
/// End of an identifier chain starting at `start`: segments `[A-Za-z_][A-Za-z0-9_]*` joined by
/// `.` or `::`.
pub(super) fn ident_chain_end(bytes: &[u8], start: usize) -> usize {
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

pub(super) fn is_identifier(chain: &str, call: bool) -> bool {
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
pub(super) fn number_end(bytes: &[u8], start: usize) -> usize {
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
