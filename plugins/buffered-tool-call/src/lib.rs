//! `buffered-tool-call`: summarizes old tool exchanges in batches instead of one by one.
//!
//! Tool results are the bulkiest part of an agent's context. Summarizing each tool call as soon
//! as it ages costs one LLM call per call, at a steady trickle. This strategy instead buffers
//! the aged (*eligible*) exchanges and waits until there are enough of them (size trigger) or
//! one has grown too old (age trigger). Then it summarizes the whole buffer at once: adjacent
//! exchanges are cut into groups of `group_size`, one LLM call per group, all running
//! concurrently through the host. Each group is archived in a page and replaced by a summary
//! that names the tools called and says whether any call failed.
//!
//! The decision is in [`plan`], the config in [`config`]; this file runs the plan.

pub mod config;
pub mod plan;

use tamp_plugin_api::host::CallFinished;
use tamp_plugin_api::prelude::*;
use tamp_plugin_api::sdk::groups::{tool_activity, Group, ToolActivity};
use tamp_plugin_api::sdk::prompt::{render_messages, RenderOptions};
use tamp_plugin_api::serde_json::json;

pub use config::Config;
use plan::{Decision, Plan};

/// The fewest tokens a summary is ever asked to fit in.
const MIN_SUMMARY_TOKENS: u64 = 16;

pub struct BufferedToolCall {
    config: Config,
    prompt_template: Template,
}

/// What the strategy knows of a group before asking for its summary.
struct GroupFacts {
    activity: ToolActivity,
    /// The group's size as the host counts it against the budget.
    tokens: u64,
}

/// What becomes of one group.
enum GroupFate {
    /// Replace the group with this summary text (header and capped LLM summary).
    Replace(String),
    /// Its LLM call or its page failed: left as it was; the warning says why.
    Failed(String),
    /// Its summary would not be smaller than the group: left as it was; the warning says so.
    NotSmaller(String),
}

impl GroupFate {
    fn warning(self) -> Option<String> {
        match self {
            GroupFate::Replace(_) => None,
            GroupFate::Failed(w) | GroupFate::NotSmaller(w) => Some(w),
        }
    }
}

impl Strategy for BufferedToolCall {
    type Config = Config;
    const NAME: &'static str = "buffered-tool-call";
    const DESCRIPTION: &'static str = "Buffers aged tool exchanges until there are enough of them \
        or one is too old, then summarizes them in concurrent groups, each archived in a page.";

    fn new(config: Config) -> Result<Self, PluginError> {
        config.validate()?;
        let prompt_template = config.prompt_template()?;
        Ok(BufferedToolCall {
            config,
            prompt_template,
        })
    }

    async fn compact(&self, input: Compaction) -> Result<CompactOutcome, PluginError> {
        let Compaction {
            conversation,
            budget,
            host,
            ..
        } = input;
        let messages = &conversation.messages[..];
        let tokens = |m: &[Message]| host.count_message_tokens(m);
        let plan = match plan::decide(messages, budget.keep_recent as usize, &self.config, &tokens)
        {
            Decision::Wait(reason) => return Ok(CompactOutcome::unchanged(reason)),
            Decision::Summarize(plan) => plan,
        };
        tamp_plugin_api::tracing::debug!(groups = plan.groups.len(), "{}", plan.why);

        let facts: Vec<GroupFacts> = plan
            .groups
            .iter()
            .map(|g| GroupFacts {
                activity: tool_activity(&messages[g.range.clone()]),
                tokens: tokens(&messages[g.range.clone()]),
            })
            .collect();
        let mut fates = self
            .summarize_groups(&host, messages, &plan.groups, &facts)
            .await;
        if self.config.all_or_nothing && count_failed(&fates) > 0 {
            return Ok(self.nothing_replaced(&plan, fates));
        }

        keep_summaries_that_do_not_shrink(&host, &plan.groups, &facts, &mut fates);

        let details = self.details(&plan, &fates);
        let mut warnings = Vec::new();
        let mut edits = Vec::new();
        let mut exchanges = 0;
        for (i, fate) in fates.into_iter().enumerate() {
            let group = &plan.groups[i];
            match fate {
                GroupFate::Replace(text) => {
                    // The host archives the group as a page, with what it holds named in the
                    // page's metadata, and puts the summary in its place.
                    let metadata = json!({
                        "tool_exchanges": group.units.len(),
                        "tools": facts[i].activity.tool_list(),
                        "failed_tools": facts[i].activity.failed_list(),
                    });
                    edits.push(Edit::summarize(group.range.clone(), text).with_metadata(&metadata));
                    exchanges += group.units.len();
                }
                kept => warnings.extend(kept.warning()),
            }
        }
        let summarized = edits.len();
        if summarized == 0 {
            let report = StageReport::skipped(format!("no group replaced ({})", plan.why))
                .with_warnings(warnings)
                .with_details(&details);
            return Ok(CompactOutcome::with_edits([], report));
        }
        let mut reason = format!(
            "summarized {exchanges} tool exchange(s) in {summarized} of {} group(s) ({})",
            plan.groups.len(),
            plan.why
        );
        if !warnings.is_empty() {
            reason.push_str(&format!("; {} group(s) left as they were", warnings.len()));
        }
        let report = StageReport::acted(reason)
            .with_warnings(warnings)
            .with_details(&details);
        Ok(CompactOutcome::with_edits(edits, report))
    }
}

impl BufferedToolCall {
    /// One LLM call per group, concurrently, with a progress event as each finishes. The
    /// answers come back in group order whatever order they finish in.
    async fn summarize_groups(
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

    /// The outcome when `all_or_nothing` applies: the conversation as it came, every failure
    /// listed.
    fn nothing_replaced(&self, plan: &Plan, fates: Vec<GroupFate>) -> CompactOutcome {
        let mut details = self.details(plan, &fates);
        details["groups_summarized"] = json!(0);
        let failed = count_failed(&fates);
        let report = StageReport::skipped(format!(
            "all_or_nothing: {failed} of {} group(s) failed, so nothing was replaced ({})",
            plan.groups.len(),
            plan.why
        ))
        .with_details(&details)
        .with_warnings(fates.into_iter().filter_map(GroupFate::warning));
        CompactOutcome::with_edits([], report)
    }

    /// The report's `details`: the trigger and what became of the groups.
    fn details(&self, plan: &Plan, fates: &[GroupFate]) -> tamp_plugin_api::serde_json::Value {
        let not_smaller = fates
            .iter()
            .filter(|f| matches!(f, GroupFate::NotSmaller(_)))
            .count();
        json!({
            "trigger": plan.trigger.as_str(),
            "eligible_exchanges": plan.eligible,
            "oldest_eligible_distance": plan.oldest_distance,
            "group_size": self.config.group_size,
            "groups": plan.groups.len(),
            "groups_summarized": fates.len() - count_failed(fates) - not_smaller,
            "groups_failed": count_failed(fates),
            "groups_not_smaller": not_smaller,
        })
    }
}

/// A summary no smaller than its group would make the conversation larger (which the host
/// rolls back as a whole); such a group is left as it was instead.
fn keep_summaries_that_do_not_shrink(
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

fn count_failed(fates: &[GroupFate]) -> usize {
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

export_plugin!(BufferedToolCall);

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
