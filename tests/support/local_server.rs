//! An axum app served on 127.0.0.1 at a free port, on its own thread and runtime, so the
//! blocking tests and the async ones can both use it; stopped and joined when dropped.

use std::net::SocketAddr;
use std::time::Duration;

pub struct LocalServer {
    addr: SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl LocalServer {
    /// Binds 127.0.0.1:0 and serves the router `app` builds from the bound address.
    pub fn start<F>(app: F) -> Self
    where
        F: FnOnce(SocketAddr) -> axum::Router + Send + 'static,
    {
        let (addr_tx, addr_rx) = std::sync::mpsc::channel();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .expect("local server runtime");
            rt.block_on(async move {
                let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
                    .await
                    .expect("bind 127.0.0.1:0");
                let addr = listener.local_addr().unwrap();
                addr_tx.send(addr).unwrap();
                tokio::select! {
                    _ = axum::serve(listener, app(addr)) => {}
                    _ = stopped => {}
                }
            });
            rt.shutdown_timeout(Duration::from_millis(100));
        });
        let addr = addr_rx.recv().expect("local server starts");
        LocalServer {
            addr,
            stop: Some(stop),
            thread: Some(thread),
        }
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// `http://127.0.0.1:PORT/v1`: the base URL OpenAI's SDKs and agents take.
    pub fn openai_url(&self) -> String {
        format!("{}/v1", self.url())
    }
}

/// A mock server: a [`LocalServer`] answering every request with one handler, over the state
/// `S` the handler records into and the test reads back. Its `url()` and `openai_url()` are
/// the server's.
pub struct MockServer<S> {
    pub(crate) server: LocalServer,
    pub(crate) shared: std::sync::Arc<S>,
}

impl<S: Send + Sync + 'static> MockServer<S> {
    /// Serves every request with `handler`, its state `shared`.
    pub(crate) fn serve<H, T>(shared: S, handler: H) -> Self
    where
        H: axum::handler::Handler<T, std::sync::Arc<S>>,
        T: 'static,
    {
        let shared = std::sync::Arc::new(shared);
        let state = std::sync::Arc::clone(&shared);
        let server =
            LocalServer::start(move |_| axum::Router::new().fallback(handler).with_state(state));
        MockServer { server, shared }
    }
}

impl<S> std::ops::Deref for MockServer<S> {
    type Target = LocalServer;
    fn deref(&self) -> &LocalServer {
        &self.server
    }
}

/// The first value of header `name` among a recorded request's `headers` (names in lowercase).
pub fn header<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
    headers
        .iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.as_str())
}

impl Drop for LocalServer {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}
