//! What a run replaces and what it writes, as pure functions tested without a host: the span
//! and its prior summaries, the checks an answer must pass, the merge of the new summary over
//! the prior, and the summary built without the LLM.

use std::ops::Range;

use tamp_plugin_api::prelude::*;
use tamp_plugin_api::sdk::groups::tool_activity;
use tamp_plugin_api::sdk::prompt::{render_messages, RenderOptions};
use tamp_plugin_api::sdk::structured;
use tamp_plugin_api::sdk::summary::with_text;
use tamp_plugin_api::serde_json::json;

use crate::config::LedgerConfig;
use crate::schema::{AnchoredSummary, Merge, SummaryPath, LEDGER_LISTS, MAX_ENTRIES_WITH_LEDGER};
use crate::NAME;

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
}
/// The span to replace: from the start of the compactable range to its end or to the first
/// system message inside it (one contiguous run, so one page and one summary). A prior's text
/// is kept without its ledger (which `sdk::ledger::finish` carries), in case it must be
/// summarized as content.
pub fn select(messages: &[Message], keep_recent: usize, ledger: &LedgerConfig) -> Selection {
    let range = sdk::compactable_range(messages, keep_recent);
    let render_options = RenderOptions::default();
    let mut selected = sdk::span::select_span(messages, range, NAME, &render_options);
    let (prior_pages, prior_texts) = selected
        .priors
        .iter()
        .map(|&i| {
            let page = messages[i]
                .summary_info()
                .map(|info| info.page_ref.to_string())
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
    }
}

/// The JSON kept with the page: the new answer merged over the prior, or on the fallback
/// paths the prior alone, so its sections are never lost to a failed call. With the ledger
/// on, questions and steps are the short-term lists: the newest few (the second count says
/// how many older ones went).
pub fn merge(
    new: Option<&AnchoredSummary>,
    prior: Option<&AnchoredSummary>,
    ledger: bool,
) -> (AnchoredSummary, Merge, usize) {
    let (mut merged, merge) = match (new, prior) {
        (Some(new), Some(prior)) => new.clone().merged_over(prior),
        (Some(new), None) => (new.clone(), Merge::default()),
        (None, Some(prior)) => (prior.clone(), Merge::default()),
        (None, None) => (AnchoredSummary::default(), Merge::default()),
    };
    let stale_dropped = if ledger {
        merged.keep_newest_steps(MAX_ENTRIES_WITH_LEDGER)
    } else {
        0
    };
    (merged, merge, stale_dropped)
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

/// The structured answer, parsed, within the limits and complete; or why not.
pub fn structured_answer(
    answer: Result<LlmResponse, HostError>,
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
    let missing = summary.missing_anchors();
    if !missing.is_empty() {
        return Err(format!(
            "incomplete answer: {} empty",
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
    use tamp_plugin_api::sdk::structured::scripted_answer;

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
        structured_answer(ok(full)).unwrap();
        let incomplete = full.replace("[\"y\"]", "[]");
        assert!(structured_answer(ok(&incomplete))
            .unwrap_err()
            .contains("next_steps"));
        assert!(structured_answer(ok("{not json"))
            .unwrap_err()
            .starts_with("invalid JSON"));
        let long = full.replace("\"x\"", &format!("\"{}\"", "x".repeat(2_001)));
        assert!(structured_answer(ok(&long))
            .unwrap_err()
            .starts_with("session_intent"));
    }

    #[test]
    fn the_merge_keeps_the_prior_on_fallback_paths_and_trims_steps_with_the_ledger() {
        let summary = |intent: &str, steps: usize| AnchoredSummary {
            session_intent: intent.into(),
            next_steps: (0..steps).map(|i| format!("step {i}")).collect(),
            ..AnchoredSummary::default()
        };
        let prior = summary("old", 1);
        let (merged, _, dropped) = merge(None, Some(&prior), false);
        assert_eq!((merged, dropped), (prior.clone(), 0));
        let (merged, _, _) = merge(Some(&summary("new", 1)), Some(&prior), false);
        assert_eq!(merged.session_intent, "new");
        let many = summary("new", MAX_ENTRIES_WITH_LEDGER + 2);
        let (merged, _, dropped) = merge(Some(&many), None, true);
        assert_eq!(dropped, 2);
        assert_eq!(merged.next_steps.len(), MAX_ENTRIES_WITH_LEDGER);
        assert!(merge(None, None, true).0.is_empty());
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
        let s = select(&msgs, 1, &LedgerConfig::default());
        assert_eq!(s.span, 1..4);
        assert_eq!(s.prior_pages, ["pg_1"]);
        assert_eq!(s.pieces.len(), 2);
        assert!(s.pieces[1].contains("OTHER"));
    }
}
