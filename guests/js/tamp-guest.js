// tamp's guest SDK for JavaScript: a compaction strategy as a WebAssembly component.
//
// A strategy is a class with static NAME, VERSION, DESCRIPTION and CONFIG (its config declared
// once: `new Config([...])`), a constructor that checks its config (throw `invalidConfig(...)`) and a
// `compact(compaction)` that returns `unchanged(...)` or `withEdits(...)`. The app module
// exports the interface componentize-js binds:
//
//     import { Strategy, unchanged, exportStrategy } from "tamp-guest";
//     class Noop extends Strategy {
//       static NAME = "noop";
//       compact(c) { return unchanged("nothing to do"); }
//     }
//     export const strategy = exportStrategy(Noop);
//
// It is built by `tamp-guest build app.js -o strategy.wasm` (componentize-js, pinned, against
// the WIT package shipped in this package's `wit/`, with every WASI feature disabled): the
// host gives a guest no filesystem, network, environment or clock, only the functions of
// `tamp:strategy/host`, which this module wraps. The build binds them (`bindHost`); in Node,
// `tamp-guest/testing`'s fake host does, for a strategy's unit tests. See
// docs/writing-a-plugin.md, "A WebAssembly strategy".
//
// The conversation arrives as jco's mapping of the WIT types: records are objects with
// camelCase fields, variants `{ tag, val }` (`{ tag: "tool-result", val: { toolUseId, ... } }`),
// enums strings, and u64 values BigInts. `compactable` is `{ start, end }`, the messages a
// stage may change (the native SDK's `sdk::compactable_range`, computed by the host), and
// `units()` the conversation's units (`{ span: { start, end }, kind }`), as the host's rules
// group tool calls with their results.
//
// What the host's rules say (how messages group into units, what a clearing looks like, how
// a summarizer is shown messages) is not written again here: those helpers call the host,
// so a guest keeps the rules the host checks its edits by.

// The host's services: the component's `tamp:strategy/host` import (bound by the entry module
// `tamp-guest build` writes), or a fake host in Node (`tamp-guest/testing`).
let host;

/// Binds the host's services (the WIT import, or a fake); returns the ones bound before.
export function bindHost(services) {
  const previous = host;
  host = services;
  return previous;
}

/// An error the strategy returns: the stage is rolled back and the report says why. `kind`
/// is the WIT's `error-kind` (`"invalid-config"`, `"llm"`, ...).
export class PluginError extends Error {
  constructor(kind, message) {
    super(message);
    this.kind = kind;
  }

  /// `kind: message` with the kind as the native SDK writes it (`invalid_config`), so that
  /// a report quoting an error reads the same from every strategy.
  toString() {
    return `${this.kind.replaceAll("-", "_")}: ${this.message}`;
  }
}

export const invalidConfig = (message) => new PluginError("invalid-config", message);
export const invalidInput = (message) => new PluginError("invalid-input", message);
export const internal = (message) => new PluginError("internal", message);

// -----------------------------------------------------------------------------------------
// A strategy's config, declared once: the JSON Schema the host shows, the default config and
// the checks of a stage's config all derive from the one declaration, as a native strategy's
// derive from its `Config` struct:
//
//     static CONFIG = new Config([
//       integer("keep", 3, "Tool uses left alone.", { minimum: 0, maximum: 1000000 }),
//       stringList("exclude_tools", [], "Tools never cleared."),
//     ], { description: "How the strategy chooses what to clear." });

function field(name, type, defaultValue, description, check, schema = {}) {
  const f = { name, type, default: defaultValue, description, check, schema };
  check(defaultValue); // a default the checks would refuse is a bug in the declaration
  return f;
}

const show = (value) => JSON.stringify(value) ?? String(value);

/// A whole number in `minimum..=maximum` (either bound may be omitted). JSON's `3.0` is the
/// integer 3, as JSON Schema's `integer` reads it.
export function integer(name, defaultValue, description = "", { minimum, maximum } = {}) {
  const schema = {};
  if (minimum !== undefined) schema.minimum = minimum;
  if (maximum !== undefined) schema.maximum = maximum;
  return field(name, "integer", defaultValue, description, (value) => {
    if (typeof value !== "number" || !Number.isInteger(value)) {
      throw invalidConfig(`${name}: expected an integer, got ${show(value)}`);
    }
    if ((minimum !== undefined && value < minimum) || (maximum !== undefined && value > maximum)) {
      throw invalidConfig(`${name}: ${value} is out of range ${minimum ?? ""}..=${maximum ?? ""}`);
    }
    return value;
  }, schema);
}

