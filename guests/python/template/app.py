"""The template Python strategy: tool-result clearing (plugins/tool-result-clearing, the
native strategy) ported to the Python guest SDK. Copy this directory to start a strategy of
your own; docs/writing-a-plugin.md says how to build and load it.

Old tool outputs are cleared in place, no LLM: each replaced by a placeholder naming the
page that keeps the original message. It makes the native strategy's edits with the same
config, byte for byte (the end-to-end tests compare the two), but counts what each clearing
costs exactly: with the page id its placeholder names, a lone block against its whole cleared
message, so that no clearing grows the conversation whatever the config. `test_app.py` holds
its unit tests (`python -m unittest`, against the SDK's fake host).
"""

import tamp_guest as tamp
from tamp_guest.clearing import (
    Clearing,
    input_placeholder_tokens,
    is_cleared,
    result_placeholder_tokens,
)

DEFAULT_PLACEHOLDER = "Output of {tool} ({tokens} tokens) cleared; recall this page to read it."

# The config, declared once: its schema, its defaults and its checks derive from this.
CONFIG = tamp.Config(
    tamp.Integer("keep", 3, "The most recent tool uses whose results (and inputs) are left "
                 "alone, counted over the whole conversation.", minimum=0, maximum=1000000),
    tamp.Integer("clear_at_least", 2000, "Clear nothing unless at least this many tokens "
                 "would go at once. 0: clear whatever is eligible.", minimum=0,
                 maximum=100000000),
    tamp.StringList("exclude_tools", [], "Tools whose results are never cleared."),
    tamp.Boolean("clear_tool_inputs", False,
                 "Also replace the input of each cleared call by a placeholder."),
    tamp.Integer("min_result_tokens", 100,
                 "Results smaller than this many tokens are left alone.", minimum=0,
                 maximum=100000000),
    tamp.String("placeholder", DEFAULT_PLACEHOLDER, "The note inside each placeholder: "
                "`{tool}`, `{tokens}`, `{page}`; `{{` and `}}` for literal braces."),
    description="How the strategy chooses what to clear.",
)


class ToolResultClearing(tamp.Strategy):
    NAME = "py-tool-result-clearing"
    VERSION = "0.1.0"
    DESCRIPTION = ("Clears old tool outputs in place, no LLM (a Python port of "
                   "tool-result-clearing): each replaced by a placeholder naming the page "
                   "that keeps it.")
    CONFIG = CONFIG

    def __init__(self, config):
        super().__init__(config)  # checked against CONFIG: self.config
        self.keep = self.config["keep"]
        self.clear_at_least = self.config["clear_at_least"]
        self.min_result_tokens = self.config["min_result_tokens"]
        self.exclude_tools = set(self.config["exclude_tools"])
        self.clear_tool_inputs = self.config["clear_tool_inputs"]
        self.placeholder = self.config["placeholder"]
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

    def cost(self, message, index, block, tool, result, size, page):
        """Tokens of the clearing of `block` in `message`, counted as `_Tokens` counted the
        block: the whole cleared message when the block is its only one, else the
        placeholder's text."""
        note = self.note(tool, size, page) if result else None
        if len(message.content) == 1:
            probe = Clearing(message, index, page)
            if result:
                probe.clear_result(block, note)
            else:
                probe.clear_input(block)
            return tamp.count_message_tokens([probe.message])
        if result:
            return result_placeholder_tokens(page, note)
        return input_placeholder_tokens(page)

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

        # What each clearing will cost, sized with the page id its placeholder will name
        # (the page of its message) and the note it will carry, and counted as its block
        # was (a lone block as its whole message): a block no larger than its placeholder
        # is left alone, so the conversation never grows (TAMP-INV-06).
        pages = {}
        worth = []
        for t in targets:
            index, block, tool, result, size = t
            if index not in pages:
                pages[index] = c.page_id(index)
            cost = self.cost(messages[index], index, block, tool, result, size, pages[index])
            if size > cost:
                worth.append((t, size - cost))
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
                clearing = Clearing(messages[index], index, pages[index])
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
