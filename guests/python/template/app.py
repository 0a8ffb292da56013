"""The template Python strategy: tool-result clearing (plugins/tool-result-clearing, the
native strategy) ported to the Python guest SDK. Copy this directory to start a strategy of
your own; docs/writing-a-plugin.md says how to build and load it.

Old tool outputs are cleared in place, no LLM: each replaced by a placeholder naming the
page that keeps the original message. It makes the same decisions, byte for byte, as the
native strategy with the same config (the end-to-end tests compare the two).
"""

import tamp_guest as tamp
from tamp_guest.clearing import Clearing, input_placeholder, is_cleared, result_placeholder

DEFAULT_PLACEHOLDER = "Output of {tool} ({tokens} tokens) cleared; recall this page to read it."
# A page id's length ("pg_" and 32 hex digits), for sizing placeholders before pages exist.
SAMPLE_PAGE = "pg_" + "0" * 32
U64_MAX = 2**64 - 1

CONFIG_SCHEMA = {
    "$schema": "http://json-schema.org/draft-07/schema#",
    "title": "Config",
    "description": "How the strategy chooses what to clear.",
    "type": "object",
    "properties": {
        "keep": {
            "description": "The most recent tool uses whose results (and inputs) are left "
            "alone, counted over the whole conversation.",
            "type": "integer", "minimum": 0, "maximum": 1000000, "default": 3,
        },
        "clear_at_least": {
            "description": "Clear nothing unless at least this many tokens would go at once. "
            "0: clear whatever is eligible.",
            "type": "integer", "minimum": 0, "maximum": 100000000, "default": 2000,
        },
        "exclude_tools": {
            "description": "Tools whose results are never cleared.",
            "type": "array", "items": {"type": "string"}, "default": [],
        },
        "clear_tool_inputs": {
            "description": "Also replace the input of each cleared call by a placeholder.",
            "type": "boolean", "default": False,
        },
        "min_result_tokens": {
            "description": "Results smaller than this many tokens are left alone.",
            "type": "integer", "minimum": 0, "maximum": 100000000, "default": 100,
        },
        "placeholder": {
            "description": "The note inside each placeholder: `{tool}`, `{tokens}`, `{page}`; "
            "`{{` and `}}` for literal braces.",
            "type": "string", "default": DEFAULT_PLACEHOLDER,
        },
    },
    "additionalProperties": False,
}

DEFAULT_CONFIG = {
    "keep": 3,
    "clear_at_least": 2000,
    "exclude_tools": [],
    "clear_tool_inputs": False,
    "min_result_tokens": 100,
    "placeholder": DEFAULT_PLACEHOLDER,
}


def _integer(config, key, maximum):
    value = config[key]
    if isinstance(value, bool) or not isinstance(value, int):
        raise tamp.invalid_config(f"{key}: expected an integer, got {value!r}")
    if not 0 <= value <= maximum:
        raise tamp.invalid_config(f"{key}: {value} is out of range 0..={maximum}")
    return value


