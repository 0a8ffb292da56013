//! The run loop: the stages in order on one conversation, each stage guarded, its edits
//! checked and applied or the stage rolled back.

use std::sync::Arc;
use std::time::Instant;

use tamp_plugin_api::rules::{self, exchanges::Unit};
use tamp_plugin_api::{
    Budget, CompactRequest, Conversation, HostServices as _, Message, Shared, StageReport, Usage,
};

use super::report::invariant_failure;
use super::{
    BudgetReport, Chain, ChainError, ChainReport, CompactOptions, Compacted, OpaqueCount, Stage,
    StageFailure, StageFailureKind, StageRun, StageStatus, ROLLBACK_LOG_TARGET,
};
use crate::budget::BudgetConfig;
use crate::config::Trigger;
use crate::edits;
use crate::invariants::{check_no_growth, infer_format, Violation};
use crate::services::{StageIdentity, StageServices};
use crate::stage_guard::{self, GuardedFailure};
use crate::tokens::TokenCounter;
use crate::wire::{check_tool_pairing, WireFormat};

/// How many of the newest messages no stage may touch: `keep_recent`, or, with
/// `keep_recent_tokens`, the newest whole units (a tool exchange with its results, or one
/// message) that fit in that many tokens, whichever is fewer. The newest unit is always
/// protected, so an agent's latest tool result is never summarized away.
fn protected_tail(units: &[Unit], counts: &[u64], budget: &BudgetConfig) -> u32 {
    let Some(limit) = budget.tail_token_limit() else {
        return budget.keep_recent;
    };
    let keep = budget.keep_recent as usize;
    let mut kept = 0usize;
    let mut kept_tokens = 0u64;
    for unit in units.iter().rev() {
        if kept >= keep {
            break;
        }
        let unit_tokens: u64 = counts[unit.range.clone()].iter().sum();
        if kept > 0 && kept_tokens + unit_tokens > limit {
            break;
        }
        kept += unit.range.len();
        kept_tokens += unit_tokens;
    }
    u32::try_from(kept.min(keep)).unwrap_or(budget.keep_recent)
}

/// What the chain reads of its input before any stage runs: each message's tokens and the
/// protected head and tail. Computed once per compaction: hashing every message for the token
/// memo and grouping it into units are a compaction's largest fixed costs. No stage may touch
/// the head or the tail, so their sizes hold for the chain's output too.
struct InputShape {
    tokens: u64,
    /// Messages in the protected tail (`Budget::keep_recent`).
    keep_recent: u32,
    head_tokens: u64,
    tail_tokens: u64,
    tail_messages: usize,
}

impl InputShape {
    fn of(messages: &[Message], budget: &BudgetConfig, tokens: &TokenCounter) -> Self {
        let counts: Vec<u64> = messages.iter().map(|m| tokens.count_message(m)).collect();
        let units = rules::exchanges::units(messages);
        let keep_recent = protected_tail(&units, &counts, budget);
        let head = rules::protect::protected_head(messages);
        let tail_start =
            rules::protect::compactable_range_of(messages, &units, keep_recent as usize).end;
        InputShape {
            tokens: counts.iter().sum(),
            keep_recent,
            head_tokens: counts[..head].iter().sum(),
            tail_tokens: counts[tail_start..].iter().sum(),
            tail_messages: messages.len() - tail_start,
        }
    }
}

