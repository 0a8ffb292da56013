//! Summary messages: the text a stage puts where a page's messages were.

use abi_stable::std_types::ROption;

use crate::conversation::{Message, Role, SummaryInfo, SummaryStatus};

/// The role summaries take: a `user` turn is valid at any position in both wire formats.
pub const SUMMARY_ROLE: Role = Role::User;

/// A summary message standing for the page `page_ref`.
pub fn summary_message(
    text: &str,
    page_ref: &str,
    strategy: &str,
    status: SummaryStatus,
) -> Message {
    let mut message = Message::text(SUMMARY_ROLE, text);
    message.summary = ROption::RSome(SummaryInfo {
        page_ref: page_ref.into(),
        strategy: strategy.into(),
        status,
    });
    message
}

// A method of the handle, written here beside the summary message it measures: the handle
// itself is below the SDK and names none of it.
impl crate::Host {
    /// Whether a summary of `text` costs fewer tokens than the `replaced` messages: a summary
    /// as long as what it replaces saves nothing (and the host refuses a stage whose edits
    /// grow the conversation).
    pub fn summary_is_smaller(&self, text: &str, replaced: &[Message]) -> bool {
        let summary = summary_message(text, "", self.strategy_name(), SummaryStatus::Final);
        self.count_message_tokens(std::slice::from_ref(&summary))
            < self.count_message_tokens(replaced)
    }
}

/// A copy of `message` whose content is `text` alone: the same role, summary mark and wire
/// fields (a summary shown to a model without part of its text, say).
pub fn with_text(message: &Message, text: &str) -> Message {
    Message {
        content: vec![crate::ContentBlock::text(text)].into(),
        ..message.clone()
    }
}

/// Cuts `text` to at most `max_chars` characters, marking the cut with `…`.
pub fn cap_chars(text: &str, max_chars: usize) -> String {
    match text.char_indices().nth(max_chars) {
        None => text.to_string(),
        Some(_) if max_chars == 0 => String::new(),
        Some(_) => {
            let keep = text
                .char_indices()
                .nth(max_chars - 1)
                .map(|(i, _)| i)
                .unwrap_or(text.len());
            let mut out = text[..keep].to_string();
            out.push('…');
            out
        }
    }
}

/// An LLM answer fit to enter the conversation: its text, trimmed and cut (marked `…`) to at
/// most `limit_tokens` tokens; an error for a failed call or an empty answer (an empty
/// summary would silently lose the content it replaces). `label` names the call in errors.
pub fn bounded_answer(
    host: &crate::Host,
    answer: Result<crate::LlmResponse, crate::HostError>,
    label: &str,
    limit_tokens: u64,
) -> Result<String, crate::PluginError> {
    use crate::{ErrorKind, PluginError};
    let response =
        answer.map_err(|e| PluginError::new(ErrorKind::Llm, format!("{label}: {}", e.message)))?;
    let text = response.text.trim();
    if text.is_empty() {
        return Err(PluginError::new(
            ErrorKind::Llm,
            format!(
                "{label}: the LLM answered nothing (stop reason `{}`); no empty summaries",
                response.stop_reason
            ),
        ));
    }
    let keep = crate::sdk::chunk::longest_prefix_within(text, limit_tokens, &|t: &str| {
        host.count_tokens(t)
    });
    if keep == text.len() {
        Ok(text.to_string())
    } else {
        Ok(format!("{}…", text[..keep].trim_end()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn with_text_keeps_the_summary_mark() {
        let summary = summary_message("old text", "pg_1", "s", SummaryStatus::Final);
        let shown = with_text(&summary, "new text");
        assert_eq!(shown.joined_text(), "new text");
        assert_eq!(shown.summary_info(), summary.summary_info());
        assert_eq!(shown.role, summary.role);
    }

    #[test]
    fn cap_counts_characters_not_bytes() {
        assert_eq!(cap_chars("héllo wörld", 5), "héll…");
        assert_eq!(cap_chars("short", 10), "short");
        assert_eq!(cap_chars("exact", 5), "exact");
        assert_eq!(cap_chars("abc", 0), "");
        assert_eq!(cap_chars("😀😀😀", 2).chars().count(), 2);
    }

    #[test]
    fn summary_carries_its_page() {
        let m = summary_message("s", "pg_1", "x", SummaryStatus::Pending);
        let info = m.summary_info().unwrap();
        assert_eq!(info.page_ref.as_str(), "pg_1");
        assert_eq!(info.status, SummaryStatus::Pending);
    }
}
