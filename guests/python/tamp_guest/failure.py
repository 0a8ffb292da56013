"""Whether a tool call failed, read from its result, as the native SDK's `sdk::failure`
reads it: the result's error flag, or, where the wire has none (an OpenAI Responses tool
output: Codex writes `Process exited with code 1`), the non-zero exit code its text reports.
Use `failed` rather than `is_error` alone, or a Responses client's failures never count.
"""

# Words that mark a line of tool output as an error (ASCII, case ignored).
ERROR_MARKS = (
    "error",
    "exception",
    "traceback",
    "failed",
    "failure",
    "fatal",
    "panicked",
    "not found",
    "denied",
    "refused",
    "no such file",
)

_I64 = 2**63


def _ascii_lower(text: str) -> str:
    return "".join(c.lower() if c.isascii() else c for c in text)


def _lines(output: str):
    return [line.strip() for line in output.split("\n")]


def _is_markup(line: str) -> bool:
    """A line that is only an output's markup (`<returncode>1</returncode>`, `<output>`)."""
    return line.startswith("<") and line.endswith(">") and " " not in line[1:-1]


def _meaningful(line: str) -> bool:
    return any(c.isalnum() for c in line) and not _is_markup(line)


def _exit_code(output: str):
    """The exit code an output reports, if it reports one."""
    lower = _ascii_lower(output)
    for marker in ("<returncode>", "exit code", "exited with code", "exit status"):
        at = lower.find(marker)
        if at < 0:
            continue
        rest = output[at + len(marker):].lstrip(" :=")
        digits = ""
        for c in rest:
            if c in "0123456789-":
                digits += c
            else:
                break
        body = digits[1:] if digits.startswith("-") else digits
        if body and body.isascii() and body.isdigit() and -_I64 <= int(digits) < _I64:
            return int(digits)
    return None


def failure_line(output: str, is_error: bool):
    """The line of a tool's output that says what went wrong, when the call failed (its
    result is marked as an error, or its output reports a non-zero exit code): the last line
    naming an error, or the output's last line; None for a success, and for a non-zero exit
    with no error in its output (`grep` finding nothing)."""
    code = _exit_code(output)
    if not is_error and (code is None or code == 0):
        return None
    lines = [line for line in _lines(output) if _meaningful(line)]
    marked = next(
        (line for line in reversed(lines)
         if any(m in _ascii_lower(line) for m in ERROR_MARKS)),
        None,
    )
    if is_error:
        if marked is not None:
            return marked
        return lines[-1] if lines else "(no output)"
    return marked


def refusal_line(output: str):
    """The first line of an output that reports no exit code, when that line names an
    error: how an editor tool says it wrote nothing."""
    first = next((line for line in _lines(output) if _meaningful(line)), None)
    if first is None:
        return None
    words = [_ascii_lower(w) for w in first.split() if not any(c in w for c in "/.\\")]
    said = " ".join(words)
    if _exit_code(output) is None and any(m in said for m in ERROR_MARKS):
        return first
    return None


def failed(output: str, is_error: bool) -> bool:
    """Whether a tool result with `output` failed (see `failure_line`)."""
    return failure_line(output, is_error) is not None
