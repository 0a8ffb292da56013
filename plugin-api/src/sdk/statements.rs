//! What the offline extractive summarizer and the ledger (`sdk::ledger`) read in text, written
//! once: sentences (prose split at sentence ends, code and log lines whole), the words by which
//! someone states a decision, a reason, a commitment or a plan, in the languages an agent
//! speaks, and file paths in free text.
//!
//! The host's extractive provider scores and picks with these; the ledger extracts the
//! decisions an assistant states and the files its tool calls write with them, so the two
//! agree on what a statement, a decision and a path are.

/// Units longer than this many characters are cut (at whitespace when possible).
pub const MAX_UNIT_CHARS: usize = 600;

/// Words by which an assistant states a decision, a finding or a plan.
pub const CUE_WORDS: &[&str] = &[
    "because", "cause", "caused", "decide", "decided", "fix", "fixed", "found", "instead", "issue",
    "must", "need", "needs", "plan", "problem", "should", "will",
];

/// Words by which an assistant states a decision taken, which a handover must keep over
/// plans and findings ("I will look at…" is said far more often than "we decided…").
pub const DECISION_CUE_WORDS: &[&str] = &[
    "agreed", "chose", "chosen", "decided", "decision", "settled",
];

/// Whether `unit` has one of `words` (written in lower case) as a whole word, case ignored.
pub fn has_word(unit: &str, words: &[&str]) -> bool {
    unit.split(|c: char| !c.is_alphanumeric()).any(|w| {
        words
            .iter()
            .any(|cue| cue.eq_ignore_ascii_case(w) || (!w.is_ascii() && w.to_lowercase() == *cue))
    })
}

