"""Clearings (TAMP-INV-10), as the native SDK's `sdk::clearing` makes them: a tool result's
content, or a tool call's input, replaced in place by a placeholder naming the page that
holds the original message. The placeholders' canonical forms (docs/plugin-spec.md):

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

_RESULT_OPEN = '<tamp-cleared page="'
_RESULT_CLOSE = "\n</tamp-cleared>"
_INPUT_OPEN = '{"tamp_cleared":{"page":"'
_INPUT_CLOSE = '"}}'


def _is_page_id(page: str) -> bool:
    return bool(page) and all(c.isascii() and (c.isalnum() or c in "_-") for c in page)


def result_placeholder(page: str, note: str) -> str:
    """The text of a cleared tool result naming `page`, with `note` for the model."""
    return f'{_RESULT_OPEN}{page}">\n{note}{_RESULT_CLOSE}'


def input_placeholder(page: str) -> str:
    """The input of a cleared tool call naming `page`."""
    return f"{_INPUT_OPEN}{page}{_INPUT_CLOSE}"


def result_placeholder_tokens(page: str, note: str) -> int:
    """What a cleared tool result's placeholder naming `page` with `note` costs, in the
    chain's tokens: the real cost, when `page` is the id the clearing will name."""
    from . import count_tokens

    return count_tokens(result_placeholder(page, note))


def input_placeholder_tokens(page: str) -> int:
    """What a cleared tool input's placeholder naming `page` costs, in the chain's tokens."""
    from . import count_tokens

    return count_tokens(input_placeholder(page))


def _result_page(text: str):
    if not text.startswith(_RESULT_OPEN):
        return None
    rest = text[len(_RESULT_OPEN):]
    quote = rest.find('"')
    if quote < 0:
        return None
    page, rest = rest[:quote], rest[quote + 1:]
    if not rest.startswith(">\n") or not rest.endswith(_RESULT_CLOSE):
        return None
    if len(rest) < len(">\n") + len(_RESULT_CLOSE):
        return None
    return page if _is_page_id(page) else None


def _input_page(input_json: str):
    if not (input_json.startswith(_INPUT_OPEN) and input_json.endswith(_INPUT_CLOSE)):
        return None
    page = input_json[len(_INPUT_OPEN):len(input_json) - len(_INPUT_CLOSE)]
    return page if len(input_json) >= len(_INPUT_OPEN) + len(_INPUT_CLOSE) and _is_page_id(page) else None


def cleared_page(block):
    """The page a cleared block names, or None for any block that is not one."""
    if isinstance(block, ContentBlock_ToolResult):
        content = block.value.content
        if len(content) == 1 and isinstance(content[0], ToolResultPart_Text):
            return _result_page(content[0].value)
        return None
    if isinstance(block, ContentBlock_ToolUse):
        return _input_page(block.value.input_json)
    return None


def is_cleared(block) -> bool:
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
