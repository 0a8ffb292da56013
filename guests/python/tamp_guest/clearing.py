"""Clearings (TAMP-INV-10), as the native SDK's `sdk::clearing` makes them: a tool result's
content, or a tool call's input, replaced in place by a placeholder naming the page that
holds the original message. The placeholders' canonical forms (docs/plugin-spec.md), which
the host writes and reads for every guest (these helpers ask it: the WIT's
`result-placeholder`, `input-placeholder` and `cleared-page`, callable at any time):

- a cleared tool result has one text part:
  `<tamp-cleared page="PAGE">` NEWLINE `NOTE` NEWLINE `</tamp-cleared>`;
- a cleared tool input is exactly `{"tamp_cleared":{"page":"PAGE"}}`.

The host checks every clearing against the original, block by block, and a compaction
never grows the conversation (TAMP-INV-06): size a placeholder with the page id it will name
(`result_placeholder_tokens(compaction.page_id(i), note)`) before deciding a block is worth
clearing. A stand-in id (`"pg_" + "0" * 32`) counts fewer tokens than a real one.
"""

from wit_world.imports.types import (
    ClearEdit,
    ContentBlock_ToolResult,
    ContentBlock_ToolUse,
    Edit_Clear,
    Message,
    ToolResult,
    ToolResultPart_Text,
    ToolUse,
)

from . import _renderings


def result_placeholder(page: str, note: str) -> str:
    """The text of a cleared tool result naming `page`, with `note` for the model."""
    return _renderings().result_placeholder(page, note)


def input_placeholder(page: str) -> str:
    """The input of a cleared tool call naming `page`."""
    return _renderings().input_placeholder(page)


def result_placeholder_tokens(page: str, note: str) -> int:
    """What a cleared tool result's placeholder naming `page` with `note` costs, in the
    chain's tokens: the real cost, when `page` is the id the clearing will name."""
    from . import count_tokens

    return count_tokens(result_placeholder(page, note))


def input_placeholder_tokens(page: str) -> int:
    """What a cleared tool input's placeholder naming `page` costs, in the chain's tokens."""
    from . import count_tokens

    return count_tokens(input_placeholder(page))


def cleared_page(block):
    """The page a cleared block names, or None for any block that is not one: a tool result
    whose content is one placeholder text part, or a tool call whose input is the input
    placeholder."""
    if not isinstance(block, (ContentBlock_ToolResult, ContentBlock_ToolUse)):
        return None  # no other block is ever cleared: spare the host the call
    return _renderings().cleared_page(block)


def is_cleared(block) -> bool:
    """Whether `block` is a cleared tool result or tool input (clearing it again is refused,
    TAMP-INV-10)."""
    return cleared_page(block) is not None


class Clearing:
    """A clearing of one message, built block by block; `edit()` is the `Clear` edit.

    `page` is the id of the page that will hold the original message alone (ask the host:
    `compaction.page_id(index)`), so the same message is always cleared the same way."""

    def __init__(self, original: Message, index: int, page: str):
        self.index = index
        self.page = page
        self.message = Message(original.role, list(original.content), original.summary,
                               original.extra_json)
        self.cleared = 0

    def clear_result(self, block: int, note: str) -> bool:
        """Replaces the content of the tool result at `block` by a placeholder with
        `note`; False when that block is not a tool result or is cleared already."""
        b = self.message.content[block] if block < len(self.message.content) else None
        if not isinstance(b, ContentBlock_ToolResult) or is_cleared(b):
            return False
        r = b.value
        text = result_placeholder(self.page, note)
        self.message.content[block] = ContentBlock_ToolResult(
            ToolResult(r.tool_use_id, [ToolResultPart_Text(text)], r.is_error, r.extra_json)
        )
        self.cleared += 1
        return True

    def clear_input(self, block: int) -> bool:
        """Replaces the input of the tool call at `block` by the input placeholder; False
        when that block is not a tool call or its input is cleared already."""
        b = self.message.content[block] if block < len(self.message.content) else None
        if not isinstance(b, ContentBlock_ToolUse) or is_cleared(b):
            return False
        u = b.value
        self.message.content[block] = ContentBlock_ToolUse(
            ToolUse(u.id, u.name, input_placeholder(self.page), u.extra_json)
        )
        self.cleared += 1
        return True

    def edit(self):
        """The `Clear` edit, or None when no block was cleared."""
        if self.cleared == 0:
            return None
        return Edit_Clear(ClearEdit(self.index, self.message))
