//! Starting the real `tamp serve` binary on a free loopback port, talking to it, stopping it.

use std::io::{BufRead as _, BufReader};
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;

/// A running `tamp serve` process; killed when dropped.
pub struct Server {
    child: Child,
    /// `http://127.0.0.1:PORT`.
    pub base: String,
    log: Arc<Mutex<String>>,
    pub client: reqwest::Client,
}

impl Server {
    /// `tamp serve --config <config> --listen 127.0.0.1:0` with `extra_args`.
    pub fn start(config: &Path, extra_args: &[&str]) -> Server {
        Self::start_with_env(config, extra_args, &[])
    }

    /// Like [`Server::start`], with extra environment variables.
    pub fn start_with_env(config: &Path, extra_args: &[&str], env: &[(&str, &str)]) -> Server {
        Self::start_command("serve", config, extra_args, env)
    }

    /// `tamp <command> --config <config> --listen 127.0.0.1:0` (`serve` or `proxy`), once it
    /// has printed `tamp <command>: listening on ...`.
    pub fn start_command(
        command: &str,
        config: &Path,
        extra_args: &[&str],
        env: &[(&str, &str)],
    ) -> Server {
        let mut cmd = Command::new(crate::tamp_bin());
        cmd.arg(command)
            .arg("--config")
            .arg(config)
            .args(["--listen", "127.0.0.1:0"])
            .args(extra_args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("spawn tamp {command}: {e}"));
        let listening = format!("tamp {command}: listening on ");
        let stderr = child.stderr.take().expect("stderr piped");
        let log = Arc::new(Mutex::new(String::new()));
        let (tx, rx) = mpsc::channel();
        {
            let log = Arc::clone(&log);
            // Drains stderr for the process's whole life (a full pipe would block it).
            std::thread::spawn(move || {
                for line in BufReader::new(stderr).lines() {
                    let Ok(line) = line else { break };
                    if let Some(addr) = line.strip_prefix(listening.as_str()) {
                        let _ = tx.send(addr.trim().to_string());
                    }
                    let mut log = log.lock().unwrap();
                    log.push_str(&line);
                    log.push('\n');
                }
            });
        }
        let base = match rx.recv_timeout(Duration::from_secs(120)) {
            Ok(base) => base,
            Err(_) => {
                let _ = child.kill();
                let _ = child.wait();
                std::thread::sleep(Duration::from_millis(100));
                panic!(
                    "tamp {command} did not start; its output:\n{}",
                    log.lock().unwrap()
                );
            }
        };
        Server {
            child,
            base,
            log,
            client: reqwest::Client::new(),
        }
    }

    /// Everything the server wrote to stderr so far.
    pub fn log(&self) -> String {
        self.log.lock().unwrap().clone()
    }

