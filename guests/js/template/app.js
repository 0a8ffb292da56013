// The template JavaScript strategy: tool-result clearing (plugins/tool-result-clearing, the
// native strategy) ported to the JavaScript guest SDK. Copy this directory to start a
// strategy of your own; docs/writing-a-plugin.md says how to build and load it.
//
// Old tool outputs are cleared in place, no LLM: each replaced by a placeholder naming the
// page that keeps the original message. It makes the native strategy's edits with the same
// config, byte for byte (the end-to-end tests compare the two), but counts what each clearing
// costs exactly: with the page id its placeholder names, a lone block against its whole
// cleared message, so that no clearing grows the conversation whatever the config.
// `app.test.js` holds its unit tests (`node --test`, against the SDK's fake host).

import {
  Clearing,
  Config,
  PluginError,
  countMessageTokens,
  countTokens,
  Strategy,
  boolean,
  exportStrategy,
  inputPlaceholderTokens,
  integer,
  invalidConfig,
  isCleared,
  renderTemplate,
  resultPlaceholderTokens,
  string,
  stringList,
  unchanged,
  withEdits,
} from "tamp-guest";

const DEFAULT_PLACEHOLDER = "Output of {tool} ({tokens} tokens) cleared; recall this page to read it.";

// The config, declared once: its schema, its defaults and its checks derive from this.
export const CONFIG = new Config(
  [
    integer(
      "keep",
      3,
      "The most recent tool uses whose results (and inputs) are left alone, counted over the whole conversation.",
      { minimum: 0, maximum: 1000000 },
    ),
    integer(
      "clear_at_least",
      2000,
      "Clear nothing unless at least this many tokens would go at once. 0: clear whatever is eligible.",
      { minimum: 0, maximum: 100000000 },
    ),
    stringList("exclude_tools", [], "Tools whose results are never cleared."),
    boolean("clear_tool_inputs", false, "Also replace the input of each cleared call by a placeholder."),
    integer("min_result_tokens", 100, "Results smaller than this many tokens are left alone.", {
      minimum: 0,
      maximum: 100000000,
    }),
    string(
      "placeholder",
      DEFAULT_PLACEHOLDER,
      "The note inside each placeholder: `{tool}`, `{tokens}`, `{page}`; `{{` and `}}` for literal braces.",
    ),
  ],
  { description: "How the strategy chooses what to clear." },
);

export class ToolResultClearing extends Strategy {
  static NAME = "js-tool-result-clearing";
  static VERSION = "0.1.0";
  static DESCRIPTION =
    "Clears old tool outputs in place, no LLM (a JavaScript port of tool-result-clearing): " +
    "each replaced by a placeholder naming the page that keeps it.";
  static CONFIG = CONFIG;

  constructor(config) {
    super(config); // checked against CONFIG: this.config
    this.keep = this.config.keep;
    this.clearAtLeast = this.config.clear_at_least;
    this.minResultTokens = this.config.min_result_tokens;
    this.excludeTools = new Set(this.config.exclude_tools);
    this.clearToolInputs = this.config.clear_tool_inputs;
    this.placeholder = this.config.placeholder;
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

  /// Tokens of the clearing of target `t`, counted as `Tokens` counted its block: the whole
  /// cleared message when the block is its only one, else the placeholder's text.
  cost(message, t, page) {
    const note = t.result ? this.note(t.tool, t.size, page) : undefined;
    if (message.content.length === 1) {
      const probe = new Clearing(message, t.index, page);
      if (t.result) probe.clearResult(t.block, note);
      else probe.clearInput(t.block);
      return countMessageTokens([probe.message]);
    }
    return t.result ? resultPlaceholderTokens(page, note) : inputPlaceholderTokens(page);
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

    // What each clearing will cost, sized with the page id its placeholder will name (the
    // page of its message) and the note it will carry, and counted as its block was (a lone
    // block as its whole message): a block no larger than its placeholder is left alone, so
    // the conversation never grows (TAMP-INV-06).
    const pages = new Map();
    const worth = [];
    for (const t of targets) {
      if (!pages.has(t.index)) pages.set(t.index, c.pageId(t.index));
      const cost = this.cost(messages[t.index], t, pages.get(t.index));
      if (t.size > cost) worth.push([t, t.size - cost]);
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
        clearing = new Clearing(messages[t.index], t.index, pages.get(t.index));
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
