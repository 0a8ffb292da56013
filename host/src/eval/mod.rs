//! `tamp eval`: every chain on every conversation, one-shot and replayed as a growing thread,
//! side by side: tokens before and after, LLM calls, tokens sent, estimated cost, prefix
//! reuse, wall time and retention of the facts that must survive.
//!
//! - **One-shot**: the whole conversation compacted once.
//! - **Replay**: the conversation as its agent lived it: compacted before every model call
//!   (after each user or tool message that an assistant message follows, and at the end), the
//!   client posting its whole history with a thread id, so the chain continues the thread from
//!   its last answer (thread continuity). Prefix reuse is the mean, over the requests after the
//!   first, of the share of each answer's tokens that is an unchanged message prefix of the
//!   previous answer: what a main model's prompt cache keeps. The main model's cost is what
//!   those answers cost it with prompt caching, ÷ what the history as posted would have
//!   ([`main_model`]).
//!
//! Each run has a scratch store of its own (pages, summary cache, thread states), so runs do
//! not share cached summaries and the chain files' own stores are never written. Retention is
//! measured on the final context: the one-shot output, the replay's last answer
//! ([`facts`]).

pub mod cells;
pub mod facts;
pub mod html;
pub mod main_model;
pub mod names;
pub mod output;
pub mod probe;
pub mod progress;

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::Context;
use serde::Serialize;
use tamp_plugin_api::{Conversation, FfiOption, Message, Role};

use crate::budget::BudgetConfig;
use crate::chain::{Chain, CompactOptions, FileOverrides, StageStatus};
use crate::config::LoadedChainFile;
use crate::store::threads::common_prefix;
use crate::wire::{self, WireFormat};
use facts::{Fact, FactsFile, Retention};
use main_model::{CachePrices, MainModelCost};
use probe::{Judge, ProbeResult, References};
use progress::{Planned, Progress, Ticker};

/// What `tamp eval` runs (its flags, but for where the output goes; `tamp eval --help` says
/// what each does).
#[derive(Debug, Clone, Default)]
pub struct EvalOptions {
    /// Chain files, compared side by side.
    pub chains: Vec<PathBuf>,
    /// Facts files: what must survive (see docs/eval.md).
    pub facts: Vec<PathBuf>,
    /// Conversations in any wire format.
    pub conversations: Vec<PathBuf>,
    /// Skip the replays.
    pub one_shot_only: bool,
    /// Skip the one-shot runs (a replay with a slow local model is long enough alone).
    pub replay_only: bool,
    /// A judge's chain file: its `[provider]` answers the facts' questions.
    pub probe: Option<PathBuf>,
    /// What the main model's provider charges for a cache read and a cache write.
    pub cache_prices: CachePrices,
}

/// How a conversation was run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    OneShot,
    Replay,
}

impl Mode {
    pub fn label(self) -> &'static str {
        match self {
            Mode::OneShot => "one-shot",
            Mode::Replay => "replay",
        }
    }
}

/// One request of a replay.
#[derive(Debug, Clone, Serialize)]
pub struct Point {
    /// Messages the client posted.
    pub messages: usize,
    /// Tokens of what it posted, and of the compacted answer.
    pub tokens_posted: u64,
    pub tokens_after: u64,
    /// Whether a stage acted (a compaction event).
    pub compacted: bool,
}

