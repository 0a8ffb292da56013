"""A fake host, so that a strategy's unit tests run in plain CPython in milliseconds, without
building a component or starting tamp.

    from tamp_guest.testing import FakeHost, assistant, tool_result, tool_use, user

    host = FakeHost()
    outcome = host.compact(MyStrategy, [user("fix it"), ...], config={"keep": 1})
    assert outcome.report.acted
    after = host.apply(outcome)            # the conversation the edits make
    assert host.count_message_tokens(after) <= host.count_message_tokens(host.messages)

It gives the services the WIT's `host` interface imports, as tamp's host gives them, but for
(each a method: a test overrides what it needs otherwise, `count_tokens` for the counts):

- **token counts** are an approximation: a text costs one token per 4 bytes of its UTF-8
  (rounded up), a message 4 tokens plus its blocks' (a tool call: its name and input; a
  tool result or an opaque block: its text). The real host counts with the chain's tokenizer
  (o200k_base by default), so write tests whose outcome does not hang on exact counts;
- **LLM calls** answer with `answers` (a list, consumed in order, or a function of the
  request), and fail with an `llm` error when there is none;
- **`compactable`** is computed as the host does for a plain conversation (after the leading
  system messages and the opening user turn, before the last `keep_recent` messages, widened
  to keep a tool call with its results); pass `compactable=(start, end)` to set it.

Page ids are the real ones (`page_id`): a placeholder sized in a test names the id it will
name in tamp. Archived pages, cached summaries, progress and log lines are kept on the fake
(`pages`, `summaries`, `progress_reports`, `logs`) for the test to read.
"""

import hashlib
import json

import tamp_guest as _sdk
from tamp_guest._bindings import Err, Ok, exports, host as _wit_host, types

LogLevel = _wit_host.LogLevel


# ------------------------------------------------------------------------------------------
# Page ids: the content address the host computes (plugin-abi's `page::page_id`).


def _block_json(block) -> dict:
    if isinstance(block, types.ContentBlock_Text):
        out = {"type": "text", "text": block.value.text}
        if block.value.extra_json:
            out["extra_json"] = block.value.extra_json
        return out
    if isinstance(block, types.ContentBlock_ToolUse):
        u = block.value
        out = {"type": "tool_use", "id": u.id, "name": u.name, "input_json": u.input_json}
        if u.extra_json:
            out["extra_json"] = u.extra_json
        return out
    if isinstance(block, types.ContentBlock_ToolResult):
        r = block.value
        parts = [
            {"type": "text", "text": p.value}
            if isinstance(p, types.ToolResultPart_Text)
            else {"type": "opaque", "json": p.value}
            for p in r.content
        ]
        out = {"type": "tool_result", "tool_use_id": r.tool_use_id, "content": parts,
               "is_error": r.is_error}
        if r.extra_json:
            out["extra_json"] = r.extra_json
        return out
    if isinstance(block, types.ContentBlock_Opaque):
        return {"type": "opaque", "json": block.value}
    raise TypeError(f"not a content block: {block!r}")


def message_json(message) -> dict:
    """`message` as tamp's JSON (plugin-abi's `Message`, its serde form)."""
    out = {"role": message.role.name.lower(),
           "content": [_block_json(b) for b in message.content]}
    if message.summary is not None:
        s = message.summary
        out["summary"] = {"page_ref": s.page_ref, "strategy": s.strategy,
                          "status": s.status.name.lower()}
    if message.extra_json:
        out["extra_json"] = message.extra_json
    return out


def canonical_json(messages) -> bytes:
    """The canonical JSON of a page's messages: what a page id hashes."""
    text = json.dumps([message_json(m) for m in messages], ensure_ascii=False,
                      separators=(",", ":"))
    return text.encode("utf-8")


def page_id(messages) -> str:
    """The id of the page that holds exactly `messages`: `pg_` and the first 32 hex digits
    of the SHA-256 of their canonical JSON, as the host computes it."""
    return "pg_" + hashlib.sha256(canonical_json(messages)).hexdigest()[:32]


def _block_from_json(b: dict):
    kind = b["type"]
    if kind == "text":
        return types.ContentBlock_Text(types.TextBlock(b["text"], b.get("extra_json", "")))
    if kind == "tool_use":
        return types.ContentBlock_ToolUse(
            types.ToolUse(b["id"], b["name"], b["input_json"], b.get("extra_json", "")))
    if kind == "tool_result":
        parts = [
            types.ToolResultPart_Text(p["text"]) if p["type"] == "text"
            else types.ToolResultPart_Opaque(p["json"])
            for p in b["content"]
        ]
        return types.ContentBlock_ToolResult(
            types.ToolResult(b["tool_use_id"], parts, b["is_error"], b.get("extra_json", "")))
    if kind == "opaque":
        return types.ContentBlock_Opaque(b["json"])
    raise ValueError(f"unknown block type {kind!r}")