impl Chain {
    /// Runs the stages on `conversation` (whose summaries [`Chain::compact`] has checked,
    /// `unrecognized` of them read as text), and gives the summaries of what it returns
    /// their MACs.
    pub(super) async fn run_chain(
        &self,
        conversation: Conversation,
        options: &CompactOptions,
        unrecognized: u32,
    ) -> Result<Compacted, ChainError> {
        let started = Instant::now();
        let mut conversation = conversation;
        // Believed already (or stored by this chain): the stages, and the pages they archive,
        // see summaries without their MACs, so that nothing they make depends on the key.
        crate::summary_mac::strip(conversation.messages.as_mut_slice());
        let format = options
            .format
            .unwrap_or_else(|| infer_format(&conversation.messages));
        check_tool_pairing(&conversation.messages, format)?;
        let budget_cfg = options.budget.unwrap_or(self.budget);
        budget_cfg.validate().map_err(ChainError::InvalidBudget)?;
        let (high, low) = (budget_cfg.high_tokens(), budget_cfg.low_tokens());

        let shape = InputShape::of(&conversation.messages, &budget_cfg, &self.ctx.tokens);
        let tokens_before = shape.tokens;
        let messages_before = conversation.messages.len();
        // The summaries' ledgers are left out of what the watermarks measure (up to the room
        // between the high watermark and `max_tokens`): see `BudgetConfig::ledgers_outside`.
        let ledger_room = if tokens_before > high {
            budget_cfg.ledger_room(&conversation.messages, &self.ctx.tokens)
        } else {
            0
        };
        let over_budget = options.force || tokens_before.saturating_sub(ledger_room) > high;
        let left_out = if ledger_room > 0 {
            format!(" ({ledger_room} of them the summaries' ledgers, left out)")
        } else {
            String::new()
        };
        let reason = if options.force {
            "forced".to_string()
        } else if over_budget {
            format!("{tokens_before} tokens{left_out}, above the high watermark of {high}")
        } else {
            format!("{tokens_before} tokens{left_out}, not above the high watermark of {high}")
        };

        let keep_recent = shape.keep_recent;
        let mut current = conversation;
        let mut tokens = tokens_before;
        let mut runs = Vec::with_capacity(self.stages.len());
        for stage in &self.stages {
            let not_run = |why: String| StageRun::not_run(stage, why, tokens);
            let run = match stage.trigger {
                Trigger::OverBudget if !over_budget => {
                    not_run("the chain is not over budget".into())
                }
                Trigger::OverBudget
                    if tokens.saturating_sub(ledger_room) <= low && !options.force =>
                {
                    not_run(format!(
                        "already under the low watermark ({tokens}{left_out} <= {low})"
                    ))
                }
                _ => {
                    let budget = Budget {
                        max_tokens: budget_cfg.max_tokens,
                        high_watermark: high,
                        low_watermark: low,
                        keep_recent,
                        current_tokens: tokens,
                    };
                    let (next, changed, run) = self.run_stage(stage, current, budget, format).await;
                    current = next;
                    if changed {
                        tokens = run.tokens_after;
                    }
                    run
                }
            };
            runs.push(run);
        }

        let mut usage = Usage::default();
        for r in &runs {
            usage.add(&r.usage);
        }
        let acted = runs.iter().any(|r| r.status == StageStatus::Acted);
        // Every summary of the answer, the input's and the stages' new ones, gets its MAC: the
        // next request (or the thread's stored state) reads them as tamp's.
        self.summaries.seal(current.messages.as_mut_slice());
        let low_watermark_missed = (over_budget && tokens > low).then(|| {
            let (head_tokens, tail_tokens) = (shape.head_tokens, shape.tail_tokens);
            let protected = head_tokens + tail_tokens;
            let parts = format!(
                "system prompt and task {head_tokens}, recent tail {tail_tokens} in {} message(s)",
                shape.tail_messages
            );
            if protected >= low {
                format!(
                    "{tokens} tokens after compaction, above the low watermark of {low}: the \
                     protected messages alone are {protected} tokens ({parts}); lower \
                     keep_recent or set keep_recent_tokens"
                )
            } else if !acted {
                format!(
                    "{tokens} tokens after compaction, above the low watermark of {low}: no \
                     stage acted (see each stage's reason); protected: {parts}"
                )
            } else {
                format!(
                    "{tokens} tokens after compaction, above the low watermark of {low}: the \
                     stages left {} compactable tokens (see each stage's reason); protected: \
                     {parts}",
                    tokens.saturating_sub(protected)
                )
            }
        });
        let report = ChainReport {
            tokens_before,
            tokens_after: tokens,
            messages_before,
            messages_after: current.messages.len(),
            budget: BudgetReport {
                max_tokens: budget_cfg.max_tokens,
                high_watermark: high,
                low_watermark: low,
                keep_recent: budget_cfg.keep_recent,
                protected_tail: keep_recent,
            },
            reason,
            llm_calls: runs.iter().map(|r| r.llm_calls).sum(),
            cache_hits: runs.iter().map(|r| r.cache_hits).sum(),
            cost_usd: self.price.map(|p| p.cost_of(&usage)),
            usage,
            stages: runs,
            duration_ms: started.elapsed().as_secs_f64() * 1e3,
            thread: None,
            low_watermark_missed,
            opaque: OpaqueCount::of(&current.messages),
            unrecognized_summaries: unrecognized,
        };
        Ok(Compacted {
            conversation: current,
            report,
        })
    }

