//! Facts files: what must survive a compaction, and how much of it did (retention).
//!
//! ```json
//! {
//!   "conversation": "ponyc-4588",
//!   "facts": [
//!     {"id": "task", "kind": "task", "text": "implement a match-on-union check"},
//!     {"id": "fix", "kind": "decision", "all": ["src/libponyc/expr/match.c", "is_union"], "message": 41}
//!   ]
//! }
//! ```
//!
//! A fact is found when its `text` appears in the compacted context, or when every keyword of
//! `all` does (each case-insensitively; a fact may give both, and then both must hold). The
//! context is what the model would read: every kept message and every summary, rendered as a
//! summarizer reads them (`sdk::render_messages`, uncapped). Pages do not count: a fact that
//! survives only in a page is lost to the model. `conversation`, when given, names the
//! conversation file the facts belong to (its file name, or its name without extensions); a
//! file without it applies to every conversation. `kind` and `message` (the index the fact
//! comes from) are for the report and the reader. A `question` is for `--probe`
//! ([`super::probe`]); a fact may be a question only, and then the word match skips it.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use tamp_plugin_api::sdk::{render_messages, RenderOptions};
use tamp_plugin_api::Message;

/// One fact that must survive.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Fact {
    pub id: String,
    /// `task`, `constraint`, `decision`, `finding`, ... (free text, for the report).
    #[serde(default)]
    pub kind: Option<String>,
    /// A phrase that must appear.
    #[serde(default)]
    pub text: Option<String>,
    /// Keywords that must all appear.
    #[serde(default)]
    pub all: Vec<String>,
    /// The index of the message the fact comes from.
    #[serde(default)]
    pub message: Option<usize>,
    /// A question the fact answers, for `--probe` ([`super::probe`]).
    #[serde(default)]
    pub question: Option<String>,
}

impl Fact {
    /// Whether the fact is looked for as words (`text`, `all`); a fact may be a question only.
    pub fn has_words(&self) -> bool {
        self.text.as_deref().is_some_and(|t| !t.trim().is_empty()) || !self.all.is_empty()
    }
}

/// A facts file, as read.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FactsFile {
    #[serde(default)]
    pub conversation: Option<String>,
    pub facts: Vec<Fact>,
    #[serde(skip)]
    pub path: PathBuf,
}

impl FactsFile {
    /// Reads and checks `path`: every fact has an id (unique) and something to look for.
    pub fn read(path: &Path) -> Result<FactsFile, String> {
        let text = crate::input_file::read_to_string(path, crate::input_file::Limit::SETTINGS)
            .map_err(|e| format!("{}: cannot read the facts file: {e}", path.display()))?;
        let mut file: FactsFile = serde_json::from_str(&text)
            .map_err(|e| format!("{}: not a facts file: {e}", path.display()))?;
        file.path = path.to_path_buf();
        let mut seen = std::collections::HashSet::new();
        for (i, fact) in file.facts.iter().enumerate() {
            let at = format!("{}: facts[{i}]", path.display());
            if fact.id.trim().is_empty() {
                return Err(format!("{at}: \"id\" is empty"));
            }
            if !seen.insert(fact.id.as_str()) {
                return Err(format!("{at}: the id {:?} is used twice", fact.id));
            }
            let no_question = fact.question.as_deref().is_none_or(|q| q.trim().is_empty());
            if !fact.has_words() && no_question {
                return Err(format!(
                    "{at} ({}): give \"text\" (a phrase), \"all\" (keywords) or \"question\" \
                     (for --probe)",
                    fact.id
                ));
            }
            if fact.question.is_some() && no_question {
                return Err(format!("{at} ({}): \"question\" is empty", fact.id));
            }
            if fact.all.iter().any(|k| k.trim().is_empty()) {
                return Err(format!("{at} ({}): an empty keyword in \"all\"", fact.id));
            }
        }
        Ok(file)
    }

    /// Whether these facts belong to the conversation file `path`.
    pub fn applies_to(&self, path: &Path) -> bool {
        let Some(name) = &self.conversation else {
            return true;
        };
        let file = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        let stem = file.split('.').next().unwrap_or("");
        name == file || name == stem
    }
}

