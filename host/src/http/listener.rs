//! The server both `tamp serve` and `tamp proxy` run once their router exists: the accept
//! loop (at most `--max-connections` open, the header timeout, hyper's own error answers given
//! JSON bodies), the shutdown that drains requests in flight, the bearer token read from its
//! variable, and the deferred-summary worker started beside the chain.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};
use axum::body::Body;
use axum::Router;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, OwnedSemaphorePermit, Semaphore};
use tower::ServiceExt as _;

use super::access::Access;
use super::active::ActiveChain;
use super::limits::{Gate, InFlight};
use super::metrics::Metrics;
use super::reload::{self, ChainSlot};
use super::socket::{Answering, Socket, TrackedBody};
use crate::chain::FileOverrides;

/// The token `--auth-token-env NAME` names, refused when no request could carry it: a
/// header value has no leading or trailing whitespace, nor control or non-ASCII characters.
fn auth_token(name: &str, value: Option<String>) -> anyhow::Result<String> {
    let Some(token) = value else {
        bail!("--auth-token-env {name}: the environment variable {name} is not set (or not UTF-8)");
    };
    if token.trim().is_empty() {
        bail!(
            "--auth-token-env {name}: the environment variable {name} is empty or only whitespace"
        );
    }
    if token.trim() != token {
        bail!(
            "--auth-token-env {name}: the token in {name} starts or ends with whitespace, which \
             no Authorization header can carry; remove it"
        );
    }
    if token.chars().any(|c| !(c.is_ascii_graphic() || c == ' ')) {
        bail!(
            "--auth-token-env {name}: the token in {name} has a control or non-ASCII \
             character, which no Authorization header can carry"
        );
    }
    Ok(token)
}

/// The flags `tamp serve` and `tamp proxy` share, parsed (`tamp serve --help` and `tamp proxy
/// --help` say what each does there, and its default).
#[derive(Debug, Clone, PartialEq)]
pub struct ServerOptions {
    /// The chain file, compacted with and watched.
    pub config: PathBuf,
    pub listen: SocketAddr,
    /// Bytes; a larger body (of a route that reads its body whole) is answered 413.
    pub max_body: usize,
    /// Bytes of request bodies held at once, across requests; a body that would pass it is
    /// answered 503 `overloaded`. At least `max_body`.
    pub max_body_memory: usize,
    /// The environment variable holding the bearer token the guarded routes require.
    pub auth_token_env: Option<String>,
    /// Quiet time after a change of the chain file before it is reloaded.
    pub debounce_ms: u64,
    /// A page store file instead of the chain file's.
    pub store: Option<PathBuf>,
    /// How long a shutdown waits for requests in flight and answers still streaming.
    pub shutdown_grace_secs: f64,
    /// Limit on a request head's arrival and on an idle connection.
    pub header_timeout_secs: f64,
    /// Limit on a request body's arrival (408 after it).
    pub body_timeout_secs: f64,
    /// Connections open at once (more wait to be accepted).
    pub max_connections: u32,
    /// Whether to serve the console (`None`: when listening on loopback; see
    /// `console::enabled`).
    pub console: Option<bool>,
}

/// How a server starts: its shared flags, and what sets it apart (its name, the paths its
/// token guards, whether a stage must be pinned). [`Startup::start`] then builds its chain.
pub(crate) struct Startup {
    /// `tamp serve` or `tamp proxy`: heads every line printed.
    name: &'static str,
    /// The paths that require the token ([`super::access::serve_guards`],
    /// [`super::access::proxy_guards`]).
    guards: fn(&str) -> bool,
    options: ServerOptions,
    overrides: FileOverrides,
}

