//! What a run of messages says that a summary must carry verbatim: the user's words, the
//! decisions the assistant states, the files its tool calls write and the errors no later
//! call fixed.

use std::collections::HashMap;

use super::writes::writes;
use super::{Entry, Kind, MAX_ENTRY_CHARS, MAX_INPUT_CHARS};
use crate::conversation::{ContentBlock, Message, Role};
use crate::sdk::failure::{failure_line, refusal_line};
use crate::sdk::harness::without_harness_context;
use crate::sdk::prompt::result_text;
use crate::sdk::statements::{read_decision, sentences, Reading};
use crate::sdk::summary::cap_chars;

/// What [`extract`] found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Extracted {
    /// In message order.
    pub entries: Vec<Entry>,
    /// The assistant's statements in a language whose decisions are not read.
    pub unread: usize,
    /// The calls (their [`call_signature`]) that succeeded: an earlier error of the same call
    /// is fixed.
    pub succeeded: Vec<String>,
}

/// A call as an error entry names it: `name(input)`, the input on one line and cut.
pub fn call_signature(name: &str, input_json: &str) -> String {
    format!("{name}({})", one_line(input_json, MAX_INPUT_CHARS))
}

/// `text` on one line (whitespace runs made one space), cut to `max` characters with `…`.
pub fn one_line(text: &str, max: usize) -> String {
    let joined = text.split_whitespace().collect::<Vec<_>>().join(" ");
    cap_chars(&joined, max)
}

/// A call waiting for its result.
struct Call<'a> {
    message: usize,
    name: &'a str,
    input_json: &'a str,
}

/// The entries of `messages` (numbered from 0, as in the page that will hold them), leaving
/// summaries out (their ledgers are carried, not read again).
pub fn extract(messages: &[Message]) -> Extracted {
    let mut found: Vec<Option<Entry>> = Vec::new();
    let mut out = Extracted::default();
    let mut calls: HashMap<&str, Call> = HashMap::new();
    // The open error of each call signature: its index in `found`.
    let mut open_errors: HashMap<String, usize> = HashMap::new();
    for (index, message) in messages.iter().enumerate() {
        if message.is_summary() {
            continue;
        }
        let said = said_text(message);
        match message.role {
            Role::User if !said.trim().is_empty() => found.push(Some(Entry {
                kind: Kind::User,
                message: index,
                text: one_line(&said, MAX_ENTRY_CHARS),
            })),
            Role::Assistant => {
                for sentence in sentences(&said) {
                    match read_decision(sentence) {
                        Reading::Decision => found.push(Some(Entry {
                            kind: Kind::Decision,
                            message: index,
                            text: one_line(sentence, MAX_ENTRY_CHARS),
                        })),
                        Reading::Unread => out.unread += 1,
                        Reading::NotADecision => {}
                    }
                }
            }
            _ => {}
        }
        for block in message.content.iter() {
            match block {
                ContentBlock::ToolUse {
                    id,
                    name,
                    input_json,
                    ..
                } => {
                    calls.insert(
                        id.as_str(),
                        Call {
                            message: index,
                            name: name.as_str(),
                            input_json: input_json.as_str(),
                        },
                    );
                }
                ContentBlock::ToolResult {
                    tool_use_id,
                    content,
                    is_error,
                    ..
                } => {
                    let Some(call) = calls.remove(tool_use_id.as_str()) else {
                        continue;
                    };
                    let result = result_text(content);
                    let output = without_harness_context(&result);
                    let signature = call_signature(call.name, call.input_json);
                    let written = writes(call.name, call.input_json);
                    // An editor tool reports no exit code: one that says it failed did not
                    // write (Codex's `apply_patch verification failed: …`).
                    let failure = failure_line(&output, *is_error).or_else(|| {
                        if written.is_empty() {
                            None
                        } else {
                            refusal_line(&output)
                        }
                    });
                    match failure {
                        Some(line) => {
                            let at = found.len();
                            found.push(Some(Entry {
                                kind: Kind::Error,
                                message: index,
                                text: format!(
                                    "{signature} failed: {}",
                                    one_line(&line, MAX_ENTRY_CHARS)
                                ),
                            }));
                            if let Some(earlier) = open_errors.insert(signature, at) {
                                // The same call failing again: the newer error stands for it.
                                found[earlier] = None;
                            }
                        }
                        None => {
                            for w in written {
                                found.push(Some(Entry {
                                    kind: Kind::File,
                                    message: call.message,
                                    text: format!("{} ({})", w.path, w.how),
                                }));
                            }
                            if let Some(fixed) = open_errors.remove(&signature) {
                                found[fixed] = None;
                            }
                            if !out.succeeded.contains(&signature) {
                                out.succeeded.push(signature);
                            }
                        }
                    }
                }
                _ => {}
            }
        }
    }
    out.entries = found.into_iter().flatten().collect();
    // File entries are found at their result but come from their call's message.
    out.entries.sort_by_key(|e| e.message);
    out
}

