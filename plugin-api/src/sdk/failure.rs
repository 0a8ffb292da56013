//! Whether a tool call failed, read from its result: the result's error flag, or, where the
//! wire has none (an OpenAI Responses tool output), the exit code its text reports. One
//! reading for every strategy: the ledger's open errors and the failed calls a summary names.

/// Words that mark a line of tool output as an error (ASCII, case ignored): tools write
/// their errors in English whatever the user speaks. `no such file` is the C library's
/// ENOENT message (`cat: x: No such file or directory`), the commonest failure of a shell
/// command that names no error otherwise.
const ERROR_MARKS: [&str; 11] = [
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
];

/// The line of a tool's output that says what went wrong, when the call failed: its result
/// is marked as an error, or its output reports a non-zero exit code
/// (`<returncode>1</returncode>`, `exit code 1`, `Exit status: 2`, Codex's `Process exited
/// with code 1`: an OpenAI Responses tool output has no error flag). The last line naming an
/// error, or the output's last line; `None` for a success, and for a non-zero exit with no
/// error in its output (`grep` finding nothing).
pub fn failure_line(output: &str, is_error: bool) -> Option<String> {
    // Most results succeed: settle those on the exit code before reading any line.
    if !is_error && exit_code(output).is_none_or(|code| code == 0) {
        return None;
    }
    let lines: Vec<&str> = output
        .lines()
        .map(str::trim)
        .filter(|l| l.chars().any(char::is_alphanumeric) && !is_markup(l))
        .collect();
    let marked = lines.iter().rev().find(|l| {
        let lower = l.to_ascii_lowercase();
        ERROR_MARKS.iter().any(|m| lower.contains(m))
    });
    if is_error {
        return Some(
            marked
                .or(lines.last())
                .map_or_else(|| "(no output)".to_string(), |l| l.to_string()),
        );
    }
    marked.map(|l| l.to_string())
}

/// A line that is only an output's markup (`<returncode>1</returncode>`, `<output>`).
fn is_markup(line: &str) -> bool {
    line.starts_with('<') && line.ends_with('>') && !line[1..line.len() - 1].contains(' ')
}

/// The exit code an output reports, if it reports one.
fn exit_code(output: &str) -> Option<i64> {
    // ASCII lowercasing keeps every byte offset, so a match in `lower` indexes `output`.
    let lower = output.to_ascii_lowercase();
    let after = |marker: &str| {
        let at = lower.find(marker)? + marker.len();
        let rest = output[at..].trim_start_matches([' ', ':', '=']);
        let digits: String = rest
            .chars()
            .take_while(|c| c.is_ascii_digit() || *c == '-')
            .collect();
        digits.parse().ok()
    };
    after("<returncode>")
        .or_else(|| after("exit code"))
        .or_else(|| after("exited with code"))
        .or_else(|| after("exit status"))
}

/// The first line of an output that reports no exit code, when that line names an error:
/// how an editor tool says it wrote nothing (Codex's `apply_patch verification failed: Failed
/// to read file to update …`). Only the first line, for such a tool answers in one; a
/// command's output may name errors anywhere and still have succeeded, so this reads only
/// the answers of calls that write.
pub fn refusal_line(output: &str) -> Option<String> {
    let first = output
        .lines()
        .map(str::trim)
        .find(|l| l.chars().any(char::is_alphanumeric) && !is_markup(l))?;
    // Paths and file names aside: `created /w/error.log` names no error.
    let words: Vec<String> = first
        .split_whitespace()
        .filter(|w| !w.contains(['/', '.', '\\']))
        .map(str::to_ascii_lowercase)
        .collect();
    let said = words.join(" ");
    (exit_code(output).is_none() && ERROR_MARKS.iter().any(|m| said.contains(m)))
        .then(|| first.to_string())
}

/// Whether a tool result with `output` failed (see [`failure_line`]).
pub fn failed(output: &str, is_error: bool) -> bool {
    failure_line(output, is_error).is_some()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codex_s_exit_code_line_tells_a_failure() {
        // Codex's exec_command output, as it sends it back (Responses: no error flag).
        let output = |code: u8, out: &str| {
            format!(
                "Chunk ID: 1f0c2a\nWall time: 0.0012 seconds\nProcess exited with code {code}\n\
                 Original token count: 9\nOutput:\n{out}"
            )
        };
        let missing = "cat: missing-1.txt: No such file or directory\n";
        assert_eq!(
            failure_line(&output(1, missing), false).as_deref(),
            Some("cat: missing-1.txt: No such file or directory")
        );
        assert_eq!(failure_line(&output(0, "step 1\n"), false), None);
        // grep finding nothing: a non-zero exit, no error.
        assert_eq!(failure_line(&output(1, ""), false), None);
    }

    #[test]
    fn an_editor_tool_that_says_it_failed_wrote_nothing() {
        // Codex 0.171's answer to an apply_patch on a file that is not there, as captured.
        let refused = "apply_patch verification failed: Failed to read file to update \
                       /w/nothere.txt: No such file or directory (os error 2)";
        assert_eq!(refusal_line(refused).as_deref(), Some(refused));
        assert_eq!(
            refusal_line("Success. Updated the following files:\nM /w/a.txt\n"),
            None
        );
        assert_eq!(
            refusal_line("File created successfully at: /w/error.log"),
            None
        );
    }

    #[test]
    fn a_flagged_result_failed_whatever_it_says() {
        assert_eq!(failure_line("", true).as_deref(), Some("(no output)"));
        assert_eq!(
            failure_line("line one\nTraceback: boom\nlast", true).as_deref(),
            Some("Traceback: boom")
        );
        assert!(failed("<returncode>2</returncode>\nerror: bad flag", false));
        assert!(!failed(
            "<returncode>0</returncode>\nerror: in the log, not a failure",
            false
        ));
    }
}