export function boolean(name, defaultValue, description = "") {
  return field(name, "boolean", defaultValue, description, (value) => {
    if (typeof value !== "boolean") throw invalidConfig(`${name}: expected true or false, got ${show(value)}`);
    return value;
  });
}

export function string(name, defaultValue, description = "") {
  return field(name, "string", defaultValue, description, (value) => {
    if (typeof value !== "string") throw invalidConfig(`${name}: expected a string, got ${show(value)}`);
    return value;
  });
}

export function stringList(name, defaultValue, description = "") {
  return field(name, "array", defaultValue, description, (value) => {
    if (!Array.isArray(value) || !value.every((v) => typeof v === "string")) {
      throw invalidConfig(`${name}: expected a list of strings, got ${show(value)}`);
    }
    return [...value];
  }, { items: { type: "string" } });
}

/// The fields of a config, in order; no other key is accepted.
export class Config {
  constructor(fields = [], { title = "Config", description = "" } = {}) {
    this.fields = fields;
    this.title = title;
    this.description = description;
  }

  /// The config's JSON Schema (draft-07).
  schema() {
    const out = { $schema: "http://json-schema.org/draft-07/schema#", title: this.title };
    if (this.description) out.description = this.description;
    out.type = "object";
    if (this.fields.length > 0) {
      out.properties = Object.fromEntries(
        this.fields.map((f) => [
          f.name,
          { ...(f.description ? { description: f.description } : {}), type: f.type, ...f.schema, default: f.default },
        ]),
      );
    }
    out.additionalProperties = false;
    return out;
  }

  /// The default config: every field at its default.
  defaults() {
    return Object.fromEntries(this.fields.map((f) => [f.name, f.default]));
  }

  /// `given` checked, with the defaults filled in; throws `invalidConfig` naming the first
  /// key at fault.
  parse(given) {
    const known = new Set(this.fields.map((f) => f.name));
    const unknown = Object.keys(given).filter((k) => !known.has(k)).sort();
    if (unknown.length > 0) {
      const expected = this.fields.map((f) => `\`${f.name}\``).join(", ") || "no field";
      throw invalidConfig(`unknown field \`${unknown[0]}\`, expected ${expected}`);
    }
    return Object.fromEntries(
      this.fields.map((f) => [f.name, f.check(Object.hasOwn(given, f.name) ? given[f.name] : f.default)]),
    );
  }
}

/// The base class of a strategy (see the top of this file): static `NAME`, `VERSION`,
/// `DESCRIPTION` and `CONFIG` (a `Config`); the constructor checks the stage's config against
/// `CONFIG` and sets `this.config`, the values with the defaults filled in. A config `Config`
/// cannot declare may instead be given as static `CONFIG_SCHEMA` and `DEFAULT_CONFIG`, with
/// the constructor checking it.
export class Strategy {
  static NAME = "";
  static VERSION = "0.1.0";
  static DESCRIPTION = "";
  static CONFIG = new Config();

  constructor(config) {
    this.config = this.constructor.CONFIG.parse(config);
  }

  compact(_compaction) {
    throw internal("compact is not implemented");
  }
}

/// A stage's input: `messages` (`messageCount`), `budget` (numbers), `stage`, `threadId`,
/// and `compactable` `{ start, end }`, the messages the stage may change.
///
/// The messages are copied from the host when first read (`messages` reads them all;
/// `read(start, end)` a slice): a stage that decides from the budget alone pays nothing for
/// a long conversation.
export class Compaction {
  constructor(request) {
    this.messageCount = request.messageCount;
    this._messages = undefined;
    const b = request.budget;
    this.budget = {
      maxTokens: Number(b.maxTokens),
      highWatermark: Number(b.highWatermark),
      lowWatermark: Number(b.lowWatermark),
      keepRecent: b.keepRecent,
      currentTokens: Number(b.currentTokens),
    };
    this.stage = request.stage;
    this.threadId = request.threadId;
    this.compactable = request.compactable;
    this._units = undefined;
  }

