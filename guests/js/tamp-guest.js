// tamp's guest SDK for JavaScript: a compaction strategy as a WebAssembly component.
//
// A strategy is a class with static NAME, VERSION, DESCRIPTION, CONFIG_SCHEMA and
// DEFAULT_CONFIG, a constructor that checks its config (throw `invalidConfig(...)`) and a
// `compact(compaction)` that returns `unchanged(...)` or `withEdits(...)`. The app module
// exports the interface componentize-js binds:
//
//     import { Strategy, unchanged, exportStrategy } from "./tamp-guest.js";
//     class Noop extends Strategy {
//       static NAME = "noop";
//       compact(c) { return unchanged("nothing to do"); }
//     }
//     export const strategy = exportStrategy(Noop);
//
// It is built with componentize-js against tamp's WIT package (`plugin-abi/wit`) with every
// WASI feature disabled: the host gives a guest no filesystem, network, environment or clock,
// only the functions of `tamp:strategy/host`, which this module wraps. See
// docs/writing-a-plugin.md, "A WebAssembly strategy".
//
// The conversation arrives as jco's mapping of the WIT types: records are objects with
// camelCase fields, variants `{ tag, val }` (`{ tag: "tool-result", val: { toolUseId, ... } }`),
// enums strings, and u64 values BigInts. `compactable` is `{ start, end }`, the messages a
// stage may change (the native SDK's `sdk::compactable_range`, computed by the host).

import * as host from "tamp:strategy/host@0.2.0";

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

/// The base class of a strategy (see the top of this file).
export class Strategy {
  static NAME = "";
  static VERSION = "0.1.0";
  static DESCRIPTION = "";
  static CONFIG_SCHEMA = { type: "object", additionalProperties: false };
  static DEFAULT_CONFIG = {};

  constructor(config) {
    const keys = Object.keys(config);
    if (keys.length > 0) {
      throw invalidConfig(`this strategy takes no config, got ${keys.join(", ")}`);
    }
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

  /// Tokens of each input message in `start..end`, as the host counts them.
  messageTokens(start, end) {
    return Array.from(host.inputMessageTokens(start, end), Number);
  }

  /// The id of the page that holds exactly input messages `start..end` (`start` alone
  /// when `end` is omitted).
  pageId(start, end = start + 1) {
    return hostCall(() => host.inputPageId(start, end));
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
        configSchemaJson: JSON.stringify(StrategyClass.CONFIG_SCHEMA),
        defaultConfigJson: JSON.stringify(StrategyClass.DEFAULT_CONFIG),
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