/// A server's chain, built and watched, and what runs beside it: what its router is made
/// of. [`Started::serve`] then answers until the shutdown.
pub(crate) struct Started {
    pub(crate) slot: Arc<ChainSlot>,
    pub(crate) metrics: Arc<Metrics>,
    pub(crate) access: Arc<Access>,
    pub(crate) in_flight: Arc<InFlight>,
    /// Turns true when the shutdown begins (a body still arriving is answered 503).
    pub(crate) stopping: watch::Receiver<bool>,
    /// The deferred-summary worker, when the chain has a stage that defers.
    pub(crate) worker: Option<crate::deferred::WorkerHandle>,
    startup: Startup,
    stop: watch::Sender<bool>,
    watcher: tokio::task::JoinHandle<()>,
    summary: String,
}

impl Startup {
    pub(crate) fn new(
        name: &'static str,
        guards: fn(&str) -> bool,
        options: ServerOptions,
    ) -> Startup {
        let overrides = FileOverrides {
            store_path: options.store.clone(),
            ..Default::default()
        };
        Startup {
            name,
            guards,
            options,
            overrides,
        }
    }

    /// Refuse a chain with a stage that has no `sha256` pin, at start and at every reload.
    pub(crate) fn require_pins(mut self, require: bool) -> Startup {
        self.overrides.require_pins = require;
        self
    }

    /// Reads the token, loads the chain (every plugin from a private copy), watches its file
    /// and starts the deferred worker: the same for both servers, in the same order, so a
    /// bad flag or chain is refused before anything listens.
    pub(crate) async fn start(self) -> anyhow::Result<Started> {
        let options = &self.options;
        if options.max_body_memory < options.max_body {
            bail!(
                "--max-body-memory {} is less than --max-body {}: a body of the largest size \
                 could never be read",
                options.max_body_memory,
                options.max_body
            );
        }
        let auth_token = match &self.options.auth_token_env {
            None => None,
            Some(name) => Some(auth_token(name, std::env::var(name).ok())?),
        };
        warn_if_over_file_limit(self.options.max_connections);
        // See `loader::load_from_private_copies` for why every plugin is loaded from a copy.
        crate::loader::load_from_private_copies();
        crate::loader::remove_stale_private_copies();
        let first = {
            let (config, overrides) = (self.options.config.clone(), self.overrides.clone());
            tokio::task::spawn_blocking(move || ActiveChain::build(&config, overrides)).await?
        }
        .map_err(|problem| anyhow::anyhow!("{problem}"))?;
        let summary = first.summary();
        let metrics = Arc::new(Metrics::default());
        let slot = Arc::new(
            ChainSlot::new(
                first,
                self.options.config.clone(),
                self.overrides.clone(),
                Arc::clone(&metrics),
            )
            .labelled(self.name),
        );
        let watcher = reload::spawn_watcher(
            Arc::clone(&slot),
            Duration::from_millis(self.options.debounce_ms),
        )
        .with_context(|| format!("cannot watch {} for changes", self.options.config.display()))?;
        let (stop, stopping) = watch::channel(false);
        let worker = start_batch_worker(&slot, stopping.clone())?;
        let access = Access::new(
            self.options.listen.ip(),
            auth_token,
            self.guards,
            Arc::clone(&slot),
        );
        Ok(Started {
            slot,
            metrics,
            access,
            in_flight: Arc::new(InFlight::default()),
            stopping,
            worker,
            startup: self,
            stop,
            watcher,
            summary,
        })
    }
}

impl Started {
    /// The flags the server was started with.
    pub(crate) fn options(&self) -> &ServerOptions {
        &self.startup.options
    }

    /// The per-request limits of `--max-body` and `--body-timeout-secs`, with `max_concurrent`
    /// requests answered at once.
    pub(crate) fn gate(&self, max_concurrent: usize) -> Gate {
        Gate::new(
            self.startup.options.max_body,
            self.startup.options.max_body_memory,
            crate::bounded::saturating_seconds(self.startup.options.body_timeout_secs),
            max_concurrent,
            self.stopping.clone(),
        )
    }

