//! Deferred work: summaries the host finishes later (through a batch API) while the
//! compaction that asked for them returns at once.
//!
//! A strategy archives a page, calls [`crate::Host::defer_summaries`] with the request that
//! would summarize it, and puts a [`crate::SummaryStatus::Pending`] summary in the page's
//! place. On a later compaction it asks [`crate::Host::deferred_results`] about its pending
//! page refs and swaps each finished one for the final text.
//!
//! ## Page-transcript prompts
//!
//! The page already holds the messages, so a deferred request need not carry them again: its
//! prompt may be a **page-transcript prompt**, which the host fills in with the transcript of
//! the page ([`crate::sdk::render_messages`] of its messages) when it sends the request. A
//! compaction then stores the material once (in the page), not twice, and returns sooner.
//!
//! A plugin writes one with [`page_transcript_prompt`], only when
//! [`crate::Host::renders_page_transcripts`] says the host fills them in: the host lists
//! [`crate::capability::PAGE_TRANSCRIPT_PROMPTS_V1`] among its capabilities. The text sent is
//! byte for byte what [`crate::sdk::render_template`] makes with the transcript as the
//! placeholder's value. The encoding (version 1), for hosts written in other languages:
//!
//! - the prompt starts with the header `U+0001 "tamp-page-transcript/1 page=" <page id>
//!   " max_block_chars=" <decimal> U+0001`: the page whose messages make the transcript
//!   (the page the request summarizes), and the [`crate::sdk::RenderOptions`] to render it;
//! - the rest is the prompt, in which every `U+0001 "transcript" U+0001` stands for the
//!   transcript, and which holds no other U+0001 ([`page_transcript_prompt`] declines a template
//!   or value holding one: the plugin then renders the whole prompt itself).
//!
//! A prompt that does not start with the header is an ordinary prompt, sent as it is.

pub use tamp_plugin_abi::deferred::{DeferredRequest, DeferredState, DeferredStatus};

use crate::conversation::Message;
use crate::error::PluginError;
use crate::sdk::prompt::{render_messages, render_template, RenderOptions};

/// The newest page-transcript prompt version this `plugin-api` writes and fills.
pub const PAGE_TRANSCRIPT_VERSION: u32 = 1;

/// The one character that delimits the header and the slots; a prompt holds it nowhere else.
const MARK: char = '\u{1}';
/// What every page-transcript prompt starts with, whatever its version.
const HEADER_START: &str = "\u{1}tamp-page-transcript/";
/// Where the transcript goes.
const SLOT: &str = "\u{1}transcript\u{1}";

/// The prompt `template` makes with `vars`, its `transcript_var` placeholder left for the host
/// to fill with the transcript of page `page_id`, rendered with `opts` (see the module docs).
/// `Ok(None)` when the template or a value holds U+0001, which the encoding reserves: render
/// the whole prompt instead. Template errors are [`render_template`]'s.
pub fn page_transcript_prompt(
    template: &str,
    transcript_var: &str,
    vars: &[(&str, &str)],
    page_id: &str,
    opts: &RenderOptions,
) -> Result<Option<String>, PluginError> {
    if !valid_page_id(page_id) {
        return Err(PluginError::invalid_input(format!(
            "page-transcript prompt: {page_id:?} is not a page id"
        )));
    }
    if template.contains(MARK) || vars.iter().any(|(_, value)| value.contains(MARK)) {
        return Ok(None);
    }
    let mut all = Vec::with_capacity(vars.len() + 1);
    all.push((transcript_var, SLOT));
    all.extend(vars.iter().filter(|(name, _)| *name != transcript_var));
    let body = render_template(template, &all)?;
    Ok(Some(format!(
        "{HEADER_START}{PAGE_TRANSCRIPT_VERSION} page={page_id} max_block_chars={}{MARK}{body}",
        opts.max_block_chars
    )))
}

/// Page ids as stores make them (`pg_` and hex), and nothing that could break the header.
fn valid_page_id(id: &str) -> bool {
    !id.is_empty()
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// Whether `prompt` is a page-transcript prompt (of any version) rather than one to send as
/// it is.
pub fn is_page_transcript_prompt(prompt: &str) -> bool {
    prompt.starts_with(HEADER_START)
}

/// A page-transcript prompt, taken apart (see the module docs).
#[derive(Clone, Debug, PartialEq)]
pub struct PageTranscriptPrompt<'a> {
    page_id: &'a str,
    opts: RenderOptions,
    /// The text around the slots: one piece more than there are slots.
    pieces: Vec<&'a str>,
}

