// A fake host, so that a strategy's unit tests run in plain Node in milliseconds, without
// building a component or starting tamp:
//
//     import { FakeHost, toolUse, toolResult, user } from "tamp-guest/testing";
//     const host = new FakeHost();
//     const outcome = host.compact(MyStrategy, [user("fix it"), ...], { keep: 1 });
//     const after = host.apply(outcome); // the conversation the edits make
//
// It gives the services the WIT's `host` interface imports, as tamp's host gives them, but for
// (each a method: a test overrides what it needs otherwise, `countTokens` for the counts):
//
// - token counts are an approximation: a text costs one token per 4 bytes of its UTF-8
//   (rounded up), a message 4 tokens plus its blocks' (a tool call: its name and input; a tool
//   result or an opaque block: its text). The real host counts with the chain's tokenizer
//   (o200k_base by default), so write tests whose outcome does not hang on exact counts;
//   `summaryIsSmaller` compares such counts too;
// - LLM calls answer with `answers` (an array, consumed in order, or a function of the
//   request), and fail with an `llm` error when there is none;
// - `compactable` is computed by the host's rules (`compactableRange`); pass
//   `compactable: { start, end }` to set it.
//
// The rest is exact, the host's rules written again for Node: the units (`units`), the page
// ids (`pageId`: a placeholder sized in a test names the id it will name in tamp), the
// clearings' placeholders, `renderMessages` (with the host's default options),
// `wrapContent`, and `renderTemplate` with its errors. Archived pages, cached summaries,
// progress and log lines are kept on the fake (`pages`, `summaries`, `progressReports`,
// `logs`) for the test to read.
//
// Importing this module binds a fake host (when no host is bound), so that the SDK's
// renderings (`renderTemplate`, `resultPlaceholder`, ...) also work outside `compact`, as
// they do in a component at any time.

import { createHash } from "node:crypto";

import { PluginError, bindHost, capChars, exportStrategy, isBoundary, isPinned, resultText } from "./tamp-guest.js";

// -----------------------------------------------------------------------------------------
// Page ids: the content address the host computes (plugin-abi's `page::page_id`).

function blockJson(block) {
  const withExtra = (out, extra) => (extra ? { ...out, extra_json: extra } : out);
  const v = block.val;
  switch (block.tag) {
    case "text":
      return withExtra({ type: "text", text: v.text }, v.extraJson);
    case "tool-use":
      return withExtra({ type: "tool_use", id: v.id, name: v.name, input_json: v.inputJson }, v.extraJson);
    case "tool-result":
      return withExtra(
        {
          type: "tool_result",
          tool_use_id: v.toolUseId,
          content: v.content.map((p) => (p.tag === "text" ? { type: "text", text: p.val } : { type: "opaque", json: p.val })),
          is_error: v.isError,
        },
        v.extraJson,
      );
    case "opaque":
      return { type: "opaque", json: v };
    default:
      throw new TypeError(`not a content block: ${JSON.stringify(block)}`);
  }
}

/// `message` as tamp's JSON (plugin-abi's `Message`, its serde form).
export function messageJson(message) {
  const out = { role: message.role, content: message.content.map(blockJson) };
  if (message.summary) {
    const s = message.summary;
    out.summary = { page_ref: s.pageRef, strategy: s.strategy, status: s.status };
  }
  if (message.extraJson) out.extra_json = message.extraJson;
  return out;
}

/// The canonical JSON of a page's messages: what a page id hashes.
export const canonicalJson = (messages) => JSON.stringify(messages.map(messageJson));

/// The id of the page that holds exactly `messages`: `pg_` and the first 32 hex digits of the
/// SHA-256 of their canonical JSON, as the host computes it.
export function pageId(messages) {
  return "pg_" + createHash("sha256").update(canonicalJson(messages), "utf8").digest("hex").slice(0, 32);
}

function blockFromJson(b) {
  switch (b.type) {
    case "text":
      return { tag: "text", val: { text: b.text, extraJson: b.extra_json ?? "" } };
    case "tool_use":
      return { tag: "tool-use", val: { id: b.id, name: b.name, inputJson: b.input_json, extraJson: b.extra_json ?? "" } };
    case "tool_result":
      return {
        tag: "tool-result",
        val: {
          toolUseId: b.tool_use_id,
          content: b.content.map((p) => (p.type === "text" ? { tag: "text", val: p.text } : { tag: "opaque", val: p.json })),
          isError: b.is_error,
          extraJson: b.extra_json ?? "",
        },
      };
    case "opaque":
      return { tag: "opaque", val: b.json };
    default:
      throw new Error(`unknown block type ${b.type}`);
  }
}

