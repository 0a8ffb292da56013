//! What `tamp eval` tells its caller as it runs: a line per step, and after each LLM call how
//! far it is through its plan and the time left, for a progress bar.
//!
//! With a real model, a run's time goes to its summarizer, whose work grows with the tokens it
//! is sent; how many calls a run will make is the strategy's business and not known before.
//! So the plan's work is reckoned in tokens sent: each run is expected to send about its
//! conversation's tokens (a one-shot run summarizes what lies above the budget once, a replay
//! summarizes each message about once as the thread grows), times what the runs finished so
//! far sent for their conversations' tokens (the same chain in the same mode first, else any
//! run). The share done is the tokens sent over those expected; the time left is the time so
//! far, at that pace. The judge's calls (`--probe`) are counted, not reckoned: its questions
//! are few beside the summaries.

use std::cell::RefCell;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use tamp_plugin_api::{LlmRequest, LlmResponse};
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver, UnboundedSender};

use super::Mode;
use crate::chain::ProviderWrap;
use crate::providers::{Provider, ProviderError};

/// What [`super::Plan::run`] tells its caller as it goes.
pub trait Progress {
    /// A step begins: each run, every tenth request of a replay, each probe. A line for a log.
    fn note(&self, line: &str);
    /// After each LLM call, the summarizer's or the judge's, and after each run.
    fn advanced(&self, status: &Status) {
        let _ = status;
    }
}

/// A function of the line is a caller that only logs the steps.
impl<F: Fn(&str)> Progress for F {
    fn note(&self, line: &str) {
        self(line)
    }
}

/// How far a `tamp eval` is.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Status {
    /// LLM calls answered so far, over every run.
    pub calls: u64,
    /// The estimated share of the work done, from 0 to 1.
    pub done: f64,
    /// Since the first run began.
    pub elapsed: Duration,
    /// The estimated time left; `None` until some work is done.
    pub left: Option<Duration>,
}

/// One run of the plan, as the estimate knows it before it runs.
#[derive(Debug, Clone, Copy)]
pub struct Planned {
    /// The chain's place among the chains given.
    pub chain: usize,
    pub mode: Mode,
    /// The conversation's tokens.
    pub tokens: u64,
}

/// The plan's work, reckoned in tokens sent to the summarizer (the module's doc says how).
#[derive(Debug, Clone)]
pub struct Estimate {
    planned: Vec<Planned>,
    /// The tokens each finished run sent, in the plan's order.
    finished: Vec<u64>,
    /// Tokens sent so far by the run under way.
    running: u64,
    calls: u64,
}

impl Estimate {
    pub fn new(planned: Vec<Planned>) -> Self {
        Estimate {
            planned,
            finished: Vec::new(),
            running: 0,
            calls: 0,
        }
    }

    /// An LLM call answered: the summarizer's, with the tokens it was sent, or the judge's.
    pub fn call(&mut self, summarizer_tokens: Option<u64>) {
        self.calls += 1;
        self.running += summarizer_tokens.unwrap_or(0);
    }

    /// The run under way finished, having sent `tokens_sent` (its report's figure, which the
    /// calls heard of add up to).
    pub fn finish_run(&mut self, tokens_sent: u64) {
        if self.finished.len() < self.planned.len() {
            self.finished.push(tokens_sent);
        }
        self.running = 0;
    }

    /// What the finished runs like `run` sent per token of their conversation: the same chain
    /// in the same mode, else any; 1 before any run finished.
    fn ratio(&self, run: &Planned) -> f64 {
        let mean = |like: &dyn Fn(&Planned) -> bool| {
            let (sent, tokens) = self
                .planned
                .iter()
                .zip(&self.finished)
                .filter(|(p, _)| like(p))
                .fold((0u64, 0u64), |(s, t), (p, &f)| (s + f, t + p.tokens));
            (tokens > 0).then(|| sent as f64 / tokens as f64)
        };
        mean(&|p| p.chain == run.chain && p.mode == run.mode)
            .or_else(|| mean(&|_| true))
            .unwrap_or(1.0)
    }

    /// The estimated share of the work done, from 0 to 1.
    pub fn done(&self) -> f64 {
        let finished = self.finished.len();
        let sent: u64 = self.finished.iter().sum::<u64>() + self.running;
        let mut expected: f64 = self.finished.iter().sum::<u64>() as f64;
        for (i, run) in self.planned.iter().enumerate().skip(finished) {
            let mut tokens = self.ratio(run) * run.tokens as f64;
            if i == finished {
                // A run that outgrows its estimate is expected to go on a while yet, not to
                // be about done.
                tokens = tokens.max(self.running as f64 * 1.1);
            }
            expected += tokens;
        }
        if expected <= 0.0 {
            // Nothing to send at all: count the runs.
            return finished as f64 / self.planned.len().max(1) as f64;
        }
        (sent as f64 / expected).clamp(0.0, 1.0)
    }

    /// Where the plan stands after `elapsed`.
    pub fn status(&self, elapsed: Duration) -> Status {
        let done = self.done();
        let left = (done > 0.0).then(|| elapsed.mul_f64((1.0 - done) / done));
        Status {
            calls: self.calls,
            done,
            elapsed,
            left,
        }
    }
}

/// A provider that reports each call answered: the summarizer's with the tokens it was sent
/// (counted as the run's report counts them), the judge's without.
struct Reporting {
    inner: Arc<dyn Provider>,
    summarizer: bool,
    calls: UnboundedSender<Option<u64>>,
}

impl Provider for Reporting {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn cacheable(&self) -> bool {
        self.inner.cacheable()
    }

