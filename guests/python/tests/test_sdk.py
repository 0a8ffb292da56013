"""The SDK's own tests, in plain CPython against the fake host (`python -m unittest discover
-s tests` in guests/python). The same cases as the native SDK's, so both read alike."""

import json
import unittest

import tamp_guest as tamp
from tamp_guest import testing
from tamp_guest.clearing import Clearing, cleared_page, input_placeholder, is_cleared
from tamp_guest.clearing import input_placeholder_tokens, result_placeholder, result_placeholder_tokens
from tamp_guest.testing import (
    FakeHost,
    assistant,
    content_section,
    page_id,
    system,
    text,
    tool_result,
    tool_use,
    user,
)

UnitKind = tamp.UnitKind


def unit(start, end, kind=UnitKind.TOOL_EXCHANGE):
    return tamp.Unit(tamp.Span(start, end), kind)


def spans(units):
    return [(u.span.start, u.span.end) for u in units]


def calls(*ids, name="bash"):
    """An assistant message calling `ids` in parallel."""
    return tamp.Message(tamp.Role.ASSISTANT, [
        tamp.ContentBlock_ToolUse(tamp.ToolUse(i, name, "{}", "")) for i in ids], None, "")


def results(role, *ids):
    """One message answering `ids`."""
    return tamp.Message(role, [
        tamp.ContentBlock_ToolResult(tamp.ToolResult(i, [tamp.ToolResultPart_Text("ok")], False, ""))
        for i in ids], None, "")


def summary(content, page="pg_1"):
    return tamp.Message(tamp.Role.USER, [tamp.ContentBlock_Text(tamp.TextBlock(content, ""))],
                        tamp.SummaryInfo(page, "s", tamp.SummaryStatus.FINAL), "")


def run_in_compaction(host, messages, probe, **kwargs):
    """`probe(compaction)` run inside a compaction of `messages` through `host`: its
    JSON-able result, carried out in the report's reason."""

    class Probe(tamp.Strategy):
        NAME = "probe"

        def compact(self, c):
            return tamp.unchanged(json.dumps(probe(c)))

    return json.loads(host.compact(Probe, messages, **kwargs).report.reason)


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


class Clearings(unittest.TestCase):
    def test_a_clearing_names_its_page_and_is_read_back(self):
        call, result = tool_use("c1", "bash", '{"cmd":"ls"}'), tool_result("c1", "a b c")
        page = page_id([result])
        cleared = Clearing(result, 3, page)
        self.assertTrue(cleared.clear_result(0, "Output of bash cleared."))
        self.assertFalse(cleared.clear_result(0, "again"))  # cleared already
        self.assertEqual(cleared.message.content[0].value.content[0].value,
                         f'<tamp-cleared page="{page}">\nOutput of bash cleared.\n</tamp-cleared>')
        self.assertEqual(cleared_page(cleared.message.content[0]), page)
        self.assertEqual(cleared.edit().value.index, 3)
        inputs = Clearing(call, 2, page)
        self.assertFalse(inputs.clear_result(0, "not a result"))
        self.assertTrue(inputs.clear_input(0))
        self.assertEqual(inputs.message.content[0].value.input_json,
                         '{"tamp_cleared":{"page":"' + page + '"}}')
        self.assertTrue(is_cleared(inputs.message.content[0]))
        self.assertIsNone(Clearing(call, 2, page).edit())

    def test_only_the_canonical_forms_are_placeholders(self):
        def result_block(output):
            return tool_result("c", output).content[0]

        def input_block(input_json):
            return tool_use("c", "bash", input_json).content[-1]

        self.assertEqual(cleared_page(result_block(result_placeholder("pg_1", ""))), "pg_1")
        for not_one in [result_block('<tamp-cleared page="pg 1">\nn\n</tamp-cleared>'),
                        result_block('<tamp-cleared page="pg_1">n\n</tamp-cleared>'),
                        result_block('<tamp-cleared page="pg_1">\nn</tamp-cleared>'),
                        result_block('<tamp-cleared page="">\nn\n</tamp-cleared>'),
                        input_block('{"tamp_cleared":{"page":"}}'),
                        input_block('{"tamp_cleared": {"page":"pg_1"}}'),
                        text("user", result_placeholder("pg_1", "n")).content[0]]:
            self.assertIsNone(cleared_page(not_one), not_one)
        self.assertEqual(cleared_page(input_block(input_placeholder("pg_1"))), "pg_1")