    /// Listens on `--listen`, prints the lines tools wait for (the address, the chain, then
    /// `more`, each with [`LISTEN_ADDR`] replaced by the address listened on), and answers
    /// with `app` until SIGTERM or Ctrl-C; then drains.
    pub(crate) async fn serve(self, app: Router, more: &[String]) -> anyhow::Result<()> {
        let Started {
            startup,
            stop,
            stopping,
            in_flight,
            worker,
            watcher,
            summary,
            ..
        } = self;
        let name = startup.name;
        let listener = TcpListener::bind(startup.options.listen)
            .await
            .with_context(|| format!("cannot listen on {}", startup.options.listen))?;
        let addr = listener.local_addr()?;
        // Tools (and the tests) wait for this line to learn the port of `--listen 127.0.0.1:0`.
        eprintln!("{name}: listening on http://{addr}");
        eprintln!("{name}: serving {summary}");
        for line in more {
            eprintln!("{name}: {}", line.replace(LISTEN_ADDR, &addr.to_string()));
        }
        run_until_shutdown(
            name,
            listener,
            app,
            Running {
                limits: ConnectionLimits::of(
                    startup.options.max_connections,
                    startup.options.header_timeout_secs,
                ),
                stop: (stop, stopping),
                in_flight,
                grace_secs: startup.options.shutdown_grace_secs,
                worker,
                watcher,
            },
        )
        .await
    }
}

/// In a line [`Started::serve`] prints: the address listened on (its port when `--listen`
/// asked for port 0).
pub(crate) const LISTEN_ADDR: &str = "{listen_addr}";

/// The connection limits `tamp serve` and `tamp proxy` take from their flags.
struct ConnectionLimits {
    max_connections: u32,
    header_timeout: Duration,
}

impl ConnectionLimits {
    fn of(max_connections: u32, header_timeout_secs: f64) -> Self {
        ConnectionLimits {
            max_connections,
            header_timeout: crate::bounded::saturating_seconds(header_timeout_secs),
        }
    }
}

/// What a server built around the chain runs with, once its router exists.
struct Running {
    limits: ConnectionLimits,
    stop: (watch::Sender<bool>, watch::Receiver<bool>),
    in_flight: Arc<InFlight>,
    grace_secs: f64,
    worker: Option<crate::deferred::WorkerHandle>,
    watcher: tokio::task::JoinHandle<()>,
}

/// Accepts connections until a shutdown signal, then drains: `tamp serve` and `tamp proxy`
/// stop the same way. `name` starts each line printed.
async fn run_until_shutdown(
    name: &str,
    listener: TcpListener,
    app: axum::Router,
    running: Running,
) -> anyhow::Result<()> {
    let Running {
        limits,
        stop: (stop_tx, stop_rx),
        in_flight,
        grace_secs,
        worker,
        watcher,
    } = running;
    let connections = Connections::new(limits.max_connections, limits.header_timeout);
    let accepting = tokio::spawn(accept_loop(listener, app, connections.clone(), stop_rx));

    crate::signals::shutdown().await;
    let _ = stop_tx.send(true);
    // The listener is closed once the loop has returned: from here on connections are refused.
    let _ = accepting.await;
    eprintln!("{name}: shutting down: no new connections; finishing requests in flight");

    // Idle and half-sent connections close at once (they hold no work); a body still
    // arriving is answered 503. What is left: answers being computed or sent, and
    // compactions whose client hung up, which still run on their own tasks (their pages are
    // written as they go).
    let grace = crate::bounded::saturating_seconds(grace_secs);
    let drained = async {
        connections.all_closed().await;
        in_flight.wait_idle().await;
    };
    if tokio::time::timeout(grace, drained).await.is_err() {
        eprintln!(
            "{name}: {} compaction(s) and {} connection(s) still open after {:.0}s; stopping \
             anyway",
            in_flight.count(),
            connections.open(),
            grace.as_secs_f64()
        );
    }
    if let Some(worker) = worker {
        // Its pass in hand finishes; whatever it leaves is resumed by the next worker.
        worker.join().await;
    }
    watcher.abort();
    let _ = watcher.await;
    // The chains (and with them the page stores, whose writes have all been committed by
    // now) are dropped here: the SQLite connections close and checkpoint their WAL.
    crate::loader::remove_private_copies();
    eprintln!("{name}: stopped");
    Ok(())
}

