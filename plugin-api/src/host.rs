//! The [`Host`] handle: what a plugin asks of the host while it compacts, with plain Rust
//! signatures over the ABI trait [`HostServices`](crate::HostServices).

use std::sync::Arc;

use abi_stable::std_types::{RResult, RString, RVec};

use futures_util::StreamExt as _;
// The deferred types are the ABI's; `crate::deferred` re-exports them beside the
// page-transcript prompts, which are written with the SDK, a layer above this handle.
use tamp_plugin_abi::deferred::{DeferredRequest, DeferredState};

use crate::conversation::Message;
use crate::error::HostError;
use crate::llm::{LlmRequest, LlmResponse};
use crate::page::{Page, PageDraft};
use crate::services::{CachedSummary, HostServicesBox, ProgressEvent};

/// One request of [`Host::complete_all_with_progress`] has finished.
#[derive(Debug)]
pub struct CallFinished<'a> {
    /// Requests finished so far, this one included.
    pub done: usize,
    pub total: usize,
    /// This request's position in the list passed in.
    pub index: usize,
    pub answer: &'a Result<LlmResponse, HostError>,
}

/// A plugin's handle on the host for one compaction.
#[derive(Clone)]
pub struct Host {
    services: HostServicesBox,
    strategy: Arc<str>,
}

impl Host {
    /// Wraps the host's services; `strategy` names the plugin in the pages it archives.
    pub fn new(services: HostServicesBox, strategy: &str) -> Self {
        Host {
            services,
            strategy: Arc::from(strategy),
        }
    }

    pub async fn complete(&self, request: LlmRequest) -> Result<LlmResponse, HostError> {
        self.services.complete(request).await.into_result()
    }

    /// Runs `requests` concurrently (at most `max_concurrency` at once); answers in order.
    pub async fn complete_all(
        &self,
        requests: Vec<LlmRequest>,
        max_concurrency: usize,
    ) -> Vec<Result<LlmResponse, HostError>> {
        let limit = u32::try_from(max_concurrency).unwrap_or(u32::MAX);
        let answers = self.services.complete_all(requests.into(), limit).await;
        answers.into_iter().map(RResult::into_result).collect()
    }

