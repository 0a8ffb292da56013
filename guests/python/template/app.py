"""The template Python strategy: a port of examples/custom-strategy, the one example strategy
tamp ships in all three languages (Rust, Python, JavaScript). With the same config and
conversation the three make the same edits, byte for byte, and the same report (the
end-to-end tests compare them). Copy this directory to start a strategy of your own;
docs/writing-a-plugin.md says how to build and load it.

It archives the oldest tool exchanges into pages and leaves a note in their place naming the
tools called, optionally with a short LLM summary of what the calls found out: the newest
`keep_exchanges` exchanges of the compactable range stay, the older ones go in runs of
adjacent exchanges (a user turn between two ends a run), one page and one note per run.
Everything a rule decides comes from the host (the units, the prompt's rendering, whether a
note is smaller than what it replaces), so nothing here can drift from the Rust example.
`test_app.py` holds its unit tests (`python -m unittest`, against the SDK's fake host).
"""

import tamp_guest as tamp

# The config, declared once: its schema, its defaults and its checks derive from this (the
# names, defaults, bounds and descriptions of the Rust example's `Config`).
CONFIG = tamp.Config(
    tamp.Integer("keep_exchanges", 3, "The newest tool exchanges (outside the protected "
                 "recent messages) left as they are.", minimum=0, maximum=100000),
    tamp.Integer("min_exchanges", 1, "Archive only when at least this many exchanges would "
                 "go.", minimum=1),
    tamp.Boolean("summarize", True, "Ask the host's LLM for a short summary of each archived "
                 "run, not just the tool names."),
    tamp.Integer("summary_tokens", 200, "Upper bound on each summary, in tokens (asked of the "
                 "LLM).", minimum=16, maximum=4096),
    tamp.Integer("max_summary_chars", 2000, "Hard cap on each summary's length, in characters: "
                 "an LLM answer is cut here before it enters the conversation, whatever it "
                 "says its length is.", minimum=1),
    tamp.Integer("max_concurrency", 8, "At most this many summary requests run at once.",
                 minimum=1, maximum=256),
    description="The stage config (`[stage.config]` in a chain file).",
)

# The material goes last, inside the `<content>` section `wrap_content` writes: the host's
# offline summarizer reads that section.
PROMPT = ("Summarize what these tool calls found out, in a few sentences. Keep file paths, "
          "identifiers, numbers and errors.\n")


def runs_to_archive(c, keep_exchanges):
    """The oldest tool exchanges of the compactable range, beyond the newest
    `keep_exchanges`, in runs of adjacent exchanges (`tamp.Group`s)."""
    exchanges = [u for u in tamp.units_within(c.units(), c.compactable)
                 if u.kind == tamp.UnitKind.TOOL_EXCHANGE]
    archive = exchanges[:max(0, len(exchanges) - keep_exchanges)]
    return tamp.adjacent_runs(archive)


def summary_prompt(run_messages):
    """The prompt asking for a run's summary."""
    return PROMPT + tamp.wrap_content(tamp.render_messages(run_messages))


class ArchiveOldToolCalls(tamp.Strategy):
    NAME = "py-custom-strategy"
    VERSION = "0.1.0"
    DESCRIPTION = ("Archives the oldest tool exchanges into pages and leaves a note naming the "
                   "tools called.")
    CONFIG = CONFIG

    def compact(self, c):
        config = self.config
        runs = runs_to_archive(c, config["keep_exchanges"])
        exchanges = sum(len(run.units) for run in runs)
        if exchanges < config["min_exchanges"]:
            return tamp.unchanged(f"{exchanges} tool exchange(s) old enough to archive, "
                                  f"{config['min_exchanges']} needed")

        # Each run's messages, read once: only the runs are copied out of the host.
        originals = [c.read(run.start, run.end) for run in runs]
        answers = self.summarize_runs(originals) if config["summarize"] else [None] * len(runs)

        # Each run becomes one edit: the host archives its messages as a page and puts the
        # note, with the page's ref, in their place.
        warnings = []
        edits = []
        archived = 0
        for run, messages, answer in zip(runs, originals, answers):
            activity = tamp.tool_activity(messages)
            note = f"Archived {activity.calls()} tool call(s): {activity.tool_list()}."
            at = f"messages {run.start}..{run.end}"
            if isinstance(answer, tamp.PluginError):
                warnings.append(f"summary of {at} failed: {answer}")
            elif answer is not None:
                summarized = (note + "\n"
                              + tamp.cap_chars(tamp.trim(answer.text),
                                               config["max_summary_chars"]))
                # A summary must not outweigh what it replaces (an LLM may answer far more
                # than it was asked for): then the plain note stands alone.
                if c.summary_is_smaller(summarized, run.start, run.end):
                    note = summarized
                else:
                    warnings.append(f"summary of {at} is longer than the exchanges it "
                                    "replaces; kept the plain note")
            if not c.summary_is_smaller(note, run.start, run.end):
                # Even the plain note outweighs these exchanges: leave them as they are.
                continue
            edits.append(tamp.summarize(run.start, run.end, note))
            archived += len(run.units)
        if not edits:
            return tamp.unchanged("no run of tool exchanges outweighs its summary", warnings)
        return tamp.with_edits(
            edits, f"archived {archived} tool exchange(s) in {len(edits)} run(s)", warnings)

    def summarize_runs(self, originals):
        """One LLM request per run, sent at once through the host: each answer an
        `LlmResponse` or a `PluginError`, in run order."""
        total = len(originals)
        requests = [
            tamp.llm_request("", summary_prompt(messages), self.config["summary_tokens"],
                             label=f"run {i}/{total}")
            for i, messages in enumerate(originals, 1)
        ]
        return tamp.complete_all(requests, self.config["max_concurrency"])


Strategy = tamp.export(ArchiveOldToolCalls)
