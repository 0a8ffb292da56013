//! What a run replaces and what it writes, as pure functions tested without a host: the span
//! and its prior summaries, the checks an answer must pass, the merge of the new summary over
//! the prior, the summary built without the LLM, whether it is cached, the page's metadata
//! and the report.

use std::ops::Range;

use tamp_plugin_api::prelude::*;
use tamp_plugin_api::sdk::groups::tool_activity;
use tamp_plugin_api::sdk::prompt::{render_messages, RenderOptions};
use tamp_plugin_api::sdk::structured;
use tamp_plugin_api::sdk::summary::with_text;
use tamp_plugin_api::serde_json::{json, Value};

use crate::config::{Config, Reuse};
use crate::schema::{
    AnchoredSummary, Merge, SummaryPath, LEDGER_LISTS, MAX_ENTRIES, MAX_ENTRIES_WITH_LEDGER,
};
use crate::{METADATA_KEY, NAME};

/// File paths listed by the no-LLM summary.
const MAX_PATHS_SHOWN: usize = 30;

/// The messages the stage replaces, split into the prior summary and the content.
pub struct Selection {
    pub span: Range<usize>,
    /// Page refs of this strategy's earlier summaries in the span.
    pub prior_pages: Vec<String>,
    /// Texts of those summaries, used as content when their JSON cannot be read back.
    pub prior_texts: Vec<String>,
    /// Everything else, one rendered unit (message or tool exchange) per piece.
    pub pieces: Vec<String>,
    /// The messages of each piece, while no prior summary is among them.
    pub piece_ranges: Vec<Range<usize>>,
    /// The pinned units inside the span, which the host keeps after the summary.
    pub kept: Vec<Range<usize>>,
}

/// The span to replace: from the start of the compactable range to its end (one contiguous
/// run, so one page and one summary; the system messages inside it are kept, not
/// summarized). A prior's text is kept without its ledger (which `sdk::ledger::finish`
/// carries), in case it must be summarized as content. Tool inputs and outputs are shown
/// cut to `config.max_tool_chars`.
pub fn select(messages: &[Message], keep_recent: usize, config: &Config) -> Selection {
    let range = sdk::compactable_range(messages, keep_recent);
    let ledger = &config.ledger;
    let render_options = RenderOptions {
        max_tool_chars: config.max_tool_chars,
        max_assistant_chars: config.max_assistant_chars,
        ..RenderOptions::default()
    };
    let mut selected = sdk::span::select_span(messages, range, NAME, &render_options);
    let (prior_pages, prior_texts) = selected
        .priors
        .iter()
        .map(|&i| {
            let page = messages[i]
                .summary_info()
                .map(|info| info.page().to_string())
                .unwrap_or_default();
            let shown = with_text(&messages[i], ledger.shown(&messages[i].joined_text()));
            (page, render_messages(&[shown], &render_options))
        })
        .unzip();
    let (piece_ranges, pieces) = selected.take_pieces();
    Selection {
        span: selected.span,
        prior_pages,
        prior_texts,
        pieces,
        piece_ranges,
        kept: selected.kept,
    }
}

impl Selection {
    /// Whether the summary cache may be used: it is keyed by the span's messages alone, so
    /// only when no prior summary (whose page the key does not see) is part of the span.
    pub fn cache_keyed(&self) -> bool {
        self.prior_pages.is_empty()
    }
}

/// What the LLM steps produced.
pub struct Produced {
    pub path: SummaryPath,
    /// The summary's own JSON (structured path) or nothing.
    pub structured: Option<AnchoredSummary>,
    /// The prose answer (prose path) or the no-LLM description.
    pub prose: Option<String>,
    pub chunks: usize,
    pub warnings: Vec<String>,
}

impl Produced {
    /// A cached summary that covers the whole span: no call made.
    pub fn cached(summary: AnchoredSummary) -> Self {
        Produced::structured(summary, 0, Vec::new())
    }

    pub fn structured(summary: AnchoredSummary, chunks: usize, warnings: Vec<String>) -> Self {
        Produced {
            path: SummaryPath::Structured,
            structured: Some(summary),
            prose: None,
            chunks,
            warnings,
        }
    }