/// Lines kept whole: code, logs, stack traces, tables.
pub fn is_code_like(line: &str, trimmed: &str) -> bool {
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

pub const ABBREVIATIONS: [&str; 14] = [
    "e.g", "i.e", "etc", "vs", "mr", "mrs", "ms", "dr", "st", "no", "fig", "cf", "approx", "al",
];

pub fn split_sentences<'a>(line: &'a str, units: &mut Vec<&'a str>) {
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

pub fn ends_with_abbreviation(before: &str) -> bool {
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
pub fn push_unit<'a>(units: &mut Vec<&'a str>, text: &'a str) {
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

/// Words that make a sentence a decision (or a reason for one, see [`COMMITMENT_WORDS`]).
pub const DECISION_WORDS: &[&str] = &["because", "decide", "decided", "decides", "decision"];

/// Words by which a sentence that gives a reason also commits to something ("we will …
/// because …", "I'll use … instead"): without one, a "because" sentence is a finding (why
/// something happens), not a decision.
pub const COMMITMENT_WORDS: &[&str] = &[
    "will", "ll", "instead", "must", "should", "going", "chose", "choose", "use", "keep",
];

/// Whether a path is inside installed packages (`site-packages`, `dist-packages`,
/// `node_modules`): code an agent reads, not a file of the project it modifies.
pub fn is_installed_code(path: &str) -> bool {
    path.split(['/', '\\'])
        .any(|part| matches!(part, "site-packages" | "dist-packages" | "node_modules"))
}

/// Whether a path [`as_path`] found names a file: not a URL, not a one-segment absolute path
/// without an extension (`</error>` reads as `/error`), not a drive letter before an escape
/// (`e:\n` inside quoted JSON).
pub fn looks_like_a_file(path: &str) -> bool {
    if path.contains("://") {
        return false;
    }
    if let Some(rest) = path.strip_prefix('/') {
        if !rest.contains('/') && !rest.contains('.') {
            return false;
        }
    }
    !(path.contains('\\') && path.chars().count() < 6)
}

/// Strips punctuation around a token: quotes, brackets, trailing sentence punctuation.
pub fn trim_token(raw: &str) -> &str {
    let t = raw.trim_start_matches(['(', '[', '{', '"', '\'', '`', '<', '*', '“', '‘']);
    let t = t.trim_end_matches([
        '.', ',', ';', ':', '!', '?', '"', '\'', '`', '>', '*', '”', '’',
    ]);
    // Trailing `)`, `]`, `}` only when unbalanced, so `foo()` keeps its parentheses.
    let mut t = t;
    while let Some(last) = t.chars().last() {
        let open = match last {
            ')' => '(',
            ']' => '[',
            '}' => '{',
            _ => break,
        };
        if t.matches(open).count() >= t.matches(last).count() {
            break;
        }
        t = &t[..t.len() - 1];
        t = t.trim_end_matches(['.', ',', ';', ':', '!', '?', '"', '\'', '`']);
    }
    t
}

/// Where `://` starts in `s`, if it has one.
pub fn scheme_separator(s: &str) -> Option<usize> {
    let mut from = 0;
    while let Some(i) = s[from..].find(':') {
        let at = from + i;
        if s[at..].starts_with("://") {
            return Some(at);
        }
        from = at + 1;
    }
    None
}

pub const FILE_EXTENSIONS: [&str; 62] = [
    "bash", "c", "cc", "cfg", "cjs", "conf", "cpp", "cs", "css", "csv", "dart", "db", "dll",
    "dylib", "env", "erl", "ex", "exs", "go", "gradle", "gz", "h", "hpp", "hs", "html", "ini",
    "ipynb", "java", "jpg", "js", "json", "jsonl", "jsx", "kt", "lock", "log", "lua", "md", "mjs",
    "ml", "php", "pl", "png", "proto", "py", "rb", "rs", "scala", "sh", "so", "sql", "svg",
    "swift", "tar", "toml", "ts", "tsx", "txt", "wasm", "xml", "yaml", "yml",
];

/// The path in `token` (without a `:line:col` suffix), if the token is one: URLs, absolute and
/// `./ ../ ~/` paths, relative paths with two slashes or a file extension, Windows paths, and
/// bare file names with a known extension.
pub fn as_path(token: &str) -> Option<&str> {
    if !token.chars().any(|c| c.is_alphabetic()) {
        return None;
    }
    if let Some(scheme_end) = scheme_separator(token) {
        let scheme = &token[..scheme_end];
        if !scheme.is_empty()
            && scheme
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '+')
        {
            return Some(token);
        }
        return None;
    }
    // Strip a `:12` or `:12:5` suffix.
    let mut path = token;
    for _ in 0..2 {
        if let Some(colon) = path.rfind(':') {
            let tail = &path[colon + 1..];
            if !tail.is_empty() && tail.bytes().all(|b| b.is_ascii_digit()) {
                path = &path[..colon];
            }
        }
    }
    let valid = path.chars().all(|c| {
        c.is_alphanumeric()
            || matches!(
                c,
                '/' | '\\' | '.' | '_' | '-' | '~' | '@' | '+' | '%' | ':'
            )
    });
    if !valid || path.len() < 2 {
        return None;
    }
    let has_ext = |p: &str| {
        let name = p.rsplit(['/', '\\']).next().unwrap_or(p);
        match name.rsplit_once('.') {
            Some((stem, ext)) if !stem.is_empty() || name.starts_with('.') => {
                let ext = ext.to_ascii_lowercase();
                FILE_EXTENSIONS.binary_search(&ext.as_str()).is_ok()
            }
            _ => false,
        }
    };
    let windows_drive = {
        let b = path.as_bytes();
        b.len() > 3 && b[0].is_ascii_alphabetic() && b[1] == b':' && b[2] == b'\\'
    };
    if windows_drive {
        return Some(path);
    }
    if path.contains(':') {
        return None;
    }
    let slashes = path.matches('/').count();
    let is_path = if let Some(rest) = path.strip_prefix('/') {
        rest.chars()
            .next()
            .is_some_and(|c| c.is_alphanumeric() || c == '.' || c == '_')
    } else if path.starts_with("./") || path.starts_with("../") || path.starts_with("~/") {
        true
    } else if slashes > 0 {
        (slashes >= 2 || has_ext(path)) && !path.contains("//")
    } else if path.contains('\\') {
        has_ext(path)
    } else {
        // A bare file name: `Cargo.toml`, `main.rs`, `.env`.
        path.contains('.')
            && has_ext(path)
            && path
                .chars()
                .next()
                .is_some_and(|c| c.is_alphanumeric() || c == '.')
    };
    is_path.then_some(path)
}

/// The sentences of a text as the extractive summarizer splits it: each prose line cut at its
/// sentence ends; code and log lines (see [`is_code_like`]) and lines inside a ``` fence are
/// not sentences and are left out.
pub fn sentences(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut in_fence = false;
    for line in text.lines() {
        let trimmed = line.trim();
        if trimmed.starts_with("```") || trimmed.starts_with("~~~") {
            in_fence = !in_fence;
            continue;
        }
        if in_fence || !trimmed.chars().any(char::is_alphanumeric) {
            continue;
        }
        if !is_code_like(line, trimmed) {
            split_sentences(trimmed, &mut out);
        }
    }
    out
}

/// English stop words plus the role words of rendered conversations; sorted for binary search.
pub const STOP_WORDS: [&str; 151] = [
    "a",
    "about",
    "above",
    "after",
    "again",
    "against",
    "all",
    "also",
    "am",
    "an",
    "and",
    "any",
    "are",
    "as",
    "assistant",
    "at",
    "be",
    "because",
    "been",
    "before",
    "being",
    "below",
    "between",
    "both",
    "but",
    "by",
    "called",
    "can",
    "could",
    "did",
    "do",
    "does",
    "doing",
    "done",
    "down",
    "during",
    "each",
    "even",
    "few",
    "for",
    "from",
    "further",
    "get",
    "got",
    "had",
    "has",
    "have",
    "having",
    "he",
    "her",
    "here",
    "hers",
    "herself",
    "him",
    "himself",
    "his",
    "how",
    "i",
    "if",
    "in",
    "into",
    "is",
    "it",
    "its",
    "itself",
    "just",
    "let",
    "like",
    "may",
    "me",
    "might",
    "more",
    "most",
    "much",
    "must",
    "my",
    "myself",
    "no",
    "nor",
    "not",
    "now",
    "of",
    "off",
    "ok",
    "okay",
    "on",
    "once",
    "only",
    "or",
    "other",
    "our",
    "ours",
    "ourselves",
    "out",
    "over",
    "own",
    "please",
    "returned",
    "same",
    "she",
    "should",
    "so",
    "some",
    "such",
    "sure",
    "than",
    "thanks",
    "that",
    "the",
    "their",
    "theirs",
    "them",
    "themselves",
    "then",
    "there",
    "these",
    "they",
    "this",
    "those",
    "through",
    "to",
    "too",
    "tool",
    "under",
    "until",
    "up",
    "us",
    "use",
    "user",
    "very",
    "was",
    "we",
    "were",
    "what",
    "when",
    "where",
    "which",
    "while",
    "who",
    "whom",
    "why",
    "will",
    "with",
    "would",
    "yes",
    "yet",
    "you",
    "your",
    "yours",
    "yourself",
    "yourselves",
];

/// How one language states a decision: the words that say one was taken, the words that give
/// a reason, and the words that commit to something (a reason without a commitment is a
/// finding: "it fails because…"); and its commonest words, by which a sentence is told to be
/// in it.
#[derive(Debug)]
pub struct Language {
    /// An English name, for messages.
    pub name: &'static str,
    /// A decision stated as such ("decided", "decision").
    pub decided: &'static [&'static str],
    /// A reason ("because").
    pub reason: &'static [&'static str],
    /// A commitment ("will", "instead").
    pub commitment: &'static [&'static str],
    /// Function words: a sentence using them is in this language (spaced scripts only).
    pub common: &'static [&'static str],
    /// Written without spaces between words (Chinese, Japanese): its words are looked for
    /// inside the sentence, and the sentence's script tells the language.
    pub unspaced: bool,
}

