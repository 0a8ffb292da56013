// The template JavaScript strategy: examples/custom-strategy, tamp's example strategy, ported
// to the JavaScript guest SDK. The same strategy exists in all three languages (Rust,
// guests/python/template, this one): with the same config and conversation they make the same
// edits, byte for byte, and the same report (the end-to-end tests compare them). Copy this
// directory to start a strategy of your own; docs/writing-a-plugin.md says how to build and
// load it. `app.test.js` holds its unit tests (`node --test`, against the SDK's fake host).
//
// It archives the oldest tool exchanges into pages: each run of adjacent exchanges becomes one
// summary naming the tools called (`Archived 3 tool call(s): bash ×2, edit.`), optionally
// followed by what the host's LLM says the calls found out. The host decides what a unit is
// and what a summary costs; the strategy only picks the runs and words the notes.

import {
  Config,
  PluginError,
  Strategy,
  adjacentRuns,
  boolean,
  capChars,
  completeAll,
  exportStrategy,
  integer,
  renderMessages,
  summarize,
  toolActivity,
  trimWhitespace,
  unchanged,
  unitsWithin,
  withEdits,
  wrapContent,
} from "tamp-guest";

// The config, declared once: its schema, its defaults and its checks derive from this.
export const CONFIG = new Config(
  [
    integer(
      "keep_exchanges",
      3,
      "The newest tool exchanges (outside the protected recent messages) left as they are.",
      { minimum: 0, maximum: 100000 },
    ),
    integer("min_exchanges", 1, "Archive only when at least this many exchanges would go.", { minimum: 1 }),
    boolean(
      "summarize",
      true,
      "Ask the host's LLM for a short summary of each archived run, not just the tool names.",
    ),
    integer("summary_tokens", 200, "Upper bound on each summary, in tokens (asked of the LLM).", {
      minimum: 16,
      maximum: 4096,
    }),
    integer(
      "max_summary_chars",
      2000,
      "Hard cap on each summary's length, in characters: an LLM answer is cut here before it " +
        "enters the conversation, whatever it says its length is.",
      { minimum: 1 },
    ),
    integer("max_concurrency", 8, "At most this many summary requests run at once.", { minimum: 1, maximum: 256 }),
  ],
  { description: "The stage config (`[stage.config]` in a chain file)." },
);

/// The prompt asking for a run's summary. The material goes last, inside the `<content>`
/// section `wrapContent` writes: the host's offline summarizer reads that section.
export const summaryPrompt = (run) =>
  "Summarize what these tool calls found out, in a few sentences. Keep file paths, " +
  "identifiers, numbers and errors.\n" +
  wrapContent(renderMessages(run));

export class ArchiveOldToolCalls extends Strategy {
  static NAME = "js-custom-strategy";
  static VERSION = "0.1.0";
  static DESCRIPTION =
    "Archives the oldest tool exchanges into pages and leaves a note naming the tools called.";
  static CONFIG = CONFIG;

  compact(c) {
    const config = this.config;
    // The oldest tool exchanges in the compactable range, beyond the newest `keep_exchanges`,
    // in runs of adjacent exchanges: one summary each.
    const exchanges = unitsWithin(c.units(), c.compactable).filter((u) => u.kind === "tool-exchange");
    const runs = adjacentRuns(exchanges.slice(0, Math.max(0, exchanges.length - config.keep_exchanges)));
    const count = runs.reduce((sum, run) => sum + run.units.length, 0);
    if (count < config.min_exchanges) {
      return unchanged(`${count} tool exchange(s) old enough to archive, ${config.min_exchanges} needed`);
    }

    const messages = runs.map((run) => c.read(run.span.start, run.span.end));
    const answers = config.summarize ? this.summarizeRuns(messages) : runs.map(() => undefined);

    // Each run becomes one edit: the host archives its messages as a page and puts the note,
    // with the page's ref, in their place.
    const warnings = [];
    const edits = [];
    let archived = 0;
    runs.forEach((run, i) => {
      const { start, end } = run.span;
      const activity = toolActivity(messages[i]);
      let note = `Archived ${activity.calls} tool call(s): ${activity.toolList}.`;
      const at = `messages ${start}..${end}`;
      const answer = answers[i];
      if (answer instanceof PluginError) {
        warnings.push(`summary of ${at} failed: ${answer}`);
      } else if (answer !== undefined) {
        const summarized = `${note}\n${capChars(trimWhitespace(answer.text), config.max_summary_chars)}`;
        // A summary must not outweigh what it replaces (an LLM may answer far more than it
        // was asked for): then the plain note stands alone.
        if (c.summaryIsSmaller(summarized, start, end)) {
          note = summarized;
        } else {
          warnings.push(`summary of ${at} is longer than the exchanges it replaces; kept the plain note`);
        }
      }
      // Even the plain note may outweigh a short run: then it is left as it is.
      if (!c.summaryIsSmaller(note, start, end)) return;
      edits.push(summarize(start, end, note));
      archived += run.units.length;
    });
    if (edits.length === 0) {
      return unchanged("no run of tool exchanges outweighs its summary", { warnings });
    }
    return withEdits(edits, `archived ${archived} tool exchange(s) in ${edits.length} run(s)`, { warnings });
  }

  /// One LLM request per run, sent at once: each answer a response or a `PluginError`.
  summarizeRuns(runs) {
    const requests = runs.map((run, i) => ({
      prompt: summaryPrompt(run),
      maxOutputTokens: this.config.summary_tokens,
      label: `run ${i + 1}/${runs.length}`,
    }));
    return completeAll(requests, this.config.max_concurrency);
  }
}

export const strategy = exportStrategy(ArchiveOldToolCalls);