    pub fn prose(text: String, chunks: usize, warnings: Vec<String>) -> Self {
        Produced {
            path: SummaryPath::Prose,
            structured: None,
            prose: Some(text),
            chunks,
            warnings,
        }
    }

    /// The last fallback: the description of the messages is filled in by the caller, which
    /// has them.
    pub fn no_llm(chunks: usize, warnings: Vec<String>) -> Self {
        Produced {
            path: SummaryPath::NoLlm,
            structured: None,
            prose: None,
            chunks,
            warnings,
        }
    }
}

/// The earlier summary the new one is merged over, as the report's reason says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MergedOver {
    Nothing,
    /// A prior anchored summary in the span.
    Prior,
    /// The cached summary of the span's leading part.
    Cached,
}

impl MergedOver {
    pub fn of(reused: bool, prior: bool) -> Self {
        match (reused, prior) {
            (true, _) => MergedOver::Cached,
            (false, true) => MergedOver::Prior,
            (false, false) => MergedOver::Nothing,
        }
    }

    fn said(self) -> &'static str {
        match self {
            MergedOver::Cached => ", cached summary of its leading part merged",
            MergedOver::Prior => ", prior summary merged",
            MergedOver::Nothing => "",
        }
    }
}

/// The JSON kept with the page, and what merging it cost.
pub struct Merged {
    pub summary: AnchoredSummary,
    /// How the new answer's lists met the prior's.
    pub merge: Merge,
    /// Short-term entries (questions, steps) dropped as older than the newest few.
    pub stale_dropped: usize,
}

impl Merged {
    /// The warning owed when list entries were lost to the limit.
    pub fn warning(&self) -> Option<String> {
        (self.merge.dropped > 0).then(|| {
            format!(
                "{} oldest list entr(ies) dropped to stay within {MAX_ENTRIES} per list, even \
                 packed",
                self.merge.dropped
            )
        })
    }
}

/// The JSON kept with the page: the new answer merged over the prior, or on the fallback
/// paths the prior alone, so its sections are never lost to a failed call. With the ledger
/// on, questions and steps are the short-term lists: the newest few.
pub fn merge(
    new: Option<&AnchoredSummary>,
    prior: Option<&AnchoredSummary>,
    ledger: bool,
) -> Merged {
    let (mut summary, merge) = match (new, prior) {
        (Some(new), Some(prior)) => new.clone().merged_over(prior),
        (Some(new), None) => (new.clone(), Merge::default()),
        (None, Some(prior)) => (prior.clone(), Merge::default()),
        (None, None) => (AnchoredSummary::default(), Merge::default()),
    };
    let stale_dropped = if ledger {
        summary.keep_newest_steps(MAX_ENTRIES_WITH_LEDGER)
    } else {
        0
    };
    Merged {
        summary,
        merge,
        stale_dropped,
    }
}

/// Whether the merged summary goes into the cache. Only a structured one: it is all the next
/// compaction needs to merge into, where a fallback's prose is not in the JSON.
pub fn caches(produced: &Produced, reuse: Reuse, selection: &Selection) -> bool {
    produced.path == SummaryPath::Structured && reuse != Reuse::Off && selection.cache_keyed()
}

/// The page's metadata: the merged JSON (read back as the next run's prior) and what the
/// summary replaced.
pub fn page_metadata(
    merged: &AnchoredSummary,
    path: SummaryPath,
    span: &[Message],
    span_tokens: u64,
) -> Value {
    json!({
        METADATA_KEY: (!merged.is_empty()).then_some(merged),
        "path": path.as_str(),
        "messages": span.len(),
        "span_tokens": span_tokens,
    })
}

/// The report's details.
#[derive(Debug, Serialize)]
#[serde(crate = "tamp_plugin_api::serde")]
pub struct Details {
    pub path: &'static str,
    pub chunks: usize,
    pub messages: usize,
    pub span_tokens: u64,
    pub summary_tokens: u64,
    pub summary_chars: usize,
    pub prior_merged: bool,
    pub stale_steps_dropped: usize,
    pub reused_messages: usize,
}