/// One chain on one conversation, in one mode.
#[derive(Debug, Clone, Serialize)]
pub struct Run {
    /// The chain file's and the conversation file's names: their stems, made unique where two
    /// files share one ([`names`]).
    pub chain: String,
    pub conversation: String,
    pub mode: Mode,
    /// Compactions made (1 one-shot, one per model call in a replay).
    pub requests: usize,
    /// The conversation's tokens, and the final context's.
    pub tokens_before: u64,
    pub tokens_after: u64,
    pub llm_calls: u64,
    /// Of those, the calls that failed (a replay: a request its recording has no answer for).
    pub failed_llm_calls: u64,
    /// Input tokens sent to the summarizer, over the run.
    pub tokens_sent: u64,
    /// Estimated cost in US dollars, when the chain file prices its provider.
    pub cost_usd: Option<f64>,
    /// Replays: the mean share of each answer kept as a prefix of the previous one.
    pub prefix_reuse: Option<f64>,
    /// Replays: the main model's input cost for the answers, with prompt caching, ÷ its cost
    /// for the history as the client posted it ([`main_model`]).
    pub main_model_cost: Option<f64>,
    /// Replays: the cache prices that cost is reckoned at.
    pub main_model_prices: Option<CachePrices>,
    /// Mean wall time of a compaction (LLM calls included), in milliseconds.
    pub ms_per_compaction: f64,
    /// Facts found in the final context, when there are facts for the conversation.
    pub retention: Option<Retention>,
    /// With `--probe`: the facts' questions answered from the final context as from the
    /// original.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub probe: Option<ProbeResult>,
    /// Stage runs rolled back over the run.
    pub rolled_back: usize,
    /// The chain file's `[budget]`: its watermarks are where a compaction starts and what it
    /// brings the context down to, drawn on the HTML page's charts.
    pub budget: BudgetConfig,
    /// Replays: request by request.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub series: Vec<Point>,
}

/// A conversation to evaluate on.
struct Input {
    path: PathBuf,
    name: String,
    conversation: Conversation,
    format: WireFormat,
    facts: Vec<Fact>,
    /// Its tokens, as the first chain counts them: what the progress estimate starts from.
    tokens: u64,
}

/// Everything `tamp eval` was asked to run, read and checked before any chain runs.
pub struct Plan {
    chains: Vec<(PathBuf, String)>,
    inputs: Vec<Input>,
    one_shot_only: bool,
    replay_only: bool,
    judge: Option<Judge>,
    cache_prices: CachePrices,
}

impl Plan {
    /// Reads every chain file (checked as `tamp check-config` would, plugins loaded), every
    /// conversation and every facts file, so a mistake in the last one stops the run before
    /// the first chain has spent anything.
    pub fn read(args: &EvalOptions) -> anyhow::Result<Plan> {
        if args.one_shot_only && args.replay_only {
            anyhow::bail!("--one-shot-only and --replay-only leave nothing to run: give one");
        }
        // Display names: file stems, made unique where two files share one (names.rs).
        let chain_names = names::unique_names(&args.chains);
        let conversation_names = names::unique_names(&args.conversations);
        let mut chains = Vec::new();
        for (path, name) in args.chains.iter().zip(chain_names) {
            LoadedChainFile::read(path).map_err(|e| anyhow::anyhow!("{e}"))?;
            chains.push((path.clone(), name));
        }
        let facts: Vec<FactsFile> = args
            .facts
            .iter()
            .map(|p| FactsFile::read(p).map_err(anyhow::Error::msg))
            .collect::<Result<_, _>>()?;
        let mut inputs = Vec::new();
        for (path, name) in args.conversations.iter().zip(conversation_names) {
            let text =
                crate::input_file::read_to_string(path, crate::input_file::Limit::CONVERSATION)
                    .map_err(|e| {
                        anyhow::anyhow!("{}: cannot read the conversation: {e}", path.display())
                    })?;
            let (conversation, format) = wire::parse_str(&text, None)
                .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
            let facts = facts
                .iter()
                .filter(|f| f.applies_to(path))
                .flat_map(|f| f.facts.iter().cloned())
                .collect();
            inputs.push(Input {
                name,
                path: path.clone(),
                conversation,
                format,
                facts,
                tokens: 0,
            });
        }
        for f in &facts {
            if !args.conversations.iter().any(|c| f.applies_to(c)) {
                anyhow::bail!(
                    "{}: its conversation {:?} is none of the conversations given",
                    f.path.display(),
                    f.conversation.as_deref().unwrap_or("")
                );
            }
        }
        // Each chain is built once now, on a scratch store, so a plugin that does not load or
        // a stage config that does not validate fails here, naming the file and line.
        for (i, (path, _)) in chains.iter().enumerate() {
            let scratch = Scratch::new()?;
            let chain = build_chain(path, &scratch, None)?;
            if i == 0 {
                for input in &mut inputs {
                    input.tokens = chain.tokens().count_messages(&input.conversation.messages);
                }
            }
        }
        let judge = match &args.probe {
            Some(path) => {
                let asked = inputs
                    .iter()
                    .any(|i| i.facts.iter().any(|f| f.question.is_some()));
                if !asked {
                    anyhow::bail!(
                        "--probe {}: no fact of the conversations given has a \"question\" \
                         (see docs/eval.md)",
                        path.display()
                    );
                }
                Some(Judge::from_file(path)?)
            }
            None => None,
        };
        Ok(Plan {
            chains,
            inputs,
            one_shot_only: args.one_shot_only,
            replay_only: args.replay_only,
            judge,
            cache_prices: args.cache_prices,
        })
    }

