//! The typed summary the LLM is asked for, its limits, merging and Markdown rendering.

use tamp_plugin_api::prelude::*;
use tamp_plugin_api::sdk::cap_chars;
use tamp_plugin_api::sdk::lists::{pack_oldest, Packed, PACK_SEPARATOR};

/// The longest `session_intent`, in characters.
pub const MAX_INTENT_CHARS: usize = 2_000;
/// The longest list entry, in characters.
pub const MAX_ENTRY_CHARS: usize = 500;
/// The most entries in one list.
pub const MAX_ENTRIES: usize = 50;

/// The lists the ledger holds instead of the model, while it is on.
pub const LEDGER_LISTS: [&str; 2] = ["files_modified", "decisions_made"];
/// While the ledger is on, the lists left to the model (open questions, next steps) hold at
/// most this many entries, asked and carried: they go stale, and what must last is in the
/// ledger.
pub const MAX_ENTRIES_WITH_LEDGER: usize = 10;

/// The index of `decisions_made` among the lists.
const DECISIONS: usize = 1;

/// An anchored summary: each section is a required key, so a model cannot skip one silently
/// (it must at least answer an empty list).
///
/// The limits are in the schema too (`maxLength`, `maxItems`) so that providers which honour
/// them never produce an answer the plugin would refuse; the plugin checks them again anyway
/// ([`AnchoredSummary::validate`]), because not every provider does.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(crate = "tamp_plugin_api::serde", deny_unknown_fields)]
#[schemars(crate = "tamp_plugin_api::schemars")]
pub struct AnchoredSummary {
    /// What the session is trying to achieve, in a few sentences.
    #[schemars(length(max = 2000))]
    pub session_intent: String,
    /// Paths of the files created, modified or deleted, one per entry.
    #[schemars(length(max = 50), inner(length(max = 500)))]
    pub files_modified: Vec<String>,
    /// Each decision taken, as "Decision: X — Reason: Y".
    #[schemars(length(max = 50), inner(length(max = 500)))]
    pub decisions_made: Vec<String>,
    /// Questions still unanswered.
    #[schemars(length(max = 50), inner(length(max = 500)))]
    pub open_questions: Vec<String>,
    /// What is to be done next, in order.
    #[schemars(length(max = 50), inner(length(max = 500)))]
    pub next_steps: Vec<String>,
}

impl AnchoredSummary {
    /// The JSON Schema of the whole summary, as its page's metadata holds it.
    pub fn json_schema() -> tamp_plugin_api::serde_json::Value {
        let schema = tamp_plugin_api::schemars::schema_for!(AnchoredSummary);
        tamp_plugin_api::serde_json::to_value(schema).expect("a schema serializes")
    }

    /// The JSON Schema handed to the host's structured-output call: without the lists the
    /// ledger holds ([`LEDGER_LISTS`]) when it is on, since a small model asked for them
    /// writes thousands of tokens of them, and they are in the ledger verbatim already; the
    /// other lists then at most [`MAX_ENTRIES_WITH_LEDGER`] entries.
    pub fn request_schema(ledger: bool) -> tamp_plugin_api::serde_json::Value {
        let mut schema = Self::json_schema();
        if ledger {
            if let Some(properties) = schema["properties"].as_object_mut() {
                for key in LEDGER_LISTS {
                    properties.shift_remove(key);
                }
                for list in properties.values_mut().filter(|p| p["type"] == "array") {
                    list["maxItems"] = MAX_ENTRIES_WITH_LEDGER.into();
                }
            }
            if let Some(required) = schema["required"].as_array_mut() {
                required.retain(|k| !LEDGER_LISTS.iter().any(|l| k == l));
            }
        }
        // The keys in the order the summary reads, intent first: a model that follows the
        // schema's order (llama.cpp's grammar does) and is cut at its output limit then
        // loses the last list's tail, not the intent.
        const ORDER: [&str; 5] = [
            "session_intent",
            "files_modified",
            "decisions_made",
            "open_questions",
            "next_steps",
        ];
        if let Some(properties) = schema["properties"].as_object_mut() {
            let mut ordered = tamp_plugin_api::serde_json::Map::new();
            for key in ORDER {
                if let Some(p) = properties.shift_remove(key) {
                    ordered.insert(key.to_string(), p);
                }
            }
            ordered.append(properties);
            *properties = ordered;
        }
        if let Some(required) = schema["required"].as_array_mut() {
            required.sort_by_key(|k| ORDER.iter().position(|o| k == o));
        }
        schema
    }

