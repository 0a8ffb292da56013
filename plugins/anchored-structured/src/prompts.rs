//! The prompts of the three calls: a chunk's prose summary, the structured summary and the
//! prose fallback. Each depends on the material, the config and the prior alone.
//!
//! Each puts the material first and the instructions after it. A server that keeps the
//! prompt it read last (llama.cpp's slots, providers' prefix caches) then reads the material
//! once for a structured call and the prose fallback that follows it, since both open with the
//! same system prompt and material; and a small model has the instructions, length included,
//! nearest to where it starts writing.

use tamp_plugin_api::prelude::*;
use tamp_plugin_api::sdk::length;
use tamp_plugin_api::sdk::prompt::wrap_content;
use tamp_plugin_api::serde_json;

use crate::config::Config;
use crate::schema::{
    AnchoredSummary, MAX_ENTRIES, MAX_ENTRIES_WITH_LEDGER, MAX_ENTRY_CHARS, MAX_INTENT_CHARS,
};

pub const SYSTEM: &str =
    "You summarize an AI agent's working session so that the agent can carry on \
    from the summary alone. Only state what the material says: never invent files, decisions, \
    questions or steps.";

fn extra(config: &Config) -> String {
    match config.extra_instruction.as_deref().map(str::trim) {
        Some(extra) if !extra.is_empty() => format!("\nAlso: {extra}\n"),
        _ => String::new(),
    }
}

pub fn chunk_request(
    config: &Config,
    chunk: &str,
    index: usize,
    total: usize,
    target: u32,
) -> LlmRequest {
    let prompt = format!(
        "{}\nSummarize the part above, part {index} of {total} of an agent session, in prose, \
         in {}. Keep every file path touched, every decision with its reason, every open \
         question and every next step it states, word for word where short.{}",
        wrap_content(chunk),
        length::phrase(target),
        extra(config),
    );
    LlmRequest::new(SYSTEM, prompt, length::output_cap(target))
        .with_label(format!("chunk {index}/{total}"))
}

/// The structured call, asking for about `target` tokens in all (`sdk::length`) and
/// capping the answer at half as much again: an answer cut there does not parse and falls
/// back to prose, so the prompt says the length. While the ledger is on, the lists it
/// holds are neither asked for nor shown from the prior.
pub fn structured_request(
    config: &Config,
    material: &str,
    chunked: bool,
    prior: Option<&AnchoredSummary>,
    target: u32,
) -> LlmRequest {
    let ledger = config.ledger.enabled;
    let what = if chunked {
        "summaries above of consecutive parts of an agent session"
    } else {
        "agent session above"
    };
    let prior_text = match prior {
        // A small model shown the prior's lists copies them back instead of writing what
        // the material adds: on the planted session 7 of its 12 answers were the prior word
        // for word, and 6 the same as the answer before them. While the ledger is on, the
        // model is shown the prior's intent alone; its lists are merged in by the plugin.
        Some(prior) if ledger => match one_paragraph(&prior.session_intent) {
            intent if intent.is_empty() => String::new(),
            intent => format!(
                "\nThe session's intent, as an earlier summary of the session before the \
                 material above states it (the host keeps that summary's open questions and \
                 next steps): {intent}\n"
            ),
        },
        Some(prior) => format!(
            "\nAn earlier anchored summary of the session before the material above (its \
             lists are carried forward by the host, so list only what the material \
             adds):\n{}\n",
            serde_json::to_string_pretty(prior).unwrap_or_default()
        ),
        None => String::new(),
    };
    let max_entries = if ledger {
        MAX_ENTRIES_WITH_LEDGER
    } else {
        MAX_ENTRIES
    };
    let lists = if ledger {
        ""
    } else {
        "- files_modified: each file path created, modified or deleted;\n\
         - decisions_made: each decision, as \"Decision: X — Reason: Y\";\n"
    };
    let prompt = format!(
        "{}\n{prior_text}\
         Write the anchored summary of the {what}, filling every field of the schema:\n\
         - session_intent: what the session is trying to achieve (at most \
         {MAX_INTENT_CHARS} characters);\n\
         {lists}\
         - open_questions: what is still unanswered;\n\
         - next_steps: what is to be done next, in order.\n\
         An empty list is the right answer when the material has nothing of that kind. \
         Never invent anything the material does not say. Each entry at most \
         {MAX_ENTRY_CHARS} characters, at most {max_entries} entries per list, and the \
         whole answer {}.{}",
        wrap_content(material),
        length::phrase(target),
        extra(config),
    );
    LlmRequest::new(SYSTEM, prompt, length::output_cap(target))
        .with_label("anchored summary")
        .with_schema_json(&AnchoredSummary::request_schema(ledger))
}