    /// Every run, in the order [`Plan::run`] makes them.
    fn planned(&self) -> Vec<Planned> {
        let mut modes = Vec::new();
        if !self.replay_only {
            modes.push(Mode::OneShot);
        }
        if !self.one_shot_only {
            modes.push(Mode::Replay);
        }
        let mut planned = Vec::new();
        for input in &self.inputs {
            for chain in 0..self.chains.len() {
                for &mode in &modes {
                    planned.push(Planned {
                        chain,
                        mode,
                        tokens: input.tokens,
                    });
                }
            }
        }
        planned
    }

    /// Runs every chain on every conversation; `progress` hears of each step and each LLM
    /// call.
    pub async fn run(&self, progress: &dyn Progress) -> anyhow::Result<Vec<Run>> {
        let ticker = Ticker::new(progress, self.planned());
        let judge = self.judge.as_ref().map(|j| j.wrapped(&ticker.wrap(false)));
        let mut runs = Vec::new();
        for input in &self.inputs {
            let references = match &judge {
                Some(judge) if input.facts.iter().any(|f| f.question.is_some()) => {
                    ticker.note(&format!("probe {}: the original's answers", input.name));
                    let original = &input.conversation.messages;
                    let asked = References::ask(judge, &input.name, original, &input.facts);
                    Some(ticker.watch(asked).await?)
                }
                _ => None,
            };
            for (path, name) in &self.chains {
                let mut finished = Vec::new();
                if !self.replay_only {
                    ticker.note(&format!("{name} on {}: one-shot", input.name));
                    finished.push(one_shot(path, name, input, &ticker).await?);
                }
                if !self.one_shot_only {
                    finished.push(replay(path, name, input, self.cache_prices, &ticker).await?);
                }
                for (mut run, context) in finished {
                    run.retention = input
                        .facts
                        .iter()
                        .any(Fact::has_words)
                        .then(|| facts::retention(&input.facts, &context));
                    if let (Some(judge), Some(references)) = (&judge, &references) {
                        let label = format!("{}/{name}/{}", input.name, run.mode.label());
                        ticker.note(&format!("probe {label}"));
                        let asked = ProbeResult::ask(judge, references, &context, &label);
                        run.probe = Some(ticker.watch(asked).await?);
                    }
                    runs.push(run);
                }
            }
        }
        Ok(runs)
    }
}

/// A scratch directory for one run's store, removed when dropped.
struct Scratch(PathBuf);

