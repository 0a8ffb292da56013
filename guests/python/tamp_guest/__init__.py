"""tamp's guest SDK for Python: a compaction strategy as a WebAssembly component.

A strategy subclasses `Strategy`, and the app module binds the class componentize-py
looks for to `export(...)` of it::

    import tamp_guest as tamp

    class Noop(tamp.Strategy):
        NAME = "noop"
        VERSION = "0.1.0"
        DESCRIPTION = "Leaves every conversation as it is."

        def compact(self, c):
            return tamp.unchanged("nothing to do")

    Strategy = tamp.export(Noop)

It is built by `tamp-guest build app.py -o strategy.wasm` (componentize-py, pinned, against
the WIT package shipped in `tamp_guest/wit`, with WASI stubbed out): the host gives a guest
no filesystem, network, environment or clock, only the functions of `tamp:strategy/host`,
which this module wraps (`count_tokens`, `complete`, ...). The host also renders what must
read the same for every guest and every native strategy (prompts: `render_messages`,
`wrap_content`, `render_template`; clearings' placeholders: `tamp_guest.clearing`), so the
SDK keeps no copy of those rules. `tamp_guest.testing` runs a strategy in plain CPython
against a fake host, for its unit tests. See docs/writing-a-plugin.md, "A WebAssembly
strategy".

The conversation arrives as the WIT types of `wit_world.imports.types`, re-exported here
(`Message`, `ContentBlock_ToolResult`, `Unit`, ...). `compactable` is the range of messages a
stage may change (the native SDK's `sdk::compactable_range`, computed by the host), and
`units()` how its messages group (a tool call with its results), as the host checks edits.
"""

import json
import sys
import traceback

from ._bindings import IN_COMPONENT as _IN_COMPONENT
from ._bindings import Err, Ok, exports, types
from ._bindings import host as _host_bindings
from wit_world.imports.types import (  # noqa: F401  (re-exported for strategies)
    Budget,
    ClearEdit,
    CompactOutcome,
    ContentBlock_Opaque,
    ContentBlock_Text,
    ContentBlock_ToolResult,
    ContentBlock_ToolUse,
    Edit_Clear,
    Edit_Finalize,
    Edit_Replace,
    Edit_Summarize,
    ErrorKind,
    FinalizeEdit,
    LlmRequest,
    LlmResponse,
    Message,
    ReplaceEdit,
    Role,
    Span,
    StageReport,
    SummarizeEdit,
    SummaryInfo,
    SummaryStatus,
    TextBlock,
    ToolResult,
    ToolResultPart_Opaque,
    ToolResultPart_Text,
    ToolUse,
    Unit,
    UnitKind,
)

# The host's services: the component's imports, or a fake host in plain CPython
# (`tamp_guest.testing`).
_host = _host_bindings


_stand_in = None


def _renderings():
    """The host that renders prompts and placeholders. The WIT lets a guest ask for those at
    any time, not only during `compact`; in plain CPython outside a fake host's `compact`
    (a unit test building a strategy, or checking a placeholder) there is no host to ask, so
    a fake one answers (one, made on first use): its renderings are the host's, exactly, but
    for a simpler `render_messages` (see `tamp_guest.testing`)."""
    global _stand_in
    if _host is _host_bindings and not _IN_COMPONENT:
        if _stand_in is None:
            from .testing import FakeHost

            _stand_in = FakeHost()
        return _stand_in
    return _host


def _raised(e) -> "PluginError":
    """The `PluginError` a host service's `Err` answer stands for, to raise."""
    return PluginError(e.value.kind, e.value.message)


from . import clearing  # noqa: E402,F401  (tamp_guest.clearing)
from .config import Boolean, Config, Integer, String, StringList  # noqa: E402,F401
from .failure import failed, failure_line, refusal_line  # noqa: E402,F401
from .groups import (  # noqa: E402,F401
    Group,
    ToolActivity,
    adjacent_runs,
    result_text,
    tool_activity,
    units_within,
)
from .pinned import BOUNDARY, OPAQUE, is_boundary, is_instructions, is_pinned  # noqa: E402,F401
from .prompt import (  # noqa: E402,F401
    cap_chars,
    render_messages,
    render_template,
    trim,
    wrap_content,
)


