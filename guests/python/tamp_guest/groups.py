"""Grouping units for summarization, as the native SDK's `sdk::groups` does: the units inside
a range, runs of units that sit next to each other, and which tools a run of messages called.
Which units to pick, and when, is the strategy's policy; these only measure and cut.

The units are the host's (`Compaction.units()`): `Unit` values with a `span` (`start`,
`end`) and a `kind` (`UnitKind.TOOL_EXCHANGE`, ...).
"""

from ._bindings import types
from .failure import failed


def units_within(units, within: range) -> list:
    """The units lying wholly inside `within` (a `range` of message indexes, such as
    `Compaction.compactable`), in order; a unit straddling either edge is left out."""
    return [u for u in units if within.start <= u.span.start and u.span.end <= within.stop]


class Group:
    """Consecutive units covering messages `start..end` with no gap: from the first unit's
    first message to the last unit's last message."""

    __slots__ = ("start", "end", "units")

    def __init__(self, unit):
        self.start = unit.span.start
        self.end = unit.span.end
        self.units = [unit]

    @property
    def range(self) -> range:
        """The messages the group covers, as a `range`."""
        return range(self.start, self.end)

    def __repr__(self):
        return f"Group({self.start}..{self.end}, {len(self.units)} unit(s))"


def adjacent_runs(units) -> list:
    """`units` (in conversation order, a strategy's picks) split into maximal runs of
    adjacent units, as `Group`s: a unit continues the current run when it starts where the
    previous one ended, so any message that was not picked (a user turn, an earlier summary)
    ends a run."""
    runs = []
    for unit in units:
        if runs and runs[-1].end == unit.span.start:
            runs[-1].end = unit.span.end
            runs[-1].units.append(unit)
        else:
            runs.append(Group(unit))
    return runs


def _list_counts(counts) -> str:
    return ", ".join(name if n == 1 else f"{name} ×{n}" for name, n in counts)


def _bump(counts, name):
    for i, (known, n) in enumerate(counts):
        if known == name:
            counts[i] = (known, n + 1)
            return
    counts.append((name, 1))


class ToolActivity:
    """The tool calls made in some messages: `tools`, each tool called with how many times,
    in the order of its first call; `failed`, each tool with an error result with how many,
    in the order of its first error (a result answering a call outside the messages counts
    under the name `tool`)."""

    __slots__ = ("tools", "failed")

    def __init__(self):
        self.tools = []
        self.failed = []

    def calls(self) -> int:
        """How many tool calls were made."""
        return sum(n for _, n in self.tools)

    def errors(self) -> int:
        """How many tool results were errors."""
        return sum(n for _, n in self.failed)

    def tool_list(self) -> str:
        """The tools called, e.g. `bash ×2, read_file`."""
        return _list_counts(self.tools)

    def failed_list(self) -> str:
        """The tools whose results were errors, in the same form (empty when none failed)."""
        return _list_counts(self.failed)


def result_text(parts) -> str:
    """A tool result's content as text: its text parts joined by newlines, any other part
    noted as `[non-text content]` (the native SDK's `sdk::prompt::result_text`), so that a
    failure is read from the same text whichever side reads it."""
    return "\n".join(p.value if isinstance(p, types.ToolResultPart_Text) else "[non-text content]"
                     for p in parts)


def tool_activity(messages) -> ToolActivity:
    """The tools `messages` call and which of their results are failures (`failed`: the
    `is_error` flag, or the exit code the output reports where the wire has no flag, as
    Codex's Responses outputs), matched by tool-call id so that parallel calls answered in
    any order are named right (the native SDK's `sdk::groups::tool_activity`)."""
    activity = ToolActivity()
    names = {}
    for message in messages:
        for block in message.content:
            if isinstance(block, types.ContentBlock_ToolUse):
                names[block.value.id] = block.value.name
                _bump(activity.tools, block.value.name)
            elif isinstance(block, types.ContentBlock_ToolResult):
                r = block.value
                if r.is_error or failed(result_text(r.content), False):
                    _bump(activity.failed, names.get(r.tool_use_id, "tool"))
    return activity
