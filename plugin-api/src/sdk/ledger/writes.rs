//! The files a tool call writes, read from its input alone: an editor tool's path and
//! operation (`str_replace_editor`, `Write`, `Edit`, `apply_patch`), or a shell command's
//! redirections and the commands that write the files they name (`sed -i`, `tee`, `cp`,
//! `mv`, `touch`, `rm`). Nothing here reads a language: a tool call is structure.

use std::collections::HashSet;

use crate::serde_json::Value;

/// A file a call writes, and how (`sed -i`, `cat >`, `str_replace`, …).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Write {
    pub path: String,
    pub how: String,
}

/// Keys that hold the file an editor tool works on.
const PATH_KEYS: [&str; 5] = ["path", "file_path", "filename", "file", "target_file"];
/// Keys that hold an editor tool's operation.
const OPERATION_KEYS: [&str; 4] = ["command", "operation", "action", "mode"];
/// Keys that hold a shell command.
const COMMAND_KEYS: [&str; 3] = ["command", "cmd", "script"];
/// Words of an operation (or a tool's name) that write a file.
const WRITING: [&str; 12] = [
    "create",
    "write",
    "overwrite",
    "replace",
    "insert",
    "edit",
    "append",
    "patch",
    "apply",
    "delete",
    "save",
    "update",
];

/// The files the call `name(input_json)` writes, in the order it names them.
///
/// A freeform tool's input is its text, not JSON (an OpenAI Responses `custom_tool_call`:
/// Codex's `apply_patch` sends its patch so); such an input is read as a patch.
pub fn writes(name: &str, input_json: &str) -> Vec<Write> {
    let input: Value = match crate::serde_json::from_str(input_json) {
        Ok(Value::Object(map)) => Value::Object(map),
        // A bare string is a command line (a shell tool given its command as is).
        Ok(Value::String(s)) => return shell_writes(&s),
        Ok(_) => return Vec::new(),
        Err(_) => return patch_writes(input_json),
    };
    let field = |keys: &[&str]| {
        keys.iter()
            .find_map(|k| input.get(*k).and_then(Value::as_str))
    };
    let lower_name = name.to_ascii_lowercase();
    if let Some(path) = field(&PATH_KEYS) {
        // An editor: its operation, or else its name, says whether it writes.
        let operation = field(&OPERATION_KEYS).unwrap_or(name);
        let lower = operation.to_ascii_lowercase();
        if WRITING.iter().any(|w| lower.contains(w)) && !path.trim().is_empty() {
            return vec![Write {
                path: path.trim().to_string(),
                how: operation.to_string(),
            }];
        }
        return Vec::new();
    }
    for key in ["patch", "input", "diff"] {
        if let Some(patch) = input.get(key).and_then(Value::as_str) {
            let found = patch_writes(patch);
            if !found.is_empty() {
                return found;
            }
        }
    }
    if lower_name.contains("patch") {
        return Vec::new();
    }
    match field(&COMMAND_KEYS) {
        Some(command) => shell_writes(command),
        None => Vec::new(),
    }
}

/// Files an `apply_patch` envelope (`*** Update File: path`) or a unified diff (`+++ b/path`)
/// writes.
fn patch_writes(patch: &str) -> Vec<Write> {
    let mut out = Found::default();
    for line in patch.lines() {
        let found = [
            ("*** Add File: ", "add"),
            ("*** Update File: ", "update"),
            ("*** Delete File: ", "delete"),
            ("+++ b/", "patch"),
        ]
        .into_iter()
        .find_map(|(prefix, how)| line.strip_prefix(prefix).map(|p| (p.trim(), how)));
        if let Some((path, how)) = found {
            if !path.is_empty() && path != "/dev/null" {
                out.push_new(path, how);
            }
        }
    }
    out.writes
}

/// Writes in the order found, each path once (the first way it was written). A set of the
/// paths seen, for one command may name tens of thousands (`rm f1 … f50000`).
#[derive(Default)]
struct Found {
    writes: Vec<Write>,
    seen: HashSet<String>,
}

impl Found {
    fn push_new(&mut self, path: &str, how: &str) {
        if self.seen.insert(path.to_string()) {
            self.writes.push(Write {
                path: path.to_string(),
                how: how.to_string(),
            });
        }
    }
}

/// Files a shell command line writes: redirection targets, and the files `sed -i`, `tee`,
/// `cp`, `mv` (their destination), `touch` and `rm` name. Here-document bodies are skipped.
pub fn shell_writes(command: &str) -> Vec<Write> {
    let mut out = Found::default();
    let mut heredoc_end: Option<String> = None;
    for line in command.lines() {
        if let Some(end) = &heredoc_end {
            if line.trim() == end {
                heredoc_end = None;
            }
            continue;
        }
        for simple in split_commands(line) {
            let words = shell_words(&simple);
            heredoc_end = heredoc_end.or_else(|| heredoc_delimiter(&words));
            let program = words
                .iter()
                .map(String::as_str)
                .find(|w| !w.contains('=') || w.starts_with('-'))
                .unwrap_or("");
            let program = program.rsplit('/').next().unwrap_or(program);
            for (target, op) in redirections(&words) {
                out.push_new(&target, &format!("{program} {op}"));
            }
            let args: Vec<&str> = words
                .iter()
                .map(String::as_str)
                .skip_while(|w| *w != program && !w.ends_with(&format!("/{program}")))
                .skip(1)
                .take_while(|w| !is_redirection(w))
                .collect();
            for path in command_writes(program, &args) {
                let how = if program == "sed" { "sed -i" } else { program };
                out.push_new(path, how);
            }
        }
    }
    let mut writes = out.writes;
    writes.retain(|w| is_file_target(&w.path));
    writes
}