    /// Runs one stage on `input` and applies its edits; returns the conversation (the input
    /// itself when the stage was rolled back or asked for nothing), whether it changed, and
    /// the stage's report.
    async fn run_stage(
        &self,
        stage: &Stage,
        input: Conversation,
        budget: Budget,
        format: WireFormat,
    ) -> (Conversation, bool, StageRun) {
        let started = Instant::now();
        let deadline = tokio::time::Instant::now() + stage.timeout;
        let services = StageServices::new(
            Arc::clone(&self.ctx),
            StageIdentity {
                stage: stage.name.clone(),
                strategy: stage.plugin.meta().name.clone(),
                config_hash: stage.config_hash.clone(),
            },
            input.thread_id().map(str::to_string),
            Some(format),
        )
        .until(deadline);
        // The stage reads the conversation shared: nothing is copied for it, and the input
        // comes back unchanged whatever the stage does.
        let shared = Shared::new(input);
        let request = CompactRequest {
            conversation: Shared::clone(&shared),
            budget,
            host: services.to_ffi(),
            stage: stage.name.as_str().into(),
        };
        // Under the guard (`stage_guard`): a panic is caught at this frame instead of
        // unwinding through the chain, and a stage that never finishes is cut off at the
        // deadline and dropped.
        let outcome = stage_guard::call_stage(stage.strategy.compact(request), deadline)
            .await
            .map_err(|failure| StageFailure {
                kind: match &failure {
                    GuardedFailure::Timeout => StageFailureKind::Timeout,
                    failure if failure.is_panic() => StageFailureKind::Panicked,
                    _ => StageFailureKind::Error,
                },
                message: match failure {
                    GuardedFailure::Timeout => {
                        format!("no result within {:.1}s", stage.timeout.as_secs_f64())
                    }
                    GuardedFailure::Unwound(message) => message,
                    GuardedFailure::Error(e) => e.to_string(),
                },
                rule: None,
            });
        // A stage that kept a handle on the conversation (a task it left running) makes
        // this a copy; otherwise the input is taken back as it was.
        let input =
            Shared::try_unwrap(shared).unwrap_or_else(|still_shared| (*still_shared).clone());
        // Boxed: what settling a stage holds (its report, the check of its edits, the page
        // writes) is then not part of the state every compaction carries while it waits on
        // its stage, thousands at once.
        Box::pin(self.settle_stage(stage, input, outcome, &services, budget, started)).await
    }

