//! What an agent's harness writes into the conversation that nobody said: context it adds to
//! user messages and tool results, each inside a tag of its own. The ledger keeps the user's
//! words verbatim; these are not the user's words, and they come again with every turn.
//!
//! The tags are those of the agents tamp is run with, as captured from them (Claude Code
//! 2.1's `<system-reminder>`, with its CLAUDE.md and attribution rules; Codex 0.169's
//! `<environment_context>`) or documented by them (Claude Code's
//! `<user-prompt-submit-hook>`, Codex's older `<user_instructions>`, Cline's and Roo Code's
//! `<environment_details>`). A list, not a shape: Cline sends the user's own task as
//! `<task>`, and a user may write a tag of their own.

use std::borrow::Cow;

/// The tags of harness context.
pub const HARNESS_TAGS: [&str; 5] = [
    "system-reminder",
    "environment_context",
    "environment_details",
    "user_instructions",
    "user-prompt-submit-hook",
];

/// `text` without the harness context in it ([`HARNESS_TAGS`]: each element from its opening
/// tag to its closing one, both included); `text` itself when it has none. An opening tag
/// never closed is left, as it may be the user's.
pub fn without_harness_context(text: &str) -> Cow<'_, str> {
    let Some(first) = next_element(text) else {
        return Cow::Borrowed(text);
    };
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    let mut next = Some(first);
    while let Some((start, end)) = next {
        out.push_str(&rest[..start]);
        rest = &rest[end..];
        next = next_element(rest);
    }
    out.push_str(rest);
    Cow::Owned(out)
}

/// The byte range of the first harness element in `text`.
fn next_element(text: &str) -> Option<(usize, usize)> {
    let mut from = 0;
    while let Some(at) = text[from..].find('<').map(|i| from + i) {
        let after = &text[at + 1..];
        let tag = HARNESS_TAGS.iter().find(|tag| {
            after.starts_with(*tag)
                && after[tag.len()..]
                    .chars()
                    .next()
                    .is_some_and(|c| c == '>' || c.is_whitespace())
        });
        if let Some(tag) = tag {
            let close = format!("</{tag}>");
            if let Some(end) = text[at..].find(&close) {
                return Some((at, at + end + close.len()));
            }
        }
        from = at + 1;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn harness_context_is_taken_out_and_the_user_s_words_stay() {
        // Claude Code 2.1.328's CLAUDE.md reminder, as captured, then the user's words.
        let claude = "<system-reminder>\nCodebase and user instructions are shown below.\n\n\
                      Contents of /w/CLAUDE.md (project instructions):\n\nNever edit vendor/.\n\
                      </system-reminder>\nFix the totals; use Decimal.";
        assert_eq!(
            without_harness_context(claude),
            "\nFix the totals; use Decimal."
        );
        let codex = "<environment_context>\n  <cwd>/w</cwd>\n</environment_context>";
        assert_eq!(without_harness_context(codex).trim(), "");
        // Several, and one inside the user's text.
        let two = "Do X. <system-reminder a=\"1\">r1</system-reminder> Then Y.\
                   <environment_details>d</environment_details>";
        assert_eq!(without_harness_context(two), "Do X.  Then Y.");
        // Nothing of the harness: the same text, not a copy.
        assert!(matches!(
            without_harness_context("plain"),
            Cow::Borrowed("plain")
        ));
    }

    #[test]
    fn other_tags_and_unclosed_ones_are_the_user_s() {
        for text in [
            "<task>Fix the bug; do not touch billing</task>",
            "Wrap it in <system-reminders> please",
            "<system-reminder> was never closed, so this may be the user's",
            "Use <environment_contextual> here",
        ] {
            assert_eq!(without_harness_context(text), text);
        }
    }
}
