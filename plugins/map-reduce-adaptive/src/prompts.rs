//! The prompts, per content type and per kind of call.
//!
//! Every prompt puts the material to summarize last, between `<content>` and `</content>` on
//! lines of their own (tamp's convention, see the host's `providers` module): providers that
//! do not follow instructions (the offline extractive summarizer, the scripted provider's
//! `echo`) summarize what is inside the last such pair. That is why the prior summary sits
//! outside the tags in a map call (context only) but inside them in the final synthesis (it
//! must flow into the new summary whichever provider answers).
//!
//! Nothing in a map request depends on what comes after its chunk (no "chunk 3 of 12"), so a
//! conversation that grows at its end produces the same map requests for its older part.

use tamp_plugin_api::sdk::length;
use tamp_plugin_api::sdk::prompt::wrap_content;
use tamp_plugin_api::LlmRequest;

use crate::config::ContentType;

/// How the prompts speak of one content type.
struct Voice {
    /// What the whole material is called ("conversation").
    noun: &'static str,
    /// The system prompt.
    system: &'static str,
    /// What a summary must keep, as instructions.
    keep: &'static str,
}

const RULES: &str = "Write only the summary, with no preamble or comment about the task. \
     Never add facts that are not in the material. Prefer short, dense sentences or bullet points.";

fn voice(content_type: ContentType) -> Voice {
    match content_type {
        ContentType::Conversation => Voice {
            noun: "conversation",
            system: "You summarize an AI assistant's conversation with a user, including the \
                     assistant's tool calls and their results, so the assistant can carry on the \
                     work without the original messages.",
            keep: "Keep the user's preferences and constraints, the decisions made and why, the \
                   action items and open questions, and the facts the work depends on: names, \
                   file paths, identifiers, commands, numbers and error messages. Drop greetings, \
                   repetition and tool output that led nowhere.",
        },
        ContentType::Document => Voice {
            noun: "document",
            system: "You summarize documents for a reader who will not see the original.",
            keep: "Keep the main points and the line of argument in the document's order, what \
                   each part covers, definitions, key facts and figures, names and dates.",
        },
        ContentType::Journal => Voice {
            noun: "journal",
            system: "You summarize journal entries and logs for someone catching up on them.",
            keep: "Keep what happened and when, in time order: events, decisions, changes of \
                   plan or state, the people and places involved, and anything left to follow \
                   up. Keep dates and times.",
        },
        ContentType::General => Voice {
            noun: "text",
            system: "You summarize text for a reader who will not see the original.",
            keep: "Keep the main points and the specific facts a reader would need later: names, \
                   numbers, identifiers and dates.",
        },
    }
}

fn system_prompt(content_type: ContentType) -> String {
    format!("{} {RULES}", voice(content_type).system)
}

/// The material in `<content>` tags, trimmed, any tags inside it escaped so the section ends
/// where the prompt means it to.
fn content_section(material: &str) -> String {
    wrap_content(material.trim())
}

/// One map call: a chunk alone (the prior summary, if any, goes to the synthesis).
pub fn map_request(
    content_type: ContentType,
    number: usize,
    chunk: &str,
    has_overlap: bool,
    target: u32,
) -> LlmRequest {
    let v = voice(content_type);
    let overlap_note = if has_overlap {
        " The part begins with a passage repeated from the end of the previous part, for \
         context; it is summarized with that part, so summarize what follows it."
    } else {
        ""
    };
    let prompt = format!(
        "Summarize this part of a {} in {}. {}{overlap_note}\n{}",
        v.noun,
        length::phrase(target),
        v.keep,
        content_section(chunk),
    );
    LlmRequest::new(
        system_prompt(content_type),
        prompt,
        length::output_cap(target),
    )
    .with_label(format!("map {number}"))
}

/// One collapse call: a group of consecutive summaries merged into one.
pub fn collapse_request(
    content_type: ContentType,
    round: u32,
    number: usize,
    summaries: &[String],
    target: u32,
) -> LlmRequest {
    let v = voice(content_type);
    let prompt = format!(
        "Below are summaries of consecutive parts of a {}, in order, separated by blank lines. \
         Merge them into one summary of {}, keeping their order and saying once what \
         they repeat. {}\n{}",
        v.noun,
        length::phrase(target),
        v.keep,
        content_section(&summaries.join("\n\n")),
    );
    LlmRequest::new(
        system_prompt(content_type),
        prompt,
        length::output_cap(target),
    )
    .with_label(format!("collapse {round}.{number}"))
}

/// The final synthesis: the summaries of the parts (and the prior summary) into the summary.
pub fn synthesis_request(
    content_type: ContentType,
    summaries: &[String],
    prior: Option<&str>,
    target: u32,
) -> LlmRequest {
    let v = voice(content_type);
    let parts = summaries.join("\n\n");
    let (intro, material) = match prior {
        Some(prior) => (
            format!(
                "Below are the summary so far of a {noun}, then summaries of the consecutive \
                 parts that followed it, in order. Write the updated summary of the whole {noun}: \
                 keep what the summary so far says unless a later part changes it, and add the \
                 new parts.",
                noun = v.noun
            ),
            format!(
                "Summary so far:\n{}\n\nSummaries of the new parts:\n{parts}",
                prior.trim()
            ),
        ),
        None => (
            format!(
                "Below are summaries of consecutive parts of a {}, in order. Write one summary \
                 of the whole.",
                v.noun
            ),
            parts,
        ),
    };
    let prompt = format!(
        "{intro} Length: {}. {}\n{}",
        length::phrase(target),
        v.keep,
        content_section(&material)
    );
    LlmRequest::new(
        system_prompt(content_type),
        prompt,
        length::output_cap(target),
    )
    .with_label("synthesis")
}

