//! What a compaction took out and what stands for it: for each page a run wrote, the message
//! in its answer that names the page (a summary, or a tool call or result cleared in place),
//! kept with the compaction's record; and, when the console shows the compaction, the page's
//! messages beside it with the ledger the summary carries.

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use tamp_plugin_api::sdk::{clearing, ledger};
use tamp_plugin_api::{ContentBlock, Message};

use super::conversation;

/// The message of a run's answer that stands for one of the pages it wrote.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Replacement {
    pub page: String,
    /// `summary` (the page's messages replaced by one summary) or `cleared` (a message whose
    /// tool output or input became a placeholder naming the page).
    pub kind: String,
    pub message: Message,
}

/// For each of `pages`, the message of `answer` that names it, in the order of the answer. A
/// page no message names (a later stage of the same run summarized its summary) has none.
pub fn replacements(answer: &[Message], pages: &[&str]) -> Vec<Replacement> {
    if pages.is_empty() {
        return Vec::new();
    }
    let mut out = Vec::new();
    for message in answer {
        if let Some(info) = message.summary_info() {
            if pages.contains(&info.page_ref.as_str()) {
                out.push(Replacement {
                    page: info.page_ref.to_string(),
                    kind: "summary".into(),
                    message: message.clone(),
                });
            }
            continue;
        }
        let cleared = message
            .content
            .iter()
            .filter_map(clearing::cleared_page)
            .find(|page| pages.contains(page));
        if let Some(page) = cleared {
            out.push(Replacement {
                page: page.to_string(),
                kind: "cleared".into(),
                message: message.clone(),
            });
        }
    }
    out
}

/// A summary's text: its text blocks, one after another.
fn summary_text(message: &Message) -> String {
    message
        .content
        .iter()
        .filter_map(|b| match b {
            ContentBlock::Text { text, .. } => Some(text.as_str()),
            _ => None,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// A replacement as the console shows it: the message, and for a summary its narrative and
/// the ledger it carries, group by group (a group of an earlier summary names its page).
pub fn replacement_view(replacement: &Replacement) -> Value {
    let mut view = json!({
        "page": replacement.page,
        "kind": replacement.kind,
        "message": conversation::message_view(&replacement.message, &Default::default()),
    });
    if replacement.kind == "summary" {
        let text = summary_text(&replacement.message);
        let (narrative, carried) = ledger::split(&text);
        view["narrative"] = json!(narrative);
        if let Some(carried) = carried {
            let groups: Vec<Value> = carried
                .groups
                .iter()
                .map(|g| {
                    json!({
                        "page": g.page,
                        "entries": g.entries.iter().map(|e| json!({
                            "kind": e.kind.label(),
                            "message": e.message,
                            "text": e.text,
                        })).collect::<Vec<_>>(),
                    })
                })
                .collect();
            view["ledger"] = json!({
                "groups": groups,
                "moved": carried.moved,
                "packed": carried.packed,
                "fixed": carried.fixed,
            });
        }
    }
    view
}

#[cfg(test)]
mod tests {
    use tamp_plugin_api::sdk::summary_message;
    use tamp_plugin_api::{Role, SummaryStatus, ToolResultPart};

    use super::*;

    #[test]
    fn each_page_is_paired_with_the_message_that_names_it() {
        let summary = summary_message(
            "The user asked for a build; it failed twice.",
            "pg_aaa",
            "map-reduce-adaptive",
            SummaryStatus::Final,
        );
        let cleared = Message::new(
            Role::User,
            vec![ContentBlock::ToolResult {
                tool_use_id: "t1".into(),
                content: vec![ToolResultPart::Text {
                    text: clearing::result_placeholder("pg_bbb", "Output of Bash cleared.").into(),
                }]
                .into(),
                is_error: false,
                extra_json: Default::default(),
            }],
        );
        let other = Message::text(Role::User, "go on");
        let answer = vec![summary, other.clone(), cleared];
        let found = replacements(&answer, &["pg_bbb", "pg_aaa", "pg_ccc"]);
        assert_eq!(
            found
                .iter()
                .map(|r| (r.page.as_str(), r.kind.as_str()))
                .collect::<Vec<_>>(),
            [("pg_aaa", "summary"), ("pg_bbb", "cleared")]
        );
        assert!(replacements(&answer, &[]).is_empty());
        let view = replacement_view(&found[0]);
        assert_eq!(
            view["narrative"],
            "The user asked for a build; it failed twice."
        );
        assert!(view.get("ledger").is_none());
    }
}
