"""The SDK's own tests, in plain CPython against the fake host (`python -m unittest discover
-s tests` in guests/python). The same cases as the native SDK's, so both read alike."""

import json
import unittest

import tamp_guest as tamp
from tamp_guest.clearing import input_placeholder, result_placeholder
from tamp_guest.clearing import input_placeholder_tokens, result_placeholder_tokens
from tamp_guest.testing import FakeHost, page_id, system, text, tool_result, tool_use, user


def codex(code, out):
    return (f"Chunk ID: 1f0c2a\nWall time: 0.0012 seconds\nProcess exited with code {code}\n"
            f"Original token count: 9\nOutput:\n{out}")


class Failure(unittest.TestCase):
    def test_an_exit_code_line_tells_a_failure(self):
        missing = "cat: missing-1.txt: No such file or directory\n"
        self.assertEqual(tamp.failure_line(codex(1, missing), False),
                         "cat: missing-1.txt: No such file or directory")
        self.assertIsNone(tamp.failure_line(codex(0, "step 1\n"), False))
        self.assertIsNone(tamp.failure_line(codex(1, ""), False))

    def test_an_editor_tool_that_says_it_failed_wrote_nothing(self):
        refused = ("apply_patch verification failed: Failed to read file to update "
                   "/w/nothere.txt: No such file or directory (os error 2)")
        self.assertEqual(tamp.refusal_line(refused), refused)
        self.assertIsNone(tamp.refusal_line("Success. Updated the following files:\nM /w/a.txt\n"))
        self.assertIsNone(tamp.refusal_line("File created successfully at: /w/error.log"))

    def test_a_flagged_result_failed_whatever_it_says(self):
        self.assertEqual(tamp.failure_line("", True), "(no output)")
        self.assertEqual(tamp.failure_line("line one\nTraceback: boom\nlast", True),
                         "Traceback: boom")
        self.assertTrue(tamp.failed("<returncode>2</returncode>\nerror: bad flag", False))
        self.assertFalse(tamp.failed(
            "<returncode>0</returncode>\nerror: in the log, not a failure", False))


class Pinned(unittest.TestCase):
    def test_instructions_and_opaque_units_are_pinned_boundaries_marked(self):
        opaque = text("assistant", "?", json.dumps({tamp.OPAQUE: ["item:web_search_call"]}))
        boundary = text("assistant", "compacted", '{"tamp:boundary":"compaction"}')
        mentions = text("user", "hi", '{"note":"tamp:opaque"}')
        self.assertTrue(tamp.is_pinned(system("s")))
        self.assertTrue(tamp.is_instructions(system("s")))
        self.assertTrue(tamp.is_pinned(opaque))
        self.assertFalse(tamp.is_instructions(opaque))
        self.assertFalse(tamp.is_pinned(user("u")))
        self.assertFalse(tamp.is_pinned(mentions))  # the marker as a value is no marker
        self.assertTrue(tamp.is_boundary(boundary))
        self.assertFalse(tamp.is_pinned(boundary))

    def test_a_compaction_lists_its_pinned_messages(self):
        class Lists(tamp.Strategy):
            NAME = "lists"

            def compact(self, c):
                return tamp.unchanged(json.dumps(c.pinned()))

        messages = [system("s"), user("u"), system("mid"), text("assistant", "a")]
        outcome = FakeHost().compact(Lists, messages)
        self.assertEqual(json.loads(outcome.report.reason), [0, 2])


class Placeholders(unittest.TestCase):
    def test_a_placeholder_is_sized_with_the_page_id_it_names(self):
        class Sizes(tamp.Strategy):
            NAME = "sizes"

            def compact(self, c):
                page = c.page_id(2)
                return tamp.unchanged(json.dumps([
                    page, c.message_tokens(0, 3),
                    result_placeholder_tokens(page, "note"), input_placeholder_tokens(page)]))

        messages = [system("s"), user("u"), tool_use("c1", "bash"), tool_result("c1", "x" * 99)]
        host = FakeHost()
        page, tokens, result, inputs = json.loads(
            host.compact(Sizes, messages, compactable=(2, 4)).report.reason)
        self.assertEqual(page, page_id([messages[2]]))
        self.assertEqual(tokens, [host.count_message_tokens([m]) for m in messages[:3]])
        self.assertEqual(result, host.count_tokens(result_placeholder(page, "note")))
        self.assertEqual(inputs, host.count_tokens(input_placeholder(page)))


class Configs(unittest.TestCase):
    CONFIG = tamp.Config(
        tamp.Integer("n", 2, "a count", minimum=1, maximum=9),
        tamp.Boolean("on", False),
        tamp.String("label", "x"),
        tamp.StringList("tools", []),
    )

    def test_the_schema_the_defaults_and_the_checks_derive_from_one_declaration(self):
        schema = self.CONFIG.schema()
        self.assertEqual(schema["properties"]["n"],
                         {"description": "a count", "type": "integer", "minimum": 1,
                          "maximum": 9, "default": 2})
        self.assertFalse(schema["additionalProperties"])
        self.assertEqual(self.CONFIG.defaults(), {"n": 2, "on": False, "label": "x", "tools": []})
        self.assertEqual(self.CONFIG.parse({"n": 3.0})["n"], 3)
        self.assertIs(type(self.CONFIG.parse({"n": 3.0})["n"]), int)
        for bad, says in [({"n": True}, "n: expected an integer"),
                          ({"n": 0}, "n: 0 is out of range 1..=9"),
                          ({"on": 1}, "on: expected true or false"),
                          ({"tools": "a"}, "tools: expected a list of strings"),
                          ({"other": 1}, "unknown field `other`")]:
            with self.assertRaises(tamp.PluginError) as refused:
                self.CONFIG.parse(bad)
            self.assertIn(says, refused.exception.message)


if __name__ == "__main__":
    unittest.main()