impl Language {
    fn has(&self, sentence: &str, words: &[&str]) -> bool {
        if self.unspaced {
            words.iter().any(|w| sentence.contains(w))
        } else {
            has_word(sentence, words)
        }
    }

    /// Whether `sentence` (in this language) states a decision: says one was taken, or gives
    /// a reason for something it commits to.
    pub fn states_a_decision(&self, sentence: &str) -> bool {
        self.has(sentence, self.decided)
            || (self.has(sentence, self.reason) && self.has(sentence, self.commitment))
    }
}

/// English, as the extractive summarizer reads it (its decisions list: [`DECISION_CUE_WORDS`],
/// or [`DECISION_WORDS`] with [`COMMITMENT_WORDS`]).
pub const ENGLISH: Language = Language {
    name: "English",
    decided: DECISION_CUE_WORDS,
    reason: DECISION_WORDS,
    commitment: COMMITMENT_WORDS,
    common: &STOP_WORDS,
    unspaced: false,
};

/// The languages whose decisions are read, English first (it wins a tie).
pub const LANGUAGES: [&Language; 9] = [
    &ENGLISH,
    &Language {
        name: "French",
        decided: &[
            "décidé",
            "décidée",
            "décidons",
            "décision",
            "choisi",
            "choisie",
            "convenu",
            "retenu",
        ],
        reason: &["parce", "car", "puisque"],
        commitment: &[
            "allons",
            "vais",
            "utiliserons",
            "utiliser",
            "garder",
            "garderons",
            "plutôt",
            "devons",
            "faut",
            "ferons",
        ],
        common: &[
            "le", "la", "les", "et", "est", "nous", "pour", "une", "des", "du", "que", "pas",
            "dans",
        ],
        unspaced: false,
    },
    &Language {
        name: "German",
        decided: &[
            "entschieden",
            "entscheidung",
            "beschlossen",
            "gewählt",
            "festgelegt",
        ],
        reason: &["weil", "denn", "da"],
        commitment: &[
            "werden",
            "werde",
            "wird",
            "stattdessen",
            "müssen",
            "muss",
            "sollten",
            "verwenden",
            "behalten",
            "nutzen",
        ],
        common: &[
            "der", "die", "das", "und", "ist", "wir", "nicht", "mit", "ich", "ein", "eine", "zu",
            "den",
        ],
        unspaced: false,
    },
    &Language {
        name: "Spanish",
        decided: &[
            "decidimos",
            "decidido",
            "decidí",
            "decisión",
            "elegimos",
            "elegido",
            "acordamos",
        ],
        reason: &["porque", "debido"],
        commitment: &[
            "vamos",
            "voy",
            "usaremos",
            "usar",
            "mantener",
            "mantendremos",
            "debemos",
            "haremos",
        ],
        common: &[
            "el", "la", "los", "las", "y", "que", "es", "para", "con", "una", "por", "no", "del",
        ],
        unspaced: false,
    },
    &Language {
        name: "Portuguese",
        decided: &[
            "decidimos",
            "decidido",
            "decisão",
            "escolhemos",
            "escolhido",
        ],
        reason: &["porque", "pois"],
        commitment: &[
            "vamos",
            "vou",
            "usaremos",
            "usar",
            "manter",
            "manteremos",
            "devemos",
            "faremos",
        ],
        common: &[
            "o", "os", "as", "e", "que", "é", "para", "com", "não", "uma", "um", "do", "da",
        ],
        unspaced: false,
    },
    &Language {
        name: "Italian",
        decided: &["deciso", "decisione", "scelto", "scelta"],
        reason: &["perché", "poiché"],
        commitment: &[
            "useremo",
            "usare",
            "terremo",
            "manterremo",
            "dobbiamo",
            "invece",
            "faremo",
        ],
        common: &[
            "il", "lo", "la", "e", "di", "che", "è", "per", "non", "una", "con", "gli",
        ],
        unspaced: false,
    },
    &Language {
        name: "Russian",
        decided: &["решили", "решение", "решил", "решила", "выбрали"],
        reason: &["потому", "поскольку"],
        commitment: &[
            "будем",
            "буду",
            "вместо",
            "должны",
            "используем",
            "оставим",
            "сделаем",
        ],
        common: &["и", "в", "не", "на", "что", "мы", "это", "с", "я", "по"],
        unspaced: false,
    },
    &Language {
        name: "Chinese",
        decided: &["决定", "決定", "选择", "選擇", "决策"],
        reason: &["因为", "因為", "由于", "由於"],
        commitment: &["将", "將", "会", "會", "使用", "保留", "改为", "改為"],
        common: &[],
        unspaced: true,
    },
    &Language {
        name: "Japanese",
        decided: &["決定", "決めた", "決めました", "選んだ", "選びました"],
        reason: &["ため", "から", "ので"],
        commitment: &[
            "します",
            "する",
            "使う",
            "使います",
            "代わりに",
            "残す",
            "残します",
        ],
        common: &[],
        unspaced: true,
    },
];