  /// The input's units, in order, covering it (`{ span: { start, end }, kind }`, `kind` one
  /// of `"pinned"`, `"summary"`, `"tool-exchange"`, `"message"`): a tool call's message
  /// through its last result is one unit, which a stage keeps or replaces whole. The host's
  /// rule (the one it checks edits by), asked once.
  units() {
    if (this._units === undefined) {
      this._units = host.inputUnits();
    }
    return this._units;
  }

  /// Whether a summary of `text` in place of input messages `start..end` costs fewer tokens
  /// than they do, the summary message counted as the host will build it. A summary that
  /// saves nothing is refused by the host (TAMP-INV-06): ask before making the edit.
  summaryIsSmaller(text, start, end) {
    return hostCall(() => host.summaryIsSmaller(text, start, end));
  }

  /// Every input message, read from the host once.
  get messages() {
    if (this._messages === undefined) {
      this._messages = host.inputMessages(0, this.messageCount);
    }
    return this._messages;
  }

  /// Input messages `start..end`.
  read(start, end) {
    return this._messages !== undefined ? this._messages.slice(start, end) : host.inputMessages(start, end);
  }

  /// Tokens of each input message in `start..end`, as the host counts them against the
  /// budget: the host's cached counts, fetched in one call. Cheaper than
  /// `countMessageTokens` on messages read into the guest, and the same numbers.
  messageTokens(start, end) {
    return Array.from(host.inputMessageTokens(start, end), Number);
  }

  /// The id of the page that holds exactly input messages `start..end` (`start` alone
  /// when `end` is omitted): `pg_` and 32 hex digits, the content address the host archives
  /// those messages under. A clearing of message `i` names `pageId(i)`; size its
  /// placeholders with it too (`resultPlaceholderTokens`).
  pageId(start, end = start + 1) {
    return hostCall(() => host.inputPageId(start, end));
  }

  /// The indexes of the input messages no stage may summarize, replace, clear or move
  /// (`isPinned`). `compactable` already leaves out the pinned messages at its start; those
  /// inside it a strategy must step over.
  pinned() {
    const out = [];
    this.messages.forEach((m, i) => {
      if (isPinned(m)) out.push(i);
    });
    return out;
  }
}

/// The stage did nothing, for `reason` (with `warnings`: what went wrong on the way).
export function unchanged(reason, { warnings = [] } = {}) {
  return { edits: [], report: { acted: false, reason, warnings, detailsJson: "" } };
}

/// The stage asks for `edits` (`{ tag, val }` edit variants): it acted, for `reason`.
export function withEdits(edits, reason, { warnings = [], details } = {}) {
  return {
    edits,
    report: {
      acted: true,
      reason,
      warnings,
      detailsJson: details === undefined ? "" : JSON.stringify(sortKeys(details)),
    },
  };
}

/// Replace messages `start..end` by a final summary `text`; the host archives them.
export function summarize(start, end, text, metadata) {
  return {
    tag: "summarize",
    val: {
      span: { start, end },
      text,
      status: "final",
      metadataJson: metadata === undefined ? "" : JSON.stringify(metadata),
    },
  };
}

function sortKeys(value) {
  if (value === null || typeof value !== "object" || Array.isArray(value)) {
    return value;
  }
  return Object.fromEntries(
    Object.keys(value).sort().map((k) => [k, sortKeys(value[k])]),
  );
}

// -----------------------------------------------------------------------------------------
// Host services. Each is valid while `compact` runs (the host traps a call at any other
// time), but `log`, which works from the constructor too.

/// A host function that returns a WIT `result`: its error becomes a `PluginError`.
function hostCall(call) {
  try {
    return call();
  } catch (e) {
    const err = e && e.payload !== undefined ? e.payload : e;
    if (err && typeof err.kind === "string") {
      throw new PluginError(err.kind, err.message);
    }
    throw e;
  }
}

/// Tokens in `text`, with the chain's tokenizer.
export function countTokens(text) {
  return Number(host.countTokens(text));
}

/// Tokens of `messages` as the host counts them against the budget.
export function countMessageTokens(messages) {
  return Number(host.countMessageTokens(messages));
}