/// Starts the deferred-summary worker when the chain has a `batch-deferred` stage: its
/// queue is the chain's store, its settings `[batch]` (read at start; a reload does not
/// restart it). It stops when `stop` turns true.
fn start_batch_worker(
    slot: &ChainSlot,
    stop: tokio::sync::watch::Receiver<bool>,
) -> anyhow::Result<Option<crate::deferred::WorkerHandle>> {
    let active = slot.current();
    let defers = active
        .chain
        .stages()
        .iter()
        .any(|s| s.plugin.meta().name == crate::deferred::PLUGIN_NAME);
    if !defers {
        return Ok(None);
    }
    let Some(queue) = active.chain.queue().cloned() else {
        bail!("the chain has a batch-deferred stage but its store keeps no deferred queue");
    };
    let file = crate::config::LoadedChainFile::read(&active.config_path)?;
    let worker = file
        .batch_worker(queue)?
        .with_pages(Arc::clone(active.chain.store()));
    eprintln!("tamp: deferred-summary worker started");
    let mut stop = stop;
    Ok(Some(worker.spawn(async move {
        let _ = stop.wait_for(|s| *s).await;
    })))
}

/// The open connections: a permit each, out of `--max-connections`.
#[derive(Clone)]
pub(crate) struct Connections {
    permits: Arc<Semaphore>,
    max: u32,
    header_timeout: Duration,
    /// When "at the limit" was last logged (once a minute at most).
    last_full_warning: Arc<std::sync::Mutex<Option<Instant>>>,
}

impl Connections {
    pub(crate) fn new(max: u32, header_timeout: Duration) -> Connections {
        Connections {
            permits: Arc::new(Semaphore::new(max as usize)),
            max,
            header_timeout,
            last_full_warning: Arc::default(),
        }
    }

    /// A permit for one more connection; waits while `max` are open.
    async fn admit(&self) -> OwnedSemaphorePermit {
        if let Ok(permit) = Arc::clone(&self.permits).try_acquire_owned() {
            return permit;
        }
        {
            let mut last = self.last_full_warning.lock().unwrap();
            if last.is_none_or(|at| at.elapsed() >= Duration::from_secs(60)) {
                *last = Some(Instant::now());
                tracing::warn!(
                    "{} connections open (--max-connections): new ones wait until one closes",
                    self.max
                );
            }
        }
        Arc::clone(&self.permits)
            .acquire_owned()
            .await
            .expect("the connection semaphore is never closed")
    }

    pub(crate) fn open(&self) -> usize {
        self.max as usize - self.permits.available_permits()
    }

    /// Returns once every connection has closed.
    pub(crate) async fn all_closed(&self) {
        let _all = self
            .permits
            .acquire_many(self.max)
            .await
            .expect("the connection semaphore is never closed");
    }
}

/// Accepts connections until `stop` turns true, at most `--max-connections` open at once:
/// beyond, new ones wait in the listen backlog (the listener is not polled) rather than take
/// a file descriptor each. Returning drops the listener.
pub(crate) async fn accept_loop(
    listener: TcpListener,
    app: Router,
    connections: Connections,
    mut stop: watch::Receiver<bool>,
) {
    loop {
        let permit = tokio::select! {
            permit = connections.admit() => permit,
            _ = stop.wait_for(|s| *s) => return,
        };
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            _ = stop.wait_for(|s| *s) => return,
        };
        match accepted {
            Ok((stream, _peer)) => {
                let _ = stream.set_nodelay(true);
                tokio::spawn(serve_connection(
                    stream,
                    app.clone(),
                    connections.header_timeout,
                    stop.clone(),
                    permit,
                ));
            }
            // The peer gave up before it was accepted: nothing to do.
            Err(e) if is_connection_error(&e) => {}
            // Out of file descriptors (EMFILE) most likely: wait for some to be closed.
            Err(e) => {
                tracing::error!("cannot accept a connection: {e}; retrying in 1 s");
                tokio::select! {
                    () = tokio::time::sleep(Duration::from_secs(1)) => {}
                    _ = stop.wait_for(|s| *s) => return,
                }
            }
        }
    }
}

