"""The template's unit tests: plain CPython against the SDK's fake host, in milliseconds
(`python -m unittest` in this directory). `tamp conformance` on the built component checks
the rest: the host's real token counts, its checks of every edit, the sandbox."""

import unittest

import tamp_guest as tamp
from tamp_guest.clearing import cleared_page
from tamp_guest.testing import FakeHost, assistant, page_id, system, tool_result, tool_use, user

from app import ToolResultClearing


def session(calls: int, output_bytes: int = 2000):
    """A system prompt, a task, and `calls` tool calls with their results."""
    messages = [system("You are terse."), user("Fix the failing test.")]
    for i in range(calls):
        messages.append(tool_use(f"call_{i}", "bash", '{"cmd": "make test"}'))
        messages.append(tool_result(f"call_{i}", f"run {i}: " + "x" * output_bytes))
    messages.append(assistant("Done."))
    return messages


class Config(unittest.TestCase):
    def test_the_schema_and_the_checks_agree(self):
        info = FakeHost().info(ToolResultClearing)
        self.assertEqual(info["name"], "py-tool-result-clearing")
        schema = info["config_schema"]
        self.assertEqual(schema["properties"]["keep"]["type"], "integer")
        self.assertEqual(info["default_config"]["keep"], 3)
        # Every default is accepted, and a whole float is the integer JSON Schema says it is.
        self.assertEqual(ToolResultClearing(info["default_config"]).keep, 3)
        self.assertEqual(ToolResultClearing({"keep": 3.0}).keep, 3)
        for bad, says in [({"keep": 3.5}, "keep: expected an integer"),
                          ({"keep": -1}, "keep: -1 is out of range 0..=1000000"),
                          ({"kept": 1}, "unknown field `kept`"),
                          ({"placeholder": "{size}"}, "placeholder: unknown placeholder")]:
            with self.assertRaises(tamp.PluginError) as refused:
                FakeHost().compact(ToolResultClearing, session(1), bad)
            self.assertEqual(refused.exception.kind, tamp.ErrorKind.INVALID_CONFIG)
            self.assertIn(says, refused.exception.message)


class Clearing(unittest.TestCase):
    def test_old_results_are_cleared_naming_their_pages_and_the_recent_kept(self):
        host = FakeHost()
        messages = session(8)
        outcome = host.compact(ToolResultClearing, messages, {"keep": 2}, keep_recent=2)
        self.assertTrue(outcome.report.acted, outcome.report.reason)
        cleared = {e.value.index for e in outcome.edits}
        results = [i for i, m in enumerate(messages)
                   if isinstance(m.content[0], tamp.ContentBlock_ToolResult)]
        self.assertEqual(sorted(cleared), results[:-2])
        for edit in outcome.edits:
            index = edit.value.index
            page = cleared_page(edit.value.message.content[0])
            self.assertEqual(page, page_id([messages[index]]))
        after = host.apply(outcome)
        self.assertLess(host.count_message_tokens(after), host.count_message_tokens(messages))
        # Cleared once: a second pass finds nothing more.
        again = host.compact(ToolResultClearing, after, {"keep": 2}, keep_recent=2)
        self.assertFalse(again.report.acted, again.report.reason)

    def test_nothing_is_cleared_below_clear_at_least(self):
        outcome = FakeHost().compact(ToolResultClearing, session(2, 600), {"keep": 0},
                                     keep_recent=1)
        self.assertFalse(outcome.report.acted)
        self.assertIn("less than clear_at_least (2000)", outcome.report.reason)

    def test_no_clearing_grows_its_message(self):
        # Every result eligible, however small, and a tokenizer that, as real ones do, splits
        # a page id's hex digits into more tokens than a run of zeros: a placeholder sized
        # with a stand-in id would look cheaper than the one written, and some clearings
        # would grow their message (TAMP-INV-06).
        class HexCounts(FakeHost):
            def count_tokens(self, content):
                return super().count_tokens(content) + sum(c in "123456789abcdef" for c in content)

        host = HexCounts()
        messages = [system("You are terse."), user("Fix the failing test.")]
        for i in range(60):
            messages.append(tool_use(f"call_{i}", "bash", "{}"))
            messages.append(tool_result(f"call_{i}", "x" * (i * 12)))
        outcome = host.compact(
            ToolResultClearing, messages,
            {"keep": 0, "clear_at_least": 0, "min_result_tokens": 0}, keep_recent=0)
        self.assertTrue(outcome.report.acted, outcome.report.reason)
        for edit in outcome.edits:
            before = host.count_message_tokens([messages[edit.value.index]])
            self.assertLess(host.count_message_tokens([edit.value.message]), before,
                            f"the clearing of message {edit.value.index} grows it")
        # The small outputs are left: their placeholders would cost more.
        self.assertNotIn(3, {e.value.index for e in outcome.edits})


if __name__ == "__main__":
    unittest.main()
