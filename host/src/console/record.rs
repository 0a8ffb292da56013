//! Each request a server answers, recorded in the store for the console, off the request
//! path: the handler hands its record to a bounded channel ([`Recorder::record`], which never
//! waits), and one writer task writes what has come in batches, one transaction each. A full
//! channel (a store much slower than the traffic) drops the record and counts it, rather
//! than hold a request up. The writer also deletes what `[console] retention_days` and
//! `max_requests` no longer keep, once a minute.
//!
//! What a chain run adds to its request's record ([`ChainRun`]: the report, what stands for
//! each page written, the prefix the answer kept) is turned into the stored row by the writer
//! too: serializing a compaction's report is not the request's to wait for.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use tamp_plugin_api::{Conversation, Message};
use tokio::sync::{mpsc, oneshot};

use super::compaction::{replacements, Replacement};
use crate::chain::{Chain, ChainReport, Compacted, StageStatus};
use crate::http::reload::ChainSlot;
use crate::store::activity::{CompactionRecord, RequestRecord};
use crate::store::threads::common_prefix;

/// Records waiting for the writer; past this, new ones are dropped (and counted).
const CHANNEL: usize = 4096;
/// The most records one transaction writes.
const BATCH: usize = 256;
/// How long the writer lets records gather after the first of a batch.
const LINGER: Duration = Duration::from_millis(25);
/// How often old records are deleted.
const PRUNE_EVERY: Duration = Duration::from_secs(60);
/// How long a reader waits for the records sent before it to be written.
const FLUSH_WAIT: Duration = Duration::from_secs(2);
/// How long a server that has stopped waits for the writer to write what it still holds.
const CLOSE_WAIT: Duration = Duration::from_secs(5);

/// What a chain run adds to its request's record.
#[derive(Debug)]
pub struct ChainRun {
    pub report: ChainReport,
    /// What stands in the answer for each page the run wrote.
    pub replacements: Vec<Replacement>,
    /// For a run a stage acted in: the tokens of the answer that are an unchanged prefix of
    /// what the thread's previous request sent.
    pub prefix_kept: Option<u64>,
}

impl ChainRun {
    /// The run that turned `sent` (the messages the client sent) into `compacted`, and the
    /// tokens the client sent: the report's count, or, when the chain continued the thread
    /// (its report then counts the thread's last answer plus what is new), a count of `sent`.
    pub fn of(chain: &Chain, sent: &[Message], compacted: Compacted) -> (u64, ChainRun) {
        let Compacted {
            conversation,
            report,
        } = compacted;
        let continued = report.thread.as_ref().is_some_and(|t| t.continued);
        let tokens_sent = if continued {
            chain.tokens().count_messages(sent)
        } else {
            report.tokens_before
        };
        let acted = report.stages.iter().any(|s| s.status == StageStatus::Acted);
        let answer = conversation.messages.as_slice();
        let prefix_kept = acted.then(|| match &report.thread {
            // The answer continued from the thread's last one, a prefix of what was sent last.
            Some(thread) if thread.continued => thread.prefix_kept_tokens,
            // The client's previous request is a prefix of this one's messages.
            _ => chain
                .tokens()
                .count_messages(&answer[..common_prefix(sent, answer)]),
        });
        let pages: Vec<&str> = report
            .stages
            .iter()
            .flat_map(|s| s.pages.iter().map(String::as_str))
            .collect();
        let replacements = replacements(answer, &pages);
        let run = ChainRun {
            replacements,
            prefix_kept,
            report,
        };
        (tokens_sent, run)
    }

    /// Fills what the run says into `record`: the budget, the summarizer's calls, the kept
    /// prefix and, when a stage acted, the compaction.
    fn fill(self, record: &mut RequestRecord) {
        let r = &self.report;
        record.set_budget(Some((
            r.budget.max_tokens,
            r.budget.high_watermark,
            r.budget.low_watermark,
        )));
        (record.llm_input_tokens, record.llm_output_tokens) =
            (r.usage.input_tokens, r.usage.output_tokens);
        record.llm_cost_micro_usd = r.cost_usd.map(|usd| (usd * 1e6).round() as u64);
        record.prefix_kept = self.prefix_kept;
        if r.stages.iter().any(|s| s.status == StageStatus::Acted) {
            record.compaction = Some(CompactionRecord {
                report_json: serde_json::to_string(r).unwrap_or_else(|_| "{}".into()),
                replacements_json: serde_json::to_string(&self.replacements)
                    .unwrap_or_else(|_| "[]".into()),
            });
        }
    }
}

/// What a `tamp serve` compaction request asked, kept until the chain has answered it.
pub struct Asked {
    thread: Option<String>,
    model: Option<String>,
    sent: Vec<Message>,
}

