// The SDK's own tests, in plain Node against the fake host (`node --test` in guests/js). The
// same cases as the native SDK's and the Python SDK's, so all three read alike.

import assert from "node:assert/strict";
import { test } from "node:test";

import {
  BOUNDARY,
  Config,
  OPAQUE,
  PluginError,
  Strategy,
  boolean,
  failed,
  failureLine,
  inputPlaceholder,
  inputPlaceholderTokens,
  integer,
  isBoundary,
  isInstructions,
  isPinned,
  refusalLine,
  resultPlaceholder,
  resultPlaceholderTokens,
  string,
  stringList,
  unchanged,
} from "tamp-guest";
import { FakeHost, pageId, system, text, toolResult, toolUse, user } from "tamp-guest/testing";

const codex = (code, out) =>
  `Chunk ID: 1f0c2a\nWall time: 0.0012 seconds\nProcess exited with code ${code}\nOriginal token count: 9\nOutput:\n${out}`;

test("an exit code line tells a failure", () => {
  assert.equal(failureLine(codex(1, "cat: missing-1.txt: No such file or directory\n"), false), "cat: missing-1.txt: No such file or directory");
  assert.equal(failureLine(codex(0, "step 1\n"), false), undefined);
  assert.equal(failureLine(codex(1, ""), false), undefined);
});

test("an editor tool that says it failed wrote nothing", () => {
  const refused = "apply_patch verification failed: Failed to read file to update /w/nothere.txt: No such file or directory (os error 2)";
  assert.equal(refusalLine(refused), refused);
  assert.equal(refusalLine("Success. Updated the following files:\nM /w/a.txt\n"), undefined);
  assert.equal(refusalLine("File created successfully at: /w/error.log"), undefined);
});

test("a flagged result failed whatever it says", () => {
  assert.equal(failureLine("", true), "(no output)");
  assert.equal(failureLine("line one\nTraceback: boom\nlast", true), "Traceback: boom");
  assert.ok(failed("<returncode>2</returncode>\nerror: bad flag", false));
  assert.ok(!failed("<returncode>0</returncode>\nerror: in the log, not a failure", false));
});

test("instructions and opaque units are pinned, boundaries marked", () => {
  const opaque = text("assistant", "?", JSON.stringify({ [OPAQUE]: ["item:web_search_call"] }));
  const boundary = text("assistant", "compacted", JSON.stringify({ [BOUNDARY]: "compaction" }));
  assert.ok(isPinned(system("s")) && isInstructions(system("s")));
  assert.ok(isPinned(opaque) && !isInstructions(opaque));
  assert.ok(!isPinned(user("u")));
  assert.ok(!isPinned(text("user", "hi", '{"note":"tamp:opaque"}')));
  assert.ok(isBoundary(boundary) && !isPinned(boundary));
});

test("a compaction lists its pinned messages", () => {
  class Lists extends Strategy {
    static NAME = "lists";
    compact(c) {
      return unchanged(JSON.stringify(c.pinned()));
    }
  }
  const outcome = new FakeHost().compact(Lists, [system("s"), user("u"), system("mid"), text("assistant", "a")]);
  assert.deepEqual(JSON.parse(outcome.report.reason), [0, 2]);
});

test("a placeholder is sized with the page id it names", () => {
  class Sizes extends Strategy {
    static NAME = "sizes";
    compact(c) {
      const page = c.pageId(2);
      return unchanged(
        JSON.stringify([page, c.messageTokens(0, 3), resultPlaceholderTokens(page, "note"), inputPlaceholderTokens(page)]),
      );
    }
  }
  const messages = [system("s"), user("u"), toolUse("c1", "bash"), toolResult("c1", "x".repeat(99))];
  const host = new FakeHost();
  const outcome = host.compact(Sizes, messages, {}, { compactable: { start: 2, end: 4 } });
  const [page, tokens, result, inputs] = JSON.parse(outcome.report.reason);
  assert.equal(page, pageId([messages[2]]));
  assert.deepEqual(tokens, messages.slice(0, 3).map((m) => host.countMessageTokens([m])));
  assert.equal(result, Number(host.countTokens(resultPlaceholder(page, "note"))));
  assert.equal(inputs, Number(host.countTokens(inputPlaceholder(page))));
});

test("the schema, the defaults and the checks derive from one declaration", () => {
  const config = new Config([
    integer("n", 2, "a count", { minimum: 1, maximum: 9 }),
    boolean("on", false),
    string("label", "x"),
    stringList("tools", []),
  ]);
  const schema = config.schema();
  assert.deepEqual(schema.properties.n, { description: "a count", type: "integer", minimum: 1, maximum: 9, default: 2 });
  assert.equal(schema.additionalProperties, false);
  assert.deepEqual(config.defaults(), { n: 2, on: false, label: "x", tools: [] });
  assert.equal(config.parse(JSON.parse('{"n": 3.0}')).n, 3);
  for (const [bad, says] of [
    [{ n: true }, "n: expected an integer"],
    [{ n: 0 }, "n: 0 is out of range 1..=9"],
    [{ on: 1 }, "on: expected true or false"],
    [{ tools: "a" }, "tools: expected a list of strings"],
    [{ other: 1 }, "unknown field `other`"],
  ]) {
    assert.throws(() => config.parse(bad), (e) => e instanceof PluginError && e.message.includes(says));
  }
});