def message_from_json(m: dict):
    """A message from tamp's JSON (the form `message_json` writes, and `tamp compact
    --report` shows)."""
    summary = None
    if m.get("summary") is not None:
        s = m["summary"]
        summary = types.SummaryInfo(s["page_ref"], s["strategy"],
                                    types.SummaryStatus[s["status"].upper()])
    return types.Message(types.Role[m["role"].upper()],
                         [_block_from_json(b) for b in m["content"]], summary,
                         m.get("extra_json", ""))


# ------------------------------------------------------------------------------------------
# Messages, briefly.


def _message(role, blocks, extra_json=""):
    return types.Message(role, list(blocks), None, extra_json)


def text(role: str, content: str, extra_json: str = ""):
    """A message of one text block; `role` is `system`, `user`, `assistant` or `tool`."""
    return _message(types.Role[role.upper()],
                    [types.ContentBlock_Text(types.TextBlock(content, ""))], extra_json)


def system(content: str):
    return text("system", content)


def user(content: str):
    return text("user", content)


def assistant(content: str):
    return text("assistant", content)


def tool_use(call_id: str, name: str, input_json: str = "{}", say: str = None):
    """An assistant message calling tool `name` (with `say` before the call, if given)."""
    blocks = [types.ContentBlock_Text(types.TextBlock(say, ""))] if say else []
    blocks.append(types.ContentBlock_ToolUse(types.ToolUse(call_id, name, input_json, "")))
    return _message(types.Role.ASSISTANT, blocks)


def tool_result(call_id: str, output: str, is_error: bool = False):
    """A user message carrying the result of call `call_id` (as Anthropic's wire does)."""
    result = types.ToolResult(call_id, [types.ToolResultPart_Text(output)], is_error, "")
    return _message(types.Role.USER, [types.ContentBlock_ToolResult(result)])


# ------------------------------------------------------------------------------------------
# The fake host.


def approx_tokens(content: str) -> int:
    """The fake's token count of a text: one per 4 bytes of UTF-8, rounded up."""
    return (len(content.encode("utf-8")) + 3) // 4


def _block_tokens(block, count) -> int:
    if isinstance(block, types.ContentBlock_Text):
        return count(block.value.text)
    if isinstance(block, types.ContentBlock_ToolUse):
        return count(block.value.name) + count(block.value.input_json)
    if isinstance(block, types.ContentBlock_ToolResult):
        return sum(count(p.value) for p in block.value.content)
    return count(block.value)


def _has_result(m) -> bool:
    return any(isinstance(b, types.ContentBlock_ToolResult) for b in m.content)


def _has_call(m) -> bool:
    return any(isinstance(b, types.ContentBlock_ToolUse) for b in m.content)


def compactable_range(messages, keep_recent: int):
    """`compactable` as the host computes it for a plain conversation (no opaque units, no
    provider compaction): after the leading system messages and the opening user turn,
    before the last `keep_recent` messages, the tail widened to keep a tool call with its
    results."""
    system_end = 0
    while system_end < len(messages) and messages[system_end].role == types.Role.SYSTEM:
        system_end += 1
    turn = system_end
    while (turn < len(messages) and messages[turn].role == types.Role.USER
           and messages[turn].summary is None and not _has_result(messages[turn])):
        turn += 1
    start = system_end
    if turn != system_end:
        after = next((m for m in messages[turn:] if m.role != types.Role.SYSTEM), None)
        closed = after is not None and (after.role == types.Role.ASSISTANT
                                        or after.summary is not None)
        start = turn if closed else system_end + 1
    while start < len(messages) and _sdk.is_pinned(messages[start]):
        start += 1
    tail = max(0, len(messages) - keep_recent)
    # A tool result in the tail keeps its call there too.
    while 0 < tail < len(messages) and (_has_result(messages[tail])
                                        or messages[tail].role == types.Role.TOOL):
        tail -= 1
        if _has_call(messages[tail]):
            break
    return start, max(tail, start)


def _plugin_error(kind, message):
    return Err(types.PluginError(kind, message))