/// What the chain answered a `tamp serve` request, for its record.
pub struct Answered {
    thread: Option<String>,
    model: Option<String>,
    tokens: (u64, u64),
    pages: u32,
    acted: bool,
    run: ChainRun,
}

impl Asked {
    pub fn of(conversation: &Conversation) -> Asked {
        #[derive(serde::Deserialize)]
        struct Model {
            model: Option<String>,
        }
        let model = serde_json::from_str::<Model>(conversation.metadata_json.as_str())
            .ok()
            .and_then(|m| m.model);
        Asked {
            thread: conversation
                .thread_id
                .as_ref()
                .into_option()
                .map(|t| t.to_string()),
            model,
            sent: conversation.messages.to_vec(),
        }
    }

    /// The record of `compacted`: its thread is the request's `thread_id`, else `derived`
    /// when the chain named it from its leading messages.
    pub fn compacted(self, chain: &Chain, compacted: Compacted) -> Answered {
        let report = &compacted.report;
        let thread = self.thread.or_else(|| {
            report
                .thread
                .as_ref()
                .filter(|t| t.key == "derived")
                .map(|_| "derived".to_string())
        });
        let acted = report.stages.iter().any(|s| s.status == StageStatus::Acted);
        let pages = report.stages.iter().map(|s| s.pages.len()).sum::<usize>();
        let tokens_after = report.tokens_after;
        let (tokens_sent, run) = ChainRun::of(chain, &self.sent, compacted);
        Answered {
            thread,
            model: self.model,
            tokens: (tokens_sent, tokens_after),
            pages: u32::try_from(pages).unwrap_or(u32::MAX),
            acted,
            run,
        }
    }
}

/// A record being made, and the chain run that adds to it.
pub struct Noted {
    pub record: RequestRecord,
    pub run: Option<Box<ChainRun>>,
}

impl Noted {
    /// A `tamp serve` compaction that arrived `at`: answered 200 unless said otherwise.
    pub fn serve(at: SystemTime) -> Noted {
        Noted {
            record: RequestRecord {
                at_ms: millis(at),
                server: "serve".into(),
                route: "POST /v1/compact".into(),
                status: 200,
                ..RequestRecord::default()
            },
            run: None,
        }
    }

    /// What the chain answered.
    pub fn add(&mut self, answered: Answered) {
        let r = &mut self.record;
        r.thread = answered.thread;
        r.model = answered.model;
        r.set_tokens(Some(answered.tokens));
        r.pages = answered.pages;
        r.outcome = Some(
            if answered.acted {
                "compacted"
            } else {
                "unchanged"
            }
            .into(),
        );
        self.run = Some(Box::new(answered.run));
    }
}