    /// The log once it holds every one of `needles`, or as it is after 10 s. A line logged
    /// while a request is answered can reach the reader thread after the answer reaches the
    /// test: asserting on `log()` at once is a race (a loaded CI machine lost it).
    pub fn log_containing(&self, needles: &[&str]) -> String {
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        loop {
            let log = self.log();
            if needles.iter().all(|n| log.contains(n)) || std::time::Instant::now() > deadline {
                return log;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// Asserts that `secret` (a client's API key) is neither in the server's log (which must
    /// be a debug log, so that everything it could log was) nor in any file under
    /// `store_dir`, which holds the page store (`store.sqlite3`, as every caller's chain file
    /// names it) and whatever else the server wrote beside it.
    pub fn assert_secret_kept_out(&self, secret: &str, store_dir: &Path) {
        let log = self.log();
        assert!(log.contains("DEBUG"), "not a debug log:\n{log}");
        assert!(!log.contains(secret), "the key is in the log");
        let store = store_dir.join("store.sqlite3");
        assert!(
            store.is_file(),
            "{}: no page store to look in",
            store.display()
        );
        let mut dirs = vec![store_dir.to_path_buf()];
        while let Some(dir) = dirs.pop() {
            let entries =
                std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
            for entry in entries {
                let path = entry
                    .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
                    .path();
                if path.is_dir() {
                    dirs.push(path);
                    continue;
                }
                let bytes =
                    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
                assert!(
                    !String::from_utf8_lossy(&bytes).contains(secret),
                    "the key is in {}",
                    path.display()
                );
            }
        }
    }

    /// `127.0.0.1:PORT`, for raw connections (see [`RawAnswer`]).
    pub fn addr(&self) -> &str {
        self.base.trim_start_matches("http://")
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends SIGTERM (graceful shutdown) without waiting.
    pub fn sigterm(&self) {
        let status = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .expect("run kill");
        assert!(status.success(), "kill -TERM failed");
    }

    /// Waits for the process to exit, at most `timeout`.
    pub fn wait_exit(&mut self, timeout: Duration) -> ExitStatus {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                return status;
            }
            assert!(
                Instant::now() < deadline,
                "tamp serve did not exit within {timeout:?}; log:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Whether the process has exited (and how).
    pub fn try_exit_status(&mut self) -> Option<ExitStatus> {
        self.child.try_wait().expect("try_wait")
    }

    /// `POST /v1/compact` with `body`; the status and the JSON answer.
    pub async fn compact(&self, body: &Value) -> (u16, Value) {
        let response = self
            .client
            .post(self.url("/v1/compact"))
            .json(body)
            .send()
            .await
            .expect("POST /v1/compact");
        let status = response.status().as_u16();
        (status, response.json().await.expect("JSON answer"))
    }

    /// `GET path`, whatever its status (a transport error fails the test).
    pub async fn get(&self, path: &str) -> reqwest::Response {
        self.client.get(self.url(path)).send().await.unwrap()
    }

    /// `POST /v1/compact` with `body` as it is, sent as `content_type`; the answer, whatever its
    /// status (a transport error fails the test).
    pub async fn post_compact(
        &self,
        content_type: &str,
        body: impl Into<reqwest::Body>,
    ) -> reqwest::Response {
        self.client
            .post(self.url("/v1/compact"))
            .header("content-type", content_type)
            .body(body)
            .send()
            .await
            .unwrap()
    }

    /// `GET path` as JSON, asserting 200.
    pub async fn get_json(&self, path: &str) -> Value {
        let response = self
            .client
            .get(self.url(path))
            .send()
            .await
            .unwrap_or_else(|e| panic!("GET {path}: {e}"));
        assert_eq!(response.status().as_u16(), 200, "GET {path}");
        response.json().await.expect("JSON answer")
    }

    /// `GET /metrics` text.
    pub async fn metrics(&self) -> String {
        self.client
            .get(self.url("/metrics"))
            .send()
            .await
            .expect("GET /metrics")
            .text()
            .await
            .expect("metrics text")
    }

    /// Polls `GET /v1/chain` until `done` holds for it, failing after `timeout`.
    pub async fn wait_for_chain(
        &self,
        what: &str,
        timeout: Duration,
        done: impl Fn(&Value) -> bool,
    ) -> Value {
        let deadline = Instant::now() + timeout;
        loop {
            let chain = self.get_json("/v1/chain").await;
            if done(&chain) {
                return chain;
            }
            assert!(
                Instant::now() < deadline,
                "timed out waiting for {what}; /v1/chain: {chain:#}\nlog:\n{}",
                self.log()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

impl Drop for Server {
    /// Stops the server gracefully (so it removes its private plugin copies), killing it if
    /// it has not exited within 10 s.
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_some() {
            return;
        }
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if self.child.try_wait().ok().flatten().is_some() {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The stage names of a `/v1/chain` answer, in order.
pub fn chain_stage_names(chain: &Value) -> Vec<String> {
    chain["stages"]
        .as_array()
        .map(|stages| {
            stages
                .iter()
                .filter_map(|s| s["name"].as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

/// The stage names of a compaction report, in order.
pub fn report_stage_names(answer: &Value) -> Vec<String> {
    answer["report"]["stages"]
        .as_array()
        .map(|stages| {
            stages
                .iter()
                .filter_map(|s| s["stage"].as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

/// Replaces `path`'s content the way editors save: write a temporary file beside it, then
/// rename it over `path` (a new inode).
pub fn write_atomically(path: &Path, content: &[u8]) {
    let tmp = path.with_extension("tmp-save");
    std::fs::write(&tmp, content).expect("write temporary file");
    std::fs::rename(&tmp, path).expect("rename over the file");
}

/// A [`crate::scratch_dir`] removed when dropped, unless the test is failing (then it stays
/// for a look). The serve tests copy plugin libraries (tens of MB) into theirs.
pub struct ScratchDir(std::path::PathBuf);

impl ScratchDir {
    pub fn new(tag: &str) -> ScratchDir {
        ScratchDir(crate::scratch_dir(tag))
    }
}

impl std::ops::Deref for ScratchDir {
    type Target = Path;

    fn deref(&self) -> &Path {
        &self.0
    }
}

impl Drop for ScratchDir {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

/// An HTTP/1.1 answer read off a raw socket (see [`read_answer`]).
#[derive(Debug)]
pub struct RawAnswer {
    pub status: u16,
    /// Header names in lowercase.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl RawAnswer {
    pub fn header(&self, name: &str) -> Option<&str> {
        crate::local_server::header(&self.headers, name)
    }

    /// The body as JSON, panicking with the answer when it is not.
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| {
            panic!(
                "not a JSON body ({e}): {} {:?} {:?}",
                self.status,
                self.headers,
                String::from_utf8_lossy(&self.body)
            )
        })
    }
}

/// Reads one answer (head, then a `content-length` body or the bytes up to EOF) from
/// `stream`; `None` when the connection closes before a whole head or `timeout` passes.
pub async fn read_answer(
    stream: &mut (impl tokio::io::AsyncRead + Unpin),
    timeout: Duration,
) -> Option<RawAnswer> {
    use tokio::io::AsyncReadExt as _;
    let read = async {
        let mut data = Vec::new();
        let mut chunk = [0u8; 8192];
        let head_end = loop {
            if let Some(i) = data.windows(4).position(|w| w == b"\r\n\r\n") {
                break i + 4;
            }
            match stream.read(&mut chunk).await {
                Ok(0) | Err(_) => return None,
                Ok(n) => data.extend_from_slice(&chunk[..n]),
            }
        };
        let head = String::from_utf8_lossy(&data[..head_end]).to_string();
        let mut lines = head.split("\r\n");
        let status = lines.next()?.split(' ').nth(1)?.parse().ok()?;
        let headers: Vec<(String, String)> = lines
            .filter_map(|l| l.split_once(':'))
            .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_string()))
            .collect();
        let length = headers
            .iter()
            .find(|(n, _)| n == "content-length")
            .and_then(|(_, v)| v.parse::<usize>().ok());
        let mut body = data[head_end..].to_vec();
        loop {
            if length.is_some_and(|n| body.len() >= n) {
                break;
            }
            match stream.read(&mut chunk).await {
                Ok(0) | Err(_) => break,
                Ok(n) => body.extend_from_slice(&chunk[..n]),
            }
        }
        Some(RawAnswer {
            status,
            headers,
            body,
        })
    };
    tokio::time::timeout(timeout, read).await.ok().flatten()
}

/// Whether the peer closes `stream` (EOF or reset) within `timeout`; bytes it sends
/// meanwhile are read and dropped.
pub async fn closed_within(
    stream: &mut (impl tokio::io::AsyncRead + Unpin),
    timeout: Duration,
) -> bool {
    use tokio::io::AsyncReadExt as _;
    let closed = async {
        let mut chunk = [0u8; 4096];
        loop {
            match stream.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    };
    tokio::time::timeout(timeout, closed).await.is_ok()
}
