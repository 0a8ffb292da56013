//! Applying a stage's edits: checked against the input first, then archived, then spliced.
//!
//! A stage reads the conversation shared and returns [`Edit`]s; nothing it does changes the
//! input, so rolling a stage back is not applying its edits. The checks are structural: one
//! pass over the conversation for its unit boundaries, then O(edits + removed messages), with
//! no copy of the conversation and no diff of a whole output against its input:
//!
//! - every span lies inside the compactable range (after the system prompt and the task,
//!   before the protected tail: TAMP-INV-03) and on unit boundaries, so a tool exchange is
//!   never split (TAMP-INV-02); it holds nothing before the last compaction boundary
//!   (TAMP-INV-13), and a clearing touches no pinned unit (a system message: TAMP-INV-11; an
//!   opaque unit: TAMP-INV-12);
//! - the pinned units inside a summarized or replaced span are kept, right after what
//!   replaces it, in order: Claude Code sends a system message every few tool calls, and a
//!   span that had to stop at each would leave almost nothing to summarize. Its page holds
//!   the whole span, them included. A system message said again later word for word is not
//!   kept: its later copy keeps the instruction (`rules::pinned::repeated_later`);
//! - spans are disjoint, so kept messages keep their order and only summaries are new
//!   (TAMP-INV-04);
//! - a `Summarize` span is archived by the host itself, and a `Replace` names a page that
//!   holds exactly its span (one hash of the span, pages being content-addressed), so nothing
//!   removed is lost (TAMP-INV-01);
//! - a `Finalize` turns one of this strategy's pending summaries final, on the same page;
//! - a `Clear` keeps its message's structure (TAMP-INV-10: only tool-result content and tool
//!   inputs change, each to a placeholder) and its placeholders name the page of exactly the
//!   original message, which the host archives before it applies the clearing (TAMP-INV-01).
//!
//! The no-growth rule (TAMP-INV-06) is counted from the spans and their replacements.

use tamp_plugin_api::rules;
use tamp_plugin_api::sdk::{self, summary_message};
use tamp_plugin_api::{Conversation, Edit, EditFfi, FfiVec, Message, PageDraft, SummaryStatus};

use crate::invariants::Violation;
use crate::store::page_id;
use crate::tokens::TokenCounter;

mod check;

pub(crate) use check::check;

/// An edit that passed the checks, in input order.
#[derive(Debug)]
pub(crate) enum Checked {
    Summarize {
        range: std::ops::Range<usize>,
        /// The pinned messages inside `range`, kept after the summary.
        kept: Vec<usize>,
        text: String,
        status: SummaryStatus,
        metadata_json: String,
    },
    Replace {
        range: std::ops::Range<usize>,
        kept: Vec<usize>,
        message: Message,
    },
    Finalize {
        index: usize,
        text: String,
    },
    Clear {
        index: usize,
        message: Message,
        /// The page its placeholders name: the original message's.
        page: String,
    },
}

impl Checked {
    /// The pinned messages inside the span, which stay.
    fn kept(&self) -> &[usize] {
        match self {
            Checked::Summarize { kept, .. } | Checked::Replace { kept, .. } => kept,
            _ => &[],
        }
    }

    fn range(&self) -> std::ops::Range<usize> {
        match self {
            Checked::Summarize { range, .. } | Checked::Replace { range, .. } => range.clone(),
            Checked::Finalize { index, .. } | Checked::Clear { index, .. } => *index..*index + 1,
        }
    }

    /// The message that takes the span's place, its summary referring to `page` (a
    /// `Summarize` edit's new page; a `Finalize` keeps the pending summary's).
    fn message(&self, messages: &[Message], strategy: &str, page: &str) -> Message {
        match self {
            Checked::Summarize { text, status, .. } => {
                summary_message(text, page, strategy, *status)
            }
            Checked::Replace { message, .. } | Checked::Clear { message, .. } => message.clone(),
            Checked::Finalize { index, text } => {
                let pending = &messages[*index];
                let page_ref = pending.summary_info().map_or("", |i| i.page_ref.as_str());
                let mut message = summary_message(text, page_ref, strategy, SummaryStatus::Final);
                message.role = pending.role;
                message
            }
        }
    }
}