    /// Runs `requests` through [`Host::complete`], at most `max_concurrency` at once (0: all at
    /// once), and returns the answers in request order. As each request finishes, in whatever
    /// order, `describe` words a progress event for it, which is emitted at once with the
    /// count of finished requests.
    ///
    /// Unlike [`Host::complete_all`], the plugin words the progress (`3/12 groups
    /// summarized`), and a new request starts whenever any running one finishes, so one slow
    /// answer does not hold back the requests queued behind it.
    pub async fn complete_all_with_progress<F>(
        &self,
        requests: Vec<LlmRequest>,
        max_concurrency: usize,
        mut describe: F,
    ) -> Vec<Result<LlmResponse, HostError>>
    where
        F: FnMut(CallFinished<'_>) -> String + Send,
    {
        let total = requests.len();
        let limit = match max_concurrency {
            0 => total.max(1),
            n => n,
        };
        let mut answers: Vec<Option<Result<LlmResponse, HostError>>> =
            (0..total).map(|_| None).collect();
        let mut finishing = futures_util::stream::iter(requests.into_iter().enumerate())
            .map(|(index, request)| async move { (index, self.complete(request).await) })
            .buffer_unordered(limit);
        let mut done = 0;
        while let Some((index, answer)) = finishing.next().await {
            done += 1;
            let message = describe(CallFinished {
                done,
                total,
                index,
                answer: &answer,
            });
            self.progress(done, total, message);
            answers[index] = Some(answer);
        }
        answers
            .into_iter()
            .map(|answer| answer.expect("the stream yields every request exactly once"))
            .collect()
    }

    pub fn count_tokens(&self, text: &str) -> u64 {
        self.services.count_tokens(text.into())
    }

    pub fn count_message_tokens(&self, messages: &[Message]) -> u64 {
        self.services.count_message_tokens(messages.into())
    }

    /// Archives `messages` (with optional plugin metadata) and returns the page id.
    pub async fn archive_page(
        &self,
        messages: Vec<Message>,
        metadata: Option<&serde_json::Value>,
    ) -> Result<String, HostError> {
        let draft = PageDraft {
            messages: messages.into(),
            strategy: RString::from(&*self.strategy),
            metadata_json: metadata.map(|m| m.to_string()).unwrap_or_default().into(),
        };
        self.services
            .archive_page(draft)
            .await
            .into_result()
            .map(String::from)
    }

    /// Archives several pages at once (a store that commits in groups writes them together);
    /// the page ids, or errors, come back in the order given.
    pub async fn archive_pages(
        &self,
        pages: Vec<(Vec<Message>, Option<serde_json::Value>)>,
    ) -> Vec<Result<String, HostError>> {
        futures_util::future::join_all(pages.into_iter().map(|(messages, metadata)| async move {
            self.archive_page(messages, metadata.as_ref()).await
        }))
        .await
    }

    pub async fn load_page(&self, id: &str) -> Result<Page, HostError> {
        self.services.load_page(id.into()).await.into_result()
    }

    pub fn progress(&self, done: usize, total: usize, message: impl Into<String>) {
        self.services.progress(ProgressEvent {
            done: u32::try_from(done).unwrap_or(u32::MAX),
            total: u32::try_from(total).unwrap_or(u32::MAX),
            message: RString::from(message.into()),
        });
    }

    /// The summary the host cached for the longest leading run of `messages` (this thread,
    /// strategy and config), if any. See [`crate::sdk::incremental`] for the usual way to use it.
    pub async fn cached_summary(&self, messages: &[Message]) -> Option<CachedSummary> {
        self.services
            .cached_summary(messages.into())
            .await
            .into_option()
    }

    /// Caches `summary` as the summary of exactly `messages`.
    pub async fn cache_summary(&self, messages: &[Message], summary: &str) {
        self.services
            .cache_summary(messages.into(), summary.into())
            .await
    }

    /// Queues `(page id, request)` pairs to be answered later through a batch, each as the
    /// summary of its page (idempotent per page), in one store write. See [`crate::deferred`].
    pub async fn defer_summaries(
        &self,
        requests: Vec<(String, LlmRequest)>,
    ) -> Result<(), HostError> {
        let requests: RVec<DeferredRequest> = requests
            .into_iter()
            .map(|(page_id, request)| DeferredRequest {
                page_id: page_id.into(),
                request,
            })
            .collect();
        self.services.defer_summaries(requests).await.into_result()
    }

    /// Where the deferred requests of `page_ids` stand, in the order asked.
    pub async fn deferred_results(&self, page_ids: &[String]) -> Vec<DeferredState> {
        let ids: RVec<RString> = page_ids
            .iter()
            .map(|id| RString::from(id.as_str()))
            .collect();
        self.services.deferred_results(ids).await.into_vec()
    }

    /// Whether the host fills in the page-transcript prompts that
    /// [`crate::deferred::page_transcript_prompt`] writes, so a deferred request need not carry
    /// its page's messages a second time.
    pub fn renders_page_transcripts(&self) -> bool {
        self.has_capability(crate::capability::PAGE_TRANSCRIPT_PROMPTS_V1)
    }

    /// Whether the host lists `name` (one of [`crate::capability`]) among its capabilities.
    pub fn has_capability(&self, name: &str) -> bool {
        self.services
            .capabilities()
            .iter()
            .any(|c| c.as_str() == name)
    }

    /// The strategy name pages and summaries are attributed to.
    pub fn strategy_name(&self) -> &str {
        &self.strategy
    }

    /// The raw ABI object (for adapters and tests).
    pub fn services(&self) -> &HostServicesBox {
        &self.services
    }
}

#[cfg(test)]
mod tests {
    use std::future::Future;
    use std::pin::Pin;
    use std::sync::Mutex;
    use std::task::{Context, Poll};

    use std::sync::atomic::{AtomicU32, Ordering};

    use abi_stable::sabi_trait::TD_Opaque;
    use abi_stable::std_types::{RArc, ROption, RSlice, RStr};
    use async_ffi::{FfiFuture, FutureExt as _};

    use super::*;
    use crate::error::ErrorKind;
    use crate::llm::Usage;
    use crate::{HostServices, HostServices_TO};

    /// Pending `n` times (waking itself each time), then ready: lets a test decide which
    /// of several concurrent calls finishes first without a runtime or timers.
    struct YieldTimes(usize);

    impl Future for YieldTimes {
        type Output = ();
        fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
            if self.0 == 0 {
                return Poll::Ready(());
            }
            self.0 -= 1;
            cx.waker().wake_by_ref();
            Poll::Pending
        }
    }

    #[derive(Clone, Default)]
    struct FakeHost {
        progress: Arc<Mutex<Vec<ProgressEvent>>>,
        in_flight: Arc<AtomicU32>,
        most_in_flight: Arc<AtomicU32>,
        pages: Arc<Mutex<Vec<usize>>>,
    }

    impl HostServices for FakeHost {
        /// Answers the prompt back; a prompt `slow:N` takes N polls, `fail` fails.
        fn complete(&self, request: LlmRequest) -> FfiFuture<RResult<LlmResponse, HostError>> {
            let this = self.clone();
            async move {
                let now = this.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
                this.most_in_flight.fetch_max(now, Ordering::SeqCst);
                let prompt = request.prompt.to_string();
                let polls = prompt
                    .strip_prefix("slow:")
                    .and_then(|n| n.parse().ok())
                    .unwrap_or(0);
                YieldTimes(polls).await;
                this.in_flight.fetch_sub(1, Ordering::SeqCst);
                if prompt == "fail" {
                    return RResult::RErr(HostError::new(ErrorKind::Llm, "scripted failure"));
                }
                RResult::ROk(LlmResponse {
                    text: prompt.into(),
                    structured_json: ROption::RNone,
                    usage: Usage {
                        input_tokens: 3,
                        output_tokens: 2,
                        ..Usage::default()
                    },
                    model: "fake".into(),
                    stop_reason: "end_turn".into(),
                })
            }
            .into_ffi()
        }

