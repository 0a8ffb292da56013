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
  (o200k_base by default), so write tests whose outcome does not hang on exact counts
  (`summary_is_smaller` weighs a summary with the same counts);
- **`render_messages`** is simpler than the host's: the same lines (`role: text`,
  `assistant called name(input)`, `name returned: output`, `name failed: output`, a summary
  with its page), but no block is cut, and a cleared block shows its placeholder. Test that
  a prompt carries the rendering (compare with `render_messages`), not its exact text;
- **LLM calls** answer with `answers` (a list, consumed in order, or a function of the
  request), and fail with an `llm` error when there is none;
- **`compactable`** is computed as the host does for a conversation without provider
  compaction boundaries (after the leading system messages and the opening user turn and
  the pinned units right after them, before the last `keep_recent` messages, widened to keep
  a tool call with its results); pass `compactable=(start, end)` to set it.

The rest is the host's, exactly: page ids (`page_id`: a placeholder sized in a test names
the id it will name in tamp), units (`units`, the host's rule), and the renderings
`wrap_content`, `render_template` and the clearings' placeholders (`result_placeholder`,
`input_placeholder`, `cleared_page`), which the SDK asks the host for. Archived pages,
cached summaries, progress and log lines are kept on the fake (`pages`, `summaries`,
`progress_reports`, `logs`) for the test to read.
"""

import hashlib
import json

import tamp_guest as _sdk
from tamp_guest._bindings import Err, Ok, exports, host as _wit_host, types
from tamp_guest.groups import result_text

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


def tool_result(call_id: str, output: str, is_error: bool = False, role: str = "user"):
    """A message carrying the result of call `call_id`: a user message, as Anthropic's wire
    has it, or with `role="tool"` an OpenAI tool message."""
    result = types.ToolResult(call_id, [types.ToolResultPart_Text(output)], is_error, "")
    return _message(types.Role[role.upper()], [types.ContentBlock_ToolResult(result)])


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


def _call_ids(m):
    return [b.value.id for b in m.content if isinstance(b, types.ContentBlock_ToolUse)]


def _result_ids(m):
    return [b.value.tool_use_id for b in m.content
            if isinstance(b, types.ContentBlock_ToolResult)]


def _unit_kind(run):
    if any(_sdk.is_pinned(m) for m in run):
        return types.UnitKind.PINNED
    if len(run) == 1 and run[0].summary is not None:
        return types.UnitKind.SUMMARY
    if any(_call_ids(m) for m in run):
        return types.UnitKind.TOOL_EXCHANGE
    return types.UnitKind.MESSAGE


def units(messages) -> list:
    """`messages` split into units, as the host splits them (plugin-abi's
    `rules::exchanges::units`): a tool exchange runs from the message making a call to the
    last message answering any of its calls, widened over whatever it overlaps; a result
    answering no known call stands alone. A unit holding a pinned message is pinned."""
    call_site = {}
    # reach[i]: the last message a unit starting at or containing message i extends to.
    reach = list(range(len(messages)))
    for i, m in enumerate(messages):
        for call in _result_ids(m):
            if call in call_site:
                reach[call_site[call]] = max(reach[call_site[call]], i)
        for call in _call_ids(m):
            call_site[call] = i
    out = []
    start = 0
    while start < len(messages):
        end = reach[start]
        i = start
        while i <= end:
            end = max(end, reach[i])
            i += 1
        out.append(types.Unit(types.Span(start, end + 1), _unit_kind(messages[start:end + 1])))
        start = end + 1
    return out


def compactable_range(messages, keep_recent: int):
    """`compactable` as the host computes it (plugin-abi's `rules::protect`) for a
    conversation without provider compaction boundaries: after the leading system messages
    and the opening user turn (the task) and the pinned units right after them, before the
    last `keep_recent` messages, the tail widened to the start of the unit it cuts (a tool
    call kept with its results)."""
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
    split = units(messages)
    for unit in split:
        if unit.span.start == start and unit.kind == types.UnitKind.PINNED:
            start = unit.span.end
    tail = max(0, len(messages) - keep_recent)
    for unit in split:
        if unit.span.start <= tail < unit.span.end:
            tail = unit.span.start
    return start, max(tail, start)


# ------------------------------------------------------------------------------------------
# The host's renderings, exactly: the SDK asks the host for them (so that it keeps no copy of
# their rules), and in plain CPython these answer in its place. But `render_messages`, which
# the module's docstring says is simpler.

_RESULT_OPEN = '<tamp-cleared page="'
_RESULT_CLOSE = "\n</tamp-cleared>"
_INPUT_OPEN = '{"tamp_cleared":{"page":"'
_INPUT_CLOSE = '"}}'
_CONTENT_OPEN = "<content>"
_CONTENT_CLOSE = "</content>"


def result_placeholder(page: str, note: str) -> str:
    """The text of a cleared tool result naming `page`, with `note` for the model (plugin-abi's
    `rules::clearing::result_placeholder`)."""
    return f'{_RESULT_OPEN}{page}">\n{note}{_RESULT_CLOSE}'


def input_placeholder(page: str) -> str:
    """The input of a cleared tool call naming `page`."""
    return f"{_INPUT_OPEN}{page}{_INPUT_CLOSE}"


def _is_page_id(page: str) -> bool:
    return bool(page) and all(c.isascii() and (c.isalnum() or c in "_-") for c in page)


def _result_page(text_: str):
    if not text_.startswith(_RESULT_OPEN):
        return None
    page, quote, rest = text_[len(_RESULT_OPEN):].partition('"')
    if not quote or not rest.startswith(">\n"):
        return None
    if not rest[len(">\n"):].endswith(_RESULT_CLOSE):
        return None
    return page if _is_page_id(page) else None


def _input_page(input_json: str):
    if not (input_json.startswith(_INPUT_OPEN) and input_json.endswith(_INPUT_CLOSE)):
        return None
    if len(input_json) < len(_INPUT_OPEN) + len(_INPUT_CLOSE):
        return None
    page = input_json[len(_INPUT_OPEN):len(input_json) - len(_INPUT_CLOSE)]
    return page if _is_page_id(page) else None


def cleared_page(block):
    """The page a cleared block names (plugin-abi's `rules::clearing::cleared_page`), or
    None for a block that is not a placeholder."""
    if isinstance(block, types.ContentBlock_ToolResult):
        content = block.value.content
        if len(content) == 1 and isinstance(content[0], types.ToolResultPart_Text):
            return _result_page(content[0].value)
        return None
    if isinstance(block, types.ContentBlock_ToolUse):
        return _input_page(block.value.input_json)
    return None


def wrap_content(material: str) -> str:
    """`material` as a prompt's `<content>` section, tags inside it escaped (the native SDK's
    `sdk::prompt::wrap_content`)."""
    escaped = (material.replace(_CONTENT_OPEN, "&lt;content&gt;")
               .replace(_CONTENT_CLOSE, "&lt;/content&gt;"))
    return f"{_CONTENT_OPEN}\n{escaped}\n{_CONTENT_CLOSE}"


def content_section(prompt: str) -> str:
    """The material of a prompt, as the host's offline summarizer reads it (the native SDK's
    `sdk::prompt::content_section`): what stands between the last `</content>` and the last
    `<content>` before it, without the newline `wrap_content` puts on each side; the whole
    prompt when it has no such pair. For a test of what a prompt asks about."""
    close = prompt.rfind(_CONTENT_CLOSE)
    if close < 0:
        return prompt
    open_ = prompt.rfind(_CONTENT_OPEN, 0, close)
    if open_ < 0:
        return prompt
    inner = prompt[open_ + len(_CONTENT_OPEN):close]
    for newline in ("\r\n", "\n"):
        if inner.startswith(newline):
            inner = inner[len(newline):]
            break
    for newline in ("\r\n", "\n"):
        if inner.endswith(newline):
            inner = inner[:-len(newline)]
            break
    return inner


def render_template(template: str, values) -> str:
    """`template` with each `{name}` replaced by its value in `values` (name and value pairs,
    as the WIT passes them), `{{` and `}}` writing braces (the native SDK's
    `sdk::prompt::render_template`); raises the host's `Err` (`invalid-config`) for an unknown
    placeholder or an unmatched brace."""
    known = [name for name, _ in values]
    out = []
    i = 0
    n = len(template)
    while i < n:
        c = template[i]
        if template.startswith("{{", i) or template.startswith("}}", i):
            out.append(c)
            i += 2
        elif c == "}":
            raise _plugin_error(types.ErrorKind.INVALID_CONFIG, "prompt template: unmatched `}` "
                                "(write `}}` for a literal brace)")
        elif c == "{":
            close = template.find("}", i)
            if close < 0:
                raise _plugin_error(types.ErrorKind.INVALID_CONFIG, "prompt template: unclosed "
                                    "`{` (write `{{` for a literal brace)")
            name = template[i + 1:close]
            if name not in known:
                listed = ", ".join("{" + k + "}" for k in known)
                raise _plugin_error(types.ErrorKind.INVALID_CONFIG, "prompt template: unknown "
                                    f"placeholder {{{name}}}; known: {listed}")
            # The first value given for a name, as the native SDK looks it up.
            out.append(next(v for k, v in values if k == name))
            i = close + 1
        else:
            j = n
            for brace in "{}":
                k = template.find(brace, i)
                if 0 <= k < j:
                    j = k
            out.append(template[i:j])
            i = j
    return "".join(out)


def render_messages(messages) -> str:
    """`messages` as the host renders them for a summarizer, simplified: the same lines, but
    no block cut and cleared blocks shown as their placeholders (see the module's
    docstring)."""
    names = {}
    lines = []
    for m in messages:
        role = m.role.name.lower()
        if m.summary is not None:
            said = "\n\n".join(b.value.text for b in m.content
                                if isinstance(b, types.ContentBlock_Text))
            lines.append(f"summary of earlier messages (page {m.summary.page_ref}): {said}")
            continue
        for b in m.content:
            if isinstance(b, types.ContentBlock_Text):
                lines.append(f"{role}: {b.value.text}")
            elif isinstance(b, types.ContentBlock_ToolUse):
                names[b.value.id] = b.value.name
                lines.append(f"{role} called {b.value.name}({b.value.input_json})")
            elif isinstance(b, types.ContentBlock_ToolResult):
                r = b.value
                verb = "failed" if r.is_error else "returned"
                lines.append(f"{names.get(r.tool_use_id, 'tool')} {verb}: "
                             f"{result_text(r.content)}")
            else:
                lines.append(f"{role}: [non-text content]")
    return "".join(line + "\n" for line in lines)


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
            error = e.value
        finally:
            _sdk._host = previous
        # Raised outside the `except`: an `Err` is a frozen dataclass, and unittest, cleaning
        # the traceback of a failure whose context it is, would fail on it instead of
        # reporting the failure.
        if error.kind == types.ErrorKind.PANICKED:
            raise AssertionError(f"the strategy panicked: {error.message}")
        raise _sdk.PluginError(error.kind, error.message)

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

    def input_units(self):
        return units(self.messages)

    def summary_is_smaller(self, text_, start, end):
        # The summary message as the host builds it (the native SDK's `summary_message`),
        # weighed with this fake's counts.
        replaced = self._span(start, end)
        summary = types.Message(
            types.Role.USER, [types.ContentBlock_Text(types.TextBlock(text_, ""))],
            types.SummaryInfo("", "test", types.SummaryStatus.FINAL), "")
        return self.count_message_tokens([summary]) < self.count_message_tokens(replaced)

    def render_messages(self, messages):
        return render_messages(messages)

    def wrap_content(self, material):
        return wrap_content(material)

    def render_template(self, template, values):
        return render_template(template, values)

    def result_placeholder(self, page, note):
        return result_placeholder(page, note)

    def input_placeholder(self, page):
        return input_placeholder(page)

    def cleared_page(self, block):
        return cleared_page(block)

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