function llmRequest({ system = "", prompt, maxOutputTokens, label = "", temperature, responseSchema }) {
  return {
    system,
    prompt,
    maxOutputTokens,
    temperature,
    responseSchemaJson: responseSchema === undefined ? undefined : JSON.stringify(responseSchema),
    label,
  };
}

/// One LLM call through the host (its provider, retries, timeout and cache); throws a
/// `PluginError` when it fails. The request: `{ system, prompt, maxOutputTokens, label,
/// temperature, responseSchema }` (`prompt` and `maxOutputTokens` required).
export function complete(request) {
  return hostCall(() => host.complete(llmRequest(request)));
}

/// Many LLM calls (requests as `complete` takes them) through the host, at most
/// `maxConcurrency` at once (0: the host's limit). The answers, in request order, are each
/// a response or, for a call that failed, a `PluginError`, returned rather than thrown: one
/// failure loses none of the other answers.
export function completeAll(requests, maxConcurrency = 0) {
  return host
    .completeAll(requests.map(llmRequest), maxConcurrency)
    .map((answer) => (answer.tag === "ok" ? answer.val : new PluginError(answer.val.kind, answer.val.message)));
}

/// Archives `messages` under this strategy's name; returns the page id.
export function archivePage(messages, metadata) {
  const metadataJson = metadata === undefined ? "" : JSON.stringify(metadata);
  return hostCall(() => host.archivePage(messages, metadataJson));
}

export function progress(done, total, message) {
  host.progress(done, total, message);
}

export const log = {
  error: (message) => host.log("error", message),
  warn: (message) => host.log("warn", message),
  info: (message) => host.log("info", message),
  debug: (message) => host.log("debug", message),
};

// -----------------------------------------------------------------------------------------
// The host's renderings. Unlike the services above, they read nothing of the compaction in
// progress and work at any time (from a strategy's constructor, to check a config's template).

/// `messages` as a prompt shows them to a summarizer: each message's role and text, tool
/// calls with their names and inputs, their results, each long part cut in its middle (the
/// native SDK's `render_messages` with its default options).
export const renderMessages = (messages) => host.renderMessages(messages);

/// `material` as a prompt's `<content>` section, on lines of its own, any `<content>` or
/// `</content>` inside it escaped: the host's offline summarizer reads that section, so
/// put a prompt's material there, last.
export const wrapContent = (material) => host.wrapContent(material);

/// `template` with each `{name}` replaced by `values[name]` (`{{` and `}}` write braces);
/// throws an `invalid-config` `PluginError` for an unknown or unclosed placeholder, naming
/// it (the native SDK's `render_template`).
export function renderTemplate(template, values) {
  const pairs = Object.entries(values).map(([name, value]) => [name, String(value)]);
  return hostCall(() => host.renderTemplate(template, pairs));
}

// -----------------------------------------------------------------------------------------
// Clearings (TAMP-INV-10): a tool result's content, or a tool call's input, replaced in place
// by a placeholder naming the page of the original message. The placeholders' one canonical
// form (docs/plugin-spec.md) is the host's: these write and read it through the host.

/// The text of a cleared tool result naming `page`, with `note` for the model.
export const resultPlaceholder = (page, note) => host.resultPlaceholder(page, note);

/// The input of a cleared tool call naming `page`.
export const inputPlaceholder = (page) => host.inputPlaceholder(page);

/// What a cleared tool result's placeholder naming `page` with `note` costs, in the chain's
/// tokens: the real cost, when `page` is the id the clearing will name
/// (`compaction.pageId(i)`). A compaction never grows the conversation (TAMP-INV-06): size a
/// placeholder with its real page id before deciding a block is worth clearing; a stand-in
/// id (`"pg_" + "0".repeat(32)`) counts fewer tokens than a real one.
export const resultPlaceholderTokens = (page, note) => countTokens(resultPlaceholder(page, note));

/// What a cleared tool input's placeholder naming `page` costs, in the chain's tokens.
export const inputPlaceholderTokens = (page) => countTokens(inputPlaceholder(page));

/// The page a cleared block names, or undefined for any block that is not one.
export const clearedPage = (block) => host.clearedPage(block);

export const isCleared = (block) => clearedPage(block) !== undefined;

