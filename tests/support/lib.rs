//! Shared support for the end-to-end tests: builds the plugin libraries with cargo (once per
//! test process; cargo's own lock serializes concurrent builds) and finds them, the `tamp`
//! binary and the fixtures.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use tamp_plugin_api::Conversation;

/// A scripted upstream for the coding agents: checks requests as the real APIs do, answers a
/// tool task.
pub mod agent_upstream;
/// A headless Chromium, installed from Debian's packages when none is there.
pub mod browser;
/// That browser driven through the DevTools protocol (navigate, evaluate, click, screenshot).
pub mod cdp;
/// One compaction through a built chain and its first stage's report.
pub mod chain_run;
/// What a compaction left: its summaries' texts, their pages, the first stage's status.
pub mod compacted;
/// The docs' marked blocks (runnable commands, files a reader writes) and the scratch
/// directory a reader's steps run in.
pub mod docs;
/// WebAssembly guests built from source with componentize-py and componentize-js.
pub mod guests;
/// An axum app on 127.0.0.1 at a free port, for the local provider servers.
pub mod local_server;
/// Local servers speaking the providers' wire formats (Anthropic Messages, OpenAI Chat Completions).
pub mod mock_batches;
pub mod mock_llm;
/// A local Anthropic and OpenAI upstream for `tamp proxy`, SSE streams included.
pub mod mock_upstream;
/// A real PostgreSQL server in a scratch directory, for the shared-store tests.
pub mod postgres;
/// Starting and driving a real `tamp serve` process.
pub mod serve_support;
/// The benches' statistics: medians and percentiles of measured times.
pub mod stats;
/// Tools installed once into `target/tools/`: Prism, the official Python SDKs, PostgreSQL,
/// Chromium.
pub mod tools;

/// Packages whose artifacts the tests load or run.
const PACKAGES: &[&str] = &[
    "tamp-cli",
    "tamp-buffered-tool-call",
    "tamp-map-reduce-adaptive",
    "tamp-anchored-structured",
    "tamp-batch-deferred",
    "tamp-tool-result-clearing",
    "tamp-custom-strategy",
    "tamp-test-misbehaving",
    "tamp-test-not-a-plugin",
    "tamp-test-incompatible-abi",
    "tamp-test-layout-mismatch",
    "tamp-test-rule-breaker",
    "tamp-test-bad-metadata",
];

/// The multi-threaded runtime most end-to-end tests drive the chain on.
pub fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime")
}

pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ has a parent")
        .to_path_buf()
}

/// target/<profile> of the running test binary (it lives in target/<profile>/deps).
pub fn artifact_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("current exe");
    let deps = exe.parent().expect("exe dir");
    deps.parent().expect("profile dir").to_path_buf()
}

/// Builds the plugins and the `tamp` binary in the test's own profile, once.
pub fn ensure_built() -> &'static Path {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT.get_or_init(|| {
        let dir = artifact_dir();
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let mut cmd = Command::new(cargo);
        cmd.current_dir(workspace_root())
            .arg("build")
            .arg("--quiet");
        if dir.file_name().is_some_and(|n| n == "release") {
            cmd.arg("--release");
        }
        for p in PACKAGES {
            cmd.args(["-p", p]);
        }
        // The binary runs WebAssembly strategies too (the tests build tamp-host with `wasm`,
        // so this is the same tamp-host build, not a second one).
        cmd.args(["--features", "tamp-cli/wasm"]);
        let status = cmd.status().expect("run cargo build");
        assert!(status.success(), "cargo build of the test plugins failed");
        dir
    })
}

/// A multi-thread runtime of two workers: the benches' steadier figures.
pub fn two_worker_rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// A bench's quick run: `TAMP_BENCH_QUICK` set (not empty, not 0) or a `quick` argument.
pub fn bench_quick() -> bool {
    std::env::var("TAMP_BENCH_QUICK").is_ok_and(|v| !v.is_empty() && v != "0")
        || std::env::args().any(|a| a == "quick")
}

/// The path of a built plugin library, e.g. `plugin("tamp_custom_strategy")`.
pub fn plugin(lib_name: &str) -> PathBuf {
    let dir = ensure_built();
    let path = dir.join(format!(
        "{}{lib_name}{}",
        std::env::consts::DLL_PREFIX,
        std::env::consts::DLL_SUFFIX
    ));
    assert!(path.is_file(), "{} was not built", path.display());
    path
}

