//! The shape a `content` field had on the wire, and the `tamp:` markers that remember it.
//!
//! A reader records a shape only when it differs from the natural default a writer would pick
//! for the same content; a message a plugin builds (empty `extra_json`) gets the default.

use abi_stable::std_types::RString;

use crate::plugin_api::{ContentBlock, Role, ToolResultPart};

use super::json::Extra;

/// Marker key: the shape of the `content` field (of a message, or of a tool result).
pub(crate) const CONTENT: &str = "tamp:content";
/// Marker key (OpenAI): a system message was a `developer` message.
pub(crate) const ROLE: &str = "tamp:role";
/// Marker key (OpenAI): `tool_calls` was `[]` (`"empty"`) or `null` (`"null"`).
pub(crate) const TOOL_CALLS: &str = "tamp:tool_calls";
/// Marker key (OpenAI tool call): the call had no `type` field (`"absent"`).
pub(crate) const CALL_TYPE: &str = "tamp:type";
/// Marker key (OpenAI tool call): `arguments` was JSON, not a string (`"json"`).
pub(crate) const ARGUMENTS: &str = "tamp:arguments";
/// Marker key (OpenAI tool call): other fields of the `function` object, as an object.
pub(crate) const FUNCTION: &str = "tamp:function";
/// Marker key (Anthropic tool result): `is_error` was present although false (`"false"`).
pub(crate) const IS_ERROR: &str = "tamp:is_error";
/// Marker key: the original order of an object's keys, when the writer's would differ.
pub(crate) const KEYS: &str = "tamp:keys";
/// Marker key (OpenAI tool call): the original order of the `function` object's keys.
pub(crate) const FUNCTION_KEYS: &str = "tamp:function_keys";
/// Marker key (top level, in `metadata_json`): the original order of the top-level fields.
pub(crate) const ORDER: &str = "tamp:order";
/// Marker key: a leading system message stood in the message list (`"inline"`), not in the
/// request's top-level field (Anthropic `system`, Responses `instructions`), where a writer
/// puts leading system messages by default.
pub(crate) const SYSTEM: &str = "tamp:system";
/// Marker key: how a message maps to wire messages or items. `"raw"`: the message is one
/// opaque block holding a whole wire message or item, written as it is (an unknown role or
/// item type, a Responses `compaction` item). Responses only: `"items"`: each block is an
/// item of its own (reasoning items, calls); `"custom_tool_call_output"`: a tool message
/// that was a `custom_tool_call_output`.
pub(crate) const ITEM: &str = "tamp:item";
/// Marker key (Responses message): the first N blocks (a decimal string) are items of their
/// own (reasoning items) that came before the message item.
pub(crate) const LEAD: &str = "tamp:lead";
/// Marker key (Responses assistant message): the last N blocks (a decimal string) are items of
/// their own that came after the message item: the calls that followed it, with the reasoning
/// items between them. Set only when the default (the message item, then every call) would
/// write other items: reasoning among the calls, or a message item with no parts.
pub(crate) const TAIL: &str = "tamp:tail";
/// Marker key (Responses text part): the part's type, when not the default for its role
/// (`input_text`, or `output_text` for an assistant).
pub(crate) const PART: &str = "tamp:part";
/// Marker key (Responses call): the call was a `custom_tool_call` (`"custom"`).
pub(crate) const CALL: &str = "tamp:call";
/// Marker key (summary message): its marker had no recall line (`"absent"`): an earlier tamp
/// wrote it, and it is written back as it came.
pub(crate) const NO_RECALL_LINE: &str = "tamp:no_recall_line";
/// Marker key (summary message): the MAC its marker carried (see [`super::summary_marker`]).
pub(crate) const MAC: &str = "tamp:mac";
/// Marker key (Responses, in `metadata_json`): `input` was a string (`"string"`).
pub(crate) const INPUT: &str = "tamp:input";
/// Marker keys the SDK reads (`rules::pinned`): what the reader did not know, and a provider's
/// compaction boundary.
pub(crate) use crate::plugin_api::rules::pinned::{BOUNDARY, OPAQUE};

/// The shape of a `content` field.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Form {
    String,
    Array,
    Null,
    Absent,
}

impl Form {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Form::String => "string",
            Form::Array => "array",
            Form::Null => "null",
            Form::Absent => "absent",
        }
    }

    /// The shape a `tamp:content` marker in `extra` asks for.
    pub(crate) fn from_marker(extra: &Extra<'_>) -> Option<Form> {
        match extra.marker(CONTENT)?.as_ref() {
            "string" => Some(Form::String),
            "array" => Some(Form::Array),
            "null" => Some(Form::Null),
            "absent" => Some(Form::Absent),
            _ => None,
        }
    }
}

/// Whether an `extra_json` carries no wire fields (markers aside).
pub(crate) fn plain_empty(extra_json: &RString) -> bool {
    extra_json.is_empty()
        || Extra::parse(extra_json.as_str())
            .wire_fields()
            .next()
            .is_none()
}

/// Whether `blocks` is one text block that can be written as a plain string.
pub(crate) fn is_single_plain_text(blocks: &[&ContentBlock]) -> bool {
    matches!(blocks, [ContentBlock::Text { extra_json, .. }] if plain_empty(extra_json))
}

/// The default shape of a message's `content` in Anthropic requests.
pub(crate) fn anthropic_default(blocks: &[&ContentBlock]) -> Form {
    if is_single_plain_text(blocks) {
        Form::String
    } else {
        Form::Array
    }
}

/// The default shape of a message's `content` (tool calls aside) in OpenAI requests.
pub(crate) fn openai_default(blocks: &[&ContentBlock], role: Role) -> Form {
    if blocks.is_empty() {
        if role == Role::Assistant {
            Form::Null
        } else {
            Form::Array
        }
    } else if is_single_plain_text(blocks) {
        Form::String
    } else {
        Form::Array
    }
}

/// The default shape of an Anthropic `tool_result`'s `content`.
pub(crate) fn anthropic_result_default(parts: &[ToolResultPart]) -> Form {
    match parts {
        [] => Form::Absent,
        [ToolResultPart::Text { .. }] => Form::String,
        _ => Form::Array,
    }
}

/// The default shape of an OpenAI `tool` message's `content` (no parts: `""`).
pub(crate) fn openai_result_default(parts: &[ToolResultPart]) -> Form {
    match parts {
        [] | [ToolResultPart::Text { .. }] => Form::String,
        _ => Form::Array,
    }
}

/// The shape to write an OpenAI `tool` message's content or a Responses `output` in: the
/// reader's marker (in the result block's `extra`) when it fits, else the default.
pub(crate) fn openai_result_shape(parts: &[ToolResultPart], markers: &Extra<'_>) -> Form {
    choose(
        Form::from_marker(markers),
        openai_result_default(parts),
        |shape| match shape {
            Form::String => parts.len() <= 1 && !matches!(parts, [ToolResultPart::Opaque { .. }]),
            Form::Null | Form::Absent => parts.is_empty(),
            Form::Array => true,
        },
    )
}

/// The shape to write: the marker's when it fits the content, else `default`.
pub(crate) fn choose(marker: Option<Form>, default: Form, fits: impl Fn(Form) -> bool) -> Form {
    match marker {
        Some(form) if fits(form) => form,
        _ => default,
    }
}
