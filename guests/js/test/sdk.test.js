// The SDK's own tests, in plain Node against the fake host (`node --test` in guests/js). The
// same cases as the native SDK's and the Python SDK's, so all three read alike.

import assert from "node:assert/strict";
import { test } from "node:test";

import {
  BOUNDARY,
  Clearing,
  Config,
  OPAQUE,
  PluginError,
  Strategy,
  adjacentRuns,
  boolean,
  capChars,
  clearedPage,
  completeAll,
  failed,
  failureLine,
  inputPlaceholder,
  inputPlaceholderTokens,
  integer,
  isBoundary,
  isCleared,
  isInstructions,
  isPinned,
  refusalLine,
  renderMessages,
  renderTemplate,
  resultPlaceholder,
  resultPlaceholderTokens,
  string,
  stringList,
  toolActivity,
  trimWhitespace,
  unchanged,
  unitsWithin,
  wrapContent,
} from "tamp-guest";
import {
  FakeHost,
  assistant,
  compactableRange,
  pageId,
  system,
  text,
  toolResult,
  toolUse,
  units,
  user,
} from "tamp-guest/testing";

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

/// A strategy that reports what `probe(compaction)` returns, as JSON.
function probing(probe) {
  return class Probe extends Strategy {
    static NAME = "probe";
    compact(c) {
      return unchanged(JSON.stringify(probe(c)));
    }
  };
}

const unit = (start, end, kind = "tool-exchange") => ({ span: { start, end }, kind });

test("units within a range leave out straddlers", () => {
  const us = [unit(0, 2), unit(2, 4), unit(4, 6)];
  assert.deepEqual(unitsWithin(us, { start: 1, end: 6 }), [unit(2, 4), unit(4, 6)]);
  assert.deepEqual(unitsWithin(us, { start: 0, end: 0 }), []);
});

test("runs of adjacent units break at gaps", () => {
  const picks = [unit(0, 2), unit(2, 4), unit(5, 7), unit(7, 9)];
  const runs = adjacentRuns(picks);
  assert.deepEqual(runs.map((r) => [r.span.start, r.span.end, r.units.length]), [[0, 4, 2], [5, 9, 2]]);
  assert.deepEqual(picks[0].span, { start: 0, end: 2 }, "a run's span is its own, not its first unit's");
  assert.deepEqual(adjacentRuns([]), []);
});

test("tool activity names tools and failures across parallel calls", () => {
  const parallel = {
    role: "assistant",
    content: [...toolUse("a", "grep").content, ...toolUse("b", "bash").content],
    summary: undefined,
    extraJson: "",
  };
  const activity = toolActivity([
    toolUse("x", "bash"),
    toolResult("x", "out"),
    parallel,
    // Answered out of order; only the bash call failed.
    toolResult("b", "out", true),
    toolResult("a", "out"),
    toolResult("zz", "out", true),
  ]);
  assert.equal(activity.toolList, "bash ×2, grep");
  assert.equal(activity.calls, 3);
  assert.equal(activity.failedList, "bash, tool");
  assert.equal(activity.errors, 2);
  // A Responses output has no error flag: Codex says so in its text.
  const exec = toolActivity([toolUse("c", "exec_command"), toolResult("c", codex(1, "cat: a.txt: No such file or directory"))]);
  assert.equal(exec.failedList, "exec_command");
  const quiet = toolActivity([toolUse("y", "ls"), toolResult("y", "out")]);
  assert.equal(quiet.errors, 0);
  assert.equal(quiet.failedList, "");
});

test("capChars counts code points, not UTF-16 units", () => {
  assert.equal(capChars("héllo wörld", 5), "héll…");
  assert.equal(capChars("short", 10), "short");
  assert.equal(capChars("exact", 5), "exact");
  assert.equal(capChars("abc", 0), "");
  assert.equal(capChars("", 0), "");
  assert.equal(capChars("😀😀😀", 3), "😀😀😀");
  assert.equal(capChars("😀😀😀", 2), "😀…");
});

test("trimWhitespace cuts what Rust's trim cuts", () => {
  assert.equal(trimWhitespace(" \t\n\u0085\u3000 a b \u00a0\r\n"), "a b");
  assert.equal(trimWhitespace("\ufeffa\ufeff"), "\ufeffa\ufeff");
  assert.equal(trimWhitespace(" \n "), "");
  assert.equal(trimWhitespace(""), "");
});

test("units group a call with its results, as the host's rule does", () => {
  const kinds = (messages) => units(messages).map((u) => [u.span.start, u.span.end, u.kind]);
  // OpenAI's parallel calls answered by several `tool` messages are one unit.
  const parallel = { role: "assistant", content: [...toolUse("a", "t").content, ...toolUse("b", "t").content], summary: undefined, extraJson: "" };
  const answer = (id) => ({ ...toolResult(id, "ok"), role: "tool" });
  assert.deepEqual(kinds([system("s"), user("hi"), parallel, answer("a"), answer("b"), assistant("done")]), [
    [0, 1, "pinned"],
    [1, 2, "message"],
    [2, 5, "tool-exchange"],
    [5, 6, "message"],
  ]);
  // A call answered after another exchange began holds it; an orphan result stands alone.
  assert.deepEqual(kinds([toolUse("a", "t"), toolUse("b", "t"), answer("b"), answer("a")]), [[0, 4, "tool-exchange"]]);
  assert.deepEqual(kinds([answer("zz"), toolUse("q", "t")]), [
    [0, 1, "message"],
    [1, 2, "tool-exchange"],
  ]);
  // A unit holding an opaque message is pinned whole; a summary is its own kind.
  const opaque = { ...toolResult("a", "ok"), extraJson: JSON.stringify({ [OPAQUE]: ["block:fancy"] }) };
  const summary = { ...user("s"), summary: { pageRef: "pg_1", strategy: "x", status: "final" } };
  assert.deepEqual(kinds([user("task"), toolUse("a", "t"), opaque, summary]), [
    [0, 1, "message"],
    [1, 3, "pinned"],
    [3, 4, "summary"],
  ]);
  assert.deepEqual(units([]), []);
});

