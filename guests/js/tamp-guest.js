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
// stage may change (the native SDK's `sdk::compactable_range`, computed by the host).

// The host's services: the component's `tamp:strategy/host` import (bound by the entry module
// `tamp-guest build` writes), or a fake host in Node (`tamp-guest/testing`).
let host;

/// Binds the host's services (the WIT import, or a fake); returns the ones bound before.
export function bindHost(services) {
  const previous = host;
  host = services;
  return previous;
}

/// An error the strategy returns: the stage is rolled back and the report says why.
export class PluginError extends Error {
  constructor(kind, message) {
    super(message);
    this.kind = kind;
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

/// The stage did nothing, for `reason`.
export function unchanged(reason) {
  return { edits: [], report: { acted: false, reason, warnings: [], detailsJson: "" } };
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

/// One LLM call through the host (its provider, retries, timeout and cache); throws a
/// `PluginError` when it fails.
export function complete({ system = "", prompt, maxOutputTokens, label = "", temperature, responseSchema }) {
  return hostCall(() =>
    host.complete({
      system,
      prompt,
      maxOutputTokens,
      temperature,
      responseSchemaJson: responseSchema === undefined ? undefined : JSON.stringify(responseSchema),
      label,
    }),
  );
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
// Template rendering, as the native SDK's `sdk::render_template`: `{name}` is replaced by its
// value, `{{` and `}}` are literal braces, anything else is an error.

export function renderTemplate(template, values) {
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
      throw invalidConfig("prompt template: unmatched `}` (write `}}` for a literal brace)");
    } else {
      const end = template.indexOf("}", next);
      if (end < 0) {
        throw invalidConfig("prompt template: unclosed `{` (write `{{` for a literal brace)");
      }
      const name = template.slice(next + 1, end);
      if (!Object.prototype.hasOwnProperty.call(values, name)) {
        const known = Object.keys(values).map((k) => `{${k}}`).join(", ");
        throw invalidConfig(`prompt template: unknown placeholder {${name}}; known: ${known}`);
      }
      out += String(values[name]);
      i = end + 1;
    }
  }
  return out;
}

// -----------------------------------------------------------------------------------------
// Clearings (TAMP-INV-10), as the native SDK's `sdk::clearing` makes them: a tool result's
// content, or a tool call's input, replaced in place by a placeholder naming the page of the
// original message. The canonical forms (docs/plugin-spec.md): a cleared result's one text
// part `<tamp-cleared page="PAGE">\nNOTE\n</tamp-cleared>`; a cleared input exactly
// `{"tamp_cleared":{"page":"PAGE"}}`.

const RESULT_OPEN = '<tamp-cleared page="';
const RESULT_CLOSE = "\n</tamp-cleared>";
const INPUT_OPEN = '{"tamp_cleared":{"page":"';
const INPUT_CLOSE = '"}}';

const isPageId = (page) => /^[A-Za-z0-9_-]+$/.test(page);

/// The text of a cleared tool result naming `page`, with `note` for the model.
export const resultPlaceholder = (page, note) => `${RESULT_OPEN}${page}">\n${note}${RESULT_CLOSE}`;

/// The input of a cleared tool call naming `page`.
export const inputPlaceholder = (page) => `${INPUT_OPEN}${page}${INPUT_CLOSE}`;

/// What a cleared tool result's placeholder naming `page` with `note` costs, in the chain's
/// tokens: the real cost, when `page` is the id the clearing will name
/// (`compaction.pageId(i)`). A compaction never grows the conversation (TAMP-INV-06): size a
/// placeholder with its real page id before deciding a block is worth clearing; a stand-in
/// id (`"pg_" + "0".repeat(32)`) counts fewer tokens than a real one.
export const resultPlaceholderTokens = (page, note) => countTokens(resultPlaceholder(page, note));

/// What a cleared tool input's placeholder naming `page` costs, in the chain's tokens.
export const inputPlaceholderTokens = (page) => countTokens(inputPlaceholder(page));

function resultPage(text) {
  if (!text.startsWith(RESULT_OPEN)) return undefined;
  const rest = text.slice(RESULT_OPEN.length);
  const quote = rest.indexOf('"');
  if (quote < 0) return undefined;
  const page = rest.slice(0, quote);
  const after = rest.slice(quote + 1);
  if (!after.startsWith('>\n') || after.length < 2 + RESULT_CLOSE.length || !after.endsWith(RESULT_CLOSE)) {
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

/// The page a cleared block names, or undefined for any block that is not one.
export function clearedPage(block) {
  if (block.tag === "tool-result") {
    const content = block.val.content;
    return content.length === 1 && content[0].tag === "text" ? resultPage(content[0].val) : undefined;
  }
  if (block.tag === "tool-use") {
    return inputPage(block.val.inputJson);
  }
  return undefined;
}

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
