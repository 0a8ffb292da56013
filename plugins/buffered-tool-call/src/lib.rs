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
mod summarize;

use tamp_plugin_api::prelude::*;
use tamp_plugin_api::sdk::groups::tool_activity;
use tamp_plugin_api::serde_json::json;

pub use config::Config;
use plan::{Decision, Plan};
use summarize::{count_failed, keep_summaries_that_do_not_shrink, GroupFacts, GroupFate};

pub struct BufferedToolCall {
    config: Config,
    prompt_template: Template,
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

export_plugin!(BufferedToolCall);