/// The stage's report: acted, or skipped when the summary would not be smaller than what it
/// replaces (the conversation must not grow).
pub fn report(details: &Details, over: MergedOver, warnings: Vec<String>) -> StageReport {
    let report = if details.summary_tokens >= details.span_tokens {
        StageReport::skipped(format!(
            "the summary ({} tokens) would not be smaller than the {} message(s) it replaces \
             ({} tokens)",
            details.summary_tokens, details.messages, details.span_tokens
        ))
    } else {
        StageReport::acted(format!(
            "{} message(s) of {} tokens → an anchored summary of {} tokens ({} path, {} \
             chunk(s){})",
            details.messages,
            details.span_tokens,
            details.summary_tokens,
            details.path,
            details.chunks,
            over.said()
        ))
    };
    report.with_warnings(warnings).with_details(details)
}

/// The summary's body: the prose (fallback paths) under its title, then the merged sections.
pub fn body(path: SummaryPath, prose: Option<&str>, merged: &AnchoredSummary) -> String {
    let mut body = String::new();
    if let Some(prose) = prose {
        let title = match path {
            SummaryPath::NoLlm => "What the messages show",
            _ => "Summary",
        };
        body.push_str(&format!("\n## {title}\n{}\n", prose.trim()));
    }
    body.push_str(&merged.markdown_sections());
    body
}

/// What a prior made on a fallback path says beyond its JSON: its rendered `text` without the
/// sections that JSON holds (the prior is merged under the answer like any other). Shown
/// them as material, a small model copied the lists back, past their cap, so its answer
/// failed and the next summary fell back too. `text` is whole when the sections are not
/// found in it as rendered (a summary cut at `max_summary_chars`).
pub fn without_sections(text: &str, prior: &AnchoredSummary) -> String {
    let sections = prior.markdown_sections();
    let sections = sections.trim();
    match text.find(sections) {
        Some(at) if !sections.is_empty() => {
            format!("{}{}", text[..at].trim_end(), &text[at + sections.len()..])
        }
        _ => text.to_string(),
    }
}

/// The structured answer, parsed and within the limits, complete once merged over `prior`
/// (as the page will keep it: an answer that names no next step carries the prior's); or
/// why not.
pub fn structured_answer(
    answer: Result<LlmResponse, HostError>,
    prior: Option<&AnchoredSummary>,
) -> Result<AnchoredSummary, String> {
    let response = answer.map_err(|e| format!("the call failed: {}", e.message))?;
    let mut value = response.structured_value().map_err(|e| e.to_string())?;
    // Asked without the lists the ledger holds, an answer leaves them out.
    if let Some(map) = value.as_object_mut() {
        for key in LEDGER_LISTS {
            map.entry(key).or_insert_with(|| json!([]));
        }
    }
    let summary: AnchoredSummary = structured::parse(value).map_err(|e| e.to_string())?;
    summary.validate()?;
    let missing = match prior {
        Some(prior) => summary.clone().merged_over(prior).0.missing_anchors(),
        None => summary.missing_anchors(),
    };
    if !missing.is_empty() {
        let carried = if prior.is_some() {
            ", the prior's too"
        } else {
            ""
        };
        return Err(format!(
            "incomplete answer: {} empty{carried}",
            missing.join(" and ")
        ));
    }
    Ok(summary)
}

/// The prose answer, trimmed; an empty answer is a failure (an empty summary would silently
/// lose what it replaces).
pub fn prose_answer(answer: Result<LlmResponse, HostError>) -> Result<String, String> {
    let response = answer.map_err(|e| format!("the call failed: {}", e.message))?;
    let text = response.text.trim();
    if text.is_empty() {
        return Err(format!(
            "the LLM answered nothing (stop reason `{}`)",
            response.stop_reason
        ));
    }
    Ok(text.to_string())
}