fn is_connection_error(e: &std::io::Error) -> bool {
    use std::io::ErrorKind::*;
    matches!(
        e.kind(),
        ConnectionRefused | ConnectionAborted | ConnectionReset
    )
}

/// Serves one HTTP/1.1 connection until it closes, or until the shutdown if it is idle or
/// still sending a request head then. `_permit` is its place among `--max-connections`.
async fn serve_connection(
    stream: TcpStream,
    app: Router,
    header_timeout: Duration,
    mut stop: watch::Receiver<bool>,
    _permit: OwnedSemaphorePermit,
) {
    let answering = Arc::new(AtomicUsize::new(0));
    let socket = Socket {
        stream,
        write_waiting: Arc::new(AtomicBool::new(false)),
        answering: Arc::clone(&answering),
        rewritten: None,
    };
    let write_waiting = Arc::clone(&socket.write_waiting);
    let service = {
        let answering = Arc::clone(&answering);
        hyper::service::service_fn(move |request: hyper::Request<Incoming>| {
            let guard = Answering::enter(&answering);
            let app = app.clone();
            async move {
                let response = app
                    .oneshot(request.map(Body::new))
                    .await
                    .unwrap_or_else(|never| match never {});
                Ok::<_, Infallible>(response.map(|body| TrackedBody {
                    body,
                    _answering: guard,
                }))
            }
        })
    };
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        // Also the idle time allowed between two requests of a kept-alive connection: hyper
        // starts the clock when it starts waiting for the next request head.
        .header_read_timeout(header_timeout);
    let connection = builder.serve_connection(TokioIo::new(socket), service);
    tokio::pin!(connection);
    tokio::select! {
        result = connection.as_mut() => {
            if let Err(e) = result {
                tracing::debug!("connection closed: {e}");
            }
            return;
        }
        _ = stop.wait_for(|s| *s) => {}
    }
    // No request after the one in hand, if any.
    connection.as_mut().graceful_shutdown();
    if answering.load(Ordering::SeqCst) == 0 && !write_waiting.load(Ordering::SeqCst) {
        // Idle, or a request head still arriving: nothing is lost by closing it now, and a
        // client that never finishes its request does not hold up the shutdown.
        return;
    }
    // A request in hand: its answer is sent (a body still arriving gets 503 at once), then
    // hyper closes the connection. The shutdown grace bounds this wait.
    if let Err(e) = connection.await {
        tracing::debug!("connection closed: {e}");
    }
}

/// File descriptors the server needs besides its connections: stdio, the runtime, the
/// watcher, the page store, outgoing LLM connections. A rough figure for a warning.
const OWN_FILES: u64 = 64;

/// Warns when `--max-connections` does not fit under the open-file limit: accepting would
/// then fail (EMFILE) before the limit is reached, and the server could not answer even
/// `/healthz` until connections close.
fn warn_if_over_file_limit(max_connections: u32) {
    let Some(limit) = std::fs::read_to_string("/proc/self/limits")
        .ok()
        .and_then(|text| soft_open_files_limit(&text))
    else {
        return;
    };
    if u64::from(max_connections) + OWN_FILES > limit {
        eprintln!(
            "tamp: warning: --max-connections {max_connections} plus the server's own \
             files (about {OWN_FILES}) is above the open-file limit of {limit} (ulimit -n): \
             lower --max-connections or raise the limit"
        );
    }
}