class PluginError(Exception):
    """An error the strategy returns: the stage is rolled back and the report says why.
    Also what a host service raises (`complete`, ...), or `complete_all` answers, when it
    fails. `str()` reads `kind: message` (`llm: timed out`), as the native error displays."""

    def __init__(self, kind: ErrorKind, message: str):
        super().__init__(message)
        self.kind = kind
        self.message = message

    def __str__(self):
        return f"{self.kind.name.lower()}: {self.message}"


def invalid_config(message: str) -> PluginError:
    return PluginError(ErrorKind.INVALID_CONFIG, message)


def invalid_input(message: str) -> PluginError:
    return PluginError(ErrorKind.INVALID_INPUT, message)


def internal(message: str) -> PluginError:
    return PluginError(ErrorKind.INTERNAL, message)


class Compaction:
    """A stage's input: the conversation (`messages`, `message_count`), the budget, the
    stage's name, and `compactable`, the `range` of messages the stage may change.

    The messages are copied from the host when first read (`messages` reads them all;
    `read(start, end)` a slice): a stage that decides from the budget alone pays nothing for
    a long conversation."""

    __slots__ = ("message_count", "budget", "stage", "thread_id", "compactable", "_messages",
                 "_units")

    def __init__(self, request):
        self.message_count = request.message_count
        self.budget = request.budget
        self.stage = request.stage
        self.thread_id = request.thread_id
        self.compactable = range(request.compactable.start, request.compactable.end)
        self._messages = None
        self._units = None

    @property
    def messages(self) -> list:
        """Every input message, read from the host once."""
        if self._messages is None:
            self._messages = _host.input_messages(0, self.message_count)
        return self._messages

    def read(self, start: int, end: int) -> list:
        """Input messages `start..end`."""
        if self._messages is not None:
            return self._messages[start:end]
        return _host.input_messages(start, end)

    def message_tokens(self, start: int, end: int) -> list:
        """Tokens of each input message in `start..end`, as the host counts them against the
        budget: the host's cached counts (it counted them already), fetched in one call.
        Cheaper than `count_message_tokens` on messages read into the guest, and the same
        numbers."""
        return list(_host.input_message_tokens(start, end))

    def page_id(self, start: int, end: int = None) -> str:
        """The id of the page that holds exactly input messages `start..end` (`start`
        alone when `end` is omitted): `pg_` and 32 hex digits, the content address the host
        archives those messages under. A clearing of message `i` names `page_id(i)`; size
        its placeholders with it too (`clearing.result_placeholder_tokens`)."""
        try:
            return _host.input_page_id(start, start + 1 if end is None else end)
        except Err as e:
            raise _raised(e) from None

    def units(self) -> list:
        """The input's units, in order, covering it (`Unit`: a `span` with `start` and `end`,
        and a `kind`): a tool call's message through the last message answering its calls is
        one `UnitKind.TOOL_EXCHANGE`, whatever stands between; a summary, `SUMMARY`; a
        system message, an opaque unit or a run holding one, `PINNED`; any other message,
        `MESSAGE`. The host's rule, the one it checks edits by: a span that cuts a unit is
        refused. Read from the host once."""
        if self._units is None:
            self._units = list(_host.input_units())
        return self._units

    def summary_is_smaller(self, text: str, start: int, end: int) -> bool:
        """Whether a summary of `text` in place of input messages `start..end` costs fewer
        tokens than they do, the summary message counted as the host will build it: a
        summary as long as what it replaces saves nothing (and the host refuses a stage whose
        edits grow the conversation)."""
        try:
            return _host.summary_is_smaller(text, start, end)
        except Err as e:
            raise _raised(e) from None

    def pinned(self) -> list:
        """The indexes of the input messages no stage may summarize, replace, clear or move
        (`is_pinned`: instructions and opaque units). `compactable` already leaves out the
        pinned messages at its start; those inside it a strategy must step over."""
        return [i for i, m in enumerate(self.messages) if is_pinned(m)]


