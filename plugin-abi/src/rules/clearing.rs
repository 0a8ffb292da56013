//! Clearings (TAMP-INV-10): a tool result's content, or a tool call's input, replaced in place
//! by a short placeholder that names the page holding the original message. The message keeps
//! its role, its blocks and their order, its tool ids and names and `is_error`: the model still
//! sees what it did and in which order, only the bulky output is gone from the context, and the
//! original stays recoverable from its page.
//!
//! A cleared block is recognizable in both wire formats, and survives a round trip through
//! them, because its placeholder has one canonical form:
//!
//! - a cleared **tool result** has exactly one text part,
//!
//!   ```text
//!   <tamp-cleared page="PAGE">
//!   NOTE
//!   </tamp-cleared>
//!   ```
//!
//! - a cleared **tool input** is the JSON object `{"tamp_cleared":{"page":"PAGE"}}`, byte for
//!   byte (it stays a valid tool input: Anthropic wants an object, OpenAI a JSON string).
//!
//! `PAGE` is a page id as [`page_id`] makes them (`pg_` and hex), never escaped; `NOTE` is free
//! text. [`cleared_page`] reads either form back; anything else is not a placeholder.
//!
//! [`Clearing`] builds the message a `Clear` edit carries:
//!
//! ```
//! use tamp_plugin_abi::rules::clearing::{cleared_page, Clearing};
//! use tamp_plugin_abi::{ContentBlock, Message, Role};
//!
//! let output = ContentBlock::tool_result("call_1", "400 lines of test output", false);
//! let result = Message::new(Role::Tool, vec![output]);
//! let mut clearing = Clearing::new(&result, 7);
//! assert!(clearing.clear_result(0, "Output of pytest cleared."));
//! let page = clearing.page().to_string();
//! let edit = clearing.into_edit().expect("one block cleared");
//! let tamp_plugin_abi::Edit::Clear { message, .. } = edit else { unreachable!() };
//! assert_eq!(cleared_page(&message.content[0]).as_deref(), Some(page.as_str()));
//! ```

use crate::conversation::{ContentBlock, Message, ToolResultPart};
use crate::edit::Edit;
use crate::page::page_id;

const RESULT_OPEN: &str = "<tamp-cleared page=\"";
const RESULT_CLOSE: &str = "\n</tamp-cleared>";
const INPUT_OPEN: &str = "{\"tamp_cleared\":{\"page\":\"";
const INPUT_CLOSE: &str = "\"}}";