class FakeHost:
    """The host's services over `messages` (set by `compact`), for unit tests."""

    LogLevel = LogLevel

    def __init__(self, answers=None, capabilities=()):
        self.messages = []
        self.answers = answers
        self._capabilities = list(capabilities)
        self.pages = {}
        self.summaries = {}
        self.progress_reports = []
        self.logs = []
        self.llm_requests = []

    # -- what `compact` gives a strategy ---------------------------------------------------

    def compact(self, strategy_class, messages, config=None, *, max_tokens=4000,
                high_watermark=3000, low_watermark=2000, keep_recent=4, compactable=None,
                stage="test", thread_id=None):
        """Builds `strategy_class` with `config` (as a stage does) and runs one compaction
        of `messages` through this fake host: the outcome (`edits`, `report`). A
        `PluginError` the strategy returns (a refused config too) is raised as one; any
        other exception as itself."""
        self.messages = list(messages)
        if compactable is None:
            compactable = compactable_range(self.messages, keep_recent)
        budget = types.Budget(max_tokens, high_watermark, low_watermark, keep_recent,
                              self.count_message_tokens(self.messages))
        request = exports.strategy.CompactRequest(
            thread_id, len(self.messages), budget, stage,
            types.Span(compactable[0], compactable[1]))
        previous = _sdk._host
        _sdk._host = self
        try:
            strategy = _sdk.export(strategy_class)()
            strategy.new_strategy(json.dumps(config or {}))
            return strategy.compact(request)
        except Err as e:
            if e.value.kind == types.ErrorKind.PANICKED:
                raise AssertionError(f"the strategy panicked: {e.value.message}") from None
            raise _sdk.PluginError(e.value.kind, e.value.message) from None
        finally:
            _sdk._host = previous

    def info(self, strategy_class) -> dict:
        """What the component says about itself, its JSON decoded."""
        info = _sdk.export(strategy_class)().info()
        return {"name": info.name, "version": info.version, "description": info.description,
                "config_schema": json.loads(info.config_schema_json),
                "default_config": json.loads(info.default_config_json)}

    def apply(self, outcome) -> list:
        """The conversation `outcome`'s edits make of the input (clearings, summaries and
        replacements; the host also checks them, which this does not)."""
        out = list(self.messages)
        spans = []
        for edit in outcome.edits:
            if isinstance(edit, types.Edit_Clear):
                out[edit.value.index] = edit.value.message
            elif isinstance(edit, types.Edit_Summarize):
                e = edit.value
                page = page_id(self.messages[e.span.start:e.span.end])
                summary = types.Message(
                    types.Role.USER, [types.ContentBlock_Text(types.TextBlock(e.text, ""))],
                    types.SummaryInfo(page, "test", e.status), "")
                spans.append((e.span.start, e.span.end, summary))
            elif isinstance(edit, types.Edit_Replace):
                spans.append((edit.value.span.start, edit.value.span.end, edit.value.message))
            elif isinstance(edit, types.Edit_Finalize):
                e = edit.value
                m = out[e.index]
                out[e.index] = types.Message(
                    m.role, [types.ContentBlock_Text(types.TextBlock(e.text, ""))],
                    m.summary, m.extra_json)
        for start, end, message in sorted(spans, key=lambda s: s[0], reverse=True):
            out[start:end] = [message]
        return out

    # -- the WIT's `host` interface ---------------------------------------------------------

    def _span(self, start, end):
        if not 0 <= start <= end <= len(self.messages):
            raise IndexError(f"messages {start}..{end} of {len(self.messages)}")
        return self.messages[start:end]

    def input_messages(self, start, end):
        return list(self._span(start, end))

    def capabilities(self):
        return list(self._capabilities)

    def count_tokens(self, content):
        return approx_tokens(content)

    def count_message_tokens(self, messages):
        # From `count_tokens`, so that a test's subclass that counts otherwise counts both.
        return sum(4 + sum(_block_tokens(b, self.count_tokens) for b in m.content)
                   for m in messages)

    def input_message_tokens(self, start, end):
        return [self.count_message_tokens([m]) for m in self._span(start, end)]

    def page_id(self, messages):
        return page_id(messages)

    def input_page_id(self, start, end):
        if not 0 <= start < end <= len(self.messages):
            raise _plugin_error(types.ErrorKind.INVALID_INPUT,
                                f"no input messages {start}..{end} of {len(self.messages)}")
        return page_id(self.messages[start:end])

    def complete(self, request):
        self.llm_requests.append(request)
        answers = self.answers
        answer = None
        if callable(answers):
            answer = answers(request)
        elif answers:
            answer = answers.pop(0)
        if answer is None:
            raise _plugin_error(types.ErrorKind.LLM, "the fake host has no answer left")
        usage = types.Usage(approx_tokens(request.system + request.prompt),
                            approx_tokens(answer), 0, 0)
        structured = answer if request.response_schema_json else None
        return types.LlmResponse(answer, structured, usage, "fake", "end_turn")

    def complete_all(self, requests, max_concurrency):
        out = []
        for request in requests:
            try:
                out.append(Ok(self.complete(request)))
            except Err as e:
                out.append(e)
        return out

    def archive_page(self, messages, metadata_json):
        pid = page_id(messages)
        self.pages[pid] = types.Page(pid, None, "test", list(messages), metadata_json, 0)
        return pid

    def load_page(self, pid):
        if pid not in self.pages:
            raise _plugin_error(types.ErrorKind.HOST, f"no page {pid}")
        return self.pages[pid]

    def cached_summary(self, messages):
        for n in range(len(messages), 0, -1):
            text_ = self.summaries.get(page_id(messages[:n]))
            if text_ is not None:
                return types.CacheHit(n, text_)
        return None

    def cache_summary(self, messages, summary):
        self.summaries[page_id(messages)] = summary

    def defer_summaries(self, requests):
        raise _plugin_error(types.ErrorKind.HOST, "the fake host defers no summaries")

    def deferred_results(self, page_ids):
        return [types.DeferredState(p, types.DeferredStatus.UNKNOWN, "", "") for p in page_ids]

    def progress(self, done, total, message):
        self.progress_reports.append((done, total, message))

    def log(self, level, message):
        self.logs.append((level.name.lower(), message))