/// Runs `tamp args...` in `dir`, stdin closed and `TAMP_LOG` unset, and waits for it.
pub fn run_tamp(args: &[&str], dir: &Path) -> std::process::Output {
    Command::new(tamp_bin())
        .args(args)
        .current_dir(dir)
        .stdin(std::process::Stdio::null())
        .env_remove("TAMP_LOG")
        .output()
        .expect("run tamp")
}

/// [`run_tamp`] with `envs` set in tamp's environment (after `TAMP_LOG` is unset, so a test
/// can set it again): for a provider's key, a store's URL variable, a log level.
pub fn run_tamp_env(args: &[&str], dir: &Path, envs: &[(&str, &str)]) -> std::process::Output {
    Command::new(tamp_bin())
        .args(args)
        .current_dir(dir)
        .stdin(std::process::Stdio::null())
        .env_remove("TAMP_LOG")
        .envs(envs.iter().copied())
        .output()
        .expect("run tamp")
}

/// [`run_tamp_env`], failing the test unless tamp succeeds: the message is
/// `tamp {args:?} failed:` and its stderr.
#[track_caller]
pub fn run_tamp_env_ok(args: &[&str], dir: &Path, envs: &[(&str, &str)]) -> std::process::Output {
    let out = run_tamp_env(args, dir, envs);
    assert_ok(&out, format!("tamp {args:?} failed:\n"));
    out
}