    /// The lists with their section titles, in rendering order.
    pub fn sections(&self) -> [(&'static str, &Vec<String>); 4] {
        [
            ("Files modified", &self.files_modified),
            ("Decisions made", &self.decisions_made),
            ("Open questions", &self.open_questions),
            ("Next steps", &self.next_steps),
        ]
    }

    /// The lists in [`Self::lists_mut`] order; `decisions_made` at [`DECISIONS`].
    fn lists_mut(&mut self) -> [&mut Vec<String>; 4] {
        [
            &mut self.files_modified,
            &mut self.decisions_made,
            &mut self.open_questions,
            &mut self.next_steps,
        ]
    }

    /// Checks the limits; the error names the field that breaks one.
    pub fn validate(&self) -> Result<(), String> {
        let intent = self.session_intent.chars().count();
        if intent > MAX_INTENT_CHARS {
            return Err(format!(
                "session_intent: {intent} characters, more than {MAX_INTENT_CHARS}"
            ));
        }
        let names = [
            "files_modified",
            "decisions_made",
            "open_questions",
            "next_steps",
        ];
        for (name, (_, list)) in names.iter().zip(self.sections()) {
            if list.len() > MAX_ENTRIES {
                return Err(format!(
                    "{name}: {} entries, more than {MAX_ENTRIES}",
                    list.len()
                ));
            }
            if let Some((i, entry)) = list
                .iter()
                .enumerate()
                .find(|(_, e)| e.chars().count() > MAX_ENTRY_CHARS)
            {
                return Err(format!(
                    "{name}[{i}]: {} characters, more than {MAX_ENTRY_CHARS}",
                    entry.chars().count()
                ));
            }
        }
        Ok(())
    }

    /// Complete: the two sections without which an agent cannot carry on are filled.
    pub fn missing_anchors(&self) -> Vec<&'static str> {
        let mut missing = Vec::new();
        if self.session_intent.trim().is_empty() {
            missing.push("session_intent");
        }
        if !self.next_steps.iter().any(|s| !s.trim().is_empty()) {
            missing.push("next_steps");
        }
        missing
    }

    /// `self` (the newer summary) merged over `prior`: the prior lists carried forward first,
    /// then the new entries, blank entries and duplicates (up to case and surrounding
    /// whitespace) removed; the newer intent wins when it has one. Past [`MAX_ENTRIES`],
    /// `decisions_made` has its oldest entries packed several to an entry (the SDK's
    /// [`pack_oldest`]): a decision is what a handover cannot rebuild from elsewhere, and
    /// nothing is lost while packed entries hold it (a new decision already inside a packed
    /// one is a repeat too).
    /// The other lists keep their newest entries (the files are in the repository, questions
    /// and steps go stale). Either way the result still validates; how many entries were
    /// packed away and dropped is returned so the caller can say so.
    pub fn merged_over(self, prior: &AnchoredSummary) -> (AnchoredSummary, Merge) {
        let mut merged = AnchoredSummary {
            session_intent: if self.session_intent.trim().is_empty() {
                prior.session_intent.clone()
            } else {
                self.session_intent
            },
            ..prior.clone()
        };
        let newer = [
            self.files_modified,
            self.decisions_made,
            self.open_questions,
            self.next_steps,
        ];
        let mut merge = Merge::default();
        for (i, (list, new)) in merged.lists_mut().into_iter().zip(newer).enumerate() {
            let decisions = i == DECISIONS;
            let packed: Vec<String> = if decisions {
                list.iter()
                    .filter(|e| e.contains(PACK_SEPARATOR))
                    .map(|e| e.trim().to_lowercase())
                    .collect()
            } else {
                Vec::new()
            };
            // A new decision a packed entry already holds is a repeat.
            let new = new.into_iter().filter(|e| {
                let e = e.trim().to_lowercase();
                e.is_empty() || !packed.iter().any(|p| p.contains(&e))
            });
            list.extend(new);
            let mut seen = std::collections::HashSet::new();
            list.retain(|e| !e.trim().is_empty() && seen.insert(e.trim().to_lowercase()));
            for e in list.iter_mut() {
                *e = e.trim().to_string();
            }
            if list.len() > MAX_ENTRIES && !decisions {
                let excess = list.len() - MAX_ENTRIES;
                list.drain(..excess);
                merge.dropped += excess;
            } else if list.len() > MAX_ENTRIES {
                let before = list.len();
                let Packed { entries, dropped } =
                    pack_oldest(std::mem::take(list), MAX_ENTRIES, MAX_ENTRY_CHARS);
                *list = entries;
                // `dropped` counts the entries inside the packed items dropped, which can be
                // more than the items themselves: what packing alone saved is at least 0.
                merge.packed += (before - list.len()).saturating_sub(dropped);
                merge.dropped += dropped;
            }
        }
        (merged, merge)
    }

