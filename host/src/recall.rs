//! What a model reads back of what was archived: a page rendered as readable text, and a
//! search over the archive, each within what its caller may see ([`Scope`]). `tamp mcp`'s
//! tools (`recall`, `search`) are these two functions.
//!
//! A page holds the original messages a summary or a placeholder stands for. Some of those
//! may themselves be placeholders (a clearing's, or an earlier summary): the rendering
//! restores a cleared tool output from its own page, when the caller may read that page, so
//! that one `recall` of a summary's page gives the outputs the summary's span had, not their
//! placeholders.

use std::fmt::Write as _;

use tamp_plugin_api::rules::clearing::{parse_input_placeholder, parse_result_placeholder};
use tamp_plugin_api::sdk::prompt::result_text;
use tamp_plugin_api::{ContentBlock, Message, ToolResultPart};

use crate::store::search::{PageSearch, Scope};
use crate::store::{PageStore, SearchHit, StoreError, StoredPage};

/// The most characters of a page one `recall` returns; the rest is asked for with `offset`.
pub const RECALL_CHARS: usize = 24_000;
/// The most hits one `search` returns.
pub const MAX_HITS: usize = 50;

/// One `recall`: a part of a page's text.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Recalled {
    /// The part, with a last line that says how to ask for the rest when there is more.
    pub text: String,
    /// The page's full id.
    pub page: String,
    /// Where the next part starts (characters), when there is one.
    pub next_offset: Option<usize>,
}

/// Why a recall or a search gave nothing.
#[derive(Debug, thiserror::Error)]
pub enum RecallError {
    /// Not a page of the caller's: unknown, or another's (the two are not told apart).
    #[error("no page {0} among the pages you can read; page ids look like pg_ and 12 to 32 hex digits, as placeholders and summaries name them")]
    NoSuchPage(String),
    #[error("offset {offset} is past the end of page {page} ({chars} characters)")]
    PastTheEnd {
        page: String,
        offset: usize,
        chars: usize,
    },
    #[error(transparent)]
    Store(StoreError),
}

/// Reads page `reference` (an id or a short ref) as text from character `offset` on, if
/// `scope` may read it.
pub async fn recall(
    pages: &dyn PageStore,
    search: &dyn PageSearch,
    scope: Scope<'_>,
    reference: &str,
    offset: usize,
) -> Result<Recalled, RecallError> {
    let stored = readable_page(pages, search, scope, reference.trim()).await?;
    let text = render(pages, search, scope, &stored).await;
    let chars = text.chars().count();
    if offset > chars || (offset == chars && offset > 0) {
        return Err(RecallError::PastTheEnd {
            page: stored.page.id.to_string(),
            offset,
            chars,
        });
    }
    let mut part: String = text.chars().skip(offset).take(RECALL_CHARS).collect();
    let end = offset + part.chars().count();
    let next_offset = (end < chars).then_some(end);
    if let Some(next) = next_offset {
        let _ = write!(
            part,
            "\n[{} more characters: recall page {} with offset {next}]",
            chars - end,
            stored.page.id
        );
    }
    Ok(Recalled {
        text: part,
        page: stored.page.id.to_string(),
        next_offset,
    })
}

/// The pages whose text holds every word of `query`, best first, at most `limit` (and
/// [`MAX_HITS`]), among those `scope` may read.
pub async fn search(
    search: &dyn PageSearch,
    scope: Scope<'_>,
    query: &str,
    limit: usize,
) -> Result<Vec<SearchHit>, RecallError> {
    search
        .search_pages(query, scope, limit.clamp(1, MAX_HITS))
        .await
        .map_err(RecallError::Store)
}

/// `hits` as text for the model: one line a page, with its snippet.
pub fn hits_text(query: &str, hits: &[SearchHit]) -> String {
    if hits.is_empty() {
        return format!("No archived message matches \"{query}\".");
    }
    let mut out = format!(
        "{} archived page(s) match \"{query}\" (recall a page to read it whole):\n",
        hits.len()
    );
    for hit in hits {
        let thread = hit.thread_id.as_deref().unwrap_or("no thread");
        let _ = writeln!(
            out,
            "- {} ({}, {thread}, archived {}): {}",
            hit.page_id,
            hit.strategy,
            crate::time_text::utc(hit.created_at),
            hit.snippet.replace('\n', " ")
        );
    }
    out
}

/// The page `reference` names, if `scope` may read it. A page that is not there and one that
/// is another's give the same error.
async fn readable_page(
    pages: &dyn PageStore,
    search: &dyn PageSearch,
    scope: Scope<'_>,
    reference: &str,
) -> Result<StoredPage, RecallError> {
    let stored = match pages.get_page(reference).await {
        Ok(stored) => stored,
        Err(e) if e.is_not_found() => return Err(RecallError::NoSuchPage(reference.into())),
        Err(e) => return Err(RecallError::Store(e)),
    };
    match search.may_read(&stored.page.id, scope).await {
        Ok(true) => Ok(stored),
        Ok(false) => Err(RecallError::NoSuchPage(reference.into())),
        Err(e) => Err(RecallError::Store(e)),
    }
}