/// A clearing of one message, built block by block; `edit()` is the `clear` edit. `page`
/// is the id of the page that will hold the original alone (`compaction.pageId(index)`).
export class Clearing {
  constructor(original, index, page) {
    this.index = index;
    this.page = page;
    this.message = { ...original, content: [...original.content] };
    this.cleared = 0;
  }

  /// Replaces the content of the tool result at `block` by a placeholder with `note`;
  /// false when that block is not a tool result or is cleared already.
  clearResult(block, note) {
    const b = this.message.content[block];
    if (!b || b.tag !== "tool-result" || isCleared(b)) return false;
    this.message.content[block] = {
      tag: "tool-result",
      val: { ...b.val, content: [{ tag: "text", val: resultPlaceholder(this.page, note) }] },
    };
    this.cleared += 1;
    return true;
  }

  /// Replaces the input of the tool call at `block` by the input placeholder; false when
  /// that block is not a tool call or its input is cleared already.
  clearInput(block) {
    const b = this.message.content[block];
    if (!b || b.tag !== "tool-use" || isCleared(b)) return false;
    this.message.content[block] = {
      tag: "tool-use",
      val: { ...b.val, inputJson: inputPlaceholder(this.page) },
    };
    this.cleared += 1;
    return true;
  }

  /// The `clear` edit, or undefined when no block was cleared.
  edit() {
    return this.cleared === 0 ? undefined : { tag: "clear", val: { index: this.index, message: this.message } };
  }
}

// -----------------------------------------------------------------------------------------
// Pinned messages, as the native SDK's `sdk::pinned` reads them (the host checks the same
// rules, TAMP-INV-11 to TAMP-INV-13): instructions (a system message wherever it stands),
// opaque units (a message the wire reader kept verbatim, marked with `OPAQUE` in its
// `extraJson`) and provider compaction boundaries (marked with `BOUNDARY`; nothing up to one
// is compactable). No stage may summarize, replace, clear or move a pinned message.

/// Marker key (in a message's `extraJson`): what in the message tamp does not know.
export const OPAQUE = "tamp:opaque";
/// Marker key (in a message's `extraJson`): the message holds a provider's compaction.
export const BOUNDARY = "tamp:boundary";

function hasMarker(message, key) {
  const extra = message.extraJson;
  if (!extra || !extra.includes(`"${key}"`)) return false;
  try {
    const keys = JSON.parse(extra);
    return keys !== null && typeof keys === "object" && !Array.isArray(keys) && Object.hasOwn(keys, key);
  } catch {
    return false;
  }
}

/// Whether no stage may summarize, replace, clear or move `message`: instructions (a system
/// message) or an opaque unit.
export const isPinned = (message) => message.role === "system" || hasMarker(message, OPAQUE);
/// Whether `message` is instructions: a system message that is not an opaque unit.
export const isInstructions = (message) => message.role === "system" && !hasMarker(message, OPAQUE);
/// Whether `message` holds a provider's compaction boundary.
export const isBoundary = (message) => hasMarker(message, BOUNDARY);

// -----------------------------------------------------------------------------------------
// Failed tool calls, as the native SDK's `sdk::failure` reads them: the result's error flag,
// or, where the wire has none (an OpenAI Responses tool output: Codex writes `Process exited
// with code 1`), the non-zero exit code its text reports. Use `failed` rather than `isError`
// alone, or a Responses client's failures never count.

/// Words that mark a line of tool output as an error (ASCII, case ignored).
export const ERROR_MARKS = [
  "error", "exception", "traceback", "failed", "failure", "fatal", "panicked", "not found",
  "denied", "refused", "no such file",
];

const asciiLower = (text) => text.replace(/[A-Z]/g, (c) => c.toLowerCase());
const outputLines = (output) => output.split("\n").map((l) => l.trim());
const isMarkup = (line) =>
  line.startsWith("<") && line.endsWith(">") && !line.slice(1, -1).includes(" ");
// A letter or digit (Rust's `char::is_alphanumeric`; without Unicode property escapes, which
// the component's engine lacks: a non-ASCII character counts unless it is a space,
// punctuation or a symbol of the Latin-1, general punctuation or CJK punctuation blocks).
const alphanumeric = (c) =>
  /[0-9A-Za-z]/.test(c) || (c > "\x7f" && !/[\u0080-\u00bf\u00d7\u00f7\u2000-\u2bff\u3000-\u303f\ufe30-\ufe4f\uff00-\uff0f]/.test(c));