/// Fails the test unless the command behind `out` exited successfully, with the message
/// `context` followed by the command's stderr: the check after every command a test expects
/// to work, in one place.
#[track_caller]
pub fn assert_ok(out: &std::process::Output, context: impl std::fmt::Display) {
    assert!(
        out.status.success(),
        "{context}{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Fails the test unless `haystack` contains `needle`, with `haystack` as the message.
#[track_caller]
pub fn assert_contains(haystack: &str, needle: &str) {
    assert!(haystack.contains(needle), "{haystack}");
}

/// Fails the test unless the stderr of the command behind `out` contains `needle`, with that
/// stderr as the message.
#[track_caller]
pub fn assert_stderr_has(out: &std::process::Output, needle: &str) {
    let stderr = text(&out.stderr);
    assert!(stderr.contains(needle), "{stderr}");
}

/// [`assert_stderr_has`] for stdout.
#[track_caller]
pub fn assert_stdout_has(out: &std::process::Output, needle: &str) {
    let stdout = text(&out.stdout);
    assert!(stdout.contains(needle), "{stdout}");
}

/// [`run_tamp`] with `stdin`, failing the test when tamp has not exited within `limit`
/// (then it is killed): for what must never wait for ever (a FIFO, `/dev/zero`).
pub fn run_tamp_within(
    args: &[&str],
    dir: &Path,
    stdin: std::process::Stdio,
    limit: std::time::Duration,
) -> std::process::Output {
    let child = Command::new(tamp_bin())
        .args(args)
        .current_dir(dir)
        .stdin(stdin)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .env_remove("TAMP_LOG")
        .spawn()
        .expect("run tamp");
    let pid = child.id();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(limit) {
        Ok(output) => output.expect("wait for tamp"),
        Err(_) => {
            let _ = Command::new("kill")
                .args(["-KILL", &pid.to_string()])
                .status();
            panic!("tamp {args:?} did not exit within {limit:?}");
        }
    }
}

/// A `tamp` command that runs as the unprivileged user 65534 (through `setpriv`) when `root`
/// (the tests run as root, whom file permissions do not stop), else as this process's user.
pub fn tamp_command_as_nobody(root: bool) -> Command {
    if root {
        let mut c = Command::new("setpriv");
        c.args(["--reuid=65534", "--regid=65534", "--clear-groups"])
            .arg(tamp_bin());
        c
    } else {
        Command::new(tamp_bin())
    }
}

/// Output bytes as text (lossy), for assertions and their messages.
pub fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The built `tamp` binary.
pub fn tamp_bin() -> PathBuf {
    let path = ensure_built().join(format!("tamp{}", std::env::consts::EXE_SUFFIX));
    assert!(path.is_file(), "{} was not built", path.display());
    path
}

/// A corpus conversation's JSON text, e.g. `corpus("anthropic", "taubench_gpt4o_airline_task2_trial2")`.
pub fn corpus(format: &str, name: &str) -> String {
    let path = workspace_root().join(format!("tests/fixtures/corpus/{format}/{name}.json"));
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The names of the corpus conversations.
pub fn corpus_names() -> Vec<String> {
    let dir = workspace_root().join("tests/fixtures/corpus/anthropic");
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            e.path()
                .file_stem()
                .map(|s| s.to_string_lossy().into_owned())
        })
        .collect();
    names.sort();
    assert!(
        !names.is_empty(),
        "{}: no corpus conversations",
        dir.display()
    );
    names
}

/// Parses a corpus conversation.
pub fn corpus_conversation(format: &str, name: &str) -> Conversation {
    tamp_host::wire::parse_str(&corpus(format, name), None)
        .expect("corpus parses")
        .0
}

/// The request bodies of a recorded agent session, in order (`tests/fixtures/agents/`:
/// `"claude-code"` or `"codex"`).
pub fn agent_session(agent: &str) -> Vec<serde_json::Value> {
    let path = workspace_root().join(format!("tests/fixtures/agents/{agent}.session.json"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let session: serde_json::Value =
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    session["requests"]
        .as_array()
        .expect("a session's requests")
        .iter()
        .map(|r| r["body"].clone())
        .collect()
}

/// A fresh scratch directory under the system temp dir.
pub fn scratch_dir(tag: &str) -> PathBuf {
    static COUNTER: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("tamp-e2e-{tag}-{}-{n}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("create scratch dir");
    dir
}

/// Rewrites every occurrence of `from` in `file` with `to` (same length), behind the back of
/// whatever wrote it: what bit rot or a hand edit does to a stored page. How many it rewrote.
pub fn patch_bytes(file: &Path, from: &[u8], to: &[u8]) -> usize {
    let mut bytes = std::fs::read(file).unwrap();
    let count = replace_all(&mut bytes, from, to);
    std::fs::write(file, bytes).unwrap();
    count
}

/// Replaces every occurrence of `from` in `bytes` with `to` (same length), in place; how many
/// it replaced.
pub fn replace_all(bytes: &mut [u8], from: &[u8], to: &[u8]) -> usize {
    assert_eq!(from.len(), to.len());
    let mut count = 0;
    let mut i = 0;
    while i + from.len() <= bytes.len() {
        if &bytes[i..i + from.len()] == from {
            bytes[i..i + from.len()].copy_from_slice(to);
            count += 1;
            i += from.len();
        } else {
            i += 1;
        }
    }
    count
}

/// A host context for the benches that call a strategy directly: a provider that must not be
/// called (it answers "unused"), an in-memory store, no cache or queue, 16 LLM permits and a
/// ten-second LLM timeout.
pub fn offline_host_context(
    tokens: std::sync::Arc<tamp_host::tokens::TokenCounter>,
) -> std::sync::Arc<tamp_host::services::HostContext> {
    use std::sync::Arc;
    Arc::new(tamp_host::services::HostContext {
        provider: Arc::new(tamp_host::providers::ScriptedProvider::always("unused")),
        store: Arc::new(tamp_host::store::SqliteStore::in_memory().expect("store")),
        cache: None,
        queue: None,
        tokens,
        llm_permits: Arc::new(tokio::sync::Semaphore::new(16)),
        llm_timeout: std::time::Duration::from_secs(10),
        progress: None,
    })
}

/// A chain file's head: a 2000-token budget keeping the 4 most recent messages, and the
/// scripted provider answering from `script.json` beside the chain file.
pub const SCRIPTED_2000_KEEP_4: &str = r#"[budget]
max_tokens = 2000
keep_recent = 4

[provider]
kind = "scripted"
script = "script.json""#;

/// `base` with `mark` added to its first user text, so a compaction of it archives new pages:
/// the same conversation again, as a chain sees a new one.
pub fn variant(base: &Conversation, mark: String) -> Conversation {
    let mut conv = base.clone();
    let first = conv
        .messages
        .iter_mut()
        .find(|m| {
            m.role == tamp_plugin_api::Role::User && m.content.iter().any(|b| b.as_text().is_some())
        })
        .expect("a user text");
    first
        .content
        .push(tamp_plugin_api::ContentBlock::text(mark));
    conv
}

/// `GET url` with `client`, its body as text (a transport or decoding error fails the test).
pub async fn get_text(client: &reqwest::Client, url: &str) -> String {
    client.get(url).send().await.unwrap().text().await.unwrap()
}

/// Why a chain refuses a stage of `plugin` with `config` (always triggered, a one-second
/// timeout); fails the test when it accepts it.
pub fn refusal(
    plugin: &std::sync::Arc<tamp_host::loader::LoadedPlugin>,
    config: &serde_json::Value,
) -> String {
    tamp_host::chain::ChainBuilder::new(tamp_host::budget::BudgetConfig::default())
        .stage(
            "s",
            plugin.clone(),
            config.clone(),
            tamp_host::config::Trigger::Always,
            std::time::Duration::from_secs(1),
        )
        .err()
        .unwrap_or_else(|| panic!("{config} accepted"))
        .message
}

/// One tool round trip in the Anthropic shape: the assistant calling tool `name` with the
/// JSON text `input_json` (call id `id`), then the user's message answering it with `result`.
pub fn tool_round_trip(
    id: &str,
    name: &str,
    input_json: &str,
    result: &str,
) -> [tamp_plugin_api::Message; 2] {
    use tamp_plugin_api::{ContentBlock, Message, Role, ToolResultPart};
    [
        Message::new(
            Role::Assistant,
            vec![ContentBlock::ToolUse {
                id: id.into(),
                name: name.into(),
                input_json: input_json.into(),
                extra_json: Default::default(),
            }],
        ),
        Message::new(
            Role::User,
            vec![ContentBlock::ToolResult {
                tool_use_id: id.into(),
                content: vec![ToolResultPart::Text {
                    text: result.into(),
                }]
                .into(),
                is_error: false,
                extra_json: Default::default(),
            }],
        ),
    ]
}

/// One call of `strategy` straight through the plugin boundary (no chain), as a stage "bench"
/// of strategy `strategy_name` on `ctx`, with `conversation` and `budget`: the call's wall
/// time in ms, and its edits.
pub fn direct_call(
    rt: &tokio::runtime::Runtime,
    ctx: &std::sync::Arc<tamp_host::services::HostContext>,
    strategy_name: &str,
    strategy: &tamp_plugin_api::StrategyBox,
    conversation: &tamp_plugin_api::Shared<Conversation>,
    budget: tamp_plugin_api::Budget,
) -> (f64, Vec<tamp_plugin_api::Edit>) {
    let services = tamp_host::services::StageServices::new(
        std::sync::Arc::clone(ctx),
        tamp_host::services::StageIdentity {
            stage: "bench".into(),
            strategy: strategy_name.into(),
            config_hash: String::new(),
        },
        None,
        None,
    );
    let request = tamp_plugin_api::CompactRequest {
        conversation: tamp_plugin_api::Shared::clone(conversation),
        budget,
        host: services.to_ffi(),
        stage: "bench".into(),
    };
    rt.block_on(async {
        let started = std::time::Instant::now();
        let outcome = strategy
            .compact(request)
            .await
            .into_result()
            .expect("compacts");
        let ms = started.elapsed().as_secs_f64() * 1e3;
        let edits = outcome
            .edits
            .into_iter()
            .map(|e| e.into_enum().expect("a known edit"))
            .collect();
        (ms, edits)
    })
}

/// Writes a chain file into `dir` and returns its path.
pub fn write_chain(dir: &Path, toml: &str) -> PathBuf {
    let path = dir.join("chain.toml");
    std::fs::write(&path, toml).expect("write chain file");
    path
}

/// A chain of one map-reduce-adaptive stage (keep_recent 6) whose LLM calls the scripted
/// provider answers (a summary reporting 1,000 tokens in and 100 out), its store the TOML
/// value `store` (`{ kind = "postgres", ... }`, on the file's line 2); `script.json` is written
/// beside it.
pub fn scripted_summary_chain(dir: &Path, store: &str, max_tokens: u64) -> PathBuf {
    std::fs::write(
        dir.join("script.json"),
        r#"{"default": {"text": "a summary of the work so far", "usage": {"input_tokens": 1000, "output_tokens": 100}}}"#,
    )
    .expect("write script.json");
    write_chain(
        dir,
        &format!(
            "\nstore = {store}\n\n[budget]\nmax_tokens = {max_tokens}\nkeep_recent = 6\n\n\
             [provider]\nkind = \"scripted\"\nscript = \"script.json\"\n\n\
             [[stage]]\nname = \"summarize\"\nplugin = \"{}\"\n",
            plugin("tamp_map_reduce_adaptive").display()
        ),
    )
}

/// A conversation of about `n` messages (at least the system prompt and whole tool
/// exchanges) made of real corpus text: the Anthropic corpus conversations' messages one after
/// another, tool ids suffixed so they stay unique, cut at a unit boundary.
pub fn corpus_mix(n: usize) -> Conversation {
    use tamp_plugin_api::{sdk, ContentBlock, Message, Role};
    let mut messages: Vec<Message> = Vec::new();
    let mut round = 0;
    'outer: loop {
        for name in corpus_names() {
            let conv = corpus_conversation("anthropic", &name);
            let body: Vec<Message> = conv
                .messages
                .iter()
                .filter(|m| m.role != Role::System)
                .cloned()
                .collect();
            if messages.is_empty() {
                messages.extend(
                    conv.messages
                        .iter()
                        .filter(|m| m.role == Role::System)
                        .cloned(),
                );
            }
            for unit in sdk::units(&body) {
                if messages.len() + unit.len() > n {
                    break 'outer;
                }
                for m in &body[unit.range.clone()] {
                    let mut m = m.clone();
                    for block in m.content.iter_mut() {
                        match block {
                            ContentBlock::ToolUse { id, .. } => {
                                *id = format!("{id}_{round}").into()
                            }
                            ContentBlock::ToolResult { tool_use_id, .. } => {
                                *tool_use_id = format!("{tool_use_id}_{round}").into()
                            }
                            _ => {}
                        }
                    }
                    messages.push(m);
                }
            }
            round += 1;
        }
    }
    Conversation::new(messages)
}

/// `config` with the ledger (`sdk::ledger`) off unless it sets one: for the tests of what a
/// strategy's model writes and how it is merged, whose conversations are mostly the user's
/// words (which the ledger would carry). `tests/e2e/ledger.rs` covers the ledger.
pub fn without_ledger(mut config: serde_json::Value) -> serde_json::Value {
    if let Some(map) = config.as_object_mut() {
        map.entry("ledger")
            .or_insert_with(|| serde_json::json!({"enabled": false}));
    }
    config
}

/// A chain of one plugin stage that runs on every compaction (`always`), so the plugin's own
/// triggers decide, with every LLM call answered by `provider`. Defaults: a budget far above
/// any test conversation, `keep_recent` 2, `o200k_base`, 256 LLM calls at once, 120 s.
pub struct StageChain {
    plugin_lib: &'static str,
    config: serde_json::Value,
    provider: std::sync::Arc<dyn tamp_host::providers::Provider>,
    max_tokens: u64,
    keep_recent: u32,
    encoding: tamp_host::tokens::Encoding,
    llm_concurrency: usize,
    timeout: std::time::Duration,
    store: Option<std::sync::Arc<dyn tamp_host::store::PageStore>>,
    cache: bool,
    cache_store: Option<std::sync::Arc<dyn tamp_host::store::SummaryCache>>,
    queue: Option<std::sync::Arc<dyn tamp_host::store::DeferredQueue>>,
    over_budget: bool,
}

/// Builder methods that set a field of the same name and type (`name: Type`), or an optional
/// field to `Some` (`method => Some(field): Type`).
macro_rules! setters {
    ($($field:ident: $ty:ty),* $(,)?) => {
        $(
            pub fn $field(mut self, $field: $ty) -> Self {
                self.$field = $field;
                self
            }
        )*
    };
    ($($(#[$doc:meta])* $method:ident => Some($field:ident): $ty:ty),* $(,)?) => {
        $(
            $(#[$doc])*
            pub fn $method(mut self, $field: $ty) -> Self {
                self.$field = Some($field);
                self
            }
        )*
    };
}

impl StageChain {
    pub fn new(
        plugin_lib: &'static str,
        config: serde_json::Value,
        provider: std::sync::Arc<dyn tamp_host::providers::Provider>,
    ) -> Self {
        StageChain {
            plugin_lib,
            config,
            provider,
            max_tokens: 10_000_000,
            keep_recent: 2,
            encoding: tamp_host::tokens::Encoding::O200kBase,
            llm_concurrency: 256,
            timeout: std::time::Duration::from_secs(120),
            store: None,
            cache: true,
            cache_store: None,
            queue: None,
            over_budget: false,
        }
    }

    /// The stage on the `over_budget` trigger (by default it runs on every call).
    pub fn over_budget(mut self) -> Self {
        self.over_budget = true;
        self
    }

    /// Without the summary cache (by default a chain on its own in-memory store caches there;
    /// a chain given a store does not).
    pub fn without_cache(mut self) -> Self {
        self.cache = false;
        self
    }

    setters! {
        /// Archive pages here instead of a fresh in-memory store.
        store => Some(store): std::sync::Arc<dyn tamp_host::store::PageStore>,
        /// Queue deferred summaries here (e.g. the same file store as the pages). A chain given
        /// a store and no queue offers no deferred summaries; one on its own in-memory store
        /// queues there.
        queue_in => Some(queue): std::sync::Arc<dyn tamp_host::store::DeferredQueue>,
        /// Keep the summary cache here (e.g. the same file store as the pages).
        cache_in => Some(cache_store): std::sync::Arc<dyn tamp_host::store::SummaryCache>,
    }

    setters! {
        max_tokens: u64,
        keep_recent: u32,
        encoding: tamp_host::tokens::Encoding,
        llm_concurrency: usize,
        timeout: std::time::Duration,
    }

    pub fn build(self) -> tamp_host::chain::Chain {
        use std::sync::Arc;
        use tamp_host::budget::BudgetConfig;
        use tamp_host::chain::ChainBuilder;
        use tamp_host::config::Trigger;
        use tamp_host::loader::load_plugin;
        use tamp_host::tokens::TokenCounter;
        let mut builder = ChainBuilder::new(BudgetConfig {
            max_tokens: self.max_tokens,
            keep_recent: self.keep_recent,
            ..Default::default()
        });
        if let Some(store) = self.store {
            builder = builder.store(store);
        }
        if !self.cache {
            builder = builder.cache(None);
        } else if let Some(cache) = self.cache_store {
            builder = builder.cache(Some(cache));
        }
        if let Some(queue) = self.queue {
            builder = builder.queue(Some(queue));
        }
        builder
            .provider(self.provider)
            .tokens(Arc::new(
                TokenCounter::new(self.encoding).expect("tokenizer"),
            ))
            .llm_concurrency(self.llm_concurrency)
            .stage(
                "stage",
                load_plugin(&plugin(self.plugin_lib)).expect("plugin loads"),
                self.config,
                if self.over_budget {
                    Trigger::OverBudget
                } else {
                    Trigger::Always
                },
                self.timeout,
            )
            .expect("stage config is valid")
            .build()
            .expect("chain builds")
    }
}

/// Asserts `conversation` is valid on the wire in `format`: written out and read back, it is
/// detected as `format`, equals itself, and keeps that format's tool-pairing rules.
pub fn assert_wire_round_trip(
    conversation: &Conversation,
    format: tamp_host::wire::WireFormat,
    ctx: &str,
) {
    use tamp_host::wire;
    let json = wire::to_string_pretty(conversation, format);
    let (back, back_format) = wire::parse_str(&json, None).unwrap();
    assert_eq!(back_format, format, "{ctx}");
    assert_eq!(&back, conversation, "{ctx}");
    wire::check_tool_pairing(&back.messages, format).unwrap();
}

/// The first (about) 50 messages of a real customer-service conversation, cut at a unit
/// boundary: tool runs between user turns.
pub fn fifty_message_conversation() -> Conversation {
    let conv = corpus_conversation("anthropic", "taubench_gpt4o_airline_task23_trial3");
    let units = tamp_plugin_api::sdk::units(&conv.messages);
    let end = units
        .iter()
        .map(|u| u.range.end)
        .take_while(|&e| e <= 50)
        .last()
        .expect("a unit ends by message 50");
    conv.with_messages(conv.messages[..end].to_vec())
}