/// The time `at` in milliseconds since the Unix epoch.
pub fn millis(at: SystemTime) -> u64 {
    at.duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

enum Command {
    Record(Box<(RequestRecord, Option<Box<ChainRun>>)>),
    Flush(oneshot::Sender<()>),
    /// Write what came before, then end (the server has stopped).
    Close,
}

/// What the writer tells the console about itself.
#[derive(Debug, Default)]
pub struct RecorderStats {
    /// Records dropped because the channel was full.
    pub dropped: AtomicU64,
    /// Records written.
    pub written: AtomicU64,
    /// The last write that failed, and when (Unix seconds), until one succeeds.
    pub last_error: Mutex<Option<(u64, String)>>,
}

/// The sending side of the writer task. Cheap to share (`Arc`).
pub struct Recorder {
    sender: Option<mpsc::Sender<Command>>,
    slot: Option<Arc<ChainSlot>>,
    pub stats: Arc<RecorderStats>,
    /// The writer task, until [`Recorder::close`] waits for it.
    writer: Mutex<Option<tokio::task::JoinHandle<()>>>,
}

impl Recorder {
    /// Starts the writer on the current runtime, writing to the active chain's store.
    pub fn start(slot: Arc<ChainSlot>) -> Recorder {
        let (sender, receiver) = mpsc::channel(CHANNEL);
        let stats = Arc::new(RecorderStats::default());
        let writer = tokio::spawn(write_all(receiver, Arc::clone(&slot), Arc::clone(&stats)));
        Recorder {
            sender: Some(sender),
            slot: Some(slot),
            stats,
            writer: Mutex::new(Some(writer)),
        }
    }

    /// A recorder that records nothing (a server without a runtime of its own, tests).
    pub fn off() -> Recorder {
        Recorder {
            sender: None,
            slot: None,
            stats: Arc::default(),
            writer: Mutex::default(),
        }
    }

    /// Hands `record` (and the chain run that adds to it) to the writer, unless the chain
    /// file turned recording off. Never waits: a full channel drops it.
    pub fn record(&self, record: RequestRecord, run: Option<Box<ChainRun>>) {
        let (Some(sender), Some(slot)) = (&self.sender, &self.slot) else {
            return;
        };
        if !slot.current().console().record {
            return;
        }
        if sender
            .try_send(Command::Record(Box::new((record, run))))
            .is_err()
        {
            let dropped = self.stats.dropped.fetch_add(1, Ordering::Relaxed);
            if dropped.is_power_of_two() || dropped == 0 {
                tracing::warn!(
                    "console: {} request record(s) dropped: the store writes them more slowly \
                     than they come",
                    dropped + 1
                );
            }
        }
    }

    /// Waits (at most a couple of seconds) until every record handed over before this call
    /// is written: a reader of the store then sees this server's own requests.
    pub async fn flush(&self) {
        let Some(sender) = &self.sender else {
            return;
        };
        let (done, written) = oneshot::channel();
        let sent = sender.send_timeout(Command::Flush(done), FLUSH_WAIT);
        let _ = tokio::time::timeout(FLUSH_WAIT, async {
            if sent.await.is_ok() {
                let _ = written.await;
            }
        })
        .await;
    }

    /// Has the writer write what it was handed and end, and waits for it (a few seconds at
    /// most): a server calls this once it has stopped. The writer holds the chain, and so the
    /// store: it must let go before the process exits, or a SQLite store is left unclosed, its
    /// last writes in its write-ahead log beside the file rather than in it.
    pub async fn close(&self) {
        let (Some(sender), Some(writer)) = (
            &self.sender,
            self.writer
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .take(),
        ) else {
            return;
        };
        let _ = tokio::time::timeout(CLOSE_WAIT, async {
            if sender.send(Command::Close).await.is_ok() {
                let _ = writer.await;
            }
        })
        .await;
    }
}

/// What the writer takes in one go: records, and the readers waiting for them.
#[derive(Default)]
struct Batch {
    records: Vec<RequestRecord>,
    flushes: Vec<oneshot::Sender<()>>,
    /// The server has stopped: the writer ends after this batch.
    closing: bool,
}

impl Batch {
    fn take(&mut self, command: Command) {
        match command {
            Command::Record(boxed) => {
                let (mut record, run) = *boxed;
                if let Some(run) = run {
                    run.fill(&mut record);
                }
                self.records.push(record);
            }
            Command::Flush(done) => self.flushes.push(done),
            Command::Close => self.closing = true,
        }
    }
}

/// The writer: batches of records into the store, flushes acknowledged once what came before
/// them is written, and the periodic delete of old records.
async fn write_all(
    mut receiver: mpsc::Receiver<Command>,
    slot: Arc<ChainSlot>,
    stats: Arc<RecorderStats>,
) {
    let mut last_prune: Option<Instant> = None;
    while let Some(first) = receiver.recv().await {
        let mut batch = Batch::default();
        batch.take(first);
        let deadline = tokio::time::Instant::now() + LINGER;
        loop {
            while batch.records.len() < BATCH {
                match receiver.try_recv() {
                    Ok(command) => batch.take(command),
                    Err(_) => break,
                }
            }
            // A full batch, or a reader (or the server's end) waiting for what is there:
            // written now.
            if batch.records.len() >= BATCH || !batch.flushes.is_empty() || batch.closing {
                break;
            }
            match tokio::time::timeout_at(deadline, receiver.recv()).await {
                Ok(Some(command)) => batch.take(command),
                _ => break,
            }
        }
        let Batch {
            records: batch,
            flushes,
            closing,
        } = batch;
        let active = slot.current();
        if let (false, Some(activity)) = (batch.is_empty(), active.chain.activity()) {
            let n = batch.len() as u64;
            match activity.record_requests(batch).await {
                Ok(()) => {
                    stats.written.fetch_add(n, Ordering::Relaxed);
                    *stats
                        .last_error
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner) = None;
                }
                Err(e) => {
                    let mut last = stats
                        .last_error
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner);
                    if last.is_none() {
                        tracing::warn!("console: {n} request record(s) not written: {e}");
                    }
                    *last = Some((millis(SystemTime::now()) / 1000, e.to_string()));
                }
            }
        }
        for done in flushes {
            let _ = done.send(());
        }
        if closing {
            return;
        }
        if last_prune.is_none_or(|at| at.elapsed() >= PRUNE_EVERY) {
            last_prune = Some(Instant::now());
            if let Some(activity) = active.chain.activity() {
                let keep = active.console();
                let before = millis(SystemTime::now()).saturating_sub(keep.retention_ms());
                if let Err(e) = activity.prune(before, keep.max_requests).await {
                    tracing::warn!("console: old request records not deleted: {e}");
                }
            }
        }
    }
}