const meaningful = (line) => [...line].some(alphanumeric) && !isMarkup(line);
const I64 = 2n ** 63n;

function exitCode(output) {
  const lower = asciiLower(output);
  for (const marker of ["<returncode>", "exit code", "exited with code", "exit status"]) {
    const at = lower.indexOf(marker);
    if (at < 0) continue;
    const rest = output.slice(at + marker.length).replace(/^[ :=]*/, "");
    const digits = /^[0-9-]*/.exec(rest)[0];
    if (/^-?[0-9]+$/.test(digits) && BigInt(digits) >= -I64 && BigInt(digits) < I64) {
      return Number(digits);
    }
  }
  return undefined;
}

/// The line of a tool's output that says what went wrong, when the call failed (its result
/// is marked as an error, or its output reports a non-zero exit code): the last line naming
/// an error, or the output's last line; undefined for a success, and for a non-zero exit with
/// no error in its output (`grep` finding nothing).
export function failureLine(output, isError) {
  const code = exitCode(output);
  if (!isError && (code === undefined || code === 0)) return undefined;
  const lines = outputLines(output).filter(meaningful);
  const marked = [...lines].reverse().find((l) => ERROR_MARKS.some((m) => asciiLower(l).includes(m)));
  if (isError) return marked ?? lines[lines.length - 1] ?? "(no output)";
  return marked;
}

/// The first line of an output that reports no exit code, when that line names an error: how
/// an editor tool says it wrote nothing.
export function refusalLine(output) {
  const first = outputLines(output).find(meaningful);
  if (first === undefined) return undefined;
  const said = first
    .split(/\s+/)
    .filter((w) => w && !/[/.\\]/.test(w))
    .map(asciiLower)
    .join(" ");
  return exitCode(output) === undefined && ERROR_MARKS.some((m) => said.includes(m)) ? first : undefined;
}

/// Whether a tool result with `output` failed (see `failureLine`).
export const failed = (output, isError) => failureLine(output, isError) !== undefined;

// -----------------------------------------------------------------------------------------
// Grouping units for summarization, as the native SDK's `sdk::groups`: which units to pick is
// a strategy's policy; these only cut and count.

/// The units lying wholly inside `range` (`{ start, end }`, e.g. `compaction.compactable`),
/// in order: a unit straddling either edge is left out.
export const unitsWithin = (units, range) =>
  units.filter((u) => range.start <= u.span.start && u.span.end <= range.end);

/// `units` (in conversation order, a strategy's picks) as maximal runs of adjacent units,
/// each `{ span: { start, end }, units }`: a unit joins the run before it when it starts
/// where that run ends, so any message not picked (a user's turn, a summary) ends a run.
export function adjacentRuns(units) {
  const runs = [];
  for (const unit of units) {
    const last = runs[runs.length - 1];
    if (last !== undefined && last.span.end === unit.span.start) {
      last.span.end = unit.span.end;
      last.units.push(unit);
    } else {
      runs.push({ span: { ...unit.span }, units: [unit] });
    }
  }
  return runs;
}

/// The tool calls some messages made, by tool, and the calls whose result failed
/// (`toolActivity`).
export class ToolActivity {
  constructor() {
    /// `[tool, count]` for each tool called, in the order of its first call.
    this.tools = [];
    /// `[tool, count]` for each tool with a failed result, in the order of its first failure;
    /// a result answering a call outside the messages counts under the name `tool`.
    this.failed = [];
  }

  /// How many tool calls were made.
  get calls() {
    return this.tools.reduce((sum, [, n]) => sum + n, 0);
  }

  /// How many tool results failed.
  get errors() {
    return this.failed.reduce((sum, [, n]) => sum + n, 0);
  }

  /// The tools called, e.g. `bash ×2, read_file`.
  get toolList() {
    return listCounts(this.tools);
  }

  /// The tools whose results failed, in the same form (empty when none failed).
  get failedList() {
    return listCounts(this.failed);
  }
}

function bump(counts, name) {
  const entry = counts.find(([n]) => n === name);
  if (entry) entry[1] += 1;
  else counts.push([name, 1]);
}

