// The template JavaScript strategy: tool-result clearing (plugins/tool-result-clearing, the
// native strategy) ported to the JavaScript guest SDK. Copy this directory to start a
// strategy of your own; docs/writing-a-plugin.md says how to build and load it.
//
// Old tool outputs are cleared in place, no LLM: each replaced by a placeholder naming the
// page that keeps the original message. It makes the same decisions, byte for byte, as the
// native strategy with the same config (the end-to-end tests compare the two).

import {
  Clearing,
  Strategy,
  countTokens,
  exportStrategy,
  inputPlaceholder,
  invalidConfig,
  isCleared,
  PluginError,
  renderTemplate,
  resultPlaceholder,
  unchanged,
  withEdits,
} from "../tamp-guest.js";

const DEFAULT_PLACEHOLDER = "Output of {tool} ({tokens} tokens) cleared; recall this page to read it.";
// A page id's length ("pg_" and 32 hex digits), for sizing placeholders before pages exist.
const SAMPLE_PAGE = "pg_" + "0".repeat(32);
const U64_MAX = "18446744073709551615";

const DEFAULT_CONFIG = {
  keep: 3,
  clear_at_least: 2000,
  exclude_tools: [],
  clear_tool_inputs: false,
  min_result_tokens: 100,
  placeholder: DEFAULT_PLACEHOLDER,
};

const CONFIG_SCHEMA = {
  $schema: "http://json-schema.org/draft-07/schema#",
  title: "Config",
  description: "How the strategy chooses what to clear.",
  type: "object",
  properties: {
    keep: {
      description: "The most recent tool uses whose results (and inputs) are left alone, counted over the whole conversation.",
      type: "integer", minimum: 0, maximum: 1000000, default: 3,
    },
    clear_at_least: {
      description: "Clear nothing unless at least this many tokens would go at once. 0: clear whatever is eligible.",
      type: "integer", minimum: 0, maximum: 100000000, default: 2000,
    },
    exclude_tools: {
      description: "Tools whose results are never cleared.",
      type: "array", items: { type: "string" }, default: [],
    },
    clear_tool_inputs: {
      description: "Also replace the input of each cleared call by a placeholder.",
      type: "boolean", default: false,
    },
    min_result_tokens: {
      description: "Results smaller than this many tokens are left alone.",
      type: "integer", minimum: 0, maximum: 100000000, default: 100,
    },
    placeholder: {
      description: "The note inside each placeholder: `{tool}`, `{tokens}`, `{page}`; `{{` and `}}` for literal braces.",
      type: "string", default: DEFAULT_PLACEHOLDER,
    },
  },
  additionalProperties: false,
};

function integer(config, key, maximum) {
  const value = config[key];
  if (!Number.isInteger(value)) {
    throw invalidConfig(`${key}: expected an integer, got ${JSON.stringify(value)}`);
  }
  if (value < 0 || value > maximum) {
    throw invalidConfig(`${key}: ${value} is out of range 0..=${maximum}`);
  }
  return value;
}

class ToolResultClearing extends Strategy {
  static NAME = "js-tool-result-clearing";
  static VERSION = "0.1.0";
  static DESCRIPTION =
    "Clears old tool outputs in place, no LLM (a JavaScript port of tool-result-clearing): " +
    "each replaced by a placeholder naming the page that keeps it.";
  static CONFIG_SCHEMA = CONFIG_SCHEMA;
  static DEFAULT_CONFIG = DEFAULT_CONFIG;

  constructor(given) {
    super({});
    const unknown = Object.keys(given).filter((k) => !(k in DEFAULT_CONFIG)).sort();
    if (unknown.length > 0) {
      throw invalidConfig(`unknown field \`${unknown[0]}\``);
    }
    const config = { ...DEFAULT_CONFIG, ...given };
    this.keep = integer(config, "keep", 1000000);
    this.clearAtLeast = integer(config, "clear_at_least", 100000000);
    this.minResultTokens = integer(config, "min_result_tokens", 100000000);
    const tools = config.exclude_tools;
    if (!Array.isArray(tools) || !tools.every((t) => typeof t === "string")) {
      throw invalidConfig("exclude_tools: expected a list of strings");
    }
    this.excludeTools = new Set(tools);
    if (typeof config.clear_tool_inputs !== "boolean") {
      throw invalidConfig("clear_tool_inputs: expected true or false");
    }
    this.clearToolInputs = config.clear_tool_inputs;
    if (typeof config.placeholder !== "string") {
      throw invalidConfig("placeholder: expected a string");
    }
    this.placeholder = config.placeholder;
    // A bad template stops the chain from loading, not the first compaction.
    this.note("tool", 0, "pg_0");
  }

  note(tool, tokens, page) {
    try {
      return renderTemplate(this.placeholder, { tool, tokens: String(tokens), page });
    } catch (e) {
      if (e instanceof PluginError) {
        throw invalidConfig(`placeholder: ${e.message.replace(/^prompt template: /, "")}`);
      }
      throw e;
    }
  }

