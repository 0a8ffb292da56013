//! The model's calls, one per group, and what becomes of each group: replaced by its summary
//! (a header naming the tools and failed calls, then the model's words), or left as it was,
//! with a warning that says why.

use tamp_plugin_api::host::CallFinished;
use tamp_plugin_api::prelude::*;
use tamp_plugin_api::sdk::groups::{Group, ToolActivity};
use tamp_plugin_api::sdk::prompt::{render_messages, RenderOptions};

use crate::BufferedToolCall;

/// The fewest tokens a summary is ever asked to fit in.
const MIN_SUMMARY_TOKENS: u64 = 16;

/// What the strategy knows of a group before asking for its summary.
pub(crate) struct GroupFacts {
    pub(crate) activity: ToolActivity,
    /// The group's size as the host counts it against the budget.
    pub(crate) tokens: u64,
}

/// What becomes of one group.
pub(crate) enum GroupFate {
    /// Replace the group with this summary text (header and capped LLM summary).
    Replace(String),
    /// Its LLM call or its page failed: left as it was; the warning says why.
    Failed(String),
    /// Its summary would not be smaller than the group: left as it was; the warning says so.
    NotSmaller(String),
}

impl GroupFate {
    pub(crate) fn warning(self) -> Option<String> {
        match self {
            GroupFate::Replace(_) => None,
            GroupFate::Failed(w) | GroupFate::NotSmaller(w) => Some(w),
        }
    }
}

impl BufferedToolCall {
    /// One LLM call per group, concurrently, with a progress event as each finishes. The
    /// answers come back in group order whatever order they finish in.
    pub(crate) async fn summarize_groups(
        &self,
        host: &Host,
        messages: &[Message],
        groups: &[Group],
        facts: &[GroupFacts],
    ) -> Vec<GroupFate> {
        let total = groups.len();
        let render = RenderOptions::cut_at(self.config.max_block_chars);
        let mut requests = Vec::with_capacity(total);
        for (group, facts) in groups.iter().zip(facts) {
            let calls = render_messages(&messages[group.range.clone()], &render);
            let exchanges = group.units.len().to_string();
            let tools = facts.activity.tool_list();
            // Ask for at most half the group: a summary as long as what it replaces saves
            // nothing, and would be left out anyway.
            let max_output_tokens = u64::from(self.config.summary_max_tokens)
                .min((facts.tokens / 2).max(MIN_SUMMARY_TOKENS));
            let prompt = self.prompt_template.render(&[
                ("calls", calls.as_str()),
                ("tools", tools.as_str()),
                ("exchanges", exchanges.as_str()),
            ]);
            requests.push(
                LlmRequest::new(
                    self.config.system_prompt.as_str(),
                    prompt,
                    u32::try_from(max_output_tokens).unwrap_or(self.config.summary_max_tokens),
                )
                // Named by position, not by "i of total": a label that changed whenever the
                // buffer grew would make the same request look new to a cache.
                .with_label(format!(
                    "tool exchanges at messages {}..{}",
                    group.range.start, group.range.end
                )),
            );
        }
        let progress = |finished: CallFinished<'_>| match finished.answer {
            Ok(_) => format!("{}/{} groups summarized", finished.done, finished.total),
            Err(_) => format!(
                "{}/{} groups finished; group {} failed",
                finished.done,
                finished.total,
                finished.index + 1
            ),
        };
        let answers = host
            .complete_all_with_progress(requests, self.config.max_concurrency, progress)
            .await;
        answers
            .into_iter()
            .enumerate()
            .map(|(i, answer)| {
                let failed = |why: String| {
                    GroupFate::Failed(format!(
                        "{}: {why}; left as it was",
                        describe_group(i, groups, &facts[i].activity)
                    ))
                };
                match answer {
                    Err(e) => failed(format!("LLM call failed: {e}")),
                    Ok(r) if r.text.trim().is_empty() => {
                        failed("the LLM answered with an empty summary".into())
                    }
                    Ok(r) => GroupFate::Replace(summary_text(
                        &facts[i].activity,
                        groups[i].units.len(),
                        &sdk::cap_chars(r.text.trim(), self.config.max_summary_chars),
                    )),
                }
            })
            .collect()
    }
}

/// A summary no smaller than its group would make the conversation larger (which the host
/// rolls back as a whole); such a group is left as it was instead.
pub(crate) fn keep_summaries_that_do_not_shrink(
    host: &Host,
    groups: &[Group],
    facts: &[GroupFacts],
    fates: &mut [GroupFate],
) {
    for (i, fate) in fates.iter_mut().enumerate() {
        let GroupFate::Replace(text) = fate else {
            continue;
        };
        // The page ref is not counted as content, so any ref measures the same.
        let summary = sdk::summary_message(text, "", BufferedToolCall::NAME, SummaryStatus::Final);
        let after = host.count_message_tokens(std::slice::from_ref(&summary));
        let before = facts[i].tokens;
        if after >= before {
            *fate = GroupFate::NotSmaller(format!(
                "{}: its summary ({after} tokens) is not smaller than the group ({before} \
                 tokens); left as it was",
                describe_group(i, groups, &facts[i].activity)
            ));
        }
    }
}

pub(crate) fn count_failed(fates: &[GroupFate]) -> usize {
    fates
        .iter()
        .filter(|f| matches!(f, GroupFate::Failed(_)))
        .count()
}

/// `group 3/12 (messages 14..18: bash ×2)`, for warnings.
fn describe_group(i: usize, groups: &[Group], activity: &ToolActivity) -> String {
    let range = &groups[i].range;
    format!(
        "group {}/{} (messages {}..{}: {})",
        i + 1,
        groups.len(),
        range.start,
        range.end,
        activity.tool_list()
    )
}

/// The summary message's text: a header naming the tools and any failed calls, which the
/// agent can rely on whatever the LLM wrote, then the LLM's summary.
fn summary_text(activity: &ToolActivity, exchanges: usize, summary: &str) -> String {
    let errors = match activity.errors() {
        0 => "no call failed".to_string(),
        n => format!(
            "{n} of {} call(s) failed: {}",
            activity.calls(),
            activity.failed_list()
        ),
    };
    format!(
        "Summary of {exchanges} tool exchange(s) ({}; {errors}):\n{summary}",
        activity.tool_list()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summary_header_names_tools_and_failures() {
        let activity = ToolActivity {
            tools: vec![("bash".into(), 2), ("read_file".into(), 1)],
            failed: vec![("bash".into(), 1)],
        };
        assert_eq!(
            summary_text(&activity, 2, "found it"),
            "Summary of 2 tool exchange(s) (bash ×2, read_file; 1 of 3 call(s) failed: bash):\nfound it"
        );
        let clean = ToolActivity {
            tools: vec![("ls".into(), 1)],
            failed: vec![],
        };
        assert!(summary_text(&clean, 1, "x").contains("(ls; no call failed)"));
    }
}