const listCounts = (counts) => counts.map(([name, n]) => (n === 1 ? name : `${name} ×${n}`)).join(", ");

/// The text parts of a tool result's content, joined by newlines, any other part noted as
/// `[non-text content]` (the native SDK's `result_text`).
export const resultText = (content) => content.map((p) => (p.tag === "text" ? p.val : "[non-text content]")).join("\n");

/// The tools `messages` call and which of their results failed (`failed`: the error flag,
/// or the exit code the output reports where the wire has none), matched by tool-call id so
/// that parallel calls answered in any order are named right.
export function toolActivity(messages) {
  const activity = new ToolActivity();
  const names = new Map();
  for (const message of messages) {
    for (const block of message.content) {
      if (block.tag === "tool-use") {
        names.set(block.val.id, block.val.name);
        bump(activity.tools, block.val.name);
      } else if (block.tag === "tool-result" && (block.val.isError || failed(resultText(block.val.content), false))) {
        bump(activity.failed, names.get(block.val.toolUseId) ?? "tool");
      }
    }
  }
  return activity;
}

// Unicode's White_Space, which Rust's `char::is_whitespace` reads; JavaScript's `trim` also
// strips U+FEFF and keeps U+0085.
const WHITE_SPACE = /[\t-\r \u0085\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]/;

/// `text` without the white space at either end, as Rust's `str::trim` cuts it: an LLM's
/// answer trimmed so makes the same summary as a native strategy's.
export function trimWhitespace(text) {
  let start = 0;
  let end = text.length;
  while (start < end && WHITE_SPACE.test(text[start])) start++;
  while (end > start && WHITE_SPACE.test(text[end - 1])) end--;
  return text.slice(start, end);
}

/// `text` cut to at most `maxChars` characters, the last one kept replaced by `…` to mark
/// the cut (the native SDK's `cap_chars`). Characters are Unicode code points, as Rust
/// counts them, not JavaScript's UTF-16 units: an emoji is one.
export function capChars(text, maxChars) {
  let count = 0;
  let lastKept = 0; // where the `maxChars`th character starts, which `…` replaces
  for (let i = 0; i < text.length; i += text.codePointAt(i) > 0xffff ? 2 : 1) {
    if (count === maxChars) return maxChars === 0 ? "" : text.slice(0, lastKept) + "…";
    count += 1;
    lastKept = i;
  }
  return text;
}

// -----------------------------------------------------------------------------------------
// The export componentize-js binds.

/// Any exception that is not a `PluginError` is a bug in the strategy: reported as
/// `panicked` with its stack, as the native SDK reports a panic.
function asError(e) {
  if (e instanceof PluginError) {
    return { kind: e.kind, message: e.message };
  }
  const text = e && e.stack ? `${e}\n${e.stack}` : String(e);
  return { kind: "panicked", message: text };
}

/// The `strategy` interface for `StrategyClass`: `export const strategy = exportStrategy(C)`.
export function exportStrategy(StrategyClass) {
  // One strategy per component instance: the host builds it once with the stage's config,
  // then runs one `compact` at a time on this instance.
  let instance;
  return {
    info() {
      return {
        name: StrategyClass.NAME,
        version: StrategyClass.VERSION,
        description: StrategyClass.DESCRIPTION,
        configSchemaJson: JSON.stringify(StrategyClass.CONFIG_SCHEMA ?? StrategyClass.CONFIG.schema()),
        defaultConfigJson: JSON.stringify(StrategyClass.DEFAULT_CONFIG ?? StrategyClass.CONFIG.defaults()),
      };
    },
    newStrategy(configJson) {
      let config;
      try {
        config = JSON.parse(configJson);
      } catch (e) {
        throw { kind: "invalid-config", message: `config is not JSON: ${e}` };
      }
      if (config === null || typeof config !== "object" || Array.isArray(config)) {
        throw { kind: "invalid-config", message: `config: expected an object, got ${configJson}` };
      }
      try {
        instance = new StrategyClass(config);
      } catch (e) {
        throw asError(e);
      }
    },
    compact(request) {
      if (instance === undefined) {
        throw { kind: "internal", message: "compact before new-strategy" };
      }
      try {
        return instance.compact(new Compaction(request));
      } catch (e) {
        throw asError(e);
      }
    },
  };
}