/// One line on what `edit` asks for, for reports: `summarize messages[2..6] (final): "…"`.
pub fn describe(edit: &EditFfi) -> String {
    let Ok(edit) = edit.as_enum() else {
        return "an edit of a kind this host does not know".into();
    };
    let span = edit.span();
    let at = format!("messages[{}..{}]", span.start, span.end);
    let preview = |text: &str| sdk::cap_chars(text, 60);
    match edit {
        Edit::Summarize { text, status, .. } => {
            format!("summarize {at} ({}): {:?}", status.as_str(), preview(text))
        }
        Edit::Replace { message, .. } => match message.summary_info() {
            Some(info) => format!("replace {at} by a summary of page {}", info.page_ref),
            None => format!("replace {at} by a message that is not a summary"),
        },
        Edit::Finalize { text, .. } => format!("finalize {at}: {:?}", preview(text)),
        Edit::Clear { message, .. } => {
            let cleared = message
                .content
                .iter()
                .filter(|b| rules::clearing::is_cleared(b))
                .count();
            format!("clear {at} ({cleared} cleared block(s) in it)")
        }
        _ => format!("an edit of another kind at {at}"),
    }
}

/// What a checked edit puts in its span's place, once its page exists.
pub(crate) struct Ready {
    range: std::ops::Range<usize>,
    /// The pinned messages inside `range`, which stay, after `message`.
    kept: Vec<usize>,
    message: Message,
    /// The page it refers to, when the edit removed messages into one, or cleared one.
    page: Option<String>,
    cleared: bool,
}

/// The key of a clearing's page metadata that says a placeholder stands for the page, not a
/// summary (what `recall` tells the model).
pub(crate) const REPLACED_BY: &str = "replaced_by";
pub(crate) const PLACEHOLDER: &str = "placeholder";