/// Words of at least one letter in `sentence` (spaced scripts).
fn words(sentence: &str) -> impl Iterator<Item = &str> {
    sentence
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| w.chars().any(char::is_alphabetic))
}

/// The language of `sentence` among [`LANGUAGES`], or `None` when it is in none of them (or
/// too short to tell: fewer than three words and no script of its own).
///
/// Kana makes it Japanese, other Han characters Chinese; a spaced sentence is in the language
/// whose commonest words it uses most (English first on a tie).
pub fn language_of(sentence: &str) -> Option<&'static Language> {
    let kana = sentence
        .chars()
        .any(|c| matches!(c, '\u{3040}'..='\u{30ff}'));
    let han = sentence
        .chars()
        .any(|c| matches!(c, '\u{4e00}'..='\u{9fff}' | '\u{3400}'..='\u{4dbf}'));
    let by_name = |name: &str| LANGUAGES.iter().copied().find(|l| l.name == name);
    if kana {
        return by_name("Japanese");
    }
    if han {
        return by_name("Chinese");
    }
    let mut best: Option<(&'static Language, usize)> = None;
    for language in LANGUAGES.iter().copied().filter(|l| !l.unspaced) {
        let hits = words(sentence)
            .filter(|w| has_word(w, language.common))
            .count();
        if hits > 0 && best.is_none_or(|(_, most)| hits > most) {
            best = Some((language, hits));
        }
    }
    best.map(|(language, _)| language)
}