/// The page as text: a head that names it, its thread and what stands for it in the
/// conversation, then each message.
async fn render(
    pages: &dyn PageStore,
    search: &dyn PageSearch,
    scope: Scope<'_>,
    stored: &StoredPage,
) -> String {
    let page = &stored.page;
    let messages = page.messages.as_slice();
    let thread = page
        .thread_id
        .as_ref()
        .into_option()
        .map_or("no thread".to_string(), |t| format!("thread {t}"));
    let stands = if replaced_by_placeholder(page.metadata_json.as_str()) {
        "a placeholder stands for it in the conversation (its tool output or input cleared)"
    } else {
        "a summary stands for it in the conversation"
    };
    let mut out = format!(
        "Page {} ({thread}): {} message(s) archived by {} on {}; {stands}.\n",
        page.id,
        messages.len(),
        page.strategy,
        crate::time_text::utc(page.created_at),
    );
    let mut names = std::collections::HashMap::new();
    for (i, message) in messages.iter().enumerate() {
        let _ = write!(
            out,
            "\n--- message {} ({}) ---\n",
            i + 1,
            message.role.as_str()
        );
        if let Some(info) = message.summary_info() {
            let _ = writeln!(
                out,
                "[a summary of earlier messages, archived in page {}]\n{}",
                info.page_ref,
                message.joined_text()
            );
            continue;
        }
        for block in message.content.iter() {
            render_block(pages, search, scope, block, &mut names, &mut out).await;
        }
    }
    out
}

/// Whether a page's metadata says a placeholder stands for it (the host marks a clearing's
/// page so; a summary's page carries its strategy's metadata).
fn replaced_by_placeholder(metadata_json: &str) -> bool {
    serde_json::from_str::<serde_json::Value>(metadata_json)
        .is_ok_and(|m| m[crate::edits::REPLACED_BY] == crate::edits::PLACEHOLDER)
}

async fn render_block<'a>(
    pages: &dyn PageStore,
    search: &dyn PageSearch,
    scope: Scope<'_>,
    block: &'a ContentBlock,
    names: &mut std::collections::HashMap<&'a str, &'a str>,
    out: &mut String,
) {
    match block {
        ContentBlock::Text { text, .. } => {
            let _ = writeln!(out, "{text}");
        }
        ContentBlock::ToolUse {
            id,
            name,
            input_json,
            ..
        } => {
            names.insert(id.as_str(), name.as_str());
            let input = match parse_input_placeholder(input_json) {
                Some(page) => restored(pages, search, scope, page, |m| input_of(m, id))
                    .await
                    .unwrap_or_else(|why| format!("[input cleared; {why}]")),
                None => input_json.to_string(),
            };
            let _ = writeln!(out, "[call of {name} ({id})] {input}");
        }
        ContentBlock::ToolResult {
            tool_use_id,
            content,
            is_error,
            ..
        } => {
            let name = names.get(tool_use_id.as_str()).copied().unwrap_or("a tool");
            let failed = if *is_error { ", failed" } else { "" };
            let cleared = match content.as_slice() {
                [ToolResultPart::Text { text }] => parse_result_placeholder(text),
                _ => None,
            };
            let text = match cleared {
                Some((page, _)) => {
                    restored(pages, search, scope, page, |m| output_of(m, tool_use_id))
                        .await
                        .unwrap_or_else(|why| format!("[output cleared; {why}]"))
                }
                None => result_text(content),
            };
            let _ = writeln!(out, "[result of {name} ({tool_use_id}){failed}]\n{text}");
        }
        ContentBlock::Opaque { json } => {
            let kind = serde_json::from_str::<serde_json::Value>(json)
                .ok()
                .and_then(|v| v["type"].as_str().map(str::to_string))
                .unwrap_or_else(|| "non-text".into());
            let _ = writeln!(out, "[{kind} block]");
        }
    }
}

/// What `pick` finds in the messages of page `page` (a clearing's page: the original
/// message), with a note of where it came from; why not, when the page cannot be read.
async fn restored(
    pages: &dyn PageStore,
    search: &dyn PageSearch,
    scope: Scope<'_>,
    page: &str,
    pick: impl Fn(&Message) -> Option<String>,
) -> Result<String, String> {
    let stored = readable_page(pages, search, scope, page)
        .await
        .map_err(|_| format!("page {page} cannot be read here"))?;
    stored
        .page
        .messages
        .iter()
        .find_map(pick)
        .map(|text| format!("{text}\n[restored from page {page}]"))
        .ok_or_else(|| format!("page {page} does not hold it"))
}

fn output_of(message: &Message, tool_use_id: &str) -> Option<String> {
    message.content.iter().find_map(|b| match b {
        ContentBlock::ToolResult {
            tool_use_id: id,
            content,
            ..
        } if id.as_str() == tool_use_id => Some(result_text(content)),
        _ => None,
    })
}

fn input_of(message: &Message, call_id: &str) -> Option<String> {
    message.content.iter().find_map(|b| match b {
        ContentBlock::ToolUse { id, input_json, .. } if id.as_str() == call_id => {
            Some(input_json.to_string())
        }
        _ => None,
    })
}