/// The page drafts of the `Summarize` and `Clear` edits, in order, for the host to archive
/// (a clearing's page holds the original message alone, its metadata [`REPLACED_BY`]).
pub(crate) fn drafts(messages: &[Message], checked: &[Checked], strategy: &str) -> Vec<PageDraft> {
    checked
        .iter()
        .filter_map(|c| match c {
            Checked::Summarize {
                range,
                metadata_json,
                ..
            } => Some(PageDraft {
                messages: messages[range.clone()].to_vec().into(),
                strategy: strategy.into(),
                metadata_json: metadata_json.as_str().into(),
            }),
            Checked::Clear { index, .. } => Some(PageDraft {
                messages: vec![messages[*index].clone()].into(),
                strategy: strategy.into(),
                metadata_json: format!(r#"{{"{REPLACED_BY}":"{PLACEHOLDER}"}}"#).into(),
            }),
            _ => None,
        })
        .collect()
}

/// Turns checked edits into replacements, `pages` being the ids the drafts were archived
/// under, in order. A store that gave a clearing's original another id than the one its
/// placeholders name is an error: the placeholders would name a page that is not there.
pub(crate) fn ready(
    messages: &[Message],
    checked: Vec<Checked>,
    mut pages: impl Iterator<Item = String>,
    strategy: &str,
) -> Result<Vec<Ready>, String> {
    checked
        .into_iter()
        .map(|c| {
            let range = c.range();
            let kept = c.kept().to_vec();
            let cleared = matches!(c, Checked::Clear { .. });
            let page = match &c {
                Checked::Summarize { .. } => {
                    Some(pages.next().expect("one page per Summarize edit"))
                }
                Checked::Clear { page, .. } => {
                    let archived = pages.next().expect("one page per Clear edit");
                    if archived != *page {
                        return Err(format!(
                            "the store archived a cleared message as page {archived}, not as \
                             page {page}, which its placeholders name"
                        ));
                    }
                    Some(archived)
                }
                Checked::Replace { message, .. } => {
                    message.summary_info().map(|i| i.page_ref.to_string())
                }
                Checked::Finalize { .. } => None,
            };
            let message = match c {
                Checked::Replace { message, .. } | Checked::Clear { message, .. } => message,
                other => other.message(messages, strategy, page.as_deref().unwrap_or("")),
            };
            Ok(Ready {
                range,
                kept,
                message,
                page,
                cleared,
            })
        })
        .collect()
}

/// The tokens of `messages` (`tokens_before` in all) once `checked` is applied, counted from
/// the spans and what replaces them alone. A summary's page ref is not counted, so the page
/// it will get does not matter yet.
pub(crate) fn count_after(
    messages: &[Message],
    checked: &[Checked],
    tokens_before: u64,
    tokens: &TokenCounter,
    strategy: &str,
) -> u64 {
    let mut removed = 0u64;
    let mut added = 0u64;
    for c in checked {
        removed += tokens.count_messages(&messages[c.range()]);
        removed -= c
            .kept()
            .iter()
            .map(|&i| tokens.count_message(&messages[i]))
            .sum::<u64>();
        added += match c {
            Checked::Replace { message, .. } | Checked::Clear { message, .. } => {
                tokens.count_message(message)
            }
            // The page ref is not counted, so the page a summary will get does not matter.
            other => tokens.count_message(&other.message(messages, strategy, "")),
        };
    }
    (tokens_before + added).saturating_sub(removed)
}

/// The pages that `Replace` edits name (which must exist).
pub(crate) fn replaced_pages(checked: &[Checked]) -> Vec<String> {
    checked
        .iter()
        .filter_map(|c| match c {
            Checked::Replace { message, .. } => {
                message.summary_info().map(|i| i.page_ref.to_string())
            }
            _ => None,
        })
        .collect()
}

/// The result of applying a stage's edits.
pub(crate) struct Applied {
    pub conversation: Conversation,
    /// Pages the summaries put in place refer to (archived now, or by the stage).
    pub pages: Vec<String>,
    pub messages_removed: u32,
    pub summaries_added: u32,
    /// Messages cleared in place (their originals archived).
    pub messages_cleared: u32,
}

/// Splices `ready` into `input`, moving the kept messages (none is copied).
pub(crate) fn splice(input: Conversation, ready: Vec<Ready>) -> Applied {
    let mut pages = Vec::new();
    let mut messages_removed = 0u32;
    let mut summaries_added = 0u32;
    let mut messages_cleared = 0u32;
    for r in &ready {
        if let Some(page) = &r.page {
            pages.push(page.clone());
            if r.cleared {
                messages_cleared += 1;
            } else {
                messages_removed += (r.range.len() - r.kept.len()) as u32;
                summaries_added += 1;
            }
        }
    }
    let Conversation {
        thread_id,
        messages,
        metadata_json,
    } = input;
    let mut out = Vec::with_capacity(messages.len());
    let mut edits = ready.into_iter().peekable();
    let mut skip_until = 0usize;
    // The pinned messages of the span being skipped, which stay (in order, after its
    // replacement).
    let mut kept: Vec<usize> = Vec::new();
    for (i, message) in messages.into_iter().enumerate() {
        if i < skip_until {
            if kept.binary_search(&i).is_ok() {
                out.push(message);
            }
            continue;
        }
        match edits.peek() {
            Some(r) if r.range.start == i => {
                let r = edits.next().expect("peeked");
                skip_until = r.range.end;
                kept = r.kept;
                out.push(r.message);
                if kept.binary_search(&i).is_ok() {
                    out.push(message);
                }
            }
            _ => out.push(message),
        }
    }
    Applied {
        conversation: Conversation {
            thread_id,
            messages: out.into(),
            metadata_json,
        },
        pages,
        messages_removed,
        summaries_added,
        messages_cleared,
    }
}

/// A page id and the messages it holds.
pub type ArchivedPage = (String, Vec<Message>);

/// A stage's edits applied to a copy of `input` without a store, for the conformance kit:
/// each `Summarize` page gets the id the store would give it (pages are content-addressed),
/// and is returned with its messages so the kit's checks can find it.
pub fn preview(
    input: &Conversation,
    asked: FfiVec<EditFfi>,
    keep_recent: usize,
    strategy: &str,
) -> Result<(Conversation, Vec<ArchivedPage>), Violation> {
    let checked = check(&input.messages, asked, keep_recent, strategy)?;
    let pages: Vec<ArchivedPage> = drafts(&input.messages, &checked, strategy)
        .into_iter()
        .map(|draft| {
            let messages: Vec<Message> = draft.messages.into();
            (page_id(&messages), messages)
        })
        .collect();
    let ids = pages.iter().map(|(id, _)| id.clone()).collect::<Vec<_>>();
    let ready = ready(&input.messages, checked, ids.into_iter(), strategy)
        .expect("pages made by page_id are the pages clearings name");
    Ok((splice(input.clone(), ready).conversation, pages))
}

#[cfg(test)]
mod tests;