class Strategy:
    """What a strategy defines: `NAME` (lowercase letters, digits, `-`, `_`), `VERSION`
    (semver), `DESCRIPTION`, and `CONFIG`, its config declared once (`Config(Integer(...),
    ...)`), from which the schema the host shows (`CONFIG.schema()`), the default config and
    the checks all derive. `__init__(config)` gets the stage's config; the base class's
    checks it against `CONFIG` (raising `invalid_config`) and sets `self.config`, the
    values with the defaults filled in. `compact(compaction)` returns an outcome
    (`unchanged`, `with_edits`). A config `Config` cannot declare may instead be given as
    `CONFIG_SCHEMA` (a JSON Schema, as a dict) and `DEFAULT_CONFIG`, with `__init__` checking
    it."""

    NAME = ""
    VERSION = "0.1.0"
    DESCRIPTION = ""
    CONFIG = Config()

    def __init__(self, config: dict):
        self.config = self.CONFIG.parse(config)

    def compact(self, compaction: Compaction) -> CompactOutcome:
        raise NotImplementedError


def unchanged(reason: str, warnings=()) -> CompactOutcome:
    """The stage did nothing, for `reason` (with `warnings`: what went wrong on the way, a
    failed LLM call, say)."""
    return CompactOutcome([], StageReport(False, reason, list(warnings), ""))


def with_edits(edits, reason: str, warnings=(), details=None) -> CompactOutcome:
    """The stage asks for `edits` (`Edit_*` values): it acted, for `reason`."""
    details_json = (json.dumps(details, separators=(",", ":"), sort_keys=True)
                    if details is not None else "")
    return CompactOutcome(list(edits), StageReport(True, reason, list(warnings), details_json))


def summarize(start: int, end: int, text: str, metadata=None) -> Edit_Summarize:
    """Replace messages `start..end` by a final summary `text`; the host archives them."""
    metadata_json = json.dumps(metadata, separators=(",", ":")) if metadata is not None else ""
    return Edit_Summarize(SummarizeEdit(Span(start, end), text, SummaryStatus.FINAL, metadata_json))


# ------------------------------------------------------------------------------------------
# Host services. Each is valid while `compact` runs (the host traps a call at any other
# time), but `log`, which works from `__init__` too.


def count_tokens(text: str) -> int:
    """Tokens in `text`, with the chain's tokenizer."""
    return _host.count_tokens(text)


def count_message_tokens(messages) -> int:
    """Tokens of `messages` as the host counts them against the budget."""
    return _host.count_message_tokens(list(messages))


def llm_request(system: str, prompt: str, max_output_tokens: int, label: str = "",
                temperature=None, response_schema=None) -> LlmRequest:
    """A request for `complete_all` (`complete` takes the same arguments): `label` names it
    in logs and progress, `response_schema` (a JSON Schema, as a dict) asks for structured
    output."""
    schema = json.dumps(response_schema) if response_schema is not None else None
    return LlmRequest(system, prompt, max_output_tokens, temperature, schema, label)


def complete(system: str, prompt: str, max_output_tokens: int, label: str = "",
             temperature=None, response_schema=None) -> LlmResponse:
    """One LLM call through the host (its provider, retries, timeout and cache); raises
    `PluginError` when it fails."""
    request = llm_request(system, prompt, max_output_tokens, label, temperature,
                          response_schema)
    try:
        return _host.complete(request)
    except Err as e:
        raise _raised(e) from None


def complete_all(requests, max_concurrency: int = 0) -> list:
    """Many LLM calls (`llm_request` values), at most `max_concurrency` at once (0: the
    host's limit): the answers in request order, each an `LlmResponse` or, for a call that
    failed, a `PluginError` (returned, not raised: the other answers stand)."""
    answers = []
    for answer in _host.complete_all(list(requests), max_concurrency):
        if isinstance(answer, Ok):
            answers.append(answer.value)
        else:
            answers.append(PluginError(answer.value.kind, answer.value.message))
    return answers