/// New material that fits one chunk, with a prior summary: the summary updated from the
/// material itself in one call, where a map call and a synthesis would read it twice.
pub fn update_request(
    content_type: ContentType,
    content: &str,
    prior: &str,
    target: u32,
) -> LlmRequest {
    let v = voice(content_type);
    let prompt = format!(
        "Below are the summary so far of a {noun} and the new material that followed it. Write \
         the updated summary of the whole {noun}: keep what the summary so far says unless the \
         new material changes it, and add what the new material says. Length: {}. {}\n{}",
        length::phrase(target),
        v.keep,
        content_section(&format!(
            "Summary so far:\n{}\n\nNew material:\n{content}",
            prior.trim()
        )),
        noun = v.noun,
    );
    LlmRequest::new(
        system_prompt(content_type),
        prompt,
        length::output_cap(target),
    )
    .with_label("update")
}

/// The one call of the `brief` level: a one-sentence brief, or with a prior summary, that
/// summary updated with one sentence for the new content.
pub fn brief_request(
    content_type: ContentType,
    content: &str,
    prior: Option<&str>,
    target: u32,
) -> LlmRequest {
    let v = voice(content_type);
    let prompt = match prior {
        Some(prior) => format!(
            "Below are the summary so far of a {} and the new material that followed it. \
             Write the updated summary: keep what the summary so far says, and add a single \
             sentence for the new material. Length: {}.\n{}",
            v.noun,
            length::phrase(target),
            content_section(&format!(
                "Summary so far:\n{}\n\nNew material:\n{content}",
                prior.trim()
            )),
        ),
        None => format!(
            "Summarize this excerpt of a {} in a single sentence of {}. {}\n{}",
            v.noun,
            length::phrase(target),
            v.keep,
            content_section(content),
        ),
    };
    LlmRequest::new(
        system_prompt(content_type),
        prompt,
        length::output_cap(target),
    )
    .with_label("brief")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn material(request: &LlmRequest) -> &str {
        let prompt = request.prompt.as_str();
        let close = prompt.rfind("</content>").unwrap();
        let open = prompt[..close].rfind("<content>").unwrap();
        &prompt[open + "<content>\n".len()..close - 1]
    }

    #[test]
    fn material_is_last_and_escaped() {
        let r = map_request(
            ContentType::Conversation,
            3,
            "user: what does </content> do?\n",
            false,
            120,
        );
        assert_eq!(material(&r), "user: what does &lt;/content&gt; do?");
        assert!(r.prompt.as_str().starts_with("Summarize this part"));
        assert!(r.prompt.contains("about 90 words (at most 120 tokens)"));
        assert_eq!(r.max_output_tokens, 180);
        assert_eq!(r.label.as_str(), "map 3");
        assert!(!r.prompt.contains("repeated from the end"));
        let r = map_request(ContentType::Conversation, 4, "x", true, 50);
        assert!(r.prompt.contains("repeated from the end"));
    }

    #[test]
    fn each_content_type_has_its_own_instructions() {
        let prompts: Vec<String> = [
            ContentType::Conversation,
            ContentType::Document,
            ContentType::Journal,
            ContentType::General,
        ]
        .into_iter()
        .map(|t| {
            let r = map_request(t, 1, "material", false, 50);
            format!("{}\n{}", r.system, r.prompt)
        })
        .collect();
        assert!(prompts[0].contains("preferences") && prompts[0].contains("action items"));
        assert!(prompts[1].contains("document's order"));
        assert!(prompts[2].contains("time order"));
        assert!(prompts[3].contains("main points"));
        for (i, a) in prompts.iter().enumerate() {
            for b in &prompts[i + 1..] {
                assert_ne!(a, b);
            }
        }
    }

    #[test]
    fn synthesis_carries_the_prior_summary_inside_the_material() {
        let parts = vec!["first part".to_string(), "second part".to_string()];
        let r = synthesis_request(ContentType::Document, &parts, Some("PRIOR"), 300);
        assert_eq!(
            material(&r),
            "Summary so far:\nPRIOR\n\nSummaries of the new parts:\nfirst part\n\nsecond part"
        );
        let r = synthesis_request(ContentType::Document, &parts, None, 300);
        assert_eq!(material(&r), "first part\n\nsecond part");
        let r = brief_request(ContentType::General, "new stuff", Some("PRIOR"), 60);
        assert!(material(&r).starts_with("Summary so far:\nPRIOR"));
        assert!(r.prompt.contains("single sentence"));
        let r = update_request(ContentType::Conversation, "new stuff", " PRIOR\n", 400);
        assert_eq!(
            material(&r),
            "Summary so far:\nPRIOR\n\nNew material:\nnew stuff"
        );
        assert_eq!(r.label.as_str(), "update");
        assert!(r.prompt.contains("about 300 words (at most 400 tokens)"));
        let r = collapse_request(ContentType::Journal, 2, 5, &parts, 80);
        assert_eq!(r.label.as_str(), "collapse 2.5");
        assert_eq!(material(&r), "first part\n\nsecond part");
    }
}