/// The soft "Max open files" of a `/proc/<pid>/limits` text (`None` when unlimited).
fn soft_open_files_limit(limits: &str) -> Option<u64> {
    let line = limits.lines().find(|l| l.starts_with("Max open files"))?;
    line["Max open files".len()..]
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_no_header_can_carry_are_refused_naming_the_variable() {
        assert_eq!(auth_token("T", Some("s3cret".into())).unwrap(), "s3cret");
        assert_eq!(
            auth_token("T", Some("two words".into())).unwrap(),
            "two words"
        );
        for (value, says) in [
            (None, "not set"),
            (Some(""), "empty or only whitespace"),
            (Some("  \t "), "empty or only whitespace"),
            (Some("tok\n"), "starts or ends with whitespace"),
            (Some(" tok"), "starts or ends with whitespace"),
            (Some("to\u{7}k"), "control or non-ASCII"),
            (Some("tök"), "control or non-ASCII"),
        ] {
            let e = auth_token("TAMP_TOKEN", value.map(str::to_string))
                .unwrap_err()
                .to_string();
            assert!(
                e.contains("TAMP_TOKEN") && e.contains(says),
                "{value:?}: {e}"
            );
        }
    }

    #[test]
    fn the_open_file_limit_is_read_from_proc_limits() {
        let text = "Limit                     Soft Limit           Hard Limit           Units     \n\
                    Max processes             63445                63445                processes \n\
                    Max open files            256                  524288               files     \n";
        assert_eq!(soft_open_files_limit(text), Some(256));
        let unlimited =
            "Max open files            unlimited            unlimited            files\n";
        assert_eq!(soft_open_files_limit(unlimited), None);
    }

    /// The accept loop over a router with `/healthz` and a `/slow` route that answers after
    /// 600 ms; the address, the connections and the stop switch.
    async fn test_server(
        max_connections: u32,
        header_timeout: Duration,
    ) -> (SocketAddr, Connections, watch::Sender<bool>) {
        let app = Router::new()
            .route("/healthz", axum::routing::get(|| async { "ok" }))
            .route(
                "/slow",
                axum::routing::get(|| async {
                    tokio::time::sleep(Duration::from_millis(600)).await;
                    "slow"
                }),
            );
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let connections = Connections::new(max_connections, header_timeout);
        let (stop, stopping) = watch::channel(false);
        tokio::spawn(accept_loop(listener, app, connections.clone(), stopping));
        (addr, connections, stop)
    }

    /// Reads until EOF (or a reset); what arrived, or `None` if `timeout` passed first.
    async fn read_to_close(stream: &mut TcpStream, timeout: Duration) -> Option<String> {
        use tokio::io::AsyncReadExt as _;
        let mut data = Vec::new();
        let read = async {
            let mut chunk = [0u8; 1024];
            while let Ok(n) = stream.read(&mut chunk).await {
                if n == 0 {
                    break;
                }
                data.extend_from_slice(&chunk[..n]);
            }
        };
        tokio::time::timeout(timeout, read).await.ok()?;
        Some(String::from_utf8_lossy(&data).into_owned())
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_request_head_sent_too_slowly_or_never_is_closed_after_the_header_timeout() {
        use tokio::io::AsyncWriteExt as _;
        let (addr, connections, _stop) = test_server(8, Duration::from_millis(300)).await;
        let mut idle = TcpStream::connect(addr).await.unwrap();
        let mut slow = TcpStream::connect(addr).await.unwrap();
        slow.write_all(b"GET /healthz HTTP/1.1\r\nhost: t\r\n")
            .await
            .unwrap();
        let started = Instant::now();
        assert_eq!(
            read_to_close(&mut idle, Duration::from_secs(5))
                .await
                .as_deref(),
            Some("")
        );
        assert_eq!(
            read_to_close(&mut slow, Duration::from_secs(5))
                .await
                .as_deref(),
            Some("")
        );
        assert!(
            started.elapsed() >= Duration::from_millis(250),
            "{:?}",
            started.elapsed()
        );
        // Their permits are back: the one left is the accept loop's, held for the next.
        let deadline = Instant::now() + Duration::from_secs(5);
        while connections.open() > 1 {
            assert!(Instant::now() < deadline, "{} open", connections.open());
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn beyond_max_connections_new_ones_wait_until_one_closes() {
        use tokio::io::AsyncWriteExt as _;
        let (addr, _connections, _stop) = test_server(1, Duration::from_secs(30)).await;
        let mut first = TcpStream::connect(addr).await.unwrap();
        first
            .write_all(b"GET /healthz HTTP/1.1\r\nhost: t\r\n\r\n")
            .await
            .unwrap();
        let mut answer = [0u8; 12];
        tokio::io::AsyncReadExt::read_exact(&mut first, &mut answer)
            .await
            .unwrap();
        assert_eq!(&answer, b"HTTP/1.1 200");
        let mut second = TcpStream::connect(addr).await.unwrap();
        second
            .write_all(b"GET /healthz HTTP/1.1\r\nhost: t\r\nconnection: close\r\n\r\n")
            .await
            .unwrap();
        assert_eq!(
            read_to_close(&mut second, Duration::from_millis(400)).await,
            None,
            "served beyond --max-connections 1"
        );
        drop(first);
        let answer = read_to_close(&mut second, Duration::from_secs(5))
            .await
            .expect("served once the first closed");
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_shutdown_closes_idle_and_half_sent_connections_and_finishes_answers() {
        use tokio::io::AsyncWriteExt as _;
        let (addr, connections, stop) = test_server(8, Duration::from_secs(30)).await;
        let mut idle = TcpStream::connect(addr).await.unwrap();
        let mut half = TcpStream::connect(addr).await.unwrap();
        half.write_all(b"GET /healthz HTTP/1.1\r\nhos")
            .await
            .unwrap();
        let mut kept_alive = TcpStream::connect(addr).await.unwrap();
        kept_alive
            .write_all(b"GET /healthz HTTP/1.1\r\nhost: t\r\n\r\n")
            .await
            .unwrap();
        let mut busy = TcpStream::connect(addr).await.unwrap();
        busy.write_all(b"GET /slow HTTP/1.1\r\nhost: t\r\n\r\n")
            .await
            .unwrap();
        // Accepted in order: once a last one is answered, the others were accepted; a little
        // more time lets the server read what they sent.
        let mut last = TcpStream::connect(addr).await.unwrap();
        last.write_all(b"GET /healthz HTTP/1.1\r\nhost: t\r\nconnection: close\r\n\r\n")
            .await
            .unwrap();
        assert!(read_to_close(&mut last, Duration::from_secs(5))
            .await
            .is_some());
        tokio::time::sleep(Duration::from_millis(100)).await;

        let stopped = Instant::now();
        stop.send(true).unwrap();
        for stream in [&mut idle, &mut half] {
            assert_eq!(
                read_to_close(stream, Duration::from_millis(400))
                    .await
                    .as_deref(),
                Some("")
            );
        }
        let answered = read_to_close(&mut kept_alive, Duration::from_millis(400))
            .await
            .expect("the kept-alive connection closed");
        assert!(answered.starts_with("HTTP/1.1 200"), "{answered}");
        assert!(stopped.elapsed() < Duration::from_millis(500));
        // The request in hand is answered; then the connection closes.
        let answer = read_to_close(&mut busy, Duration::from_secs(5))
            .await
            .expect("the busy connection closed after its answer");
        assert!(
            answer.starts_with("HTTP/1.1 200") && answer.ends_with("slow"),
            "{answer}"
        );
        tokio::time::timeout(Duration::from_secs(5), connections.all_closed())
            .await
            .expect("every connection closed");
        assert!(TcpStream::connect(addr).await.is_err(), "still accepting");
    }
}
