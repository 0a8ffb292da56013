"""The template's unit tests: plain CPython against the SDK's fake host, in milliseconds
(`python -m unittest` in this directory). They are the Rust example's (examples/
custom-strategy) and more: the host's offline summarizer and the comparison with the Rust
example are the end-to-end tests' part, and `tamp conformance` on the built component checks
the rest (the host's real token counts, its checks of every edit, the sandbox)."""

import unittest

import tamp_guest as tamp
from tamp_guest.testing import (
    FakeHost,
    assistant,
    content_section,
    render_messages,
    system,
    tool_result,
    tool_use,
    user,
)

from app import PROMPT, ArchiveOldToolCalls

OUTPUT = "ok: " + "x" * 200


def exchange(call_id, tool, output=OUTPUT):
    """A call of `tool` and its result in an OpenAI `tool` message, as in the Rust tests."""
    return [tool_use(call_id, tool, "{}"), tool_result(call_id, output, role="tool")]


def conversation(output=OUTPUT):
    """The Rust example's `runs_split_at_user_messages_and_keep_the_newest`: two exchanges, a
    user message, two more, and the assistant's answer (messages 2..6 and 7..11)."""
    return [
        system("s"), user("go"),
        *exchange("a", "bash", output), *exchange("b", "bash", output),
        user("more"),
        *exchange("c", "edit", output), *exchange("d", "edit", output),
        assistant("done"),
    ]


def small_exchanges():
    """Two exchanges, each alone in its run, each smaller than its note."""
    return [system("s"), user("go"), *exchange("a", "bash", "ok"), user("more"),
            *exchange("b", "edit", "ok"), assistant("done")]


def compact(config, answers=None, messages=None):
    """One compaction of `conversation()` with the last message protected, as in the Rust
    test; the fake host too, for what it saw."""
    host = FakeHost(answers=answers)
    outcome = host.compact(ArchiveOldToolCalls, messages or conversation(),
                           {"keep_exchanges": 1, **config}, keep_recent=1)
    return outcome, host


def spans(outcome):
    return [(e.value.span.start, e.value.span.end) for e in outcome.edits]


def texts(outcome):
    return [e.value.text for e in outcome.edits]


class Config(unittest.TestCase):
    def test_the_schema_and_the_checks_agree(self):
        info = FakeHost().info(ArchiveOldToolCalls)
        self.assertEqual(info["name"], "py-custom-strategy")
        self.assertEqual(info["default_config"], {
            "keep_exchanges": 3, "min_exchanges": 1, "summarize": True, "summary_tokens": 200,
            "max_summary_chars": 2000, "max_concurrency": 8})
        props = info["config_schema"]["properties"]
        self.assertEqual((props["summary_tokens"]["minimum"], props["summary_tokens"]["maximum"]),
                         (16, 4096))
        self.assertEqual(ArchiveOldToolCalls(info["default_config"]).config["keep_exchanges"], 3)

    def test_a_config_error_names_its_field(self):
        for bad, says in [({"min_exchanges": 0}, "min_exchanges: 0 is out of range 1..="),
                          ({"summary_tokens": 8}, "summary_tokens: 8 is out of range 16..=4096"),
                          ({"summarize": "yes"}, "summarize: expected true or false"),
                          ({"keep": 1}, "unknown field `keep`")]:
            with self.assertRaises(tamp.PluginError) as refused:
                FakeHost().compact(ArchiveOldToolCalls, conversation(), bad)
            self.assertEqual(refused.exception.kind, tamp.ErrorKind.INVALID_CONFIG)
            self.assertIn(says, refused.exception.message)


