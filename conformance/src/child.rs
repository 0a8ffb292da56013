//! Each check runs in a child process, so a plugin that aborts the process or never returns
//! fails that check instead of taking the kit down. The child gets its request in the
//! environment variable [`CHILD_ENV`] (JSON: the check ids and the kit's options), runs the
//! checks, and prints one line per check: [`RESULT_MARKER`] followed by the [`CheckResult`]
//! as JSON. The child is `tamp conformance <plugin> --child` ([`Launcher::Tamp`]).

use std::io::Read as _;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::checks::run_check;
use super::report::{CheckOutput, Finding};
use super::KitOptions;

/// The environment variable that makes a process a check's child.
pub const CHILD_ENV: &str = "TAMP_CONFORMANCE_CHILD";
/// Starts the child's one line of result on stdout.
pub const RESULT_MARKER: &str = "TAMP-CONFORMANCE-RESULT ";

/// What a child is asked to do: these checks, in this order.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ChildRequest {
    pub checks: Vec<String>,
    pub options: KitOptions,
}

/// One check's result line.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CheckResult {
    pub check: String,
    pub output: CheckOutput,
    pub ms: f64,
}

/// How the kit starts a check's child process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Launcher {
    /// A `tamp` binary: `tamp conformance <plugin> --child`.
    Tamp(PathBuf),
    /// No child: checks run in this process (no protection from aborts and hangs).
    InProcess,
}

impl Launcher {
    fn command(&self, request: &ChildRequest) -> Option<Command> {
        let mut cmd = match self {
            Launcher::Tamp(bin) => {
                let mut c = Command::new(bin);
                c.arg("conformance")
                    .arg(&request.options.plugin)
                    .arg("--child");
                c
            }
            Launcher::InProcess => return None,
        };
        let json = serde_json::to_string(request).expect("a child request serializes");
        cmd.env(CHILD_ENV, json)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        Some(cmd)
    }
}

/// If this process is a check's child, runs the checks, prints each result as it finishes
/// and returns true.
pub fn serve_child_from_env() -> bool {
    let Some(json) = std::env::var_os(CHILD_ENV) else {
        return false;
    };
    let print = |result: &CheckResult| {
        use std::io::Write as _;
        let line = serde_json::to_string(result).expect("a check result serializes");
        let mut stdout = std::io::stdout().lock();
        let _ = writeln!(stdout, "\n{RESULT_MARKER}{line}");
        let _ = stdout.flush();
    };
    match serde_json::from_str::<ChildRequest>(&json.to_string_lossy()) {
        Ok(request) => run_here(&request, print),
        Err(e) => print(&CheckResult {
            check: "TAMP-LOAD-01".into(),
            output: CheckOutput {
                findings: vec![Finding::new(
                    "TAMP-LOAD-01",
                    format!("bad {CHILD_ENV}: {e}"),
                )],
                ..CheckOutput::default()
            },
            ms: 0.0,
        }),
    }
    true
}

/// Runs the request's checks in this process, on a runtime of its own, handing each result
/// to `done` as it finishes.
pub fn run_here(request: &ChildRequest, mut done: impl FnMut(&CheckResult)) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime starts");
    for check in &request.checks {
        let started = Instant::now();
        let output = runtime.block_on(run_check(check, &request.options));
        done(&CheckResult {
            check: check.clone(),
            output,
            ms: started.elapsed().as_secs_f64() * 1e3,
        });
    }
}

/// Runs `checks` through `launcher`: in one child process while it lives; when it dies,
/// prints no result, or a check outlives its time, the check it was running fails with that
/// and the rest go on in a new child. Results come back in the order given.
pub fn run_checks_isolated(
    launcher: &Launcher,
    checks: &[String],
    options: &KitOptions,
) -> Vec<CheckResult> {
    let mut results = Vec::new();
    let mut pending: Vec<String> = checks.to_vec();
    while !pending.is_empty() {
        let request = ChildRequest {
            checks: pending.clone(),
            options: options.clone(),
        };
        let Some(mut cmd) = launcher.command(&request) else {
            run_here(&request, |r| results.push(r.clone()));
            break;
        };
        let limit = child_timeout(options);
        let mut started = Instant::now();
        let died = |check: &str, message: String, ms: f64| CheckResult {
            check: check.to_string(),
            output: CheckOutput {
                findings: vec![Finding::new(check, message)],
                ..CheckOutput::default()
            },
            ms,
        };
        let mut child = match cmd.spawn() {
            Ok(c) => c,
            Err(e) => {
                let message = format!("cannot start the check's process: {e}");
                results.extend(pending.iter().map(|c| died(c, message.clone(), 0.0)));
                break;
            }
        };
        let (tx, rx) = std::sync::mpsc::channel::<CheckResult>();
        let stdout = child.stdout.take();
        let reader = std::thread::spawn(move || {
            let Some(out) = stdout else { return };
            for line in std::io::BufRead::lines(std::io::BufReader::new(out)) {
                let Ok(line) = line else { break };
                if let Some(json) = line.strip_prefix(RESULT_MARKER) {
                    if let Ok(result) = serde_json::from_str::<CheckResult>(json) {
                        let _ = tx.send(result);
                    }
                }
            }
        });
        let stderr = child.stderr.take();
        let stderr = std::thread::spawn(move || {
            let mut buf = Vec::new();
            if let Some(mut p) = stderr {
                let _ = p.read_to_end(&mut buf);
            }
            String::from_utf8_lossy(&buf).into_owned()
        });
        let mut timed_out = false;
        loop {
            match rx.recv_timeout(limit.saturating_sub(started.elapsed())) {
                Ok(result) => {
                    pending.retain(|c| *c != result.check);
                    results.push(result);
                    started = Instant::now();
                }
                Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => break,
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                    timed_out = true;
                    let _ = child.kill();
                    break;
                }
            }
        }
        let status = child.wait().ok();
        let _ = reader.join();
        let stderr = stderr.join().unwrap_or_default();
        if pending.is_empty() {
            break;
        }
        // The child runs its checks in order: the first without a result is the culprit.
        let culprit = pending.remove(0);
        let ms = started.elapsed().as_secs_f64() * 1e3;
        let message = if timed_out {
            format!(
                "no result within {:.0}s: the plugin hung or is far too slow (the check's process was killed)",
                limit.as_secs_f64()
            )
        } else {
            let how = status.map(describe_exit).unwrap_or_else(|| "ended".into());
            let tail: Vec<&str> = stderr.lines().rev().take(3).collect();
            let tail: Vec<&str> = tail.into_iter().rev().collect();
            let mut message = format!("the check's process {how} without a result");
            if !tail.is_empty() {
                message.push_str(&format!("; its last words: {}", tail.join(" | ")));
            }
            message
        };
        results.push(died(&culprit, message, ms));
    }
    results
}

/// How long a check's process may run before it is killed: four compactions' time limits
/// and a start-up allowance.
pub fn child_timeout(options: &KitOptions) -> Duration {
    Duration::from_secs_f64(options.timeout_secs * 4.0 + 4.0)
}

fn describe_exit(status: std::process::ExitStatus) -> String {
    #[cfg(unix)]
    {
        use std::os::unix::process::ExitStatusExt as _;
        if let Some(signal) = status.signal() {
            let name = match signal {
                6 => " (SIGABRT: the plugin aborted the process)",
                9 => " (SIGKILL)",
                11 => " (SIGSEGV: invalid memory access)",
                _ => "",
            };
            return format!("was killed by signal {signal}{name}");
        }
    }
    match status.code() {
        Some(code) => format!("exited with status {code}"),
        None => "ended".into(),
    }
}