    /// Checks and applies what a stage answered, once its pages are written, or rolls it
    /// back; fills the stage's report. See [`Chain::run_stage`].
    async fn settle_stage(
        &self,
        stage: &Stage,
        input: Conversation,
        outcome: Result<tamp_plugin_api::CompactOutcome, StageFailure>,
        services: &StageServices,
        budget: Budget,
        started: Instant,
    ) -> (Conversation, bool, StageRun) {
        let mut run = StageRun::not_run(stage, String::new(), budget.current_tokens);

        let result = match outcome {
            Ok(outcome) => self.apply(&input, outcome, services, stage, budget).await,
            Err(failure) => Err(failure),
        };
        // The stage's pages may still be staged: its output is accepted only once they are
        // written, so every summary's page is durable when the caller gets it.
        let result = match (result, services.pages_written().await) {
            (Err(failure), written) => {
                if let Err(e) = written {
                    tracing::warn!(stage = %stage.name, "the pages of a failed stage were not written: {e}");
                }
                Err(failure)
            }
            (Ok(_), Err(e)) => Err(StageFailure::error(format!(
                "its pages could not be written: {e}"
            ))),
            (Ok(applied), Ok(())) => Ok(applied),
        };
        let used = services.usage();
        run.llm_calls = used.llm_calls;
        run.failed_llm_calls = used.failed_llm_calls;
        run.cache_hits = used.cache_hits;
        run.usage = used.usage;
        run.cost_usd = self.price.map(|p| p.cost_of(&used.usage));
        run.llm_errors = used.errors;
        run.duration_ms = started.elapsed().as_secs_f64() * 1e3;
        match result {
            Err(failure) => {
                tracing::warn!(target: ROLLBACK_LOG_TARGET, stage = %stage.name, kind = %failure.kind, "stage rolled back: {}", failure.message);
                run.status = StageStatus::RolledBack;
                run.reason = format!("rolled back ({}): {}", failure.kind, failure.message);
                run.error = Some(failure);
                (input, false, run)
            }
            Ok((report, None)) => {
                run.apply_report(report);
                (input, false, run)
            }
            Ok((report, Some((plan, tokens_after)))) => {
                let applied = edits::splice(input, plan);
                run.apply_report(report);
                run.pages = applied.pages;
                run.messages_removed = applied.messages_removed;
                run.summaries_added = applied.summaries_added;
                run.messages_cleared = applied.messages_cleared;
                run.tokens_after = tokens_after;
                (applied.conversation, true, run)
            }
        }
    }

    /// Checks a stage's edits against its input, counts their growth and archives the pages
    /// of its `Summarize` and `Clear` edits; returns the report and what to splice (None: no edits).
    async fn apply(
        &self,
        input: &Conversation,
        outcome: tamp_plugin_api::CompactOutcome,
        services: &StageServices,
        stage: &Stage,
        budget: Budget,
    ) -> Result<(StageReport, Option<(Vec<edits::Ready>, u64)>), StageFailure> {
        let tamp_plugin_api::CompactOutcome {
            edits: asked,
            report,
        } = outcome;
        if asked.is_empty() {
            return Ok((report, None));
        }
        let strategy = stage.plugin.meta().name.as_str();
        let messages = &input.messages;
        let checked = edits::check(messages, asked, budget.keep_recent as usize, strategy)
            .map_err(invariant_failure)?;
        let tokens_after = edits::count_after(
            messages,
            &checked,
            budget.current_tokens,
            &self.ctx.tokens,
            strategy,
        );
        check_no_growth(budget.current_tokens, tokens_after).map_err(invariant_failure)?;
        // A replaced span's page must exist: archived by this stage, or by an earlier one.
        // A store that cannot be read is the host's failure, not the plugin's: only a page
        // the store answers it does not hold breaks TAMP-INV-01.
        for page in edits::replaced_pages(&checked) {
            if services.has_archived(&page) {
                continue;
            }
            match self.ctx.store.get_page(&page).await {
                Ok(_) => {}
                Err(e) if e.is_not_found() => {
                    return Err(invariant_failure(Violation::new(
                        crate::invariants::Rule::NothingLost,
                        format!("a summary refers to page {page}, which the store does not hold"),
                    )))
                }
                Err(e) => {
                    return Err(StageFailure::error(format!(
                        "page {page}, which a summary refers to, could not be read to check \
                             it: {e}"
                    )))
                }
            }
        }
        // All at once, as `Host::archive_pages` does: a store that commits in groups writes
        // them together.
        let archiving = edits::drafts(messages, &checked, strategy)
            .into_iter()
            .map(|draft| services.archive_page(draft));
        let pages = futures::future::join_all(archiving)
            .await
            .into_iter()
            .map(|archived| {
                archived.into_result().map(String::from).map_err(|e| {
                    StageFailure::error(format!("a page could not be archived: {}", e.message))
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        let ready = edits::ready(messages, checked, pages.into_iter(), strategy)
            .map_err(StageFailure::error)?;
        Ok((report, Some((ready, tokens_after))))
    }
}