    /// Markdown sections for what is filled (empty sections omitted).
    pub fn markdown_sections(&self) -> String {
        let mut out = String::new();
        if !self.session_intent.trim().is_empty() {
            out.push_str("\n## Session intent\n");
            out.push_str(self.session_intent.trim());
            out.push('\n');
        }
        for (title, list) in self.sections() {
            if list.is_empty() {
                continue;
            }
            out.push_str(&format!("\n## {title}\n"));
            for entry in list {
                out.push_str(&format!("- {}\n", entry.replace('\n', " ")));
            }
        }
        out
    }

    /// Keeps the newest `max` open questions and next steps; returns how many were dropped.
    pub fn keep_newest_steps(&mut self, max: usize) -> usize {
        let mut dropped = 0;
        for list in [&mut self.open_questions, &mut self.next_steps] {
            let excess = list.len().saturating_sub(max);
            list.drain(..excess);
            dropped += excess;
        }
        dropped
    }

    pub fn is_empty(&self) -> bool {
        self.session_intent.trim().is_empty() && self.sections().iter().all(|(_, l)| l.is_empty())
    }
}

/// What a merge did to keep the lists within [`MAX_ENTRIES`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Merge {
    /// Entries fewer after packing the oldest several to an entry (nothing lost).
    pub packed: usize,
    /// Entries dropped because even packed they did not fit.
    pub dropped: usize,
}

/// Which step of the fallback order produced a summary.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SummaryPath {
    Structured,
    Prose,
    NoLlm,
}

impl SummaryPath {
    pub fn as_str(self) -> &'static str {
        match self {
            SummaryPath::Structured => "structured",
            SummaryPath::Prose => "prose",
            SummaryPath::NoLlm => "no_llm",
        }
    }
}

/// The header every rendering starts with, so a reader (and a later run) knows what it is.
pub const HEADER: &str = "# Anchored summary";