impl Scratch {
    fn new() -> anyhow::Result<Scratch> {
        use std::sync::atomic::{AtomicUsize, Ordering};
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let dir = std::env::temp_dir().join(format!(
            "tamp-eval-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir)
            .with_context(|| format!("cannot create the scratch store {}", dir.display()))?;
        Ok(Scratch(dir))
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The chain of `path` on the scratch store, its provider wrapped when `wrap` is given.
fn build_chain(
    path: &Path,
    scratch: &Scratch,
    wrap: Option<crate::chain::ProviderWrap>,
) -> anyhow::Result<Chain> {
    Chain::from_file(
        path,
        FileOverrides {
            store_path: Some(scratch.0.join("store.sqlite3")),
            wrap_provider: wrap,
            ..Default::default()
        },
    )
    .map_err(|e| anyhow::anyhow!("{e}"))
}

/// Every input token the summarizer was sent: a provider that cached part of a prompt
/// reports that part apart (`cache_read_tokens`), but it was sent all the same.
fn tokens_sent(usage: &tamp_plugin_api::Usage) -> u64 {
    usage.input_tokens + usage.cache_read_tokens + usage.cache_write_tokens
}

fn rolled_back(report: &crate::chain::ChainReport) -> usize {
    report
        .stages
        .iter()
        .filter(|s| s.status == StageStatus::RolledBack)
        .count()
}

/// The summarizer calls of a compaction that failed, over its stages.
fn failed_llm_calls(report: &crate::chain::ChainReport) -> u64 {
    report
        .stages
        .iter()
        .map(|s| u64::from(s.failed_llm_calls))
        .sum()
}

/// A finished run and its final context (the one-shot output, the replay's last answer).
type Finished = (Run, Vec<Message>);

async fn one_shot(
    path: &Path,
    name: &str,
    input: &Input,
    ticker: &Ticker<'_>,
) -> anyhow::Result<Finished> {
    let scratch = Scratch::new()?;
    let chain = build_chain(path, &scratch, Some(ticker.wrap(true)))?;
    let options = CompactOptions {
        format: Some(input.format),
        ..Default::default()
    };
    let started = Instant::now();
    let out = ticker
        .watch(chain.compact(input.conversation.clone(), &options))
        .await
        .map_err(|e| anyhow::anyhow!("{}: {}: {e}", name, input.path.display()))?;
    let ms = started.elapsed().as_secs_f64() * 1e3;
    let r = &out.report;
    let run = Run {
        chain: name.to_string(),
        conversation: input.name.clone(),
        mode: Mode::OneShot,
        requests: 1,
        tokens_before: r.tokens_before,
        tokens_after: r.tokens_after,
        llm_calls: r.llm_calls.into(),
        failed_llm_calls: failed_llm_calls(r),
        tokens_sent: tokens_sent(&r.usage),
        cost_usd: r.cost_usd,
        prefix_reuse: None,
        main_model_cost: None,
        main_model_prices: None,
        ms_per_compaction: ms,
        retention: None,
        probe: None,
        rolled_back: rolled_back(r),
        budget: *chain.budget(),
        series: Vec::new(),
    };
    ticker.finish_run(run.tokens_sent);
    Ok((run, out.conversation.messages.to_vec()))
}

/// Where the agent called its model: after each user or tool message that an assistant
/// message follows, and after the last message.
pub fn model_calls(messages: &[Message]) -> Vec<usize> {
    let mut cuts: Vec<usize> = (0..messages.len())
        .filter(|&i| {
            matches!(messages[i].role, Role::User | Role::Tool)
                && messages
                    .get(i + 1)
                    .is_some_and(|m| m.role == Role::Assistant)
        })
        .map(|i| i + 1)
        .collect();
    if cuts.last() != Some(&messages.len()) && !messages.is_empty() {
        cuts.push(messages.len());
    }
    cuts
}

async fn replay(
    path: &Path,
    name: &str,
    input: &Input,
    prices: CachePrices,
    ticker: &Ticker<'_>,
) -> anyhow::Result<Finished> {
    let scratch = Scratch::new()?;
    let chain = build_chain(path, &scratch, Some(ticker.wrap(true)))?;
    let options = CompactOptions {
        format: Some(input.format),
        thread_continuity: true,
        ..Default::default()
    };
    let messages = &input.conversation.messages;
    let cuts = model_calls(messages);
    let mut run = Run {
        chain: name.to_string(),
        conversation: input.name.clone(),
        mode: Mode::Replay,
        requests: cuts.len(),
        tokens_before: 0,
        tokens_after: 0,
        llm_calls: 0,
        failed_llm_calls: 0,
        tokens_sent: 0,
        cost_usd: None,
        prefix_reuse: None,
        main_model_cost: None,
        main_model_prices: None,
        ms_per_compaction: 0.0,
        retention: None,
        probe: None,
        rolled_back: 0,
        budget: *chain.budget(),
        series: Vec::with_capacity(cuts.len()),
    };
    // What the client posted at each request: a running sum, each message counted once.
    let mut posted_tokens = Vec::with_capacity(messages.len() + 1);
    posted_tokens.push(0u64);
    for m in messages.iter() {
        posted_tokens
            .push(posted_tokens.last().copied().unwrap_or(0) + chain.tokens().count_message(m));
    }
    run.tokens_before = posted_tokens[messages.len()];
    let mut previous: Option<Vec<Message>> = None;
    let (mut reuse, mut reused_requests, mut ms) = (0.0, 0usize, 0.0);
    let mut main_model = MainModelCost::new(prices);
    let thread = format!("tamp-eval-{}", input.name);
    for (n, &cut) in cuts.iter().enumerate() {
        let mut posted = input.conversation.with_messages(messages[..cut].to_vec());
        posted.thread_id = FfiOption::RSome(thread.as_str().into());
        let started = Instant::now();
        let out = ticker
            .watch(chain.compact(posted, &options))
            .await
            .map_err(|e| {
                anyhow::anyhow!(
                    "{name}: {}: the request of {cut} messages: {e}",
                    input.path.display()
                )
            })?;
        ms += started.elapsed().as_secs_f64() * 1e3;
        let r = &out.report;
        run.llm_calls += u64::from(r.llm_calls);
        run.failed_llm_calls += failed_llm_calls(r);
        run.tokens_sent += tokens_sent(&r.usage);
        if let Some(cost) = r.cost_usd {
            *run.cost_usd.get_or_insert(0.0) += cost;
        }
        run.rolled_back += rolled_back(r);
        let answer = out.conversation.messages.to_vec();
        let tokens_after = r.tokens_after;
        let kept_tokens = previous.as_ref().map_or(0, |prev| {
            let kept = common_prefix(prev, &answer);
            chain.tokens().count_messages(&answer[..kept])
        });
        if previous.is_some() {
            reuse += kept_tokens as f64 / tokens_after.max(1) as f64;
            reused_requests += 1;
        }
        // Counted as the postings are, so that a chain that changes nothing costs 1.0.
        let answer_tokens = chain.tokens().count_messages(&answer);
        main_model.add(kept_tokens, answer_tokens, posted_tokens[cut]);
        run.series.push(Point {
            messages: cut,
            tokens_posted: posted_tokens[cut],
            tokens_after,
            compacted: r.stages.iter().any(|s| s.status == StageStatus::Acted),
        });
        if n + 1 == cuts.len() {
            run.tokens_after = tokens_after;
        }
        previous = Some(answer);
        if (n + 1) % 10 == 0 || n + 1 == cuts.len() {
            ticker.note(&format!(
                "{name} on {}: replay, {}/{} requests",
                input.name,
                n + 1,
                cuts.len()
            ));
        }
    }
    run.prefix_reuse = (reused_requests > 0).then(|| reuse / reused_requests as f64);
    run.main_model_cost = main_model.ratio();
    run.main_model_prices = Some(prices);
    run.ms_per_compaction = ms / cuts.len().max(1) as f64;
    ticker.finish_run(run.tokens_sent);
    Ok((run, previous.unwrap_or_default()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_model_is_called_after_user_and_tool_turns_and_at_the_end() {
        let m = |role| Message::text(role, "x");
        let messages = vec![
            m(Role::System),
            m(Role::User),
            m(Role::Assistant),
            m(Role::Tool),
            m(Role::Tool),
            m(Role::Assistant),
            m(Role::User),
        ];
        assert_eq!(model_calls(&messages), [2, 5, 7]);
        assert_eq!(model_calls(&messages[..6]), [2, 5, 6]);
        assert!(model_calls(&[]).is_empty());
    }
}
