//! The per-request limits both servers put before their handlers: the request target's
//! length ([`MAX_URI_BYTES`]), the body's size and arrival time and the shutdown ([`Gate`]),
//! the bytes of bodies held at once across requests (`--max-body-memory`), the requests
//! answered at once ([`Gate::admit`]), the compactions still running
//! ([`InFlight`]), and `connection: close` on an answer given before its body was read. The
//! per-connection ones (header timeout, connection count) are in the accept loop
//! ([`super::listener`]).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::Request;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::Response;
use futures::StreamExt as _;
use tokio::sync::{watch, Notify, OwnedSemaphorePermit, Semaphore};

use super::error::{ApiError, ApiErrorCode};

/// The longest request target (path and query) answered; longer ones get 414. Page ids are
/// 35 bytes: this is for clients gone wrong, not a tight fit. (hyper itself answers 414,
/// with an empty body, above 64 KiB, before a request reaches the router.)
pub const MAX_URI_BYTES: usize = 8 << 10;

/// The per-request limits of `tamp serve`, and the shutdown signal a body read listens to.
#[derive(Debug)]
pub struct Gate {
    /// `--max-body`: larger bodies, declared or sent, are answered 413.
    max_body: usize,
    /// `--max-body-memory`: one permit per byte of request bodies read and not yet dropped,
    /// across every request; a body that would take more is answered 503 at once.
    held: Arc<Semaphore>,
    max_held: usize,
    /// `--body-timeout-secs`: a body still arriving after this is answered 408.
    body_timeout: Duration,
    /// `--max-concurrent`: one permit per request answered (but `/healthz` and `/metrics`);
    /// a compaction keeps its permit to its end, even when its client has hung up.
    permits: Arc<Semaphore>,
    max_concurrent: usize,
    /// Turns true when the server starts shutting down: a body still arriving is answered
    /// 503 at once, since it holds no work yet.
    stopping: watch::Receiver<bool>,
}

/// A request's share of `--max-concurrent`, released when the last copy is dropped: the
/// router's limit middleware keeps one until the answer is ready, and the request's extensions
/// carry one that the compaction task takes along.
#[derive(Clone)]
pub(crate) struct RequestPermit {
    _held: Arc<OwnedSemaphorePermit>,
}

impl Gate {
    pub fn new(
        max_body: usize,
        max_held: usize,
        body_timeout: Duration,
        max_concurrent: usize,
        stopping: watch::Receiver<bool>,
    ) -> Gate {
        let max_held = max_held.min(Semaphore::MAX_PERMITS);
        Gate {
            max_body,
            held: Arc::new(Semaphore::new(max_held)),
            max_held,
            body_timeout,
            permits: Arc::new(Semaphore::new(max_concurrent)),
            max_concurrent,
            stopping,
        }
    }

    /// 413 at once for a body declared larger than `--max-body`: not one byte of it is
    /// awaited.
    pub(crate) fn check_declared(&self, declared: Option<u64>) -> Result<(), ApiError> {
        match declared {
            Some(n) if n > self.max_body as u64 => Err(ApiError::body_too_large(self.max_body)),
            _ => Ok(()),
        }
    }