        fn complete_all(
            &self,
            _requests: RVec<LlmRequest>,
            _max_concurrency: u32,
        ) -> FfiFuture<RVec<RResult<LlmResponse, HostError>>> {
            async { RVec::new() }.into_ffi()
        }

        fn count_tokens(&self, text: RStr<'_>) -> u64 {
            text.len() as u64
        }

        fn count_message_tokens(&self, messages: RSlice<'_, Message>) -> u64 {
            messages.len() as u64
        }

        fn archive_page(&self, page: PageDraft) -> FfiFuture<RResult<RString, HostError>> {
            let this = self.clone();
            async move {
                let n = page.messages.len();
                YieldTimes(10 - n).await;
                this.pages.lock().unwrap().push(n);
                RResult::ROk(RString::from(format!("pg_{n}")))
            }
            .into_ffi()
        }

        fn load_page(&self, _id: RString) -> FfiFuture<RResult<Page, HostError>> {
            async { RResult::RErr(HostError::new(ErrorKind::Host, "no pages here")) }.into_ffi()
        }

        fn progress(&self, event: ProgressEvent) {
            self.progress.lock().unwrap().push(event);
        }
    }

    fn host_of(fake: &FakeHost) -> Host {
        Host::new(
            HostServices_TO::from_ptr(RArc::new(fake.clone()), TD_Opaque),
            "test",
        )
    }

    #[test]
    fn answers_keep_request_order_while_progress_follows_completion() {
        let fake = FakeHost::default();
        let host = host_of(&fake);
        // The first request is the slowest and the last the fastest.
        let prompts = ["slow:30", "slow:20", "fail", "slow:10", "slow:0"];
        let requests = prompts
            .iter()
            .map(|p| LlmRequest::new("", *p, 10))
            .collect();
        let mut finished_order = Vec::new();
        let answers =
            futures::executor::block_on(host.complete_all_with_progress(requests, 0, |f| {
                finished_order.push(f.index);
                let verdict = if f.answer.is_ok() { "ok" } else { "failed" };
                format!("{}/{} {verdict}", f.done, f.total)
            }));
        let texts: Vec<String> = answers
            .iter()
            .map(|a| match a {
                Ok(r) => r.text.to_string(),
                Err(e) => e.message.to_string(),
            })
            .collect();
        assert_eq!(
            texts,
            [
                "slow:30",
                "slow:20",
                "scripted failure",
                "slow:10",
                "slow:0"
            ]
        );
        assert_eq!(finished_order, [2, 4, 3, 1, 0]);
        let events = fake.progress.lock().unwrap().clone();
        let shown: Vec<String> = events.iter().map(|e| e.message.to_string()).collect();
        assert_eq!(
            shown,
            ["1/5 failed", "2/5 ok", "3/5 ok", "4/5 ok", "5/5 ok"]
        );
        assert!(events.iter().all(|e| e.total == 5));
    }

    #[test]
    fn at_most_max_concurrency_calls_run_at_once() {
        let fake = FakeHost::default();
        let host = host_of(&fake);
        let requests = (0..12)
            .map(|i| LlmRequest::new("", format!("slow:{}", 12 - i), 10))
            .collect();
        let answers =
            futures::executor::block_on(
                host.complete_all_with_progress(requests, 3, |f| f.done.to_string()),
            );
        assert_eq!(answers.len(), 12);
        assert_eq!(fake.most_in_flight.load(Ordering::SeqCst), 3);

        let unlimited = FakeHost::default();
        let requests = (0..12).map(|_| LlmRequest::new("", "slow:5", 10)).collect();
        futures::executor::block_on(host_of(&unlimited).complete_all_with_progress(
            requests,
            0,
            |_| String::new(),
        ));
        assert_eq!(unlimited.most_in_flight.load(Ordering::SeqCst), 12);
        // No requests, no progress, no hang.
        let none = futures::executor::block_on(host.complete_all_with_progress(
            Vec::new(),
            0,
            |_| unreachable!(),
        ));
        assert!(none.is_empty());
    }

    #[test]
    fn pages_come_back_in_the_order_given() {
        let fake = FakeHost::default();
        let host = host_of(&fake);
        let page = |n: usize| {
            (
                (0..n)
                    .map(|i| Message::text(crate::Role::User, i.to_string()))
                    .collect::<Vec<_>>(),
                None,
            )
        };
        let ids = futures::executor::block_on(host.archive_pages(vec![page(1), page(5), page(3)]));
        let ids: Vec<String> = ids.into_iter().map(Result::unwrap).collect();
        assert_eq!(ids, ["pg_1", "pg_5", "pg_3"]);
        // Written concurrently: the fake store takes more polls the smaller the page, so the
        // pages were stored largest first, yet the ids keep the order given.
        assert_eq!(*fake.pages.lock().unwrap(), [5, 3, 1]);
    }
}