impl<'a> PageTranscriptPrompt<'a> {
    /// Reads a page-transcript prompt; an error says what is wrong with it (a prompt of a
    /// newer version than [`PAGE_TRANSCRIPT_VERSION`] is one).
    pub fn parse(prompt: &'a str) -> Result<Self, PluginError> {
        let bad = |why: &str| {
            PluginError::invalid_input(format!("malformed page-transcript prompt: {why}"))
        };
        let rest = prompt
            .strip_prefix(HEADER_START)
            .ok_or_else(|| bad("no header"))?;
        let (header, body) = rest
            .split_once(MARK)
            .ok_or_else(|| bad("unterminated header"))?;
        let mut fields = header.split(' ');
        let version = fields.next().unwrap_or_default();
        if version != PAGE_TRANSCRIPT_VERSION.to_string() {
            return Err(PluginError::invalid_input(format!(
                "page-transcript prompt version {version}: this host fills version \
                 {PAGE_TRANSCRIPT_VERSION} only"
            )));
        }
        let page_id = fields
            .next()
            .and_then(|f| f.strip_prefix("page="))
            .filter(|id| valid_page_id(id))
            .ok_or_else(|| bad("the header has no page=<id>"))?;
        let max_block_chars = fields
            .next()
            .and_then(|f| f.strip_prefix("max_block_chars="))
            .filter(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
            .and_then(|n| n.parse().ok())
            .ok_or_else(|| bad("the header has no max_block_chars=<n>"))?;
        if fields.next().is_some() {
            return Err(bad("unknown fields in the header"));
        }
        let pieces: Vec<&str> = body.split(SLOT).collect();
        if pieces.iter().any(|p| p.contains(MARK)) {
            return Err(bad("U+0001 outside the header and the transcript slots"));
        }
        Ok(PageTranscriptPrompt {
            page_id,
            opts: RenderOptions::cut_at(max_block_chars),
            pieces,
        })
    }

    /// The page whose transcript goes in the slots.
    pub fn page_id(&self) -> &'a str {
        self.page_id
    }

    /// The prompt to send: the text around the slots with the transcript of `messages` (the
    /// page's) in each.
    pub fn fill(&self, messages: &[Message]) -> String {
        let slots = self.pieces.len() - 1;
        let transcript = if slots > 0 {
            render_messages(messages, &self.opts)
        } else {
            String::new()
        };
        let around: usize = self.pieces.iter().map(|p| p.len()).sum();
        let mut out = String::with_capacity(around + slots * transcript.len());
        for (i, piece) in self.pieces.iter().enumerate() {
            if i > 0 {
                out.push_str(&transcript);
            }
            out.push_str(piece);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conversation::Role;

    fn run() -> Vec<Message> {
        vec![
            Message::text(Role::User, "list the {files} in /tmp ".repeat(20)),
            Message::text(Role::Assistant, "there are three: a, b and c"),
        ]
    }

    const TEMPLATE: &str =
        "{{Below}} are {count} messages ({label}):\n<content>\n{messages}</content>\nagain: {messages}";

    #[test]
    fn filled_prompt_is_the_prompt_rendered_whole() {
        let opts = RenderOptions::cut_at(30);
        let vars = [("count", "2"), ("label", "1 user and 1 other turns")];
        let prompt = page_transcript_prompt(TEMPLATE, "messages", &vars, "pg_0a1b", &opts)
            .unwrap()
            .unwrap();
        assert!(is_page_transcript_prompt(&prompt));
        assert!(!prompt.contains("list the"), "{prompt:?}");
        let parsed = PageTranscriptPrompt::parse(&prompt).unwrap();
        assert_eq!(parsed.page_id(), "pg_0a1b");
        let transcript = render_messages(&run(), &opts);
        let whole = render_template(
            TEMPLATE,
            &[("messages", transcript.as_str()), vars[0], vars[1]],
        )
        .unwrap();
        assert_eq!(parsed.fill(&run()), whole);
        // Without the placeholder the prompt is the template's text, and needs no page.
        let plain = page_transcript_prompt("{count} only", "messages", &vars, "pg_1", &opts)
            .unwrap()
            .unwrap();
        assert_eq!(
            PageTranscriptPrompt::parse(&plain).unwrap().fill(&[]),
            "2 only"
        );
    }

    #[test]
    fn reserved_character_declines_and_ordinary_prompts_are_not_templates() {
        let opts = RenderOptions::default();
        let tool_label = [("label", "1 tool calls: odd\u{1}name")];
        let declined =
            page_transcript_prompt("{label} {messages}", "messages", &tool_label, "pg_1", &opts);
        assert_eq!(declined.unwrap(), None);
        let declined = page_transcript_prompt("\u{1}{messages}", "messages", &[], "pg_1", &opts);
        assert_eq!(declined.unwrap(), None);
        assert!(
            page_transcript_prompt("{nope} {messages}", "messages", &[], "pg_1", &opts).is_err()
        );
        assert!(page_transcript_prompt("{messages}", "messages", &[], "pg 1", &opts).is_err());
        assert!(!is_page_transcript_prompt(
            "Summarize:\n<content>...</content>"
        ));
    }

    #[test]
    fn malformed_or_newer_prompts_are_refused() {
        for prompt in [
            "\u{1}tamp-page-transcript/1 page=pg_1 max_block_chars=12",
            "\u{1}tamp-page-transcript/1 page=pg_1 max_block_chars=\u{1}x",
            "\u{1}tamp-page-transcript/1 page=pg_1 max_block_chars=-3\u{1}x",
            "\u{1}tamp-page-transcript/1 max_block_chars=3\u{1}x",
            "\u{1}tamp-page-transcript/1 page= max_block_chars=3\u{1}x",
            "\u{1}tamp-page-transcript/1 page=pg_1 max_block_chars=3 more=1\u{1}x",
            "\u{1}tamp-page-transcript/1 page=pg_1 max_block_chars=5\u{1}a \u{1}transcript b",
        ] {
            let err = PageTranscriptPrompt::parse(prompt).unwrap_err();
            assert!(
                err.message.contains("malformed"),
                "{prompt:?}: {}",
                err.message
            );
        }
        let newer = PageTranscriptPrompt::parse("\u{1}tamp-page-transcript/2 x\u{1}y").unwrap_err();
        assert!(newer.message.contains("version 2"), "{}", newer.message);
    }
}