/// The words of a message, tool results, opaque blocks and what the agent's harness added
/// aside.
fn said_text(message: &Message) -> String {
    message
        .content
        .iter()
        .filter_map(ContentBlock::as_text)
        .map(without_harness_context)
        .filter(|text| !text.trim().is_empty())
        .collect::<Vec<_>>()
        .join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conversation::SummaryStatus;
    use crate::sdk::summary::summary_message;

    /// An assistant message making one call of `name` with `input` as its input text.
    fn tool_call(id: &str, name: &str, input: String) -> Message {
        Message::new(
            Role::Assistant,
            vec![ContentBlock::tool_use(id, name, input)],
        )
    }

    fn call(id: &str, command: &str) -> Message {
        tool_call(
            id,
            "bash",
            crate::serde_json::json!({ "command": command }).to_string(),
        )
    }

    fn result(id: &str, text: &str) -> Message {
        Message::new(Role::User, vec![ContentBlock::tool_result(id, text, false)])
    }

    #[test]
    fn the_user_decisions_files_and_open_errors_in_message_order() {
        let messages = vec![
            Message::text(Role::User, "Use Decimal for   every amount,\nnever float."),
            Message::text(
                Role::Assistant,
                "Let me look. Decision D-001: we will keep the old column order, because \
                 consumers depend on it. It fails because the cache is stale.",
            ),
            call("c1", "cd /repo && sed -i 's/a/b/' src/totals.py"),
            result("c1", "<returncode>0</returncode>\n<output>\n</output>"),
            call("c2", "python -m pytest tests/"),
            result(
                "c2",
                "<returncode>1</returncode>\n<output>\nE   AssertionError: 3 != 4\nFAILED tests/test_a.py\n</output>",
            ),
            call("c3", "grep -rn nothing ."),
            result("c3", "<returncode>1</returncode>\n<output>\n</output>"),
            summary_message("earlier", "pg_1", "other", SummaryStatus::Final),
        ];
        let got = extract(&messages);
        let lines: Vec<String> = got.entries.iter().map(Entry::line).collect();
        assert_eq!(
            lines,
            [
                "- m0 user: Use Decimal for every amount, never float.",
                "- m1 decision: Decision D-001: we will keep the old column order, because \
                 consumers depend on it.",
                "- m2 file: src/totals.py (sed -i)",
                "- m5 error: bash({\"command\":\"python -m pytest tests/\"}) failed: FAILED \
                 tests/test_a.py",
            ]
        );
        assert_eq!(got.unread, 0);
        assert_eq!(got.succeeded.len(), 2);
    }

    #[test]
    fn an_error_is_closed_by_the_same_call_succeeding_and_a_failed_write_writes_nothing() {
        let messages = vec![
            call("c1", "python run.py > out.txt"),
            Message::new(
                Role::User,
                vec![ContentBlock::tool_result("c1", "Traceback: boom", true)],
            ),
            call("c2", "python run.py > out.txt"),
            result("c2", "ok"),
        ];
        let got = extract(&messages);
        let lines: Vec<String> = got.entries.iter().map(Entry::line).collect();
        assert_eq!(lines, ["- m2 file: out.txt (python >)"]);
    }

    #[test]
    fn a_patch_the_editor_refused_is_an_error_not_a_file() {
        // Codex's apply_patch: a freeform input, and an answer with no exit code.
        let patch = |id: &str, path: &str| {
            tool_call(
                id,
                "apply_patch",
                format!("*** Begin Patch\n*** Update File: {path}\n@@\n-a\n+b\n*** End Patch\n"),
            )
        };
        let messages = vec![
            patch("p1", "nothere.txt"),
            result(
                "p1",
                "apply_patch verification failed: Failed to read file to update \
                 /w/nothere.txt: No such file or directory (os error 2)",
            ),
            patch("p2", "src/a.rs"),
            result("p2", "Success. Updated the following files:\nM src/a.rs\n"),
        ];
        let lines: Vec<String> = extract(&messages).entries.iter().map(Entry::line).collect();
        assert_eq!(lines.len(), 2, "{lines:#?}");
        assert!(
            lines[0].starts_with("- m1 error: apply_patch(*** Begin Patch")
                && lines[0].ends_with("failed: apply_patch verification failed: Failed to read file to update /w/nothere.txt: No such file or directory (os error 2)"),
            "{lines:#?}"
        );
        assert_eq!(lines[1], "- m2 file: src/a.rs (update)");
    }

    #[test]
    fn statements_in_an_unknown_language_are_counted_not_guessed() {
        let messages = vec![Message::text(
            Role::Assistant,
            "Önbelleği kullanmaya karar verdik çünkü veriler kayıyor.\n我们决定使用缓存。",
        )];
        let got = extract(&messages);
        assert_eq!(got.unread, 1);
        assert_eq!(got.entries.len(), 1);
        assert_eq!(got.entries[0].text, "我们决定使用缓存。");
    }

    #[test]
    fn what_the_agent_s_harness_added_is_not_the_user_s_words() {
        // Claude Code puts its reminders in text blocks of their own beside the user's words;
        // Codex sends its environment as a user message of its own.
        let reminder = "<system-reminder>\nContents of /w/CLAUDE.md (project instructions, \
                        checked into the codebase):\n\nAlways run tests with -q.\n\
                        </system-reminder>";
        let messages = vec![
            Message::new(
                Role::User,
                vec![
                    ContentBlock::text(reminder),
                    ContentBlock::text("Now rename the report module."),
                ],
            ),
            Message::text(
                Role::User,
                "<environment_context>\n  <cwd>/w/sub</cwd>\n</environment_context>",
            ),
            call("c1", "false"),
            result(
                "c1",
                "exit code 1\nerror: no such file\n<system-reminder>\nWhen a command has \
                 failed, tell the user.\n</system-reminder>",
            ),
        ];
        let texts: Vec<String> = extract(&messages)
            .entries
            .into_iter()
            .map(|e| e.text)
            .collect();
        assert_eq!(
            texts,
            [
                "Now rename the report module.",
                "bash({\"command\":\"false\"}) failed: error: no such file"
            ]
        );
    }

    #[test]
    fn nothing_found_is_nothing_added() {
        let messages = vec![
            Message::text(Role::Assistant, "Let me look at the file."),
            call("c1", "ls -la"),
            result("c1", "total 0"),
        ];
        assert_eq!(
            extract(&messages),
            Extracted {
                succeeded: vec![call_signature("bash", r#"{"command":"ls -la"}"#)],
                ..Extracted::default()
            }
        );
    }
}