/// A message from tamp's JSON (the form `messageJson` writes, and `tamp compact --report`
/// shows).
export function messageFromJson(m) {
  const s = m.summary;
  return {
    role: m.role,
    content: m.content.map(blockFromJson),
    summary: s ? { pageRef: s.page_ref, strategy: s.strategy, status: s.status } : undefined,
    extraJson: m.extra_json ?? "",
  };
}

// -----------------------------------------------------------------------------------------
// Messages, briefly.

const textBlock = (text) => ({ tag: "text", val: { text, extraJson: "" } });

/// A message of one text block; `role` is `system`, `user`, `assistant` or `tool`.
export const text = (role, content, extraJson = "") => ({ role, content: [textBlock(content)], summary: undefined, extraJson });
export const system = (content) => text("system", content);
export const user = (content) => text("user", content);
export const assistant = (content) => text("assistant", content);

/// An assistant message calling tool `name` (with `say` before the call, if given).
export function toolUse(id, name, inputJson = "{}", say) {
  const content = say ? [textBlock(say)] : [];
  content.push({ tag: "tool-use", val: { id, name, inputJson, extraJson: "" } });
  return { role: "assistant", content, summary: undefined, extraJson: "" };
}

/// A user message carrying the result of call `id` (as Anthropic's wire does).
export function toolResult(id, output, isError = false) {
  return {
    role: "user",
    content: [{ tag: "tool-result", val: { toolUseId: id, content: [{ tag: "text", val: output }], isError, extraJson: "" } }],
    summary: undefined,
    extraJson: "",
  };
}

// -----------------------------------------------------------------------------------------
// Token counts, approximate.

const encoder = new TextEncoder();

/// The fake's token count of a text: one per 4 bytes of UTF-8, rounded up.
export const approxTokens = (content) => Math.ceil(encoder.encode(content).length / 4);

function blockTokens(block, count) {
  switch (block.tag) {
    case "text":
      return count(block.val.text);
    case "tool-use":
      return count(block.val.name) + count(block.val.inputJson);
    case "tool-result":
      return block.val.content.reduce((sum, p) => sum + count(p.val), 0);
    default:
      return count(block.val);
  }
}

const hasResult = (m) => m.content.some((b) => b.tag === "tool-result");
const hasCall = (m) => m.content.some((b) => b.tag === "tool-use");

// -----------------------------------------------------------------------------------------
// The host's rules: units (plugin-abi's `rules::exchanges::units`) and the compactable range
// (`rules::protect::compactable_range`).

/// `messages` split into units (`{ span: { start, end }, kind }`), in order, covering each
/// message once: a tool exchange spans from the message making a call to the last message
/// answering any of its calls (widened over whatever lies between, and over exchanges that
/// interleave with it); a unit holding a pinned message is `pinned` whole.
export function units(messages) {
  const callSite = new Map();
  // reach[i]: the last message a unit starting at or containing message i extends to.
  const reach = messages.map((_, i) => i);
  messages.forEach((m, i) => {
    for (const b of m.content) {
      const j = b.tag === "tool-result" ? callSite.get(b.val.toolUseId) : undefined;
      if (j !== undefined) reach[j] = Math.max(reach[j], i);
    }
    for (const b of m.content) {
      if (b.tag === "tool-use") callSite.set(b.val.id, i);
    }
  });
  const out = [];
  let start = 0;
  while (start < messages.length) {
    let end = reach[start];
    for (let i = start; i <= end; i++) end = Math.max(end, reach[i]);
    out.push({ span: { start, end: end + 1 }, kind: unitKind(messages.slice(start, end + 1)) });
    start = end + 1;
  }
  return out;
}

function unitKind(run) {
  if (run.some(isPinned)) return "pinned";
  if (run.length === 1 && run[0].summary) return "summary";
  return run.some(hasCall) ? "tool-exchange" : "message";
}

const holding = (of, index) => of.find((u) => u.span.start <= index && index < u.span.end);

/// How many leading messages no stage may touch: the leading system messages and the task
/// (the user's opening turn once a reply or a summary closed it, else its first message).
function protectedHead(messages) {
  let system = 0;
  while (system < messages.length && messages[system].role === "system") system++;
  let turn = system;
  while (turn < messages.length && messages[turn].role === "user" && !messages[turn].summary && !hasResult(messages[turn])) turn++;
  if (turn === system) return system;
  const after = messages.slice(turn).find((m) => m.role !== "system");
  const closed = after !== undefined && (after.role === "assistant" || Boolean(after.summary));
  return closed ? turn : system + 1;
}