class ToolResultClearing(tamp.Strategy):
    NAME = "py-tool-result-clearing"
    VERSION = "0.1.0"
    DESCRIPTION = ("Clears old tool outputs in place, no LLM (a Python port of "
                   "tool-result-clearing): each replaced by a placeholder naming the page "
                   "that keeps it.")
    CONFIG_SCHEMA = CONFIG_SCHEMA
    DEFAULT_CONFIG = DEFAULT_CONFIG

    def __init__(self, config):
        unknown = sorted(set(config) - set(DEFAULT_CONFIG))
        if unknown:
            raise tamp.invalid_config(f"unknown field `{unknown[0]}`")
        config = {**DEFAULT_CONFIG, **config}
        self.keep = _integer(config, "keep", 1000000)
        self.clear_at_least = _integer(config, "clear_at_least", 100000000)
        self.min_result_tokens = _integer(config, "min_result_tokens", 100000000)
        tools = config["exclude_tools"]
        if not isinstance(tools, list) or not all(isinstance(t, str) for t in tools):
            raise tamp.invalid_config("exclude_tools: expected a list of strings")
        self.exclude_tools = set(tools)
        if not isinstance(config["clear_tool_inputs"], bool):
            raise tamp.invalid_config("clear_tool_inputs: expected true or false")
        self.clear_tool_inputs = config["clear_tool_inputs"]
        if not isinstance(config["placeholder"], str):
            raise tamp.invalid_config("placeholder: expected a string")
        self.placeholder = config["placeholder"]
        # A bad template stops the chain from loading, not the first compaction.
        self.note("tool", 0, "pg_0")

    def note(self, tool, tokens, page):
        try:
            return tamp.render_template(
                self.placeholder, {"tool": tool, "tokens": str(tokens), "page": page}
            )
        except tamp.PluginError as e:
            message = e.message.removeprefix("prompt template: ")
            raise tamp.invalid_config(f"placeholder: {message}") from None

    def compact(self, c):
        messages = c.messages
        compactable = c.compactable
        # The calls by id (position and tool), and the ids of the `keep` most recent.
        calls = {}
        order = []
        for index, m in enumerate(messages):
            for block, b in enumerate(m.content):
                if isinstance(b, tamp.ContentBlock_ToolUse):
                    calls[b.value.id] = (index, block, b.value.name)
                    order.append(b.value.id)
        kept = set(order[max(0, len(order) - self.keep):]) if self.keep else set()

        tokens = _Tokens(c)
        targets = []
        inputs = []
        for i in compactable:
            m = messages[i]
            for b, block in enumerate(m.content):
                if not isinstance(block, tamp.ContentBlock_ToolResult):
                    continue
                call = calls.get(block.value.tool_use_id)
                tool = call[2] if call else ""
                if (block.value.tool_use_id in kept or tool in self.exclude_tools
                        or is_cleared(block)):
                    continue
                size = tokens.block(i, b)
                if size < self.min_result_tokens:
                    continue
                targets.append((i, b, tool, True, size))
                if call and self.clear_tool_inputs:
                    ci, cb, _ = call
                    if ci in compactable and not is_cleared(messages[ci].content[cb]):
                        inputs.append((ci, cb, tool, False, tokens.block(ci, cb)))
        if not targets:
            return tamp.unchanged(
                f"no tool result to clear (the {self.keep} most recent tool uses are kept; "
                f"results under {self.min_result_tokens} tokens, excluded tools and cleared "
                "ones are left)"
            )
        targets.extend(inputs)

        # A placeholder's size, counted once per tool (with the widest number and a page
        # id's length); a block no larger than its placeholder is left alone.
        sizes = {}
        worth = []
        for t in targets:
            _, _, tool, result, size = t
            key = (tool, result)
            if key not in sizes:
                if result:
                    text = result_placeholder(SAMPLE_PAGE, self.note(tool, U64_MAX, SAMPLE_PAGE))
                else:
                    text = input_placeholder(SAMPLE_PAGE)
                sizes[key] = tamp.count_tokens(text)
            if size > sizes[key]:
                worth.append((t, size - sizes[key]))
        results = sum(1 for t, _ in worth if t[3])
        input_count = len(worth) - results
        if results == 0:
            return tamp.unchanged("no tool result is larger than its placeholder would be")

        # One clearing per message, oldest first.
        by_message = {}
        freed = 0
        for (index, block, tool, result, size), gain in worth:
            clearing = by_message.get(index)
            if clearing is None:
                clearing = Clearing(messages[index], index, c.page_id(index))
                by_message[index] = clearing
            if result:
                clearing.clear_result(block, self.note(tool, size, clearing.page))
            else:
                clearing.clear_input(block)
            freed += gain
        if freed < self.clear_at_least:
            return tamp.unchanged(
                f"clearing {results} tool result(s) would free about {freed} tokens, less "
                f"than clear_at_least ({self.clear_at_least})"
            )
        edits = [by_message[i].edit() for i in sorted(by_message)]
        edits = [e for e in edits if e is not None]
        inputs_note = f" and {input_count} tool input(s)" if input_count else ""
        return tamp.with_edits(
            edits,
            f"cleared {results} tool result(s){inputs_note} in {len(by_message)} message(s), "
            f"about {freed} tokens; the {self.keep} most recent tool uses kept",
            details={
                "results_cleared": results,
                "inputs_cleared": input_count,
                "messages_cleared": len(by_message),
                "tokens_freed": freed,
            },
        )


class _Tokens:
    """Block sizes as the native strategy counts them: a message's tokens (memoized by the
    host, fetched for the whole input in one call) when the block is its only one, else the
    block's own text."""

    def __init__(self, c):
        self._c = c
        self._messages = None

    def block(self, index, block):
        m = self._c.messages[index]
        if len(m.content) == 1:
            if self._messages is None:
                self._messages = self._c.message_tokens(0, len(self._c.messages))
            return self._messages[index]
        b = m.content[block]
        if isinstance(b, tamp.ContentBlock_ToolResult):
            return sum(tamp.count_tokens(p.value) for p in b.value.content)
        if isinstance(b, tamp.ContentBlock_ToolUse):
            return tamp.count_tokens(b.value.input_json)
        return 0


Strategy = tamp.export(ToolResultClearing)
