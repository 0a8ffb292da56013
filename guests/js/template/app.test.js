// The template's unit tests: plain Node against the SDK's fake host, in milliseconds
// (`node --test` in this directory). `tamp conformance` on the built component checks the
// rest: the host's real token counts, its checks of every edit, the sandbox.

import assert from "node:assert/strict";
import { test } from "node:test";

import { PluginError } from "tamp-guest";
import { FakeHost, assistant, system, toolResult, toolUse, user } from "tamp-guest/testing";

import { ArchiveOldToolCalls } from "./app.js";

/// A call of `tool` and its result, long enough that a note is cheaper than the two.
const exchange = (id, tool, output = `${tool} output `.repeat(20)) => [toolUse(id, tool, "{}"), toolResult(id, output)];

/// Two exchanges, a user's turn, two more: the plan.rs test's conversation. With
/// `keepRecent: 1` the compactable range is 2..11 and its exchanges 2..4, 4..6, 7..9, 9..11.
const session = () => [
  system("s"),
  user("go"),
  ...exchange("a", "bash"),
  ...exchange("b", "bash"),
  user("more"),
  ...exchange("c", "edit"),
  ...exchange("d", "edit"),
  assistant("done"),
];

const spans = (outcome) => outcome.edits.map((e) => [e.val.span.start, e.val.span.end]);
const notes = (outcome) => outcome.edits.map((e) => e.val.text);

/// The material of a prompt: what `wrapContent` put between its tags.
const contentSection = (prompt) => /<content>\n([\s\S]*)\n<\/content>$/.exec(prompt)[1];

test("runs split at the user's turns, and the newest exchanges are kept", () => {
  const outcome = new FakeHost().compact(
    ArchiveOldToolCalls,
    session(),
    { keep_exchanges: 1, summarize: false },
    { keepRecent: 1 },
  );
  assert.ok(outcome.report.acted, outcome.report.reason);
  assert.deepEqual(spans(outcome), [[2, 6], [7, 9]]);
  assert.deepEqual(notes(outcome), ["Archived 2 tool call(s): bash ×2.", "Archived 1 tool call(s): edit."]);
  assert.equal(outcome.report.reason, "archived 3 tool exchange(s) in 2 run(s)");
  assert.deepEqual(outcome.report.warnings, []);
  for (const edit of outcome.edits) {
    assert.equal(edit.tag, "summarize");
    assert.equal(edit.val.status, "final");
  }
});

test("each run is summarized from its rendered messages, its answer after the note", () => {
  const host = new FakeHost({ answers: ["The tests failed in src/a.rs:12.", "  Edited b.rs.\n"] });
  const messages = session();
  const outcome = host.compact(ArchiveOldToolCalls, messages, { keep_exchanges: 1 }, { keepRecent: 1 });
  assert.equal(host.llmRequests.length, 2);
  const [first, second] = host.llmRequests;
  assert.ok(first.prompt.startsWith("Summarize what these tool calls found out, in a few sentences."), first.prompt);
  assert.equal(contentSection(first.prompt), host.renderMessages(messages.slice(2, 6)));
  assert.equal(contentSection(second.prompt), host.renderMessages(messages.slice(7, 9)));
  assert.deepEqual(
    host.llmRequests.map((r) => [r.system, r.label, r.maxOutputTokens, r.temperature, r.responseSchemaJson]),
    [
      ["", "run 1/2", 200, undefined, undefined],
      ["", "run 2/2", 200, undefined, undefined],
    ],
  );
  assert.deepEqual(notes(outcome), [
    "Archived 2 tool call(s): bash ×2.\nThe tests failed in src/a.rs:12.",
    "Archived 1 tool call(s): edit.\nEdited b.rs.",
  ]);
});

test("too few exchanges to archive change nothing", () => {
  const host = new FakeHost();
  const outcome = host.compact(ArchiveOldToolCalls, session(), { keep_exchanges: 1, min_exchanges: 4 }, { keepRecent: 1 });
  assert.equal(outcome.report.acted, false);
  assert.equal(outcome.report.reason, "3 tool exchange(s) old enough to archive, 4 needed");
  assert.deepEqual(outcome.edits, []);
  assert.equal(host.llmRequests.length, 0);
});

test("a failed summary is a warning, and the plain note stands", () => {
  const host = new FakeHost({ answers: [] });
  const outcome = host.compact(ArchiveOldToolCalls, session(), { keep_exchanges: 3 }, { keepRecent: 1 });
  assert.deepEqual(spans(outcome), [[2, 4]]);
  assert.deepEqual(notes(outcome), ["Archived 1 tool call(s): bash."]);
  assert.deepEqual(outcome.report.warnings, ["summary of messages 2..4 failed: llm: the fake host has no answer left"]);
});

test("an answer is cut to max_summary_chars, and one longer than its run is left out", () => {
  const cut = new FakeHost({ answers: ["😀".repeat(30)] }).compact(
    ArchiveOldToolCalls,
    session(),
    { keep_exchanges: 3, max_summary_chars: 10 },
    { keepRecent: 1 },
  );
  assert.deepEqual(notes(cut), [`Archived 1 tool call(s): bash.\n${"😀".repeat(9)}…`]);

  const long = new FakeHost({ answers: ["word ".repeat(400)] }).compact(
    ArchiveOldToolCalls,
    session(),
    { keep_exchanges: 3 },
    { keepRecent: 1 },
  );
  assert.deepEqual(notes(long), ["Archived 1 tool call(s): bash."]);
  assert.deepEqual(long.report.warnings, [
    "summary of messages 2..4 is longer than the exchanges it replaces; kept the plain note",
  ]);
});

test("a run its note would outweigh is left as it is", () => {
  const messages = [system("s"), user("go"), ...exchange("a", "x", "ok"), user("more"), assistant("done")];
  const host = new FakeHost({ answers: ["It worked."] });
  const outcome = host.compact(ArchiveOldToolCalls, messages, { keep_exchanges: 0 }, { keepRecent: 1 });
  assert.equal(outcome.report.acted, false);
  assert.equal(outcome.report.reason, "no run of tool exchanges outweighs its summary");
  assert.deepEqual(outcome.report.warnings, [
    "summary of messages 2..4 is longer than the exchanges it replaces; kept the plain note",
  ]);
});

test("the schema, the defaults and the checks agree, and an error names its field", () => {
  const info = new FakeHost().info(ArchiveOldToolCalls);
  assert.equal(info.name, "js-custom-strategy");
  assert.deepEqual(info.defaultConfig, {
    keep_exchanges: 3,
    min_exchanges: 1,
    summarize: true,
    summary_tokens: 200,
    max_summary_chars: 2000,
    max_concurrency: 8,
  });
  assert.deepEqual(info.configSchema.properties.summary_tokens, {
    description: "Upper bound on each summary, in tokens (asked of the LLM).",
    type: "integer",
    minimum: 16,
    maximum: 4096,
    default: 200,
  });
  for (const [bad, says] of [
    [{ summary_tokens: 8 }, "summary_tokens: 8 is out of range 16..=4096"],
    [{ min_exchanges: 0 }, "min_exchanges: 0 is out of range 1..="],
    [{ max_concurrency: 1.5 }, "max_concurrency: expected an integer"],
    [{ summarize: "yes" }, "summarize: expected true or false"],
    [{ keep: 1 }, "unknown field `keep`"],
  ]) {
    assert.throws(
      () => new FakeHost().compact(ArchiveOldToolCalls, session(), bad),
      (e) => e instanceof PluginError && e.kind === "invalid-config" && e.message.includes(says),
    );
  }
});