  compact(c) {
    const messages = c.messages;
    const { start, end } = c.compactable;
    const inRange = (i) => i >= start && i < end;
    // The calls by id (position and tool), and the ids of the `keep` most recent.
    const calls = new Map();
    const order = [];
    messages.forEach((m, index) => {
      m.content.forEach((b, block) => {
        if (b.tag === "tool-use") {
          calls.set(b.val.id, { index, block, tool: b.val.name });
          order.push(b.val.id);
        }
      });
    });
    const kept = new Set(this.keep > 0 ? order.slice(Math.max(0, order.length - this.keep)) : []);

    const tokens = new Tokens(c);
    const targets = [];
    const inputs = [];
    for (let i = start; i < end; i++) {
      messages[i].content.forEach((block, b) => {
        if (block.tag !== "tool-result") return;
        const id = block.val.toolUseId;
        const call = calls.get(id);
        const tool = call ? call.tool : "";
        if (kept.has(id) || this.excludeTools.has(tool) || isCleared(block)) return;
        const size = tokens.block(i, b);
        if (size < this.minResultTokens) return;
        targets.push({ index: i, block: b, tool, result: true, size });
        if (call && this.clearToolInputs) {
          if (inRange(call.index) && !isCleared(messages[call.index].content[call.block])) {
            inputs.push({ index: call.index, block: call.block, tool, result: false, size: tokens.block(call.index, call.block) });
          }
        }
      });
    }
    if (targets.length === 0) {
      return unchanged(
        `no tool result to clear (the ${this.keep} most recent tool uses are kept; results under ` +
          `${this.minResultTokens} tokens, excluded tools and cleared ones are left)`,
      );
    }
    targets.push(...inputs);

    // A placeholder's size, counted once per tool (with the widest number and a page id's
    // length); a block no larger than its placeholder is left alone.
    const sizes = new Map();
    const worth = [];
    for (const t of targets) {
      const key = `${t.result}\u0000${t.tool}`;
      if (!sizes.has(key)) {
        const text = t.result
          ? resultPlaceholder(SAMPLE_PAGE, this.note(t.tool, U64_MAX, SAMPLE_PAGE))
          : inputPlaceholder(SAMPLE_PAGE);
        sizes.set(key, countTokens(text));
      }
      const size = sizes.get(key);
      if (t.size > size) worth.push([t, t.size - size]);
    }
    const results = worth.filter(([t]) => t.result).length;
    const inputCount = worth.length - results;
    if (results === 0) {
      return unchanged("no tool result is larger than its placeholder would be");
    }

    // One clearing per message, oldest first.
    const byMessage = new Map();
    let freed = 0;
    for (const [t, gain] of worth) {
      let clearing = byMessage.get(t.index);
      if (clearing === undefined) {
        clearing = new Clearing(messages[t.index], t.index, c.pageId(t.index));
        byMessage.set(t.index, clearing);
      }
      if (t.result) {
        clearing.clearResult(t.block, this.note(t.tool, t.size, clearing.page));
      } else {
        clearing.clearInput(t.block);
      }
      freed += gain;
    }
    if (freed < this.clearAtLeast) {
      return unchanged(
        `clearing ${results} tool result(s) would free about ${freed} tokens, less than ` +
          `clear_at_least (${this.clearAtLeast})`,
      );
    }
    const edits = [...byMessage.keys()]
      .sort((a, b) => a - b)
      .map((i) => byMessage.get(i).edit())
      .filter((e) => e !== undefined);
    const inputsNote = inputCount > 0 ? ` and ${inputCount} tool input(s)` : "";
    return withEdits(
      edits,
      `cleared ${results} tool result(s)${inputsNote} in ${byMessage.size} message(s), about ` +
        `${freed} tokens; the ${this.keep} most recent tool uses kept`,
      {
        details: {
          results_cleared: results,
          inputs_cleared: inputCount,
          messages_cleared: byMessage.size,
          tokens_freed: freed,
        },
      },
    );
  }
}

/// Block sizes as the native strategy counts them: a message's tokens (memoized by the
/// host, fetched for the whole input in one call) when the block is its only one, else the
/// block's own text.
class Tokens {
  constructor(c) {
    this.c = c;
    this.messages = undefined;
  }

  block(index, block) {
    const m = this.c.messages[index];
    if (m.content.length === 1) {
      if (this.messages === undefined) {
        this.messages = this.c.messageTokens(0, this.c.messages.length);
      }
      return this.messages[index];
    }
    const b = m.content[block];
    if (b.tag === "tool-result") {
      return b.val.content.reduce((sum, p) => sum + countTokens(p.val), 0);
    }
    if (b.tag === "tool-use") {
      return countTokens(b.val.inputJson);
    }
    return 0;
  }
}

export const strategy = exportStrategy(ToolResultClearing);