/// What the messages themselves show, without an LLM: counts by role, the tools called (and
/// failed), and the file paths mentioned.
pub fn no_llm_description(messages: &[Message]) -> String {
    let by_role = |role: Role| messages.iter().filter(|m| m.role == role).count();
    let mut lines = vec![format!(
        "- {} message(s): {} user, {} assistant, {} tool",
        messages.len(),
        by_role(Role::User),
        by_role(Role::Assistant),
        by_role(Role::Tool)
    )];
    let activity = tool_activity(messages);
    if activity.calls() > 0 {
        lines.push(format!(
            "- {} tool call(s): {}",
            activity.calls(),
            activity.tool_list()
        ));
    }
    if activity.errors() > 0 {
        lines.push(format!(
            "- {} failed: {}",
            activity.errors(),
            activity.failed_list()
        ));
    }
    let rendered = render_messages(messages, &RenderOptions::default());
    let paths = file_paths(&rendered);
    if !paths.is_empty() {
        let shown: Vec<&str> = paths
            .iter()
            .take(MAX_PATHS_SHOWN)
            .map(String::as_str)
            .collect();
        let more = paths.len().saturating_sub(MAX_PATHS_SHOWN);
        lines.push(format!(
            "- file paths mentioned: {}{}",
            shown.join(", "),
            if more > 0 {
                format!(" (and {more} more)")
            } else {
                String::new()
            }
        ));
    }
    lines.join("\n")
}