class Grouping(unittest.TestCase):
    def test_runs_split_at_user_messages_and_keep_the_newest(self):
        outcome, host = compact({"summarize": False})
        self.assertTrue(outcome.report.acted, outcome.report.reason)
        # The newest exchange (9..11) is kept; the others go in two runs, the user message
        # between them left.
        self.assertEqual(spans(outcome), [(2, 6), (7, 9)])
        self.assertEqual(texts(outcome), ["Archived 2 tool call(s): bash ×2.",
                                          "Archived 1 tool call(s): edit."])
        self.assertEqual(outcome.report.reason, "archived 3 tool exchange(s) in 2 run(s)")
        self.assertEqual(list(outcome.report.warnings), [])
        self.assertEqual(host.llm_requests, [])
        for edit in outcome.edits:
            self.assertEqual(edit.value.status, tamp.SummaryStatus.FINAL)
            self.assertEqual(edit.value.metadata_json, "")

    def test_nothing_is_archived_below_min_exchanges(self):
        outcome, host = compact({"min_exchanges": 4})
        self.assertFalse(outcome.report.acted)
        self.assertEqual(outcome.edits, [])
        self.assertEqual(outcome.report.reason,
                         "3 tool exchange(s) old enough to archive, 4 needed")
        self.assertEqual(host.llm_requests, [])

    def test_only_exchanges_wholly_inside_the_compactable_range_go(self):
        # The exchange 4..6 straddles the range's end.
        host = FakeHost()
        outcome = host.compact(ArchiveOldToolCalls, conversation(),
                               {"keep_exchanges": 0, "summarize": False}, compactable=(2, 5))
        self.assertEqual(spans(outcome), [(2, 4)])

    def test_exchanges_no_larger_than_their_note_are_left(self):
        outcome, _ = compact({"summarize": False, "keep_exchanges": 0},
                             messages=small_exchanges())
        self.assertFalse(outcome.report.acted)
        self.assertEqual(outcome.report.reason, "no run of tool exchanges outweighs its summary")


class Summaries(unittest.TestCase):
    def test_each_run_is_summarized_from_its_rendering(self):
        outcome, host = compact({}, answers=["  bash listed the tree.\n", "edit fixed a.rs."])
        messages = conversation()
        self.assertEqual(len(host.llm_requests), 2)
        for request, (start, end), label in zip(host.llm_requests, [(2, 6), (7, 9)],
                                                 ["run 1/2", "run 2/2"]):
            self.assertEqual(request.system, "")
            self.assertTrue(request.prompt.startswith(PROMPT), request.prompt)
            self.assertEqual(content_section(request.prompt),
                             render_messages(messages[start:end]))
            self.assertEqual(request.max_output_tokens, 200)
            self.assertIsNone(request.temperature)
            self.assertIsNone(request.response_schema_json)
            self.assertEqual(request.label, label)
        self.assertEqual(texts(outcome), [
            "Archived 2 tool call(s): bash ×2.\nbash listed the tree.",
            "Archived 1 tool call(s): edit.\nedit fixed a.rs.",
        ])
        self.assertEqual(list(outcome.report.warnings), [])

    def test_a_failed_call_is_a_warning_and_the_plain_note_stands(self):
        # The fake host has one answer: the second run's call fails.
        outcome, _ = compact({}, answers=["bash listed the tree."])
        self.assertTrue(outcome.report.acted)
        self.assertEqual(texts(outcome), [
            "Archived 2 tool call(s): bash ×2.\nbash listed the tree.",
            "Archived 1 tool call(s): edit.",
        ])
        self.assertEqual(list(outcome.report.warnings), [
            "summary of messages 7..9 failed: llm: the fake host has no answer left"])

    def test_an_answer_is_cut_to_max_summary_chars(self):
        outcome, _ = compact({"max_summary_chars": 10}, answers=lambda request: "é" * 500)
        self.assertEqual(texts(outcome)[1], "Archived 1 tool call(s): edit.\n" + "é" * 9 + "…")

    def test_an_answer_outweighing_its_run_leaves_the_plain_note(self):
        outcome, _ = compact({}, answers=lambda request: "words " * 1000)
        self.assertEqual(texts(outcome), ["Archived 2 tool call(s): bash ×2.",
                                          "Archived 1 tool call(s): edit."])
        self.assertEqual(list(outcome.report.warnings), [
            f"summary of messages {at} is longer than the exchanges it replaces; kept the "
            "plain note" for at in ("2..6", "7..9")])

    def test_warnings_are_reported_when_nothing_is_archived(self):
        outcome, _ = compact({"keep_exchanges": 0}, messages=small_exchanges())
        self.assertFalse(outcome.report.acted)
        self.assertEqual(len(outcome.report.warnings), 2)
        self.assertIn("failed: llm:", outcome.report.warnings[0])


if __name__ == "__main__":
    unittest.main()