/// A redirection operator as a word of its own (`>`, `>>`, `2>`, `&>`), or a word starting
/// with one (`>out.txt`).
fn is_redirection(word: &str) -> bool {
    let w = word.trim_start_matches(|c: char| c.is_ascii_digit() || c == '&');
    w.starts_with('>') || w.starts_with('<')
}

/// The files a command's redirections write (`> f`, `>> f`, `2> f`, `>f`), and the operator.
fn redirections(words: &[String]) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < words.len() {
        let w = words[i].trim_start_matches(|c: char| c.is_ascii_digit() || c == '&');
        if let Some(rest) = w.strip_prefix('>') {
            let (op, rest) = match rest.strip_prefix('>') {
                Some(r) => (">>", r),
                None => (">", rest.strip_prefix('|').unwrap_or(rest)),
            };
            let target = if rest.is_empty() {
                i += 1;
                words.get(i).cloned().unwrap_or_default()
            } else {
                rest.to_string()
            };
            if !target.starts_with('&') {
                out.push((target, op.to_string()));
            }
        }
        i += 1;
    }
    out
}

/// The files `program args` writes by itself (not by a redirection).
fn command_writes<'a>(program: &str, args: &[&'a str]) -> Vec<&'a str> {
    let sed = matches!(program, "sed" | "gsed");
    // Operands: the arguments that are no option, nor the value of sed's `-e`/`-f` (a script).
    let mut operands: Vec<&str> = Vec::new();
    let mut value_of_option = false;
    for a in args {
        if std::mem::take(&mut value_of_option) {
            continue;
        }
        if sed && (*a == "-e" || *a == "-f") {
            value_of_option = true;
        } else if !a.starts_with('-') {
            operands.push(a);
        }
    }
    match program {
        "sed" | "gsed" => {
            let in_place = args
                .iter()
                .any(|a| *a == "-i" || a.starts_with("-i") || a.starts_with("--in-place"));
            if !in_place {
                return Vec::new();
            }
            // The script is the first operand unless given with -e or -f.
            let scripted = args.iter().any(|a| *a == "-e" || *a == "-f");
            operands.into_iter().skip(usize::from(!scripted)).collect()
        }
        "tee" | "touch" | "rm" => operands,
        "cp" | "mv" | "install" | "ln" => match operands.as_slice() {
            [_, .., last] => vec![*last],
            _ => Vec::new(),
        },
        _ => Vec::new(),
    }
}

/// The delimiter of a here-document the command opens (`<< 'EOF'`, `<<-EOF`).
fn heredoc_delimiter(words: &[String]) -> Option<String> {
    let at = words
        .iter()
        .position(|w| w.starts_with("<<") && !w.starts_with("<<<"))?;
    let attached = words[at].trim_start_matches("<<").trim_start_matches('-');
    let delimiter = if attached.is_empty() {
        words.get(at + 1)?.as_str()
    } else {
        attached
    };
    let delimiter = delimiter.trim_matches(['\'', '"']);
    (!delimiter.is_empty()).then(|| delimiter.to_string())
}

/// Whether a redirection or command target is a file worth listing: not a descriptor, a
/// device, a variable or a glob.
fn is_file_target(path: &str) -> bool {
    !path.is_empty()
        && !path.starts_with("/dev/")
        && !path.starts_with('&')
        && !path.contains(['$', '*', '?', '`', '(', ')'])
        && path.chars().any(char::is_alphanumeric)
}

/// `line` cut into simple commands at `&&`, `||`, `;` and `|` outside quotes.
fn split_commands(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut current = String::new();
    let mut quote: Option<char> = None;
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match quote {
            Some(q) => {
                if c == q {
                    quote = None;
                } else if c == '\\' && q == '"' {
                    current.push(c);
                    if let Some(n) = chars.next() {
                        current.push(n);
                    }
                    continue;
                }
                current.push(c);
            }
            None => match c {
                '\'' | '"' => {
                    quote = Some(c);
                    current.push(c);
                }
                ';' => out.push(std::mem::take(&mut current)),
                '&' if chars.peek() == Some(&'&') => {
                    chars.next();
                    out.push(std::mem::take(&mut current));
                }
                // `>|` forces a redirection; any other `|` is a pipe or `||`.
                '|' if !current.ends_with('>') => {
                    if chars.peek() == Some(&'|') {
                        chars.next();
                    }
                    out.push(std::mem::take(&mut current));
                }
                _ => current.push(c),
            },
        }
    }
    out.push(current);
    out.retain(|c| !c.trim().is_empty());
    out
}

