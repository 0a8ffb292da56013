// The template's unit tests: plain Node against the SDK's fake host, in milliseconds
// (`node --test` in this directory). `tamp conformance` on the built component checks the
// rest: the host's real token counts, its checks of every edit, the sandbox.

import assert from "node:assert/strict";
import { test } from "node:test";

import { PluginError, clearedPage } from "tamp-guest";
import { FakeHost, assistant, pageId, system, toolResult, toolUse, user } from "tamp-guest/testing";

import { ToolResultClearing } from "./app.js";

/// A system prompt, a task, and `calls` tool calls with their results.
function session(calls, outputBytes = 2000) {
  const messages = [system("You are terse."), user("Fix the failing test.")];
  for (let i = 0; i < calls; i++) {
    messages.push(toolUse(`call_${i}`, "bash", '{"cmd": "make test"}'));
    messages.push(toolResult(`call_${i}`, `run ${i}: ` + "x".repeat(outputBytes)));
  }
  messages.push(assistant("Done."));
  return messages;
}

test("the schema and the checks agree", () => {
  const info = new FakeHost().info(ToolResultClearing);
  assert.equal(info.name, "js-tool-result-clearing");
  assert.equal(info.configSchema.properties.keep.type, "integer");
  assert.equal(info.defaultConfig.keep, 3);
  assert.equal(new ToolResultClearing(info.defaultConfig).keep, 3);
  assert.equal(new ToolResultClearing(JSON.parse('{"keep": 3.0}')).keep, 3);
  for (const [bad, says] of [
    [{ keep: 3.5 }, "keep: expected an integer"],
    [{ keep: -1 }, "keep: -1 is out of range 0..=1000000"],
    [{ kept: 1 }, "unknown field `kept`"],
    [{ placeholder: "{size}" }, "placeholder: unknown placeholder"],
  ]) {
    assert.throws(
      () => new FakeHost().compact(ToolResultClearing, session(1), bad),
      (e) => e instanceof PluginError && e.kind === "invalid-config" && e.message.includes(says),
    );
  }
});

test("old results are cleared naming their pages, and the recent kept", () => {
  const host = new FakeHost();
  const messages = session(8);
  const outcome = host.compact(ToolResultClearing, messages, { keep: 2 }, { keepRecent: 2 });
  assert.ok(outcome.report.acted, outcome.report.reason);
  const results = messages.flatMap((m, i) => (m.content[0].tag === "tool-result" ? [i] : []));
  assert.deepEqual(outcome.edits.map((e) => e.val.index), results.slice(0, -2));
  for (const edit of outcome.edits) {
    assert.equal(clearedPage(edit.val.message.content[0]), pageId([messages[edit.val.index]]));
  }
  const after = host.apply(outcome);
  assert.ok(host.countMessageTokens(after) < host.countMessageTokens(messages));
  const again = host.compact(ToolResultClearing, after, { keep: 2 }, { keepRecent: 2 });
  assert.equal(again.report.acted, false, again.report.reason);
});

test("nothing is cleared below clear_at_least", () => {
  const outcome = new FakeHost().compact(ToolResultClearing, session(2, 600), { keep: 0 }, { keepRecent: 1 });
  assert.equal(outcome.report.acted, false);
  assert.match(outcome.report.reason, /less than clear_at_least \(2000\)/);
});

test("no clearing grows its message", () => {
  // Every result eligible, however small, and a tokenizer that, as real ones do, splits a page
  // id's hex digits into more tokens than a run of zeros: a placeholder sized with a stand-in
  // id would look cheaper than the one written, and some clearings would grow their message
  // (TAMP-INV-06).
  class HexCounts extends FakeHost {
    countTokens(content) {
      return super.countTokens(content) + BigInt([...content].filter((c) => "123456789abcdef".includes(c)).length);
    }
  }
  const host = new HexCounts();
  const messages = [system("You are terse."), user("Fix the failing test.")];
  for (let i = 0; i < 60; i++) {
    messages.push(toolUse(`call_${i}`, "bash", "{}"));
    messages.push(toolResult(`call_${i}`, "x".repeat(i * 12)));
  }
  const outcome = host.compact(
    ToolResultClearing,
    messages,
    { keep: 0, clear_at_least: 0, min_result_tokens: 0 },
    { keepRecent: 0 },
  );
  assert.ok(outcome.report.acted, outcome.report.reason);
  for (const edit of outcome.edits) {
    assert.ok(
      host.countMessageTokens([edit.val.message]) < host.countMessageTokens([messages[edit.val.index]]),
      `the clearing of message ${edit.val.index} grows it`,
    );
  }
  // The small outputs are left: their placeholders would cost more.
  assert.ok(!outcome.edits.some((e) => e.val.index === 3));
});
