//! The conversation model that crosses the plugin boundary.
//!
//! These types are `abi_stable` types so a conversation reaches a plugin without a JSON round
//! trip per stage. Payloads whose shape tamp does not own (tool inputs, wire-format extras,
//! opaque blocks such as images) travel as JSON text and are carried through untouched.

use abi_stable::std_types::{ROption, RString, RVec};
use abi_stable::StableAbi;
use serde::{Deserialize, Serialize};

/// Who wrote a message.
#[repr(u8)]
#[derive(StableAbi, Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    System,
    User,
    Assistant,
    /// An OpenAI `tool` message; Anthropic carries tool results inside `user` messages.
    Tool,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::System => "system",
            Role::User => "user",
            Role::Assistant => "assistant",
            Role::Tool => "tool",
        }
    }
}

/// One part of a tool result's content.
#[repr(u8)]
#[derive(StableAbi, Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ToolResultPart {
    Text {
        text: RString,
    },
    /// Any other part (an image, a document), kept as its original JSON.
    Opaque {
        json: RString,
    },
}

/// One content block of a message.
///
/// `extra_json` holds wire fields tamp does not model (`cache_control`, `citations`, ...) as a
/// JSON object, or is empty; the wire writers put them back unchanged.
#[repr(u8)]
#[derive(StableAbi, Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ContentBlock {
    Text {
        text: RString,
        #[serde(default, skip_serializing_if = "RString::is_empty")]
        extra_json: RString,
    },
    ToolUse {
        id: RString,
        name: RString,
        /// The tool input as JSON text. For OpenAI input this is the original `arguments`
        /// string, byte for byte (it is not guaranteed to be valid JSON).
        input_json: RString,
        #[serde(default, skip_serializing_if = "RString::is_empty")]
        extra_json: RString,
    },
    ToolResult {
        tool_use_id: RString,
        content: RVec<ToolResultPart>,
        is_error: bool,
        #[serde(default, skip_serializing_if = "RString::is_empty")]
        extra_json: RString,
    },
    /// A block tamp does not interpret (image, document, thinking, ...), as its original JSON.
    Opaque { json: RString },
}

impl ContentBlock {
    pub fn text(text: impl Into<RString>) -> Self {
        ContentBlock::Text {
            text: text.into(),
            extra_json: RString::new(),
        }
    }

    /// A tool call `id` of tool `name` with `input_json` as its input.
    pub fn tool_use(
        id: impl Into<RString>,
        name: impl Into<RString>,
        input_json: impl Into<RString>,
    ) -> Self {
        ContentBlock::ToolUse {
            id: id.into(),
            name: name.into(),
            input_json: input_json.into(),
            extra_json: RString::new(),
        }
    }

    /// The result of tool call `tool_use_id`: one text part.
    pub fn tool_result(
        tool_use_id: impl Into<RString>,
        text: impl Into<RString>,
        is_error: bool,
    ) -> Self {
        ContentBlock::ToolResult {
            tool_use_id: tool_use_id.into(),
            content: vec![ToolResultPart::Text { text: text.into() }].into(),
            is_error,
            extra_json: RString::new(),
        }
    }

    /// The block's text, if it is a text block.
    pub fn as_text(&self) -> Option<&str> {
        match self {
            ContentBlock::Text { text, .. } => Some(text.as_str()),
            _ => None,
        }
    }
}

/// Whether a summary is the final text or a placeholder awaiting deferred work.
#[repr(u8)]
#[derive(StableAbi, Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SummaryStatus {
    Final,
    Pending,
}

impl SummaryStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            SummaryStatus::Final => "final",
            SummaryStatus::Pending => "pending",
        }
    }
}

/// Marks a message as a summary that a stage inserted in place of a page.
#[repr(C)]
#[derive(StableAbi, Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct SummaryInfo {
    /// The id of the page holding the messages this summary replaced.
    pub page_ref: RString,
    /// The name of the strategy that wrote it.
    pub strategy: RString,
    pub status: SummaryStatus,
}

impl SummaryInfo {
    /// The id of the page holding the messages it replaced.
    pub fn page(&self) -> &str {
        &self.page_ref
    }

    /// Whether `strategy` wrote it.
    pub fn is_by(&self, strategy: &str) -> bool {
        self.strategy == strategy
    }
}

/// One message: a role and its content blocks.
#[repr(C)]
#[derive(StableAbi, Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Message {
    pub role: Role,
    pub content: RVec<ContentBlock>,
    /// Set on summary messages only.
    #[serde(default, skip_serializing_if = "ROption::is_none")]
    pub summary: ROption<SummaryInfo>,
    /// Wire fields of the message that tamp does not model, as a JSON object, or empty.
    #[serde(default, skip_serializing_if = "RString::is_empty")]
    pub extra_json: RString,
}

impl Message {
    pub fn new(role: Role, content: Vec<ContentBlock>) -> Self {
        Message {
            role,
            content: content.into(),
            summary: ROption::RNone,
            extra_json: RString::new(),
        }
    }

    pub fn text(role: Role, text: impl Into<RString>) -> Self {
        Self::new(role, vec![ContentBlock::text(text)])
    }

    pub fn is_summary(&self) -> bool {
        self.summary.is_some()
    }

    pub fn summary_info(&self) -> Option<&SummaryInfo> {
        self.summary.as_ref().into_option()
    }

    /// The ids of the tool calls this message makes.
    pub fn tool_use_ids(&self) -> impl Iterator<Item = &str> {
        self.content.iter().filter_map(|b| match b {
            ContentBlock::ToolUse { id, .. } => Some(id.as_str()),
            _ => None,
        })
    }

    /// The ids of the tool calls this message answers.
    pub fn tool_result_ids(&self) -> impl Iterator<Item = &str> {
        self.content.iter().filter_map(|b| match b {
            ContentBlock::ToolResult { tool_use_id, .. } => Some(tool_use_id.as_str()),
            _ => None,
        })
    }

    /// All text of the message's text blocks, joined by blank lines.
    pub fn joined_text(&self) -> String {
        let mut out = String::new();
        for text in self.content.iter().filter_map(ContentBlock::as_text) {
            if !out.is_empty() {
                out.push_str("\n\n");
            }
            out.push_str(text);
        }
        out
    }
}

/// A conversation: an optional thread id, ordered messages, and metadata.
///
/// System prompts are leading messages with [`Role::System`] (Anthropic's top-level `system`
/// becomes one). `metadata_json` holds the request's other top-level fields as a JSON object
/// (or is empty); the wire writers put them back.
#[repr(C)]
#[derive(StableAbi, Clone, Debug, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Conversation {
    #[serde(default, skip_serializing_if = "ROption::is_none")]
    pub thread_id: ROption<RString>,
    pub messages: RVec<Message>,
    #[serde(default, skip_serializing_if = "RString::is_empty")]
    pub metadata_json: RString,
}

impl Conversation {
    pub fn new(messages: Vec<Message>) -> Self {
        Conversation {
            thread_id: ROption::RNone,
            messages: messages.into(),
            metadata_json: RString::new(),
        }
    }

    pub fn thread_id(&self) -> Option<&str> {
        self.thread_id.as_ref().into_option().map(RString::as_str)
    }

    /// Names the thread the conversation belongs to.
    pub fn set_thread_id(&mut self, id: &str) {
        self.thread_id = ROption::RSome(id.into());
    }

    /// A copy with other messages and the same thread id and metadata.
    pub fn with_messages(&self, messages: Vec<Message>) -> Self {
        Conversation {
            thread_id: self.thread_id.clone(),
            messages: messages.into(),
            metadata_json: self.metadata_json.clone(),
        }
    }
}