/// Distinct file paths in `text`, in order of first appearance: tokens with a `/` that end in a
/// file extension or have at least two slashes (URLs left out).
pub fn file_paths(text: &str) -> Vec<String> {
    let mut seen = std::collections::HashSet::new();
    let mut out = Vec::new();
    for raw in text.split(|c: char| c.is_whitespace() || "\"'`()[]{}<>,;".contains(c)) {
        let token = raw.trim_end_matches(|c: char| ".:!?".contains(c));
        if !token.contains('/') || token.contains("://") || !token.chars().any(char::is_alphabetic)
        {
            continue;
        }
        if !token
            .chars()
            .all(|c| c.is_alphanumeric() || "/._-~@+".contains(c))
        {
            continue;
        }
        let name = token.rsplit('/').next().unwrap_or("");
        let has_extension = name
            .rsplit_once('.')
            .is_some_and(|(stem, ext)| !stem.is_empty() && (1..=5).contains(&ext.len()));
        if (has_extension || token.matches('/').count() >= 2) && seen.insert(token.to_string()) {
            out.push(token.to_string());
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::render;
    use tamp_plugin_api::sdk::structured::scripted_answer;
    use tamp_plugin_api::serde_json;

    #[test]
    fn file_paths_are_found_once_in_order() {
        let text = "edited src/config/loader.py and ./Cargo.toml; see https://x.org/a/b.html, \
                    then src/config/loader.py:12 again and /etc/hosts. and 3/4 of it";
        assert_eq!(
            file_paths(text),
            ["src/config/loader.py", "./Cargo.toml", "/etc/hosts"]
        );
    }

    #[test]
    fn structured_answers_are_checked() {
        let ok = |json: &str| Ok(scripted_answer(json, Some(json)));
        let full = r#"{"session_intent":"x","files_modified":[],"decisions_made":[],
            "open_questions":[],"next_steps":["y"]}"#;
        structured_answer(ok(full), None).unwrap();
        let incomplete = full.replace("[\"y\"]", "[]");
        assert!(structured_answer(ok(&incomplete), None)
            .unwrap_err()
            .contains("next_steps"));
        // Complete as merged: the prior's steps carry on, as the page keeps them.
        let with_steps = AnchoredSummary {
            session_intent: "x".into(),
            next_steps: vec!["Add a test.".into()],
            ..Default::default()
        };
        let kept = structured_answer(ok(&incomplete), Some(&with_steps)).unwrap();
        assert!(
            kept.next_steps.is_empty(),
            "the answer itself is kept as it came"
        );
        let without_steps = AnchoredSummary {
            session_intent: "x".into(),
            ..Default::default()
        };
        assert_eq!(
            structured_answer(ok(&incomplete), Some(&without_steps)).unwrap_err(),
            "incomplete answer: next_steps empty, the prior's too"
        );
        assert!(structured_answer(ok("{not json"), None)
            .unwrap_err()
            .starts_with("invalid JSON"));
        let long = full.replace("\"x\"", &format!("\"{}\"", "x".repeat(2_001)));
        assert!(structured_answer(ok(&long), None)
            .unwrap_err()
            .starts_with("session_intent"));
    }

    #[test]
    fn a_fallback_prior_is_shown_by_its_prose_without_the_sections_its_json_holds() {
        let prior = AnchoredSummary {
            session_intent: "Fix the loader.".into(),
            next_steps: vec!["Add a test.".into()],
            ..Default::default()
        };
        let text = render(
            SummaryPath::Prose,
            4,
            &body(
                SummaryPath::Prose,
                Some("The agent read the loader."),
                &prior,
            ),
            usize::MAX,
        );
        let shown = without_sections(&format!("user: {text}\n"), &prior);
        assert!(
            shown.contains("## Summary\nThe agent read the loader."),
            "{shown}"
        );
        assert!(!shown.contains("Add a test.") && !shown.contains("## Session intent"));
        // Sections not found as rendered (a summary cut short): the text is shown whole.
        let cut = &text[..text.len() - 3];
        assert_eq!(without_sections(cut, &prior), cut);
        assert_eq!(without_sections(&text, &AnchoredSummary::default()), text);
    }

    #[test]
    fn the_merge_keeps_the_prior_on_fallback_paths_and_trims_steps_with_the_ledger() {
        let summary = |intent: &str, steps: usize| AnchoredSummary {
            session_intent: intent.into(),
            next_steps: (0..steps).map(|i| format!("step {i}")).collect(),
            ..AnchoredSummary::default()
        };
        let prior = summary("old", 1);
        let merged = merge(None, Some(&prior), false);
        assert_eq!((merged.summary, merged.stale_dropped), (prior.clone(), 0));
        let merged = merge(Some(&summary("new", 1)), Some(&prior), false);
        assert_eq!(merged.summary.session_intent, "new");
        assert_eq!(merged.warning(), None);
        let many = summary("new", MAX_ENTRIES_WITH_LEDGER + 2);
        let merged = merge(Some(&many), None, true);
        assert_eq!(merged.stale_dropped, 2);
        assert_eq!(merged.summary.next_steps.len(), MAX_ENTRIES_WITH_LEDGER);
        assert!(merge(None, None, true).summary.is_empty());
    }

    #[test]
    fn entries_lost_to_the_limit_are_warned_of() {
        let merged = Merged {
            summary: AnchoredSummary::default(),
            merge: Merge {
                packed: 4,
                dropped: 3,
            },
            stale_dropped: 0,
        };
        let warning = merged.warning().unwrap();
        assert!(
            warning.starts_with(&format!(
                "3 oldest list entr(ies) dropped to stay within {MAX_ENTRIES}"
            )),
            "{warning}"
        );
    }

    fn details(span_tokens: u64, summary_tokens: u64) -> Details {
        Details {
            path: SummaryPath::Structured.as_str(),
            chunks: 1,
            messages: 4,
            span_tokens,
            summary_tokens,
            summary_chars: 300,
            prior_merged: false,
            stale_steps_dropped: 0,
            reused_messages: 2,
        }
    }

    #[test]
    fn the_report_acts_only_on_a_smaller_summary_and_says_what_it_merged() {
        let warnings = vec!["w".to_string()];
        let acted = report(&details(1_000, 120), MergedOver::Cached, warnings.clone());
        assert!(acted.acted);
        assert_eq!(
            acted.reason.as_str(),
            "4 message(s) of 1000 tokens → an anchored summary of 120 tokens (structured path, \
             1 chunk(s), cached summary of its leading part merged)"
        );
        assert_eq!(acted.warnings.len(), 1);
        let shown: Value = serde_json::from_str(acted.details_json.as_str()).unwrap();
        assert_eq!(shown["reused_messages"], 2);
        assert_eq!(shown["summary_tokens"], 120);
        assert!(report(&details(1_000, 120), MergedOver::Prior, Vec::new())
            .reason
            .ends_with("1 chunk(s), prior summary merged)"));

        let grown = report(&details(100, 100), MergedOver::Nothing, warnings);
        assert!(!grown.acted);
        assert_eq!(
            grown.reason.as_str(),
            "the summary (100 tokens) would not be smaller than the 4 message(s) it replaces \
             (100 tokens)"
        );
        assert_eq!(grown.warnings.len(), 1);
        assert!(!grown.details_json.is_empty());
        assert_eq!(MergedOver::of(true, true), MergedOver::Cached);
        assert_eq!(MergedOver::of(false, true), MergedOver::Prior);
        assert_eq!(MergedOver::of(false, false), MergedOver::Nothing);
    }

    #[test]
    fn only_a_structured_summary_of_a_span_without_priors_is_cached() {
        let mut selection = Selection {
            span: 1..3,
            prior_pages: Vec::new(),
            prior_texts: Vec::new(),
            pieces: vec!["a".into(), "b".into()],
            piece_ranges: vec![1..2, 2..3],
            kept: Vec::new(),
        };
        let structured = Produced::cached(AnchoredSummary::default());
        let prose = Produced::prose("p".into(), 1, Vec::new());
        assert!(caches(&structured, Reuse::Merge, &selection));
        assert!(!caches(&structured, Reuse::Off, &selection));
        assert!(!caches(&prose, Reuse::Merge, &selection));
        assert!(!caches(
            &Produced::no_llm(1, Vec::new()),
            Reuse::Merge,
            &selection
        ));
        selection.prior_pages.push("pg_1".into());
        assert!(!selection.cache_keyed());
        assert!(!caches(&structured, Reuse::Merge, &selection));
    }

    #[test]
    fn the_page_keeps_the_merged_json_unless_it_is_empty() {
        let span = [
            Message::text(Role::User, "a"),
            Message::text(Role::User, "b"),
        ];
        let empty = page_metadata(&AnchoredSummary::default(), SummaryPath::NoLlm, &span, 9);
        assert_eq!(
            empty,
            json!({METADATA_KEY: null, "path": "no_llm", "messages": 2, "span_tokens": 9})
        );
        let summary = AnchoredSummary {
            session_intent: "x".into(),
            ..AnchoredSummary::default()
        };
        let kept = page_metadata(&summary, SummaryPath::Structured, &span, 9);
        assert_eq!(kept[METADATA_KEY]["session_intent"], "x");
        assert_eq!(kept["path"], "structured");
    }

    #[test]
    fn the_body_titles_the_prose_by_its_path() {
        let merged = AnchoredSummary::default();
        let no_llm = body(SummaryPath::NoLlm, Some(" - 2 message(s) "), &merged);
        assert!(
            no_llm.starts_with("\n## What the messages show\n- 2 message(s)\n"),
            "{no_llm}"
        );
        assert!(body(SummaryPath::Prose, Some("x"), &merged).contains("## Summary\nx"));
        assert_eq!(
            body(SummaryPath::Structured, None, &merged),
            merged.markdown_sections()
        );
    }

    #[test]
    fn selection_separates_the_prior_and_stops_at_a_system_message() {
        let msgs = vec![
            Message::text(Role::System, "sys"),
            sdk::summary_message("PRIOR", "pg_1", NAME, SummaryStatus::Final),
            Message::text(Role::User, "hello"),
            sdk::summary_message("OTHER", "pg_2", "map-reduce-adaptive", SummaryStatus::Final),
            Message::text(Role::System, "mid"),
            Message::text(Role::User, "recent"),
        ];
        let s = select(&msgs, 1, &Config::default());
        assert_eq!(s.span, 1..4);
        assert_eq!(s.prior_pages, ["pg_1"]);
        assert_eq!(s.pieces.len(), 2);
        assert!(s.pieces[1].contains("OTHER"));
    }
}