/// The end of the unit holding the last provider compaction boundary (0 when there is none):
/// what comes before it the provider ignores.
function boundaryEnd(messages, of) {
  const last = messages.findLastIndex(isBoundary);
  if (last < 0) return 0;
  return holding(of, last)?.span.end ?? last + 1;
}

/// `compactable` as the host computes it: after the protected head, the last compaction
/// boundary and the pinned units right after those, before the last `keepRecent` messages,
/// the tail widened back to the start of the unit it cuts.
export function compactableRange(messages, keepRecent) {
  const of = units(messages);
  let start = Math.max(protectedHead(messages), boundaryEnd(messages, of));
  let at = of.findIndex((u) => u.span.start === start);
  if (at >= 0) {
    for (; at < of.length && of[at].kind === "pinned"; at++) start = of[at].span.end;
  }
  let tail = Math.max(0, messages.length - keepRecent);
  tail = holding(of, tail)?.span.start ?? tail;
  return { start, end: Math.max(tail, start) };
}

// -----------------------------------------------------------------------------------------
// The clearings' placeholders (plugin-abi's `rules::clearing`): a cleared result's one text
// part `<tamp-cleared page="PAGE">\nNOTE\n</tamp-cleared>`; a cleared input exactly
// `{"tamp_cleared":{"page":"PAGE"}}`.

const RESULT_OPEN = '<tamp-cleared page="';
const RESULT_CLOSE = "\n</tamp-cleared>";
const INPUT_OPEN = '{"tamp_cleared":{"page":"';
const INPUT_CLOSE = '"}}';

const isPageId = (page) => /^[A-Za-z0-9_-]+$/.test(page);

function resultPage(text) {
  if (!text.startsWith(RESULT_OPEN)) return undefined;
  const rest = text.slice(RESULT_OPEN.length);
  const quote = rest.indexOf('"');
  if (quote < 0) return undefined;
  const page = rest.slice(0, quote);
  const after = rest.slice(quote + 1);
  if (!after.startsWith(">\n") || after.length < 2 + RESULT_CLOSE.length || !after.endsWith(RESULT_CLOSE)) {
    return undefined;
  }
  return isPageId(page) ? page : undefined;
}

function inputPage(input) {
  if (input.length < INPUT_OPEN.length + INPUT_CLOSE.length) return undefined;
  if (!input.startsWith(INPUT_OPEN) || !input.endsWith(INPUT_CLOSE)) return undefined;
  const page = input.slice(INPUT_OPEN.length, input.length - INPUT_CLOSE.length);
  return isPageId(page) ? page : undefined;
}

// -----------------------------------------------------------------------------------------
// The fake host.

function hostError(kind, message) {
  const e = new Error(message);
  e.payload = { kind, message };
  return e;
}

/// The host's services over `messages` (set by `compact`), for unit tests.
export class FakeHost {
  constructor({ answers, capabilities = [] } = {}) {
    this.messages = [];
    this.answers = answers;
    this._capabilities = [...capabilities];
    this.pages = new Map();
    this.summaries = new Map();
    this.progressReports = [];
    this.logs = [];
    this.llmRequests = [];
    this.strategyName = "test";
  }

  /// Builds `StrategyClass` with `config` (as a stage does) and runs one compaction of
  /// `messages` through this fake host: the outcome (`edits`, `report`). A `PluginError` the
  /// strategy returns (a refused config too) is thrown as one; a panic as an `Error`.
  compact(StrategyClass, messages, config = {}, options = {}) {
    const {
      maxTokens = 4000,
      highWatermark = 3000,
      lowWatermark = 2000,
      keepRecent = 4,
      compactable,
      stage = "test",
      threadId,
    } = options;
    this.messages = [...messages];
    this.strategyName = StrategyClass.NAME;
    const request = {
      threadId,
      messageCount: this.messages.length,
      budget: {
        maxTokens: BigInt(maxTokens),
        highWatermark: BigInt(highWatermark),
        lowWatermark: BigInt(lowWatermark),
        keepRecent,
        currentTokens: BigInt(this.countMessageTokens(this.messages)),
      },
      stage,
      compactable: compactable ?? compactableRange(this.messages, keepRecent),
    };
    const previous = bindHost(this);
    try {
      const strategy = exportStrategy(StrategyClass);
      strategy.newStrategy(JSON.stringify(config));
      return strategy.compact(request);
    } catch (e) {
      if (e && typeof e.kind === "string" && !(e instanceof Error)) {
        if (e.kind === "panicked") throw new Error(`the strategy panicked: ${e.message}`);
        throw new PluginError(e.kind, e.message);
      }
      throw e;
    } finally {
      bindHost(previous);
    }
  }

