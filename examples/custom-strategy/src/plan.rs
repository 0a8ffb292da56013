//! What to archive: a pure function of the conversation, tested without a host.

use std::ops::Range;

use tamp_plugin_api::prelude::*;
use tamp_plugin_api::sdk::groups::Group;
use tamp_plugin_api::sdk::prompt::{render_messages, wrap_content, RenderOptions};

/// The oldest tool exchanges in `compactable` (the range the stage may change), beyond the
/// newest `keep_exchanges`, grouped into runs of adjacent exchanges (the SDK's grouping).
pub fn runs_to_archive(
    messages: &[Message],
    compactable: Range<usize>,
    keep_exchanges: usize,
) -> Vec<Group> {
    let units = sdk::units(messages);
    let exchanges: Vec<Unit> = sdk::groups::units_within(&units, &compactable)
        .filter(|u| u.kind == UnitKind::ToolExchange)
        .cloned()
        .collect();
    let archive = exchanges.len().saturating_sub(keep_exchanges);
    sdk::groups::adjacent_runs(&exchanges[..archive])
}

/// The prompt asking for a run's summary. The material goes last, inside the `<content>`
/// section `wrap_content` writes (escaping any tags inside it): the host's offline
/// summarizer reads that section.
pub fn summary_prompt(run: &[Message]) -> String {
    let material = render_messages(run, &RenderOptions::default());
    format!(
        "Summarize what these tool calls found out, in a few sentences. Keep file paths, \
         identifiers, numbers and errors.\n{}",
        wrap_content(&material)
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use tamp_plugin_api::sdk::prompt::content_section;

    fn exchange(id: &str, tool: &str) -> [Message; 2] {
        [
            Message::new(
                Role::Assistant,
                vec![ContentBlock::tool_use(id, tool, "{}")],
            ),
            Message::new(
                Role::Tool,
                vec![ContentBlock::tool_result(id, "out", false)],
            ),
        ]
    }

    #[test]
    fn runs_split_at_user_messages_and_keep_the_newest() {
        let mut msgs = vec![
            Message::text(Role::System, "s"),
            Message::text(Role::User, "go"),
        ];
        msgs.extend(exchange("a", "bash"));
        msgs.extend(exchange("b", "bash"));
        msgs.push(Message::text(Role::User, "more"));
        msgs.extend(exchange("c", "edit"));
        msgs.extend(exchange("d", "edit"));
        msgs.push(Message::text(Role::Assistant, "done"));
        let runs = runs_to_archive(&msgs, sdk::compactable_range(&msgs, 1), 1);
        assert_eq!(runs.len(), 2);
        assert_eq!(runs[0].range, 2..6);
        assert_eq!(runs[0].units.len(), 2);
        assert_eq!(runs[1].range, 7..9);
        let activity = sdk::groups::tool_activity(&msgs[runs[0].range.clone()]);
        assert_eq!(activity.tool_list(), "bash ×2");
    }

    #[test]
    fn the_prompt_carries_the_run_as_its_content() {
        let run = exchange("a", "cat");
        let prompt = summary_prompt(&run);
        assert_eq!(
            content_section(&prompt),
            render_messages(&run, &RenderOptions::default())
        );
    }
}