/// The summary message's Markdown: the header, a line saying what it covers and where the
/// JSON is, the body, capped at `max_chars` in total.
pub fn render(path: SummaryPath, messages: usize, body: &str, max_chars: usize) -> String {
    let origin = match path {
        SummaryPath::Structured => "structured",
        SummaryPath::Prose => "prose fallback; sections carried forward from earlier",
        SummaryPath::NoLlm => {
            "built without the LLM from what the messages show; sections carried forward from \
             earlier"
        }
    };
    let text = format!(
        "{HEADER}\n_{messages} earlier message(s), {origin}. Originals and the structured JSON \
         (metadata key `anchored_summary`) are in the page this summary refers to._\n{body}"
    );
    cap_chars(text.trim_end(), max_chars)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entries(n: usize, chars: usize) -> Vec<String> {
        (0..n).map(|i| format!("{i:0>chars$}")).collect()
    }

    #[test]
    fn limits_at_their_edges() {
        let ok = AnchoredSummary {
            session_intent: "x".repeat(MAX_INTENT_CHARS),
            files_modified: entries(MAX_ENTRIES, MAX_ENTRY_CHARS),
            decisions_made: entries(MAX_ENTRIES, 1),
            open_questions: Vec::new(),
            next_steps: entries(1, MAX_ENTRY_CHARS),
        };
        ok.validate().unwrap();
        let mut long_intent = ok.clone();
        long_intent.session_intent.push('é');
        assert!(long_intent
            .validate()
            .unwrap_err()
            .starts_with("session_intent"));
        let mut many = ok.clone();
        many.decisions_made.push("one more".into());
        assert!(many.validate().unwrap_err().starts_with("decisions_made"));
        let mut long_entry = ok.clone();
        long_entry.next_steps[0].push('x');
        assert_eq!(
            long_entry.validate().unwrap_err(),
            "next_steps[0]: 501 characters, more than 500"
        );
    }

    #[test]
    fn completeness_needs_intent_and_next_steps() {
        let mut s = AnchoredSummary {
            session_intent: "fix the loader".into(),
            ..Default::default()
        };
        assert_eq!(s.missing_anchors(), ["next_steps"]);
        s.next_steps.push("  ".into());
        assert_eq!(s.missing_anchors(), ["next_steps"]);
        s.next_steps.push("run tests".into());
        assert!(s.missing_anchors().is_empty());
        s.session_intent.clear();
        assert_eq!(s.missing_anchors(), ["session_intent"]);
    }

    #[test]
    fn merge_carries_lists_forward_without_duplicates() {
        let prior = AnchoredSummary {
            session_intent: "old intent".into(),
            files_modified: vec!["src/a.rs".into(), "src/b.rs".into()],
            next_steps: vec!["Run tests".into()],
            ..Default::default()
        };
        let newer = AnchoredSummary {
            session_intent: String::new(),
            files_modified: vec!["src/b.rs ".into(), "src/c.rs".into()],
            next_steps: vec!["run tests".into(), "ship".into()],
            ..Default::default()
        };
        let (m, merge) = newer.merged_over(&prior);
        assert_eq!(merge, Merge::default());
        assert_eq!(m.session_intent, "old intent");
        assert_eq!(m.files_modified, ["src/a.rs", "src/b.rs", "src/c.rs"]);
        assert_eq!(m.next_steps, ["Run tests", "ship"]);
        let full = AnchoredSummary {
            files_modified: entries(MAX_ENTRIES, 3),
            ..Default::default()
        };
        let (m, dropped) = AnchoredSummary {
            files_modified: vec!["new.rs".into()],
            ..Default::default()
        }
        .merged_over(&full);
        assert_eq!(dropped.dropped, 1);
        assert_eq!(m.files_modified.len(), MAX_ENTRIES);
        assert_eq!(m.files_modified.last().unwrap(), "new.rs");
        m.validate().unwrap();
    }

    /// A decision as a long session states it, numbered.
    fn decision(n: usize) -> String {
        format!("Decision D-{n:03}: we will keep the exporter on order {n}, because tests pin it.")
    }

    #[test]
    fn merges_over_the_cap_keep_every_decision_by_packing_the_oldest() {
        // Replayed folds: each adds six decisions to the prior, past 50 after nine folds.
        let mut merged = AnchoredSummary::default();
        let mut dropped = 0;
        for fold in 0..15 {
            let newer = AnchoredSummary {
                decisions_made: (fold * 6 + 1..=fold * 6 + 6).map(decision).collect(),
                files_modified: (0..6).map(|i| format!("src/f{fold}_{i}.rs")).collect(),
                ..Default::default()
            };
            let (m, merge) = newer.merged_over(&merged);
            m.validate().unwrap();
            dropped += merge.dropped;
            merged = m;
        }
        assert_eq!(merged.decisions_made.len(), MAX_ENTRIES);
        let all = merged.decisions_made.join("\n");
        for n in 1..=90 {
            assert!(all.contains(&decision(n)), "D-{n:03} lost");
        }
        // The newest stay entries of their own; only the oldest are packed.
        assert_eq!(merged.decisions_made.last().unwrap(), &decision(90));
        assert!(merged.decisions_made[0].starts_with(&format!("{}; ", decision(1))));
        // Files keep their newest 50: the 40 oldest were dropped, no decision.
        assert_eq!(dropped, 40);
        assert_eq!(merged.files_modified.len(), MAX_ENTRIES);
        assert_eq!(merged.files_modified.last().unwrap(), "src/f14_5.rs");
        // A decision already inside a packed entry is not added again.
        let (again, _) = AnchoredSummary {
            decisions_made: vec![decision(2)],
            ..Default::default()
        }
        .merged_over(&merged);
        assert_eq!(again.decisions_made, merged.decisions_made);
    }

    #[test]
    fn a_packed_entry_dropped_whole_is_counted_by_what_it_held() {
        // Fifty prior decisions, each already three packed into one entry near the entry
        // limit: a new one fits nowhere, so the oldest packed entry goes, three decisions.
        let packed = |i: usize| {
            (0..3)
                .map(|j| format!("{:0>155}", i * 3 + j))
                .collect::<Vec<_>>()
                .join(PACK_SEPARATOR)
        };
        let prior = AnchoredSummary {
            decisions_made: (0..MAX_ENTRIES).map(packed).collect(),
            ..Default::default()
        };
        let newer = AnchoredSummary {
            decisions_made: vec![format!("{:x>300}", "new")],
            ..Default::default()
        };
        let (merged, merge) = newer.merged_over(&prior);
        assert_eq!(merged.decisions_made.len(), MAX_ENTRIES);
        assert_eq!((merge.dropped, merge.packed), (3, 0));
        assert!(merged.decisions_made.last().unwrap().ends_with("new"));
    }

    #[test]
    fn markdown_omits_empty_sections_and_is_capped() {
        let s = AnchoredSummary {
            session_intent: "Fix the config loader.".into(),
            files_modified: vec!["src/config.rs".into()],
            next_steps: vec!["add a regression test".into()],
            ..Default::default()
        };
        let text = render(SummaryPath::Structured, 12, &s.markdown_sections(), 10_000);
        assert!(text.starts_with(HEADER));
        assert!(text.contains("12 earlier message(s)"));
        assert!(text.contains(
            "## Session intent\nFix the config loader.\n\n## Files modified\n- src/config.rs\n"
        ));
        assert!(text.ends_with("## Next steps\n- add a regression test"));
        assert!(!text.contains("Decisions") && !text.contains("Open questions"));
        let capped = render(SummaryPath::Structured, 12, &s.markdown_sections(), 60);
        assert_eq!(capped.chars().count(), 60);
    }

    #[test]
    fn schema_snapshot() {
        let schema = AnchoredSummary::json_schema();
        let expected = tamp_plugin_api::serde_json::json!({
            "$schema": "http://json-schema.org/draft-07/schema#",
            "title": "AnchoredSummary",
            "description": concat!(
                "An anchored summary: each section is a required key, so a model cannot skip ",
                "one silently (it must at least answer an empty list).\n\n",
                "The limits are in the schema too (`maxLength`, `maxItems`) so that providers ",
                "which honour them never produce an answer the plugin would refuse; the plugin ",
                "checks them again anyway ([`AnchoredSummary::validate`]), because not every ",
                "provider does."
            ),
            "type": "object",
            "required": ["decisions_made", "files_modified", "next_steps", "open_questions", "session_intent"],
            "additionalProperties": false,
            "properties": {
                "session_intent": {"description": "What the session is trying to achieve, in a few sentences.", "type": "string", "maxLength": 2000},
                "files_modified": {"description": "Paths of the files created, modified or deleted, one per entry.", "type": "array", "maxItems": 50, "items": {"type": "string", "maxLength": 500}},
                "decisions_made": {"description": "Each decision taken, as \"Decision: X — Reason: Y\".", "type": "array", "maxItems": 50, "items": {"type": "string", "maxLength": 500}},
                "open_questions": {"description": "Questions still unanswered.", "type": "array", "maxItems": 50, "items": {"type": "string", "maxLength": 500}},
                "next_steps": {"description": "What is to be done next, in order.", "type": "array", "maxItems": 50, "items": {"type": "string", "maxLength": 500}}
            }
        });
        assert_eq!(schema, expected, "{schema:#}");
        assert!(schema["description"]
            .as_str()
            .unwrap()
            .starts_with("An anchored summary"));
    }
}