    fn complete<'a>(
        &'a self,
        request: &'a LlmRequest,
    ) -> BoxFuture<'a, Result<LlmResponse, ProviderError>> {
        Box::pin(async move {
            let answer = self.inner.complete(request).await;
            let sent = match &answer {
                Ok(a) if self.summarizer => Some(super::tokens_sent(&a.usage)),
                _ => None,
            };
            // The run may be over (a call outliving its compaction's timeout): no one hears.
            let _ = self.calls.send(sent);
            answer
        })
    }
}

/// The running eval's side of the progress: its estimate, and the calls its providers report.
pub(super) struct Ticker<'a> {
    progress: &'a dyn Progress,
    estimate: RefCell<Estimate>,
    started: Instant,
    sender: UnboundedSender<Option<u64>>,
    /// Locked while a compaction is watched (one at a time: the runs are made in turn).
    calls: tokio::sync::Mutex<UnboundedReceiver<Option<u64>>>,
}

impl<'a> Ticker<'a> {
    pub fn new(progress: &'a dyn Progress, planned: Vec<Planned>) -> Self {
        let (sender, calls) = unbounded_channel();
        Ticker {
            progress,
            estimate: RefCell::new(Estimate::new(planned)),
            started: Instant::now(),
            sender,
            calls: tokio::sync::Mutex::new(calls),
        }
    }

    pub fn note(&self, line: &str) {
        self.progress.note(line);
    }

    /// Wraps a chain's provider (`summarizer`) or the judge's so that its calls are heard.
    pub fn wrap(&self, summarizer: bool) -> ProviderWrap {
        let calls = self.sender.clone();
        Arc::new(move |inner| {
            Arc::new(Reporting {
                inner,
                summarizer,
                calls: calls.clone(),
            }) as Arc<dyn Provider>
        })
    }

    fn heard(&self, call: Option<u64>) {
        let status = {
            let mut estimate = self.estimate.borrow_mut();
            estimate.call(call);
            estimate.status(self.started.elapsed())
        };
        self.progress.advanced(&status);
    }

    /// Awaits `work`, telling the caller of each call as it is answered: the compaction runs
    /// in this task, so the caller is called from here, never from a provider's thread.
    pub async fn watch<T>(&self, work: impl Future<Output = T>) -> T {
        let mut calls = self.calls.lock().await;
        let mut work = std::pin::pin!(work);
        loop {
            tokio::select! {
                biased;
                Some(call) = calls.recv() => self.heard(call),
                done = &mut work => {
                    while let Ok(call) = calls.try_recv() {
                        self.heard(call);
                    }
                    return done;
                }
            }
        }
    }

    /// The run under way finished.
    pub fn finish_run(&self, tokens_sent: u64) {
        let status = {
            let mut estimate = self.estimate.borrow_mut();
            estimate.finish_run(tokens_sent);
            estimate.status(self.started.elapsed())
        };
        self.progress.advanced(&status);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn planned(chain: usize, mode: Mode, tokens: u64) -> Planned {
        Planned {
            chain,
            mode,
            tokens,
        }
    }

    #[test]
    fn before_any_run_each_is_expected_to_send_its_conversations_tokens() {
        let mut e = Estimate::new(vec![
            planned(0, Mode::OneShot, 20_000),
            planned(0, Mode::Replay, 20_000),
        ]);
        assert_eq!(e.done(), 0.0);
        assert_eq!(e.status(Duration::from_secs(5)).left, None);
        e.call(Some(10_000));
        assert_eq!(e.done(), 0.25);
        // A quarter in 60 s: three quarters left at that pace.
        let status = e.status(Duration::from_secs(60));
        assert_eq!(status.left, Some(Duration::from_secs(180)));
        assert_eq!(status.calls, 1);
        // The judge's calls are counted, not reckoned.
        e.call(None);
        assert_eq!((e.done(), e.status(Duration::ZERO).calls), (0.25, 2));
    }

    #[test]
    fn finished_runs_teach_the_estimate_what_a_chain_sends() {
        // Two chains on two conversations, one-shot.
        let mut e = Estimate::new(vec![
            planned(0, Mode::OneShot, 10_000),
            planned(1, Mode::OneShot, 10_000),
            planned(0, Mode::OneShot, 30_000),
            planned(1, Mode::OneShot, 30_000),
        ]);
        // Chain 0 sends its conversation's tokens, chain 1 a fifth of them (it clears first).
        e.call(Some(10_000));
        e.finish_run(10_000);
        e.call(Some(2_000));
        e.finish_run(2_000);
        // Expected: 12,000 sent, then 30,000 and 6,000.
        let done = e.done();
        assert!((done - 12_000.0 / 48_000.0).abs() < 1e-9, "{done}");
        // A chain not seen yet: the mean of every finished run (12,000 for 20,000).
        let e = {
            let mut e = Estimate::new(vec![
                planned(0, Mode::OneShot, 10_000),
                planned(1, Mode::OneShot, 10_000),
                planned(2, Mode::Replay, 10_000),
            ]);
            e.finish_run(10_000);
            e.finish_run(2_000);
            e
        };
        let done = e.done();
        assert!((done - 12_000.0 / 18_000.0).abs() < 1e-9, "{done}");
    }

    #[test]
    fn a_run_past_its_estimate_is_not_taken_for_done() {
        let mut e = Estimate::new(vec![planned(0, Mode::OneShot, 1_000)]);
        e.call(Some(5_000));
        let done = e.done();
        assert!(done < 0.95, "{done}");
        e.finish_run(5_000);
        assert_eq!(e.done(), 1.0);
        // Nothing to send (a conversation under its budget): the runs are counted.
        let mut e = Estimate::new(vec![
            planned(0, Mode::OneShot, 0),
            planned(0, Mode::Replay, 0),
        ]);
        e.finish_run(0);
        assert_eq!(e.done(), 0.5);
    }
}