test("the compactable range keeps the task, pinned units, boundaries and the tail out", () => {
  const range = (messages, keepRecent) => Object.values(compactableRange(messages, keepRecent));
  const exchange = [system("s"), user("u"), toolUse("a", "t"), toolResult("a", "r"), assistant("end")];
  assert.deepEqual(range(exchange, 2), [2, 2]); // the tail's result takes its call along
  assert.deepEqual(range(exchange, 1), [2, 4]);
  assert.deepEqual(range(exchange, 0), [2, 5]);
  const boundary = text("assistant", "compacted", JSON.stringify({ [BOUNDARY]: "compaction" }));
  const messages = [system("s"), user("task"), system("mid"), assistant("a1"), user("u1"), assistant("a2")];
  assert.deepEqual(range(messages, 1), [3, 5]);
  messages.splice(4, 0, boundary);
  assert.deepEqual(range(messages, 1), [5, 6]);
});

test("a compaction reads its units and asks whether a summary is smaller", () => {
  const messages = [system("s"), user("u"), toolUse("c1", "bash"), toolResult("c1", "x".repeat(400)), assistant("done")];
  const Probe = probing((c) => [
    c.units(),
    c.summaryIsSmaller("short", 2, 4),
    c.summaryIsSmaller("y".repeat(2000), 2, 4),
  ]);
  const [got, smaller, larger] = JSON.parse(new FakeHost().compact(Probe, messages).report.reason);
  assert.deepEqual(got, units(messages));
  assert.equal(smaller, true);
  assert.equal(larger, false);
});

test("completeAll answers in order, a failure as an error among the answers", () => {
  const host = new FakeHost({ answers: (r) => (r.label === "bad" ? undefined : `re: ${r.prompt}`) });
  const Probe = probing(() =>
    completeAll(
      [
        { prompt: "one", maxOutputTokens: 10 },
        { prompt: "two", maxOutputTokens: 10, label: "bad" },
        { prompt: "three", maxOutputTokens: 10 },
      ],
      2,
    ).map((a) => (a instanceof PluginError ? `${a}` : a.text)),
  );
  assert.deepEqual(JSON.parse(host.compact(Probe, [user("u")]).report.reason), [
    "re: one",
    "llm: the fake host has no answer left",
    "re: three",
  ]);
  assert.equal(new PluginError("invalid-config", "x: bad").toString(), "invalid_config: x: bad");
});

test("templates render through the host, and their errors name the fault", () => {
  assert.equal(renderTemplate("{{x}} {a}-{b}}}", { a: 1, b: "2" }), "{x} 1-2}");
  for (const [template, says] of [
    ["hi {nope}", "prompt template: unknown placeholder {nope}; known: {tool}, {page}"],
    ["a {b", "prompt template: unclosed `{` (write `{{` for a literal brace)"],
    ["a } b", "prompt template: unmatched `}` (write `}}` for a literal brace)"],
  ]) {
    assert.throws(
      () => renderTemplate(template, { tool: "x", page: "p" }),
      (e) => e instanceof PluginError && e.kind === "invalid-config" && e.message === says,
    );
  }
});

test("a clearing writes the placeholders the host reads back", () => {
  const page = pageId([user("x")]);
  assert.equal(resultPlaceholder(page, "Output cleared."), `<tamp-cleared page="${page}">\nOutput cleared.\n</tamp-cleared>`);
  assert.equal(inputPlaceholder(page), `{"tamp_cleared":{"page":"${page}"}}`);
  const call = toolUse("c1", "bash", '{"cmd": "ls"}');
  const result = toolResult("c1", "a b c");
  const clearing = new Clearing(result, 3, page);
  assert.ok(clearing.clearResult(0, "Output cleared."));
  assert.ok(!clearing.clearResult(0, "again"), "a cleared block is not cleared again");
  const input = new Clearing(call, 2, page);
  assert.ok(input.clearInput(0));
  assert.equal(clearedPage(clearing.edit().val.message.content[0]), page);
  assert.equal(clearedPage(input.edit().val.message.content[0]), page);
  assert.ok(!isCleared(result.content[0]) && !isCleared(call.content[0]));
  // Not the canonical form: not a placeholder.
  assert.equal(clearedPage(toolResult("c1", `<tamp-cleared page="${page}">`).content[0]), undefined);
  assert.equal(clearedPage(toolResult("c1", resultPlaceholder("pg 1", "n")).content[0]), undefined);
  assert.equal(new Clearing(user("u"), 1, page).edit(), undefined);
});

test("a prompt's material is rendered and wrapped in its content section", () => {
  assert.equal(
    wrapContent("html: <content>x</content> end"),
    "<content>\nhtml: &lt;content&gt;x&lt;/content&gt; end\n</content>",
  );
  const rendered = renderMessages([user("list files"), toolUse("c1", "ls", '{"dir":"/"}'), toolResult("c1", "etc usr", true)]);
  assert.equal(rendered, 'user: list files\nassistant called ls({"dir":"/"})\nls failed: etc usr\n');
});