class Renderings(unittest.TestCase):
    def test_templates_fill_and_escape_and_name_what_is_wrong(self):
        self.assertEqual(tamp.render_template("{{x}} {a}-{b}}}", {"a": 1, "b": "2"}), "{x} 1-2}")
        for bad, says in [("hi {nope}", "prompt template: unknown placeholder {nope}; known: "
                                        "{tool}, {n}"),
                          ("a {b", "prompt template: unclosed `{` (write `{{` for a literal "
                                   "brace)"),
                          ("a } b", "prompt template: unmatched `}` (write `}}` for a literal "
                                    "brace)")]:
            with self.assertRaises(tamp.PluginError) as refused:
                tamp.render_template(bad, {"tool": "x", "n": 2})
            self.assertEqual(refused.exception.kind, tamp.ErrorKind.INVALID_CONFIG)
            self.assertEqual(refused.exception.message, says)

    def test_the_content_section_is_the_material_its_tags_escaped(self):
        self.assertEqual(tamp.wrap_content("the material"),
                         "<content>\nthe material\n</content>")
        wrapped = tamp.wrap_content("html: <content>x</content> end")
        self.assertEqual(content_section("Summarize.\n" + wrapped),
                         "html: &lt;content&gt;x&lt;/content&gt; end")
        self.assertEqual(content_section(tamp.wrap_content("")), "")
        self.assertEqual(content_section("no tags"), "no tags")

    def test_a_rendering_shows_roles_texts_calls_and_results(self):
        messages = [user("list files"), tool_use("c1", "ls", '{"dir":"/"}', say="Looking."),
                    tool_result("c1", "etc usr", is_error=True), summary("earlier work")]
        self.assertEqual(tamp.render_messages(messages),
                         'user: list files\nassistant: Looking.\n'
                         'assistant called ls({"dir":"/"})\nls failed: etc usr\n'
                         "summary of earlier messages (page pg_1): earlier work\n")

    def test_the_renderings_answer_at_any_time(self):
        # From a strategy's `__init__`, built by a stage or alone (in plain CPython, outside
        # a fake host's compaction, the fake's renderings stand in), and inside a compaction.
        class Checks(tamp.Strategy):
            NAME = "checks"

            def __init__(self, config):
                super().__init__(config)
                self.note = tamp.render_template("{a}", {"a": "b"}) + tamp.wrap_content("m")

            def compact(self, c):
                return tamp.unchanged(self.note + result_placeholder("pg_1", "n"))

        self.assertEqual(Checks({}).note, "b<content>\nm\n</content>")
        outcome = FakeHost().compact(Checks, [user("u")])
        self.assertEqual(outcome.report.reason,
                         "b<content>\nm\n</content>" + result_placeholder("pg_1", "n"))


class Text(unittest.TestCase):
    def test_cap_counts_characters_not_bytes(self):
        self.assertEqual(tamp.cap_chars("héllo wörld", 5), "héll…")
        self.assertEqual(tamp.cap_chars("short", 10), "short")
        self.assertEqual(tamp.cap_chars("exact", 5), "exact")
        self.assertEqual(tamp.cap_chars("abc", 0), "")
        self.assertEqual(tamp.cap_chars("😀😀😀", 2), "😀…")

    def test_trim_strips_what_rust_strips(self):
        self.assertEqual(tamp.trim(" \t\u3000answer\n\u2029"), "answer")
        # Python's `strip()` would take the information separators too.
        self.assertEqual(tamp.trim("\x1fanswer "), "\x1fanswer")


class Units(unittest.TestCase):
    def test_openai_parallel_calls_are_one_unit(self):
        messages = [system("sys"), user("hi"), calls("a", "b"), results(tamp.Role.TOOL, "a"),
                    results(tamp.Role.TOOL, "b"), assistant("done")]
        got = testing.units(messages)
        self.assertEqual([(u.span.start, u.span.end, u.kind) for u in got], [
            (0, 1, UnitKind.PINNED), (1, 2, UnitKind.MESSAGE), (2, 5, UnitKind.TOOL_EXCHANGE),
            (5, 6, UnitKind.MESSAGE)])

    def test_anthropic_exchanges_and_interleaved_ones(self):
        messages = [user("go"), calls("t1"), results(tamp.Role.USER, "t1"), calls("t2"),
                    results(tamp.Role.USER, "t2")]
        self.assertEqual(spans(testing.units(messages)), [(0, 1), (1, 3), (3, 5)])
        # A call answered only after another exchange began is not split from it.
        interleaved = [calls("a"), calls("b"), results(tamp.Role.TOOL, "b"),
                       results(tamp.Role.TOOL, "a")]
        self.assertEqual(spans(testing.units(interleaved)), [(0, 4)])
        orphan = testing.units([results(tamp.Role.TOOL, "zz"), calls("q")])
        self.assertEqual([u.kind for u in orphan], [UnitKind.MESSAGE, UnitKind.TOOL_EXCHANGE])
        self.assertEqual(testing.units([]), [])

    def test_a_unit_holding_a_pinned_message_is_pinned_whole_and_a_summary_is_one(self):
        opaque = results(tamp.Role.USER, "a")
        opaque.extra_json = '{"tamp:opaque":["block:fancy"]}'
        messages = [user("task"), calls("a"), opaque, system("mid"), calls("b"),
                    results(tamp.Role.USER, "b"), summary("s")]
        self.assertEqual([(u.span.start, u.span.end, u.kind) for u in testing.units(messages)], [
            (0, 1, UnitKind.MESSAGE), (1, 3, UnitKind.PINNED), (3, 4, UnitKind.PINNED),
            (4, 6, UnitKind.TOOL_EXCHANGE), (6, 7, UnitKind.SUMMARY)])

    def test_a_compaction_reads_the_units_and_the_tail_keeps_an_exchange_whole(self):
        messages = [system("s"), user("go"), calls("a"), results(tamp.Role.TOOL, "a"),
                    calls("b"), results(tamp.Role.TOOL, "b"), assistant("done")]
        got = run_in_compaction(
            FakeHost(), messages,
            lambda c: [spans(c.units()), [c.compactable.start, c.compactable.stop]],
            keep_recent=2)
        self.assertEqual(got[0], [[0, 1], [1, 2], [2, 4], [4, 6], [6, 7]])
        # The last two messages cut the exchange 4..6: it is protected whole.
        self.assertEqual(got[1], [2, 4])