  /// What the component says about itself, its JSON decoded.
  info(StrategyClass) {
    const info = exportStrategy(StrategyClass).info();
    return {
      name: info.name,
      version: info.version,
      description: info.description,
      configSchema: JSON.parse(info.configSchemaJson),
      defaultConfig: JSON.parse(info.defaultConfigJson),
    };
  }

  /// The conversation `outcome`'s edits make of the input (clearings, summaries and
  /// replacements; the host also checks them, which this does not).
  apply(outcome) {
    const out = [...this.messages];
    const spans = [];
    for (const edit of outcome.edits) {
      const e = edit.val;
      if (edit.tag === "clear") {
        out[e.index] = e.message;
      } else if (edit.tag === "summarize") {
        const page = pageId(this.messages.slice(e.span.start, e.span.end));
        spans.push([e.span.start, e.span.end, { role: "user", content: [textBlock(e.text)], summary: { pageRef: page, strategy: "test", status: e.status }, extraJson: "" }]);
      } else if (edit.tag === "replace") {
        spans.push([e.span.start, e.span.end, e.message]);
      } else if (edit.tag === "finalize") {
        out[e.index] = { ...out[e.index], content: [textBlock(e.text)] };
      }
    }
    spans.sort((a, b) => b[0] - a[0]);
    for (const [start, end, message] of spans) out.splice(start, end - start, message);
    return out;
  }

  // -- the WIT's `host` interface (jco's names) -----------------------------------------

  span(start, end) {
    if (!(start >= 0 && start <= end && end <= this.messages.length)) {
      throw new RangeError(`messages ${start}..${end} of ${this.messages.length}`);
    }
    return this.messages.slice(start, end);
  }

  inputMessages(start, end) {
    return this.span(start, end);
  }

  capabilities() {
    return [...this._capabilities];
  }

  countTokens(content) {
    return BigInt(approxTokens(content));
  }

  // From `countTokens`, so that a test's subclass that counts otherwise counts both.
  countMessageTokens(messages) {
    const count = (text) => Number(this.countTokens(text));
    return messages.reduce((sum, m) => sum + 4 + m.content.reduce((s, b) => s + blockTokens(b, count), 0), 0);
  }

  inputMessageTokens(start, end) {
    return this.span(start, end).map((m) => BigInt(this.countMessageTokens([m])));
  }

  pageId(messages) {
    return pageId(messages);
  }

  inputPageId(start, end) {
    if (!(start >= 0 && start < end && end <= this.messages.length)) {
      throw hostError("invalid-input", `no input messages ${start}..${end} of ${this.messages.length}`);
    }
    return pageId(this.messages.slice(start, end));
  }

  inputUnits() {
    return units(this.messages);
  }

  summaryIsSmaller(text, start, end) {
    const summary = {
      role: "user",
      content: [textBlock(text)],
      summary: { pageRef: "", strategy: this.strategyName, status: "final" },
      extraJson: "",
    };
    return this.countMessageTokens([summary]) < this.countMessageTokens(this.span(start, end));
  }

  // The renderings: unlike the services above, they read nothing of the compaction.

  renderMessages(messages) {
    // The host's default options: each part cut to 4,000 characters.
    const cut = (part) => capChars(part, 4000);
    const names = new Map();
    let out = "";
    for (const m of messages) {
      if (m.summary) {
        const said = m.content.filter((b) => b.tag === "text").map((b) => b.val.text).join("\n\n");
        out += `summary of earlier messages (page ${m.summary.pageRef}): ${cut(said)}\n`;
        continue;
      }
      for (const b of m.content) {
        if (b.tag === "text") {
          out += `${m.role}: ${cut(b.val.text)}\n`;
        } else if (b.tag === "tool-use") {
          names.set(b.val.id, b.val.name);
          const input = this.clearedPage(b) === undefined ? cut(b.val.inputJson) : "[input cleared]";
          out += `${m.role} called ${b.val.name}(${input})\n`;
        } else if (b.tag === "tool-result") {
          const name = names.get(b.val.toolUseId) ?? "tool";
          const verb = b.val.isError ? "failed" : "returned";
          const output = this.clearedPage(b) === undefined ? cut(resultText(b.val.content)) : "[output cleared]";
          out += `${name} ${verb}: ${output}\n`;
        } else {
          out += `${m.role}: [non-text content]\n`;
        }
      }
    }
    return out;
  }