def archive_page(messages, metadata=None) -> str:
    """Archives `messages` under this strategy's name; returns the page id."""
    metadata_json = json.dumps(metadata, separators=(",", ":")) if metadata is not None else ""
    try:
        return _host.archive_page(list(messages), metadata_json)
    except Err as e:
        raise _raised(e) from None


def progress(done: int, total: int, message: str) -> None:
    _host.progress(done, total, message)


class _Log:
    def error(self, message: str) -> None:
        _host.log(_host_bindings.LogLevel.ERROR, message)

    def warn(self, message: str) -> None:
        _host.log(_host_bindings.LogLevel.WARN, message)

    def info(self, message: str) -> None:
        _host.log(_host_bindings.LogLevel.INFO, message)

    def debug(self, message: str) -> None:
        _host.log(_host_bindings.LogLevel.DEBUG, message)


log = _Log()


class _ToLog:
    """`print` and tracebacks go to the host's log: a guest has no stdout (its WASI is
    stubbed), and writing there would trap."""

    def __init__(self, level):
        self._level = level
        self._line = ""

    def write(self, text: str) -> int:
        self._line += text
        while "\n" in self._line:
            line, self._line = self._line.split("\n", 1)
            if line:
                _host.log(self._level, line)
        return len(text)

    def flush(self) -> None:
        pass


# ------------------------------------------------------------------------------------------
# The export componentize-py calls.


def _error(e: BaseException) -> Err:
    """Any exception that is not a `PluginError` is a bug in the strategy: reported as
    `panicked` with its traceback, as the native SDK reports a panic."""
    if isinstance(e, PluginError):
        return Err(types.PluginError(e.kind, e.message))
    text = "".join(traceback.format_exception(type(e), e, e.__traceback__)).strip()
    return Err(types.PluginError(ErrorKind.PANICKED, text))


def _schema(strategy_class) -> dict:
    schema = getattr(strategy_class, "CONFIG_SCHEMA", None)
    return schema if schema is not None else strategy_class.CONFIG.schema()


def _defaults(strategy_class) -> dict:
    defaults = getattr(strategy_class, "DEFAULT_CONFIG", None)
    return defaults if defaults is not None else strategy_class.CONFIG.defaults()


def export(strategy_class):
    """The class componentize-py exports for `strategy_class`: bind it to `Strategy` in the
    app module (`Strategy = tamp_guest.export(MyStrategy)`)."""

    class _Export(exports.Strategy):
        # One strategy per component instance: the host builds it once with the stage's
        # config, then runs one `compact` at a time on this instance.
        _instance = None

        def info(self):
            return types.PluginInfo(
                strategy_class.NAME,
                strategy_class.VERSION,
                strategy_class.DESCRIPTION,
                json.dumps(_schema(strategy_class)),
                json.dumps(_defaults(strategy_class)),
            )

        def new_strategy(self, config_json: str) -> None:
            if _IN_COMPONENT and _host is _host_bindings:  # a fake host leaves stdout be
                sys.stdout = _ToLog(_host_bindings.LogLevel.INFO)
                sys.stderr = _ToLog(_host_bindings.LogLevel.WARN)
            try:
                config = json.loads(config_json)
            except ValueError as e:
                raise Err(types.PluginError(ErrorKind.INVALID_CONFIG, f"config is not JSON: {e}"))
            if not isinstance(config, dict):
                raise Err(types.PluginError(
                    ErrorKind.INVALID_CONFIG,
                    f"config: expected an object, got {type(config).__name__}",
                ))
            try:
                _Export._instance = strategy_class(config)
            except BaseException as e:  # noqa: BLE001 (every failure becomes an error)
                raise _error(e) from None

        def compact(self, request):
            if _Export._instance is None:
                raise Err(types.PluginError(ErrorKind.INTERNAL, "compact before new-strategy"))
            try:
                return _Export._instance.compact(Compaction(request))
            except BaseException as e:  # noqa: BLE001
                raise _error(e) from None

    return _Export
