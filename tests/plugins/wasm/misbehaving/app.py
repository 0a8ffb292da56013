"""Test fixture: a Python guest that misbehaves on purpose, the WASM twins of the broken
native plugins (`tests/plugins/misbehaving`, `tests/plugins/rule-breaker`). With no
`misbehave` it is a correct strategy that leaves every conversation as it is (the benches'
guest that returns no edits). Each misbehaviour is set off by what one conformance check
sends, so that the kit fails exactly that check's rule:

| `misbehave` | what it does | when | the rule it fails |
| --- | --- | --- | --- |
| `loop` | takes 48 MiB, then loops forever | a conversation of two messages (a system prompt and a user message) | TAMP-EDGE-01 (within the time limit) |
| `bomb` | allocates without end | a message over 1 MB | TAMP-EDGE-02 |
| `trap` | calls `abort()`, which traps (`unreachable`; not a Python exception) | a conversation of more than two messages, all ASCII | TAMP-ERR-01 |
| `break` | summarizes through the protected tail | whenever there is something to compact | TAMP-INV-03 |

One mode behaves: `clear` clears the first tool result of the compactable range not cleared
yet, with the SDK's clearing helpers, which ask the host for its placeholders and for what is
cleared already (the end-to-end tests compare its clearing with the native rules'), its note
rendered by the host's template rendering.
"""

import os

import tamp_guest as tamp
from tamp_guest.clearing import Clearing, is_cleared

MODES = ("loop", "bomb", "trap", "break", "clear")


class Misbehaving(tamp.Strategy):
    NAME = "wasm-misbehaving"
    VERSION = "0.1.0"
    DESCRIPTION = "A test fixture that misbehaves as its config says (or not at all)."
    CONFIG_SCHEMA = {
        "type": "object",
        "properties": {"misbehave": {"enum": [None, *MODES]}},
        "additionalProperties": False,
    }
    DEFAULT_CONFIG = {"misbehave": None}

    def __init__(self, config):
        unknown = sorted(set(config) - {"misbehave"})
        if unknown:
            raise tamp.invalid_config(f"unknown field `{unknown[0]}`")
        self.misbehave = config.get("misbehave")
        if self.misbehave not in (None, *MODES):
            raise tamp.invalid_config(f"misbehave: expected one of {MODES}")

    def compact(self, c):
        if self.misbehave is None:
            return tamp.unchanged("a guest that returns no edits")
        messages = c.messages
        if self.misbehave == "loop" and len(messages) == 2:
            held = bytearray(48 << 20)
            while held:
                pass
        if self.misbehave == "bomb" and any(len(_text(m)) > 1_000_000 for m in messages):
            hoard = []
            while True:
                hoard.append(bytearray(8 << 20))
        if self.misbehave == "trap" and len(messages) > 2 and all(_text(m).isascii() for m in messages):
            # abort() in a WebAssembly guest executes `unreachable`: a trap, which no Python
            # code can catch.
            os.abort()
        if self.misbehave == "break" and len(c.compactable) > 0 and c.compactable.stop < len(messages):
            start = c.compactable.start
            return tamp.with_edits(
                [tamp.summarize(start, len(messages), "everything, the protected tail too")],
                "summarized through the protected tail",
            )
        if self.misbehave == "clear":
            return _clear_first_result(c)
        return tamp.unchanged("nothing to break here")


def _clear_first_result(c):
    messages = c.messages
    for index in c.compactable:
        for block, b in enumerate(messages[index].content):
            if isinstance(b, tamp.ContentBlock_ToolResult) and not is_cleared(b):
                clearing = Clearing(messages[index], index, c.page_id(index))
                note = tamp.render_template("cleared by {who} {{once}}", {"who": "the fixture"})
                clearing.clear_result(block, note)
                return tamp.with_edits([clearing.edit()], f"cleared message {index}")
    return tamp.unchanged("no tool result to clear")


def _text(message) -> str:
    parts = []
    for block in message.content:
        if isinstance(block, tamp.ContentBlock_Text):
            parts.append(block.value.text)
        elif isinstance(block, tamp.ContentBlock_ToolResult):
            parts.extend(p.value for p in block.value.content)
        elif isinstance(block, tamp.ContentBlock_ToolUse):
            parts.append(block.value.input_json)
    return "".join(parts)


Strategy = tamp.export(Misbehaving)