/// `text` on one line: an intent the model wrote over several lines reads as one statement.
fn one_paragraph(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

pub fn prose_request(config: &Config, material: &str, chunked: bool, target: u32) -> LlmRequest {
    let what = if chunked {
        "the summaries above of consecutive parts of an agent session"
    } else {
        "the agent session above"
    };
    let prompt = format!(
        "{}\nSummarize {what} so the agent can carry on from the summary alone: its intent, \
         the files it modified, the decisions it made and why, what is still open and the next \
         steps, in {}. Say nothing the material does not say.{}",
        wrap_content(material),
        length::phrase(target),
        extra(config),
    );
    LlmRequest::new(SYSTEM, prompt, length::output_cap(target)).with_label("prose summary")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A structured call and the prose fallback after it open alike, system prompt and
    /// material, so a server that keeps the prompt it read last reads the material once.
    #[test]
    fn the_structured_call_and_its_fallback_open_with_the_same_material() {
        let config = Config::default();
        let material = "user: fix the totals\nassistant called bash(pytest)";
        let opening = wrap_content(material);
        for chunked in [false, true] {
            let structured = structured_request(&config, material, chunked, None, 300);
            let prose = prose_request(&config, material, chunked, 300);
            assert_eq!(structured.system, prose.system);
            assert!(structured.prompt.starts_with(opening.as_str()));
            assert!(prose.prompt.starts_with(opening.as_str()));
        }
        let chunk = chunk_request(&config, material, 1, 2, 300);
        assert!(chunk.prompt.starts_with(opening.as_str()));
    }

    /// With the ledger on, the prior's intent is shown and its lists are not (a small model
    /// copied them back); with it off, the prior's JSON is shown, every list in it.
    #[test]
    fn with_the_ledger_the_prior_is_shown_by_its_intent_alone() {
        let prior = AnchoredSummary {
            session_intent: "Fix the loader\n so CI passes.".into(),
            decisions_made: vec!["Decision: keep the old format".into()],
            next_steps: vec!["Bisect the loader change.".into()],
            ..Default::default()
        };
        let mut config = Config::default();
        let on = structured_request(&config, "m", false, Some(&prior), 300).prompt;
        let after = on.rsplit("</content>").next().unwrap();
        assert!(
            after.contains(": Fix the loader so CI passes.\n"),
            "{after}"
        );
        assert!(!after.contains("Bisect") && !after.contains("keep the old format"));
        // A prior that states no intent adds no line; its lists are merged all the same.
        let no_intent = AnchoredSummary {
            session_intent: " ".into(),
            ..prior.clone()
        };
        let shown = structured_request(&config, "m", false, Some(&no_intent), 300).prompt;
        assert_eq!(
            shown,
            structured_request(&config, "m", false, None, 300).prompt
        );
        config.ledger.enabled = false;
        let off = structured_request(&config, "m", false, Some(&prior), 300).prompt;
        assert!(
            off.contains("\"next_steps\": [\n    \"Bisect the loader change.\""),
            "{off}"
        );
        assert!(off.contains("keep the old format"), "{off}");
    }
}