/// The words of a simple command, quotes removed (no expansion).
fn shell_words(command: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut current = String::new();
    let mut started = false;
    let mut quote: Option<char> = None;
    let mut chars = command.chars();
    while let Some(c) = chars.next() {
        match quote {
            Some(q) if c == q => quote = None,
            Some('"') if c == '\\' => {
                if let Some(n) = chars.next() {
                    current.push(n);
                }
            }
            Some(_) => current.push(c),
            None if c == '\'' || c == '"' => {
                quote = Some(c);
                started = true;
            }
            None if c.is_whitespace() => {
                if started || !current.is_empty() {
                    words.push(std::mem::take(&mut current));
                    started = false;
                }
            }
            None => current.push(c),
        }
    }
    if started || !current.is_empty() {
        words.push(current);
    }
    words
}

#[cfg(test)]
mod tests {
    use super::*;

    fn paths(name: &str, input: &str) -> Vec<(String, String)> {
        writes(name, input)
            .into_iter()
            .map(|w| (w.path, w.how))
            .collect()
    }

    fn pair(path: &str, how: &str) -> (String, String) {
        (path.to_string(), how.to_string())
    }

    #[test]
    fn shell_commands_that_write_files() {
        let cmd = |c: &str| {
            paths(
                "bash",
                &crate::serde_json::json!({ "command": c }).to_string(),
            )
        };
        assert_eq!(
            cmd("cd /testbed && sed -i 's/a/b/' setup.cfg"),
            [pair("setup.cfg", "sed -i")]
        );
        assert_eq!(
            cmd("cd /testbed && cat > debug_test.py << 'EOF'\nprint('x > y')\nEOF\npython debug_test.py"),
            [pair("debug_test.py", "cat >")]
        );
        assert_eq!(
            cmd("cp astroid/modutils.py astroid/modutils.py.bak && git diff a.py > patch.txt 2>&1"),
            [
                pair("astroid/modutils.py.bak", "cp"),
                pair("patch.txt", "git >")
            ]
        );
        assert_eq!(
            cmd("echo 'import os' >> src/project/file.py; tee -a log.txt < in.txt | wc -l"),
            [
                pair("src/project/file.py", "echo >>"),
                pair("log.txt", "tee")
            ]
        );
        assert_eq!(
            cmd("sed -n '1,5p' a.py; grep -r x . > /dev/null; ls -la; python - <<EOF\nopen('x','w')\nEOF"),
            []
        );
        assert_eq!(
            cmd("rm -f build/out.o && touch done.flag"),
            [pair("build/out.o", "rm"), pair("done.flag", "touch")]
        );
        assert_eq!(cmd("echo $X > \"$OUT\""), []);
        assert_eq!(
            cmd("sed -i.bak -e 's/x/y/' -e 's/a/b/' lib/one.py lib/two.py"),
            [pair("lib/one.py", "sed -i"), pair("lib/two.py", "sed -i")]
        );
    }

    #[test]
    fn editor_tools_write_when_their_operation_does() {
        let view = r#"{"command": "view", "path": "/repo/src/a.py"}"#;
        assert!(paths("str_replace_editor", view).is_empty());
        let edit = r#"{"command": "str_replace", "path": "/repo/src/a.py", "old_str": "x", "new_str": "y"}"#;
        assert_eq!(
            paths("str_replace_editor", edit),
            [pair("/repo/src/a.py", "str_replace")]
        );
        assert_eq!(
            paths(
                "Write",
                r#"{"file_path": "src/b.rs", "content": "fn main() {}"}"#
            ),
            [pair("src/b.rs", "Write")]
        );
        assert!(paths("Read", r#"{"file_path": "src/b.rs"}"#).is_empty());
        let patch = "*** Begin Patch\n*** Update File: src/c.py\n@@\n-a\n+b\n*** Add File: src/d.py\n+x\n*** End Patch";
        assert_eq!(
            paths(
                "apply_patch",
                &crate::serde_json::json!({ "input": patch }).to_string()
            ),
            [pair("src/c.py", "update"), pair("src/d.py", "add")]
        );
        assert!(paths("bash", "not json").is_empty());
    }

    #[test]
    fn a_freeform_patch_names_its_files() {
        // Codex's `apply_patch` is a custom tool: its input is the patch itself, not JSON.
        let patch = "*** Begin Patch\n*** Add File: /work/step-1.txt\n+step 1\n*** Update File: src/e.rs\n@@\n-a\n+b\n*** End Patch\n";
        assert_eq!(
            paths("apply_patch", patch),
            [pair("/work/step-1.txt", "add"), pair("src/e.rs", "update")]
        );
        let diff = "--- a/lib/f.py\n+++ b/lib/f.py\n@@ -1 +1 @@\n-x\n+y\n";
        assert_eq!(paths("edit", diff), [pair("lib/f.py", "patch")]);
        assert!(paths("notes", "*** not a patch: /work/g.txt").is_empty());
    }
}