    /// Grows `share` (a body's share of `--max-body-memory`) to `total` bytes, or answers
    /// 503 `overloaded` when the other bodies held leave too little.
    fn hold(&self, share: &mut Option<OwnedSemaphorePermit>, total: usize) -> Result<(), ApiError> {
        let have = share.as_ref().map_or(0, OwnedSemaphorePermit::num_permits);
        if total <= have {
            return Ok(());
        }
        let more = u32::try_from(total - have)
            .ok()
            .and_then(|n| Arc::clone(&self.held).try_acquire_many_owned(n).ok())
            .ok_or_else(|| {
                ApiError::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    ApiErrorCode::Overloaded,
                    format!(
                        "the server holds {} bytes of request bodies already, and this body's \
                         {total} would pass its limit of {} (--max-body-memory); retry later",
                        self.max_held - self.held.available_permits(),
                        self.max_held
                    ),
                )
            })?;
        match share {
            Some(held) => held.merge(more),
            None => *share = Some(more),
        }
        Ok(())
    }

    /// One request's share of `--max-concurrent`, or 503 with `retry-after` when all are
    /// taken.
    pub(crate) fn admit(&self) -> Result<RequestPermit, ApiError> {
        let Ok(permit) = Arc::clone(&self.permits).try_acquire_owned() else {
            return Err(ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                ApiErrorCode::Overloaded,
                format!(
                    "the server is answering {} requests already (tamp serve --max-concurrent); \
                     retry later",
                    self.max_concurrent
                ),
            ));
        };
        Ok(RequestPermit {
            _held: Arc::new(permit),
        })
    }

    /// Reads a whole body: at most `max_body` bytes (413 beyond, at once for a declared
    /// length), within `body_timeout` of the start (408 after), only until the server starts
    /// shutting down (503), and only while the bodies held at once stay within
    /// `--max-body-memory` (503 `overloaded`: a declared length is held from the start, a
    /// chunked body as it arrives). The bytes keep their share of that limit until the last
    /// copy of them is dropped, so a client that hangs up gives it back at once, and a
    /// compaction still running on a body keeps it.
    pub(crate) async fn read_body(
        &self,
        body: Body,
        declared: Option<u64>,
    ) -> Result<Bytes, ApiError> {
        self.check_declared(declared)?;
        let max = self.max_body;
        let mut share = None;
        let capacity = declared.map_or(0, |n| n as usize);
        self.hold(&mut share, capacity)?;
        let read = async move {
            let mut bytes = Vec::with_capacity(capacity);
            let mut stream = body.into_data_stream();
            while let Some(chunk) = stream.next().await {
                let chunk = chunk.map_err(|e| {
                    ApiError::invalid_request(format!("cannot read the request body: {e}"))
                })?;
                if bytes.len() + chunk.len() > max {
                    return Err(ApiError::body_too_large(max));
                }
                self.hold(&mut share, bytes.len() + chunk.len())?;
                bytes.extend_from_slice(&chunk);
            }
            Ok(Bytes::from_owner(HeldBody {
                bytes,
                _share: share,
            }))
        };
        let mut stopping = self.stopping.clone();
        let stopped = async move {
            // A dropped sender is no shutdown signal: wait for ever then.
            if stopping.wait_for(|s| *s).await.is_err() {
                std::future::pending::<()>().await;
            }
        };
        tokio::select! {
            // A body that is all here is read even if the shutdown began meanwhile.
            biased;
            read = tokio::time::timeout(self.body_timeout, read) => read.unwrap_or_else(|_| {
                Err(ApiError::new(
                    StatusCode::REQUEST_TIMEOUT,
                    ApiErrorCode::BodyTimeout,
                    format!(
                        "the request body did not arrive within {} (tamp serve \
                         --body-timeout-secs)",
                        seconds(self.body_timeout)
                    ),
                ))
            }),
            () = stopped => Err(ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                ApiErrorCode::ShuttingDown,
                "the server is shutting down; send the request again (to it once restarted, \
                 or to another replica)",
            )),
        }
    }
}

/// A body read whole, with its share of `--max-body-memory`: given back when the last
/// `Bytes` of it is dropped.
struct HeldBody {
    bytes: Vec<u8>,
    _share: Option<OwnedSemaphorePermit>,
}

impl AsRef<[u8]> for HeldBody {
    fn as_ref(&self) -> &[u8] {
        &self.bytes
    }
}

/// `1.5 s`, `30 s`.
fn seconds(d: Duration) -> String {
    format!("{} s", d.as_secs_f64())
}

/// The compactions running now; shutdown waits for them to finish.
#[derive(Debug, Default)]
pub struct InFlight {
    count: AtomicUsize,
    idle: Notify,
}

pub struct InFlightGuard(Arc<InFlight>);

impl InFlight {
    pub fn enter(self: &Arc<Self>) -> InFlightGuard {
        self.count.fetch_add(1, Ordering::SeqCst);
        InFlightGuard(Arc::clone(self))
    }

    pub fn count(&self) -> usize {
        self.count.load(Ordering::SeqCst)
    }

    /// Returns once no compaction is running.
    pub async fn wait_idle(&self) {
        loop {
            // Created before the check, so a wake-up between the two is not lost.
            let notified = self.idle.notified();
            if self.count() == 0 {
                return;
            }
            notified.await;
        }
    }
}

impl Drop for InFlightGuard {
    fn drop(&mut self) {
        if self.0.count.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.0.idle.notify_waiters();
        }
    }
}

/// Says `connection: close` on an answer given before the request's body was read to its
/// end (a refused token, an oversized or late body, an unknown route, a full server).
/// hyper cannot carry another request on such a connection and closes it after the answer;
/// said in the answer, a keep-alive client opens a new connection for its next request
/// instead of sending it into the closed one (the fuzzer found reqwest's next request
/// failing with `IncompleteMessage`).
pub(crate) async fn close_if_body_unread(request: Request, next: Next) -> Response {
    let has_body = declared_length(request.headers()).is_some_and(|n| n > 0)
        || request.headers().contains_key(header::TRANSFER_ENCODING);
    if !has_body {
        return next.run(request).await;
    }
    let read_to_end = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (parts, body) = request.into_parts();
    let flag = Arc::clone(&read_to_end);
    // The body's stream, then an empty one that marks the end when it is reached.
    let end = futures::stream::poll_fn(move |_| {
        flag.store(true, Ordering::Release);
        std::task::Poll::Ready(None)
    });
    let body = Body::from_stream(body.into_data_stream().chain(end));
    let mut response = next.run(Request::from_parts(parts, body)).await;
    if !read_to_end.load(Ordering::Acquire) {
        response
            .headers_mut()
            .insert(header::CONNECTION, HeaderValue::from_static("close"));
    }
    response
}