class Groups(unittest.TestCase):
    def test_units_within_leaves_out_straddlers(self):
        units = [unit(0, 2), unit(2, 4), unit(4, 6)]
        self.assertEqual(spans(tamp.units_within(units, range(1, 6))), [(2, 4), (4, 6)])
        self.assertEqual(tamp.units_within(units, range(0, 0)), [])

    def test_runs_break_at_gaps(self):
        runs = tamp.adjacent_runs([unit(0, 2), unit(2, 4), unit(5, 7), unit(7, 9)])
        self.assertEqual([(r.start, r.end) for r in runs], [(0, 4), (5, 9)])
        self.assertEqual(runs[0].range, range(0, 4))
        self.assertEqual(spans(runs[0].units), [(0, 2), (2, 4)])
        self.assertEqual(tamp.adjacent_runs([]), [])

    def test_activity_names_tools_and_failures_across_parallel_calls(self):
        parallel = tamp.Message(tamp.Role.ASSISTANT, [
            tool_use("a", "grep").content[0], tool_use("b", "bash").content[0]], None, "")
        messages = [tool_use("x", "bash"), tool_result("x", "out", role="tool"), parallel,
                    # Answered out of order; only the bash call failed.
                    tool_result("b", "out", True, "tool"), tool_result("a", "out", role="tool"),
                    tool_result("zz", "out", True, "tool")]
        activity = tamp.tool_activity(messages)
        self.assertEqual(activity.tools, [("bash", 2), ("grep", 1)])
        self.assertEqual(activity.tool_list(), "bash ×2, grep")
        self.assertEqual(activity.calls(), 3)
        self.assertEqual(activity.failed_list(), "bash, tool")
        self.assertEqual(activity.errors(), 2)
        # A Responses output has no error flag: Codex says so in its text.
        said = tamp.tool_activity([tool_use("c", "exec_command"), tool_result("c", codex(1, (
            "cat: a.txt: No such file or directory")))])
        self.assertEqual(said.failed_list(), "exec_command")
        quiet = tamp.tool_activity([tool_use("y", "ls"), tool_result("y", "out")])
        self.assertEqual((quiet.errors(), quiet.failed_list(), quiet.tool_list()), (0, "", "ls"))


class Services(unittest.TestCase):
    def test_a_summary_is_weighed_as_the_host_builds_it(self):
        host = FakeHost()
        messages = [system("s"), user("go"), tool_use("c", "cat"), tool_result("c", "x" * 400)]
        replaced = host.count_message_tokens(messages[2:4])
        # A text of `replaced - 5` tokens, and 4 for its message: one fewer than `replaced`.
        fits = "y" * (4 * (replaced - 5))
        got = run_in_compaction(host, messages, lambda c: [
            c.summary_is_smaller(fits, 2, 4), c.summary_is_smaller(fits + "yyyy", 2, 4)])
        self.assertEqual(got, [True, False])

    def test_many_calls_answer_in_order_and_a_failure_is_an_answer(self):
        def probe(c):
            answers = tamp.complete_all(
                [tamp.llm_request("", f"q{i}", 16, label=f"q {i}") for i in range(3)], 2)
            return [a.text if isinstance(a, tamp.LlmResponse) else str(a) for a in answers]

        host = FakeHost(answers=["one", "two"])
        got = run_in_compaction(host, [user("u")], probe)
        self.assertEqual(got, ["one", "two", "llm: the fake host has no answer left"])
        self.assertEqual([r.label for r in host.llm_requests], ["q 0", "q 1", "q 2"])


class FakeHostErrors(unittest.TestCase):
    def test_a_strategy_s_bug_fails_the_test_with_its_traceback(self):
        class Buggy(tamp.Strategy):
            NAME = "buggy"

            def compact(self, c):
                return {}["missing"]

        with self.assertRaises(AssertionError) as failed:
            FakeHost().compact(Buggy, [user("u")])
        self.assertIn("the strategy panicked", str(failed.exception))
        self.assertIn("KeyError: 'missing'", str(failed.exception))
        # No frozen `Err` in its context, which unittest could not report.
        self.assertIsNone(failed.exception.__context__)


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