/// How many facts survived, and which did not.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Retention {
    pub found: usize,
    pub total: usize,
    /// The ids of the facts not found, in file order.
    pub lost: Vec<String>,
}

impl Retention {
    pub fn share(&self) -> f64 {
        if self.total == 0 {
            1.0
        } else {
            self.found as f64 / self.total as f64
        }
    }
}

/// The context a model reads: every message and summary, rendered as a summarizer reads them,
/// no block cut short.
pub fn render_context(messages: &[Message]) -> String {
    render_messages(messages, &RenderOptions::cut_at(0))
}

/// The context a model reads, as one lowercase text to search.
pub fn context_text(messages: &[Message]) -> String {
    render_context(messages).to_lowercase()
}

/// Whether `fact` is in `context` (from [`context_text`]).
pub fn found(fact: &Fact, context: &str) -> bool {
    let phrase = fact
        .text
        .as_deref()
        .is_none_or(|t| context.contains(&t.to_lowercase()));
    phrase && fact.all.iter().all(|k| context.contains(&k.to_lowercase()))
}

/// The retention of `facts` in `messages`.
pub fn retention<'a>(facts: impl IntoIterator<Item = &'a Fact>, messages: &[Message]) -> Retention {
    let context = context_text(messages);
    let mut r = Retention {
        found: 0,
        total: 0,
        lost: Vec::new(),
    };
    for fact in facts.into_iter().filter(|f| f.has_words()) {
        r.total += 1;
        if found(fact, &context) {
            r.found += 1;
        } else {
            r.lost.push(fact.id.clone());
        }
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;
    use tamp_plugin_api::Role;

    fn fact(id: &str, text: Option<&str>, all: &[&str]) -> Fact {
        Fact {
            id: id.into(),
            kind: None,
            text: text.map(str::to_string),
            all: all.iter().map(|s| s.to_string()).collect(),
            message: None,
            question: None,
        }
    }

    #[test]
    fn a_fact_is_found_by_its_phrase_and_all_its_keywords() {
        let messages = vec![
            Message::text(Role::User, "Do NOT touch the billing module."),
            Message::text(
                Role::Assistant,
                "Decided: patch src/report.rs, keep rounding.",
            ),
        ];
        let facts = [
            fact("constraint", Some("do not touch the billing module"), &[]),
            fact("decision", None, &["src/report.rs", "rounding"]),
            fact("half", None, &["src/report.rs", "truncation"]),
            fact("both", Some("keep rounding"), &["billing"]),
        ];
        let r = retention(&facts, &messages);
        assert_eq!((r.found, r.total), (3, 4));
        assert_eq!(r.lost, ["half"]);
        assert!((r.share() - 0.75).abs() < 1e-9);
    }

    #[test]
    fn a_facts_file_is_checked_and_matched_to_its_conversation() {
        let dir = std::env::temp_dir().join(format!("tamp-facts-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let write = |name: &str, text: &str| {
            let p = dir.join(name);
            std::fs::write(&p, text).unwrap();
            p
        };
        let good = write(
            "good.json",
            r#"{"conversation": "ponyc-4588", "facts": [{"id": "a", "text": "x"}]}"#,
        );
        let file = FactsFile::read(&good).unwrap();
        assert!(file.applies_to(Path::new("examples/ponyc-4588.anthropic.json")));
        assert!(!file.applies_to(Path::new("examples/other.anthropic.json")));
        for (text, expected) in [
            (r#"{"facts": [{"id": "a"}]}"#, "give \"text\""),
            (
                r#"{"facts": [{"id": "a", "question": " "}]}"#,
                "give \"text\"",
            ),
            (
                r#"{"facts": [{"id": "a", "text": "x"}, {"id": "a", "text": "y"}]}"#,
                "used twice",
            ),
            (r#"{"facts": [{"id": "a", "all": [" "]}]}"#, "empty keyword"),
            (r#"{"facts": [{"id": "a", "txt": "x"}]}"#, "unknown field"),
        ] {
            let err = FactsFile::read(&write("bad.json", text)).unwrap_err();
            assert!(err.contains(expected) && err.contains("bad.json"), "{err}");
        }
        std::fs::remove_dir_all(&dir).ok();
    }
}