/// The request's `Content-Length`, when it has one (hyper refuses a malformed one).
pub(crate) fn declared_length(headers: &HeaderMap) -> Option<u64> {
    headers
        .get(header::CONTENT_LENGTH)?
        .to_str()
        .ok()?
        .trim()
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::response::IntoResponse as _;

    #[tokio::test]
    async fn body_reads_are_bounded_in_size_time_and_by_the_shutdown() {
        let (stop, stopping) = watch::channel(false);
        let gate = Gate::new(16, 1 << 20, Duration::from_millis(200), 4, stopping);

        let body = gate
            .read_body(Body::from("{\"a\": 1}"), Some(8))
            .await
            .unwrap();
        assert_eq!(&body[..], b"{\"a\": 1}");
        let e = gate
            .read_body(Body::from("x".repeat(17)), None)
            .await
            .unwrap_err();
        assert_eq!(
            (e.status, e.code),
            (StatusCode::PAYLOAD_TOO_LARGE, ApiErrorCode::BodyTooLarge)
        );

        let started = std::time::Instant::now();
        let e = gate
            .read_body(stalled_body(b"{", Duration::from_secs(60)), None)
            .await
            .unwrap_err();
        assert_eq!(
            (e.status, e.code),
            (StatusCode::REQUEST_TIMEOUT, ApiErrorCode::BodyTimeout)
        );
        assert!(started.elapsed() < Duration::from_secs(5));

        let slow = Gate::new(16, 1 << 20, Duration::from_secs(60), 4, stop.subscribe());
        let read = tokio::spawn(async move {
            slow.read_body(stalled_body(b"{", Duration::from_secs(60)), None)
                .await
        });
        tokio::time::sleep(Duration::from_millis(50)).await;
        stop.send(true).unwrap();
        let e = tokio::time::timeout(Duration::from_secs(5), read)
            .await
            .expect("the shutdown ends a body read")
            .unwrap()
            .unwrap_err();
        assert_eq!(
            (e.status, e.code),
            (StatusCode::SERVICE_UNAVAILABLE, ApiErrorCode::ShuttingDown)
        );
        let response = e.into_response();
        assert_eq!(response.headers()[header::RETRY_AFTER], "1");
        // A body all here is still read after the shutdown began.
        assert!(gate.read_body(Body::from("{}"), None).await.is_ok());
    }

    #[tokio::test]
    async fn bodies_held_at_once_are_bounded_and_given_back_when_dropped() {
        let (_stop, stopping) = watch::channel(false);
        let gate = Arc::new(Gate::new(16, 24, Duration::from_secs(60), 4, stopping));
        // Declared larger than --max-body: 413 without a byte read.
        let e = gate
            .read_body(stalled_body(b"{", Duration::from_secs(60)), Some(17))
            .await
            .unwrap_err();
        assert_eq!(e.status, StatusCode::PAYLOAD_TOO_LARGE);
        // Two stalled bodies declared at 12 bytes each hold all 24.
        let mut stalled = Vec::new();
        for _ in 0..2 {
            let gate = Arc::clone(&gate);
            stalled.push(tokio::spawn(async move {
                gate.read_body(stalled_body(b"{", Duration::from_secs(60)), Some(12))
                    .await
            }));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        let e = gate.read_body(Body::from("{}"), Some(2)).await.unwrap_err();
        assert_eq!(
            (e.status, e.code),
            (StatusCode::SERVICE_UNAVAILABLE, ApiErrorCode::Overloaded)
        );
        assert!(e.message.contains("--max-body-memory"), "{}", e.message);
        // A chunked body is held as it arrives.
        let e = gate
            .read_body(Body::from("x".repeat(3)), None)
            .await
            .unwrap_err();
        assert_eq!(e.code, ApiErrorCode::Overloaded);
        // Their clients hang up: the share comes back.
        for task in &stalled {
            task.abort();
        }
        for task in stalled {
            let _ = task.await;
        }
        let body = gate
            .read_body(Body::from("x".repeat(16)), None)
            .await
            .unwrap();
        assert_eq!(gate.held.available_permits(), 8);
        let copy = body.clone();
        drop(body);
        assert_eq!(gate.held.available_permits(), 8, "a copy still holds it");
        drop(copy);
        assert_eq!(gate.held.available_permits(), 24);
    }

    /// A body whose first chunk is `first`, then nothing until `stall` ends.
    fn stalled_body(first: &'static [u8], stall: Duration) -> Body {
        let chunks =
            futures::stream::once(async move { Ok::<_, std::io::Error>(Bytes::from(first)) })
                .chain(futures::stream::once(async move {
                    tokio::time::sleep(stall).await;
                    Ok(Bytes::from_static(b"rest"))
                }));
        Body::from_stream(chunks)
    }
}