  wrapContent(material) {
    const escaped = material.replaceAll("<content>", "&lt;content&gt;").replaceAll("</content>", "&lt;/content&gt;");
    return `<content>\n${escaped}\n</content>`;
  }

  renderTemplate(template, values) {
    const names = values.map(([name]) => name);
    let out = "";
    let i = 0;
    while (i < template.length) {
      const open = template.indexOf("{", i);
      const close = template.indexOf("}", i);
      const next = open < 0 ? close : close < 0 ? open : Math.min(open, close);
      if (next < 0) {
        out += template.slice(i);
        break;
      }
      out += template.slice(i, next);
      if (template.startsWith("{{", next)) {
        out += "{";
        i = next + 2;
      } else if (template.startsWith("}}", next)) {
        out += "}";
        i = next + 2;
      } else if (template[next] === "}") {
        throw hostError("invalid-config", "prompt template: unmatched `}` (write `}}` for a literal brace)");
      } else {
        const end = template.indexOf("}", next);
        if (end < 0) {
          throw hostError("invalid-config", "prompt template: unclosed `{` (write `{{` for a literal brace)");
        }
        const name = template.slice(next + 1, end);
        const at = names.indexOf(name);
        if (at < 0) {
          const known = names.map((k) => `{${k}}`).join(", ");
          throw hostError("invalid-config", `prompt template: unknown placeholder {${name}}; known: ${known}`);
        }
        out += values[at][1];
        i = end + 1;
      }
    }
    return out;
  }

  resultPlaceholder(page, note) {
    return `${RESULT_OPEN}${page}">\n${note}${RESULT_CLOSE}`;
  }

  inputPlaceholder(page) {
    return `${INPUT_OPEN}${page}${INPUT_CLOSE}`;
  }

  clearedPage(block) {
    if (block.tag === "tool-result") {
      const content = block.val.content;
      return content.length === 1 && content[0].tag === "text" ? resultPage(content[0].val) : undefined;
    }
    return block.tag === "tool-use" ? inputPage(block.val.inputJson) : undefined;
  }

  complete(request) {
    this.llmRequests.push(request);
    let answer;
    if (typeof this.answers === "function") answer = this.answers(request);
    else if (Array.isArray(this.answers) && this.answers.length > 0) answer = this.answers.shift();
    if (answer === undefined) throw hostError("llm", "the fake host has no answer left");
    return {
      text: answer,
      structuredJson: request.responseSchemaJson ? answer : undefined,
      usage: {
        inputTokens: BigInt(approxTokens(request.system + request.prompt)),
        outputTokens: BigInt(approxTokens(answer)),
        cacheReadTokens: 0n,
        cacheWriteTokens: 0n,
      },
      model: "fake",
      stopReason: "end_turn",
    };
  }

  completeAll(requests, _maxConcurrency) {
    return requests.map((r) => {
      try {
        return { tag: "ok", val: this.complete(r) };
      } catch (e) {
        return { tag: "err", val: e.payload };
      }
    });
  }

  archivePage(messages, metadataJson) {
    const id = pageId(messages);
    this.pages.set(id, { id, threadId: undefined, strategy: "test", messages: [...messages], metadataJson, createdAt: 0n });
    return id;
  }

  loadPage(id) {
    if (!this.pages.has(id)) throw hostError("host", `no page ${id}`);
    return this.pages.get(id);
  }

  cachedSummary(messages) {
    for (let n = messages.length; n > 0; n--) {
      const hit = this.summaries.get(pageId(messages.slice(0, n)));
      if (hit !== undefined) return { messagesCovered: n, text: hit };
    }
    return undefined;
  }

  cacheSummary(messages, summary) {
    this.summaries.set(pageId(messages), summary);
  }

  deferSummaries(_requests) {
    throw hostError("host", "the fake host defers no summaries");
  }

  deferredResults(pageIds) {
    return pageIds.map((id) => ({ pageId: id, status: "unknown", text: "", reason: "" }));
  }

  progress(done, total, message) {
    this.progressReports.push([done, total, message]);
  }

  log(level, message) {
    this.logs.push([level, message]);
  }
}

// The renderings work at any time in a component; in Node, they need a host bound outside
// `compact` too (a test that renders a template or sizes a placeholder itself).
const bound = bindHost(undefined);
bindHost(bound ?? new FakeHost());