/// What reading a sentence for a decision found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reading {
    /// It states a decision (in the language [`language_of`] found).
    Decision,
    /// It states none.
    NotADecision,
    /// It is in a language whose decision words are not known here: it could not be read.
    Unread,
}

/// Reads `sentence` for a decision, in its own language ([`language_of`]); a sentence of at
/// least four words in none of [`LANGUAGES`] is [`Reading::Unread`], a shorter one is no
/// decision.
pub fn read_decision(sentence: &str) -> Reading {
    match language_of(sentence) {
        Some(language) if language.states_a_decision(sentence) => Reading::Decision,
        Some(_) => Reading::NotADecision,
        None if words(sentence).count() >= 4 => Reading::Unread,
        None => Reading::NotADecision,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_are_sorted() {
        assert!(FILE_EXTENSIONS.windows(2).all(|w| w[0] < w[1]));
        assert!(STOP_WORDS.windows(2).all(|w| w[0] < w[1]));
    }

    #[test]
    fn sentence_splitting() {
        let mut units = Vec::new();
        split_sentences(
            "It failed, e.g. on v1.2 in src/x.py. Then we fixed it! Was it J. Smith? yes it was. 42 tests pass.",
            &mut units,
        );
        assert_eq!(
            units,
            [
                "It failed, e.g. on v1.2 in src/x.py.",
                "Then we fixed it!",
                "Was it J. Smith? yes it was.",
                "42 tests pass."
            ]
        );
        let mut units = Vec::new();
        split_sentences("我们决定使用缓存。因为它更快！", &mut units);
        assert_eq!(units, ["我们决定使用缓存。", "因为它更快！"]);
    }

    #[test]
    fn sentences_leave_code_and_fenced_lines_out() {
        let text = "We will keep the cache. It is faster.\n```\nlet x = 1. Also y;\n```\n    \
                    indented.code(); Done.\nfoo(bar);\nLast one.";
        assert_eq!(
            sentences(text),
            ["We will keep the cache.", "It is faster.", "Last one."]
        );
    }

    #[test]
    fn decisions_are_read_in_the_sentence_s_own_language() {
        let cases = [
            (
                "Decision D-001: we will keep the old order, because tests pin it.",
                Reading::Decision,
            ),
            (
                "We will use the cached reader because the fixture drifts.",
                Reading::Decision,
            ),
            (
                "It fails because the cache is stale.",
                Reading::NotADecision,
            ),
            ("Let me look at the file.", Reading::NotADecision),
            (
                "Nous avons décidé de garder l'ancien ordre des colonnes.",
                Reading::Decision,
            ),
            (
                "Wir haben entschieden, den Cache zu behalten.",
                Reading::Decision,
            ),
            (
                "Wir verwenden den Cache, weil die Daten sonst driften.",
                Reading::Decision,
            ),
            (
                "Decidimos usar el lector en caché para los informes.",
                Reading::Decision,
            ),
            (
                "Vamos usar o leitor em cache porque os dados mudam.",
                Reading::Decision,
            ),
            (
                "Abbiamo deciso di usare il lettore con la cache.",
                Reading::Decision,
            ),
            (
                "Мы решили оставить старый порядок столбцов.",
                Reading::Decision,
            ),
            ("我们决定使用缓存读取器。", Reading::Decision),
            ("キャッシュを使うことに決めました。", Reading::Decision),
            ("キャッシュのファイルを読みます。", Reading::NotADecision),
            // Turkish and Korean: no words known here, and said so.
            (
                "Önbelleği kullanmaya karar verdik çünkü veriler kayıyor.",
                Reading::Unread,
            ),
            (
                "우리는 캐시를 사용하기로 결정했습니다 왜냐하면 빠릅니다.",
                Reading::Unread,
            ),
            ("Yes.", Reading::NotADecision),
        ];
        for (sentence, expected) in cases {
            assert_eq!(read_decision(sentence), expected, "{sentence}");
        }
        assert_eq!(
            language_of("Le cache est plus rapide.").unwrap().name,
            "French"
        );
        assert_eq!(language_of("the cache is faster").unwrap().name, "English");
    }
}