/// Whether `page` can stand in a placeholder unescaped: a page id's characters only.
fn is_page_id(page: &str) -> bool {
    !page.is_empty()
        && page
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// The text of a cleared tool result naming `page`, with `note` for the model.
pub fn result_placeholder(page: &str, note: &str) -> String {
    let mut out =
        String::with_capacity(RESULT_OPEN.len() + page.len() + note.len() + RESULT_CLOSE.len() + 3);
    out.push_str(RESULT_OPEN);
    out.push_str(page);
    out.push_str("\">\n");
    out.push_str(note);
    out.push_str(RESULT_CLOSE);
    out
}

/// The input of a cleared tool call naming `page`.
pub fn input_placeholder(page: &str) -> String {
    format!("{INPUT_OPEN}{page}{INPUT_CLOSE}")
}

/// The page and the note of a cleared tool result's text; `None` when `text` is not exactly
/// the canonical form [`result_placeholder`] writes.
pub fn parse_result_placeholder(text: &str) -> Option<(&str, &str)> {
    let rest = text.strip_prefix(RESULT_OPEN)?;
    let (page, rest) = rest.split_once('"')?;
    let note = rest.strip_prefix(">\n")?.strip_suffix(RESULT_CLOSE)?;
    is_page_id(page).then_some((page, note))
}

/// The page a cleared tool input names; `None` when `input_json` is not exactly the canonical
/// form [`input_placeholder`] writes.
pub fn parse_input_placeholder(input_json: &str) -> Option<&str> {
    let page = input_json
        .strip_prefix(INPUT_OPEN)?
        .strip_suffix(INPUT_CLOSE)?;
    is_page_id(page).then_some(page)
}

/// The page a cleared block names: a tool result whose content is one placeholder text part,
/// or a tool call whose input is the input placeholder. `None` for any other block.
pub fn cleared_page(block: &ContentBlock) -> Option<&str> {
    match block {
        ContentBlock::ToolResult { content, .. } => match content.as_slice() {
            [ToolResultPart::Text { text }] => parse_result_placeholder(text).map(|(page, _)| page),
            _ => None,
        },
        ContentBlock::ToolUse { input_json, .. } => parse_input_placeholder(input_json),
        _ => None,
    }
}

/// Whether `block` is a cleared tool result or tool input (a later clearing leaves it as it
/// is: clearing it again is refused, TAMP-INV-10).
pub fn is_cleared(block: &ContentBlock) -> bool {
    cleared_page(block).is_some()
}

/// A clearing of one message, built block by block; [`Clearing::into_edit`] turns it into the
/// `Clear` edit the host checks, archives and applies.
///
/// The page is the content address of the original message alone, so the same message is
/// always cleared the same way, byte for byte: a prefix-stable strategy stays prefix-stable.
#[derive(Debug, Clone)]
pub struct Clearing {
    index: usize,
    page: String,
    message: Message,
    cleared: usize,
}

impl Clearing {
    /// A clearing of `original`, the message at `index` of the conversation the stage was
    /// given; nothing is cleared yet.
    pub fn new(original: &Message, index: usize) -> Clearing {
        Clearing {
            index,
            page: page_id(std::slice::from_ref(original)),
            message: original.clone(),
            cleared: 0,
        }
    }

    /// The page that will hold the original message (the placeholders name it).
    pub fn page(&self) -> &str {
        &self.page
    }

    /// The index of the message being cleared.
    pub fn index(&self) -> usize {
        self.index
    }

    /// Replaces the content of the tool result at `block` by a placeholder with `note`. False
    /// (and nothing done) when that block is not a tool result, or is cleared already.
    pub fn clear_result(&mut self, block: usize, note: &str) -> bool {
        if self.message.content.get(block).is_some_and(is_cleared) {
            return false;
        }
        let Some(ContentBlock::ToolResult { content, .. }) = self.message.content.get_mut(block)
        else {
            return false;
        };
        *content = vec![ToolResultPart::Text {
            text: result_placeholder(&self.page, note).into(),
        }]
        .into();
        self.cleared += 1;
        true
    }

    /// Replaces the input of the tool call at `block` by the input placeholder. False (and
    /// nothing done) when that block is not a tool call, or its input is cleared already.
    pub fn clear_input(&mut self, block: usize) -> bool {
        if self.message.content.get(block).is_some_and(is_cleared) {
            return false;
        }
        let Some(ContentBlock::ToolUse { input_json, .. }) = self.message.content.get_mut(block)
        else {
            return false;
        };
        *input_json = input_placeholder(&self.page).into();
        self.cleared += 1;
        true
    }

    /// How many blocks have been cleared so far.
    pub fn cleared(&self) -> usize {
        self.cleared
    }

    /// The message as cleared so far.
    pub fn message(&self) -> &Message {
        &self.message
    }

    /// The `Clear` edit; `None` when no block was cleared.
    pub fn into_edit(self) -> Option<Edit> {
        (self.cleared > 0).then(|| Edit::clear(self.index, self.message))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conversation::Role;

    fn exchange() -> (Message, Message) {
        let call = Message::new(
            Role::Assistant,
            vec![
                ContentBlock::text("Let me look."),
                ContentBlock::ToolUse {
                    id: "a".into(),
                    name: "read".into(),
                    input_json: r#"{"path":"src/lib.rs"}"#.into(),
                    extra_json: Default::default(),
                },
                ContentBlock::ToolUse {
                    id: "b".into(),
                    name: "grep".into(),
                    input_json: r#"{"q":"fn"}"#.into(),
                    extra_json: Default::default(),
                },
            ],
        );
        let result = |id: &str, text: &str, is_error| ContentBlock::ToolResult {
            tool_use_id: id.into(),
            content: vec![ToolResultPart::Text { text: text.into() }].into(),
            is_error,
            extra_json: r#"{"cache_control":{"type":"ephemeral"}}"#.into(),
        };
        let results = Message::new(
            Role::User,
            vec![
                result("a", "fn main() {}", false),
                result("b", "no match", true),
            ],
        );
        (call, results)
    }

    #[test]
    fn placeholders_have_one_canonical_form() {
        let text = result_placeholder("pg_0a", "cleared (12 tokens)");
        assert_eq!(
            text,
            "<tamp-cleared page=\"pg_0a\">\ncleared (12 tokens)\n</tamp-cleared>"
        );
        assert_eq!(
            parse_result_placeholder(&text),
            Some(("pg_0a", "cleared (12 tokens)"))
        );
        assert_eq!(
            input_placeholder("pg_0a"),
            r#"{"tamp_cleared":{"page":"pg_0a"}}"#
        );
        assert_eq!(
            parse_input_placeholder(&input_placeholder("pg_0a")),
            Some("pg_0a")
        );
        for not_one in [
            "<tamp-cleared page=\"\">\nx\n</tamp-cleared>",
            "<tamp-cleared page=\"pg a\">\nx\n</tamp-cleared>",
            "<tamp-cleared page=\"pg_0a\">x\n</tamp-cleared>",
            "<tamp-cleared page=\"pg_0a\">\nx\n</tamp-cleared>\n",
            " <tamp-cleared page=\"pg_0a\">\nx\n</tamp-cleared>",
            "cleared",
        ] {
            assert_eq!(parse_result_placeholder(not_one), None, "{not_one}");
        }
        for not_one in [
            r#"{"tamp_cleared": {"page":"pg_0a"}}"#,
            r#"{"tamp_cleared":{"page":""}}"#,
            r#"{"tamp_cleared":{"page":"pg_0a","x":1}}"#,
        ] {
            assert_eq!(parse_input_placeholder(not_one), None, "{not_one}");
        }
    }

    #[test]
    fn a_clearing_keeps_the_structure_and_names_the_page_of_the_original() {
        let (call, results) = exchange();
        let mut clearing = Clearing::new(&results, 3);
        assert!(!clearing.clear_input(0), "a tool result has no input");
        assert!(clearing.clear_result(1, "gone"));
        assert!(!clearing.clear_result(1, "again"), "cleared once only");
        let page = page_id(std::slice::from_ref(&results));
        assert_eq!(clearing.page(), page);
        let Some(Edit::Clear { index, message }) = clearing.into_edit() else {
            panic!("a Clear edit");
        };
        assert_eq!(index, 3);
        assert_eq!(message.content[0], results.content[0]);
        match (&message.content[1], &results.content[1]) {
            (
                ContentBlock::ToolResult {
                    tool_use_id,
                    is_error,
                    extra_json,
                    ..
                },
                ContentBlock::ToolResult {
                    tool_use_id: id0,
                    is_error: e0,
                    extra_json: x0,
                    ..
                },
            ) => assert_eq!((tool_use_id, is_error, extra_json), (id0, e0, x0)),
            other => panic!("{other:?}"),
        }
        assert_eq!(cleared_page(&message.content[1]), Some(page.as_str()));
        assert!(!is_cleared(&message.content[0]));

        let mut inputs = Clearing::new(&call, 2);
        assert!(!inputs.clear_input(0), "a text block is no tool call");
        assert!(inputs.clear_input(2));
        assert!(!inputs.clear_input(2));
        assert_eq!(inputs.cleared(), 1);
        assert!(is_cleared(&inputs.message().content[2]));
        assert!(!is_cleared(&inputs.message().content[1]));
        assert!(
            Clearing::new(&call, 2).into_edit().is_none(),
            "nothing cleared"
        );
    }

    #[test]
    fn the_same_message_is_cleared_the_same_way() {
        let (_, results) = exchange();
        let once = |note: &str| {
            let mut c = Clearing::new(&results, 9);
            c.clear_result(0, note);
            c.into_edit()
        };
        assert_eq!(once("n"), once("n"));
    }
}
