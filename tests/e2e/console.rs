//! The console (`/tamp/ui`) end to end: the real `tamp proxy` (and `tamp serve`) between the
//! recorded requests of a Claude Code session and a local upstream, and the console opened in
//! the headless Chromium the suite installs, driven through the DevTools protocol
//! (`support/cdp.rs`): a thread appears while its session goes on, its timeline marks each
//! compaction, a mark opens what that compaction replaced beside its summary, and a page opens
//! as a conversation. Then the console's access rules and a page of hostile text, and the
//! console of one replica showing what another recorded on PostgreSQL.
//!
//! Screenshots are written to the test's scratch directory, or to `$TAMP_SCREENSHOTS` when it
//! is set (`TAMP_SCREENSHOTS=docs/images` refreshes the documentation's).

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{json, Value};
use tamp_e2e::assert_contains;
use tamp_e2e::cdp::Browser;
use tamp_e2e::mock_upstream::MockUpstream;
use tamp_e2e::serve_support::{ScratchDir, Server};
use tamp_e2e::{agent_session, plugin, rt, workspace_root};

const KEY: &str = "sk-console-e2e-key";
/// The series' colors of the timeline (`host/src/console/chart.rs`).
const FORWARDED: &str = "#1f77b4";
const MARK: &str = "#9467bd";

/// A chain that folds old turns of the Claude Code session: its requests grow from 3,890 to
/// 4,548 tokens, over a high watermark of 4,000.
fn folding_chain(dir: &Path, upstream: &MockUpstream, store: &str, extra: &str) -> PathBuf {
    let text = format!(
        "store = {store}\n{extra}\n\
         [budget]\nmax_tokens = 5000\nhigh_watermark = 0.8\nlow_watermark = 0.77\nkeep_recent = 2\n\n\
         [proxy]\nanthropic = \"{}\"\nopenai = \"{}\"\n\n\
         [[stage]]\nname = \"fold-old-turns\"\nplugin = \"{}\"\n",
        upstream.url(),
        upstream.openai_url(),
        plugin("tamp_map_reduce_adaptive").display()
    );
    tamp_e2e::write_chain(dir, &text)
}

const SQLITE: &str = "{ path = \"store.sqlite3\" }";

/// Posts `bodies` to the proxy's `/v1/messages` as Claude Code does; each answer's
/// `x-tamp-compaction`.
async fn post_all(proxy: &Server, bodies: &[Value], headers: &[(&str, &str)]) -> Vec<String> {
    let mut compactions = Vec::new();
    for body in bodies {
        let mut request = proxy
            .client
            .post(proxy.url("/v1/messages?beta=true"))
            .header("x-api-key", KEY)
            .header("anthropic-version", "2023-06-01")
            .json(body);
        for (k, v) in headers {
            request = request.header(*k, *v);
        }
        let answer = request.send().await.unwrap();
        assert_eq!(answer.status(), 200, "{}", proxy.log());
        compactions.push(
            answer.headers()["x-tamp-compaction"]
                .to_str()
                .unwrap()
                .to_string(),
        );
    }
    compactions
}

/// The session id Claude Code's requests carry in `metadata.user_id`.
fn session_of(body: &Value) -> String {
    let user: Value = serde_json::from_str(body["metadata"]["user_id"].as_str().unwrap()).unwrap();
    user["session_id"].as_str().unwrap().to_string()
}

/// Where screenshots go: `$TAMP_SCREENSHOTS` (relative to the workspace), else `dir`.
fn shot_path(dir: &Path, name: &str) -> PathBuf {
    match std::env::var_os("TAMP_SCREENSHOTS") {
        Some(to) => {
            let to = workspace_root().join(to);
            std::fs::create_dir_all(&to).unwrap();
            to.join(name)
        }
        None => dir.join(name),
    }
}

/// A string as a script literal.
fn js(text: &str) -> String {
    serde_json::to_string(text).unwrap()
}

/// The pixels of a PNG near each of `colors` (`#rrggbb`), counted.
fn color_counts(png: &[u8], colors: &[&str]) -> Vec<usize> {
    let decoder = png::Decoder::new(std::io::Cursor::new(png));
    let mut reader = decoder.read_info().expect("a PNG");
    let mut buf = vec![0; reader.output_buffer_size()];
    let info = reader.next_frame(&mut buf).expect("a frame");
    let rgb: Vec<[u8; 3]> = colors
        .iter()
        .map(|c| {
            let n = u32::from_str_radix(c.trim_start_matches('#'), 16).unwrap();
            [(n >> 16) as u8, (n >> 8) as u8, n as u8]
        })
        .collect();
    let mut counts = vec![0; colors.len()];
    for p in buf[..info.buffer_size()].chunks(info.color_type.samples()) {
        for (i, c) in rgb.iter().enumerate() {
            if (0..3).all(|k| p[k].abs_diff(c[k]) <= 10) {
                counts[i] += 1;
            }
        }
    }
    counts
}

#[test]
fn a_claude_code_session_shows_live_and_its_compactions_and_pages_open_in_the_browser() {
    let dir = ScratchDir::new("console-browser");
    let upstream = MockUpstream::start();
    // The main model priced, so that the savings are in dollars too.
    let prices = "[console.prices]\n\"claude-*\" = { input_per_mtok = 5.0 }";
    let proxy = Server::start_command(
        "proxy",
        &folding_chain(&dir, &upstream, SQLITE, prices),
        &[],
        &[],
    );
    let session = agent_session("claude-code");
    let thread = format!("session:{}", session_of(&session[0]));
    let rt = rt();

    let mut browser = Browser::start(1280, 1000);
    browser.navigate(&proxy.url("/tamp/ui/"));
    browser.wait_for(
        "document.querySelector('#threads tbody td.muted')",
        Duration::from_secs(20),
    );
    // Set once: still there at the end only if the page was never loaded again.
    browser.eval("window.sameDocument = 'yes'");
    let row = format!(
        "[...document.querySelectorAll('#threads tr[data-thread]')].find(r => r.dataset.thread === {})",
        js(&thread)
    );
    let requests_shown = |browser: &mut Browser, n: usize| {
        browser.wait_for(
            &format!("{row} && {row}.children[3].textContent === '{n}'"),
            Duration::from_secs(20),
        );
    };

    // The session's first four requests, then the rest: the row comes, then changes, live.
    let mut compactions = rt.block_on(post_all(&proxy, &session[..4], &[]));
    requests_shown(&mut browser, 4);
    compactions.extend(rt.block_on(post_all(&proxy, &session[4..], &[])));
    requests_shown(&mut browser, session.len());
    assert_eq!(
        browser.eval("window.sameDocument"),
        "yes",
        "the page was reloaded"
    );
    let compacted: Vec<&String> = compactions
        .iter()
        .filter(|c| c.contains("pages="))
        .collect();
    assert!(compacted.len() >= 2, "{compactions:?}");
    let cells = browser.eval(&format!("[...{row}.children].map(c => c.textContent)"));
    assert_eq!(cells[0], thread.as_str(), "{cells}");
    assert_eq!(cells[1], "claude-opus-5-5", "{cells}");
    assert_eq!(cells[5], compacted.len().to_string().as_str(), "{cells}");
    browser.screenshot(&shot_path(&dir, "console-threads.png"));

    // The thread's timeline, one mark per compaction, drawn.
    browser.click(&format!("{row}.querySelector('a')"));
    let marks = browser.wait_for(
        &format!(
            "(() => {{ const n = document.querySelectorAll('#timeline svg a.mark').length; \
             return n === {} ? n : null; }})()",
            compacted.len()
        ),
        Duration::from_secs(20),
    );
    assert_eq!(marks, json!(compacted.len()));
    let png = browser.screenshot(&shot_path(&dir, "console-thread.png"));
    let [forwarded, mark] = color_counts(&png, &[FORWARDED, MARK])[..] else {
        unreachable!()
    };
    assert!(
        forwarded > 1_500 && mark > 300,
        "the chart's forwarded line and marks on screen: {forwarded} and {mark} pixels"
    );

    // The first compaction: what it replaced beside what stands for it.
    browser.click("document.querySelector('#timeline svg a.mark circle')");
    browser.wait_for(
        "document.querySelectorAll('.diff .replaced .message').length > 0 && \
         document.querySelector('.diff .replacement .narrative')",
        Duration::from_secs(20),
    );
    let page = browser.eval("document.querySelector('.diff').dataset.page");
    let page = page.as_str().unwrap().to_string();
    assert!(
        compacted[0].contains(&page),
        "{page} is not the first compaction's page: {}",
        compacted[0]
    );
    // The summary the console shows is the one the upstream got.
    let narrative =
        browser.eval("document.querySelector('.diff .replacement .narrative').textContent");
    let first_line = narrative
        .as_str()
        .unwrap()
        .lines()
        .next()
        .unwrap()
        .to_string();
    let forwarded_with_it = upstream
        .received()
        .iter()
        .filter(|r| String::from_utf8_lossy(&r.body).contains(&page))
        .count();
    assert!(forwarded_with_it > 0, "no forwarded request names {page}");
    assert!(
        upstream.received().iter().any(|r| {
            let body = String::from_utf8_lossy(&r.body);
            body.contains(&page) && body.contains(&first_line.replace('"', "\\\""))
        }),
        "the summary shown ({first_line:?}) is not in the requests forwarded with {page}"
    );
    let stored = rt.block_on(proxy.get_json(&format!("/tamp/v1/pages/{page}")));
    let replaced = browser.eval("document.querySelectorAll('.diff .replaced .message').length");
    assert_eq!(
        replaced,
        json!(stored["messages"].as_array().unwrap().len()),
        "{stored}"
    );
    assert_eq!(
        browser.eval("document.querySelector('tr[data-stage] .pill').textContent"),
        "acted"
    );
    browser.screenshot(&shot_path(&dir, "console-compaction.png"));

    // The page, as a conversation: its messages, its seal, and the wire format it came in.
    browser.click("document.querySelector('.diff .replaced h3 a')");
    browser.wait_for(
        "document.querySelectorAll('.conversation .message').length > 0 && document.querySelector('.ok')",
        Duration::from_secs(20),
    );
    assert_eq!(
        browser.eval("document.querySelectorAll('.conversation .message').length"),
        json!(stored["messages"].as_array().unwrap().len())
    );
    let seal = browser.eval("document.querySelector('.ok').textContent");
    assert!(seal.as_str().unwrap().starts_with("sealed"), "{seal}");
    assert_eq!(
        browser.eval("document.querySelector('select').value"),
        "anthropic"
    );
    let download = browser.eval("document.querySelector('a.download').href");
    let download = download
        .as_str()
        .unwrap()
        .strip_prefix(&proxy.base)
        .unwrap();
    let wire = rt.block_on(proxy.get_json(download));
    assert_eq!(
        wire, stored,
        "the download is the page as /tamp/v1/pages answers it"
    );
    browser.screenshot(&shot_path(&dir, "console-page.png"));

    // The savings and the chain read the same thread and the running chain.
    browser.navigate(&proxy.url("/tamp/ui/#/savings"));
    let saved = browser.wait_for(
        &format!(
            "(() => {{ const r = [...document.querySelectorAll('tr[data-thread]')]\
             .find(r => r.dataset.thread === {}); return r && r.children[3].textContent; }})()",
            js(&thread)
        ),
        Duration::from_secs(20),
    );
    // What the history as sent would have cost the main model, in dollars: its counted
    // tokens at the cache's prices, at $5 per million input tokens.
    let totals = rt.block_on(proxy.get_json(&format!("/tamp/ui/api/thread?id={thread}")));
    let dollars = totals["savings"]["usd_uncompacted"].as_f64().unwrap();
    let t = &totals["thread"];
    let (sent, cached) = (
        t["tokens_in"].as_f64().unwrap(),
        t["in_cached"].as_f64().unwrap(),
    );
    let expected = (0.1 * cached + 1.25 * (sent - cached)) * 5.0 / 1e6;
    assert!((dollars - expected).abs() < 1e-9, "{dollars} {expected}");
    assert_eq!(saved, format!("${dollars:.4}").as_str());
    browser.screenshot(&shot_path(&dir, "console-savings.png"));
    // An overload from the upstream: on the health view, as /tamp/metrics counts it, and in
    // the failed requests the store keeps.
    let overloaded = rt.block_on(async {
        proxy
            .client
            .post(proxy.url("/v1/messages?beta=true"))
            .header("x-api-key", KEY)
            .header("anthropic-version", "2023-06-01")
            .header("x-mock-fail", "529:1:console")
            .json(&session[0])
            .send()
            .await
            .unwrap()
            .status()
    });
    assert_eq!(overloaded, 529);
    browser.navigate(&proxy.url("/tamp/ui/#/health"));
    let overloads = browser.wait_for(
        "[...document.querySelectorAll('tr')].map(r => r.textContent)\
         .find(t => t.startsWith('POST /v1/messages 529'))",
        Duration::from_secs(20),
    );
    assert_eq!(overloads, "POST /v1/messages 5291", "one answer 529");
    let metrics = rt.block_on(async {
        let answer = proxy.get("/tamp/metrics").await;
        answer.text().await.unwrap()
    });
    assert_contains(
        &metrics,
        "tamp_http_requests_total{route=\"POST /v1/messages\",status=\"529\"} 1",
    );
    browser.wait_for(
        "[...document.querySelectorAll('tr')].some(r => r.children[3] && r.children[3].textContent === '529')",
        Duration::from_secs(20),
    );
    browser.screenshot(&shot_path(&dir, "console-health.png"));
    browser.navigate(&proxy.url("/tamp/ui/#/chain"));
    let stage = browser.wait_for(
        "document.querySelector('tr[data-stage]') && document.querySelector('tr[data-stage]').textContent",
        Duration::from_secs(20),
    );
    assert!(
        stage.as_str().unwrap().contains("fold-old-turns")
            && stage.as_str().unwrap().contains("not pinned"),
        "{stage}"
    );
}

/// Text no page may take for markup: a script, attribute breakers, an image that runs script
/// when it fails to load, and a right-to-left override.
const HOSTILE: &str = "<script>window.pwned = 'script'</script>\"'><img src=x \
    onerror=\"window.pwned = 'img'\"><svg onload=\"window.pwned = 'svg'\">\u{202e}gnp.exe";

/// A conversation over the folding chain's budget whose older turns (summarized into a page)
/// hold [`HOSTILE`] text, in a tool call, its result and an answer.
fn hostile_conversation(model: &str) -> Value {
    let filler = "The build log repeats this line to make the turn long enough. ".repeat(40);
    let mut messages = vec![json!({"role": "user", "content": "Fix the build."})];
    for i in 0..8 {
        messages.push(json!({"role": "assistant", "content": [
            {"type": "text", "text": format!("Step {i}: {HOSTILE}")},
            {"type": "tool_use", "id": format!("toolu_{i}"), "name": format!("Bash{HOSTILE}"),
             "input": {"command": format!("echo '{HOSTILE}'")}}]}));
        messages.push(json!({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": format!("toolu_{i}"),
             "content": format!("{HOSTILE}\n{filler}")}]}));
    }
    messages.push(json!({"role": "assistant", "content": "Done."}));
    messages.push(json!({"role": "user", "content": "Thanks."}));
    json!({"model": model, "max_tokens": 64, "messages": messages})
}

#[test]
fn the_console_answers_on_the_tamp_rules_only_and_shows_hostile_text_as_text() {
    let dir = ScratchDir::new("console-access");
    let upstream = MockUpstream::start();
    let chain = folding_chain(&dir, &upstream, SQLITE, "");
    let token = "console-e2e-token";
    let proxy = Server::start_command(
        "proxy",
        &chain,
        &["--auth-token-env", "TAMP_CONSOLE_TOKEN"],
        &[("TAMP_CONSOLE_TOKEN", token)],
    );
    let rt = rt();
    let client = &proxy.client;
    let get = |path: &str, auth: Option<&str>, host: Option<&str>| {
        let mut request = client.get(proxy.url(path));
        if let Some(auth) = auth {
            request = request.header("authorization", auth);
        }
        if let Some(host) = host {
            request = request.header("host", host);
        }
        let answer = rt.block_on(request.send()).unwrap();
        let challenge = answer
            .headers()
            .get("www-authenticate")
            .map(|v| v.to_str().unwrap().to_string());
        let policy = answer
            .headers()
            .get("content-security-policy")
            .map(|v| v.to_str().unwrap().to_string());
        (answer.status().as_u16(), challenge, policy)
    };
    let bearer = format!("Bearer {token}");
    // base64("me:console-e2e-token") and base64("me:wrong")
    let basic = "Basic bWU6Y29uc29sZS1lMmUtdG9rZW4=";
    let wrong_basic = "Basic bWU6d3Jvbmc=";
    for path in [
        "/tamp/ui",
        "/tamp/ui/",
        "/tamp/ui/console.js",
        "/tamp/ui/api/threads",
    ] {
        let (status, challenge, _) = get(path, None, None);
        assert_eq!(status, 401, "{path}");
        assert!(challenge
            .unwrap()
            .starts_with("Basic realm=\"tamp console\""));
        assert_eq!(get(path, Some(wrong_basic), None).0, 401, "{path}");
        assert_eq!(get(path, Some("Bearer nope"), None).0, 401, "{path}");
        let (status, _, policy) = get(path, Some(&bearer), None);
        assert_eq!(status, 200, "{path}");
        assert!(policy.unwrap().contains("script-src 'self'"), "{path}");
        assert_eq!(get(path, Some(basic), None).0, 200, "{path}");
        // The Host check comes first, token or not.
        assert_eq!(
            get(path, Some(&bearer), Some("evil.example:7475")).0,
            421,
            "{path}"
        );
    }
    // Basic credentials are the console's alone: tamp's other routes take the bearer token.
    assert_eq!(get("/tamp/v1/threads", Some(basic), None).0, 401);
    assert_eq!(get("/tamp/v1/threads", Some(&bearer), None).0, 200);
    let forwarded = upstream.count();

    // A compaction of hostile text, under a hostile thread name and model.
    let thread = format!("t<script>window.pwned = 'thread'</script>\"'><b>{}", "x");
    let model = format!("claude-{HOSTILE}");
    let answers = rt.block_on(post_all(
        &proxy,
        &[hostile_conversation(&model)],
        &[("x-tamp-thread-id", &thread)],
    ));
    assert!(answers[0].contains("pages="), "{answers:?}");
    let page = answers[0]
        .split("pages=")
        .nth(1)
        .unwrap()
        .split(',')
        .next()
        .unwrap();

    let mut browser = Browser::start(1280, 1000);
    browser.headers(json!({ "Authorization": bearer }));
    browser.navigate(&proxy.url("/tamp/ui/#/threads"));
    let row = format!(
        "[...document.querySelectorAll('#threads tr[data-thread]')].find(r => r.dataset.thread === {})",
        js(&thread)
    );
    browser.wait_for(&row, Duration::from_secs(20));
    assert_eq!(
        browser.eval(&format!("{row}.querySelector('a').textContent")),
        thread.as_str()
    );
    let shown_model = browser.eval(&format!("{row}.children[1].textContent"));
    assert_eq!(
        shown_model,
        model.replace('\u{202e}', "⟨U+202E⟩").as_str(),
        "the model as text, its override made visible"
    );
    browser.navigate(&proxy.url(&format!("/tamp/ui/#/page/{page}")));
    browser.wait_for(
        "document.querySelectorAll('.conversation .message').length > 3",
        Duration::from_secs(20),
    );
    let text = browser.eval("document.querySelector('.conversation').textContent");
    let text = text.as_str().unwrap();
    assert!(
        text.contains(&HOSTILE.replace('\u{202e}', "⟨U+202E⟩")),
        "the hostile text is not shown as text: {}",
        &text[..text.len().min(2000)]
    );
    browser.screenshot(&shot_path(&dir, "console-hostile.png"));
    // Nothing ran and no element came from the text.
    assert_eq!(browser.eval("typeof window.pwned"), "undefined");
    assert_eq!(
        browser.eval("document.querySelectorAll('img, main svg, [onerror], [onload]').length"),
        0
    );
    assert_eq!(browser.eval("document.scripts.length"), 1);
    // The console asked nothing of the upstream.
    assert_eq!(upstream.count(), forwarded + 1);

    // `--console off`: tamp's 404, and nothing goes upstream.
    let off = Server::start_command("proxy", &chain, &["--console", "off"], &[]);
    let answer = rt
        .block_on(off.client.get(off.url("/tamp/ui/")).send())
        .unwrap();
    assert_eq!(answer.status(), 404);
    assert!(!off.log().contains("console on"), "{}", off.log());
    assert_eq!(upstream.count(), forwarded + 1);

    // `tamp serve` serves the console too, from the same store: the proxy's thread is there,
    // and so is the thread of a compaction it answered itself.
    let serve = Server::start(&chain, &[]);
    let (status, answer) = rt.block_on(serve.compact(&json!({
        "conversation": hostile_conversation("claude-opus-5-5"),
        "thread_id": "serve-thread",
    })));
    assert_eq!(status, 200, "{answer}");
    let threads = rt.block_on(serve.get_json("/tamp/ui/api/threads"));
    let names: Vec<&str> = threads["threads"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["thread"].as_str().unwrap())
        .collect();
    assert!(
        names.contains(&thread.as_str()) && names.contains(&"serve-thread"),
        "{threads}"
    );
    let served = threads["threads"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["thread"] == "serve-thread")
        .unwrap();
    assert_eq!(
        (served["server"].as_str(), served["compactions"].as_u64()),
        (Some("serve"), Some(1))
    );
}

#[test]
fn the_console_of_one_replica_shows_the_threads_another_recorded() {
    use tamp_e2e::postgres::PgServer;
    let url = PgServer::shared().create_database("console_replicas");
    let dir = ScratchDir::new("console-replicas");
    let upstream = MockUpstream::start();
    let store = "{ kind = \"postgres\", url_env = \"TAMP_DATABASE_URL\", pool_size = 4 }";
    let chain = folding_chain(&dir, &upstream, store, "");
    let env = [("TAMP_DATABASE_URL", url.as_str())];
    let a = Server::start_command("proxy", &chain, &[], &env);
    let b = Server::start_command("proxy", &chain, &[], &env);
    let rt = rt();
    let session = agent_session("claude-code");
    let thread = format!("session:{}", session_of(&session[0]));
    // Half the session through each replica, as a load balancer would send it.
    let mut compactions = rt.block_on(post_all(&a, &session[..7], &[]));
    compactions.extend(rt.block_on(post_all(&b, &session[7..], &[])));
    let compacted = compactions.iter().filter(|c| c.contains("pages=")).count();
    assert!(compacted >= 1, "{compactions:?}");

    // Each replica's console shows the whole thread: every request, whichever recorded it.
    for replica in [&a, &b] {
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        let thread_view = loop {
            let view = rt.block_on(replica.get_json(&format!(
                "/tamp/ui/api/thread?id={}",
                thread.replace(':', "%3A")
            )));
            if view["thread"]["requests"] == json!(session.len())
                || std::time::Instant::now() > deadline
            {
                break view;
            }
            std::thread::sleep(Duration::from_millis(100));
        };
        assert_eq!(
            thread_view["thread"]["requests"],
            json!(session.len()),
            "{thread_view}"
        );
        assert_eq!(
            thread_view["thread"]["compactions"],
            json!(compacted),
            "{thread_view}"
        );
        let marked = thread_view["requests"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|r| r["compacted"] == true)
            .count();
        assert_eq!(marked, compacted, "{thread_view}");
        let listed = rt.block_on(replica.get_json("/tamp/v1/threads"));
        assert_eq!(listed["threads"][0]["thread"], thread.as_str(), "{listed}");
        assert_eq!(listed["threads"][0]["requests"], json!(session.len()));
    }
    // A compaction recorded by A opens on B, with its page read from the shared store.
    let seq = rt.block_on(b.get_json(&format!(
        "/tamp/ui/api/thread?id={}",
        thread.replace(':', "%3A")
    )))["requests"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["compacted"] == true)
        .unwrap()["seq"]
        .clone();
    let compaction = rt.block_on(b.get_json(&format!("/tamp/ui/api/compactions/{seq}")));
    assert!(
        !compaction["pages"][0]["messages"]
            .as_array()
            .unwrap()
            .is_empty(),
        "{compaction}"
    );
}

/// A request the proxy streams upstream unread (its headers settle that the chain leaves it
/// as it is) is recorded with what is known of it: its thread (from `x-tamp-thread-id`), the
/// most tokens its declared length can hold, no count and no compaction. And what a server
/// recorded just before it stopped is in the store file once it has exited, the file whole:
/// the record's writer lets go of the store before the process ends.
#[test]
fn a_request_streamed_unread_is_recorded_and_a_stopped_server_leaves_its_records_in_the_file() {
    let dir = ScratchDir::new("console-streamed");
    let upstream = MockUpstream::start();
    let chain = folding_chain(&dir, &upstream, SQLITE, "");
    let mut proxy = Server::start_command("proxy", &chain, &[], &[]);
    // The address printed is the one listened on (the tests listen on port 0).
    assert!(
        proxy
            .log()
            .contains(&format!("tamp proxy: console on {}/tamp/ui", proxy.base)),
        "{}",
        proxy.log()
    );
    let rt = rt();
    let short = json!({"model": "claude-opus-5-5", "max_tokens": 64,
        "messages": [{"role": "user", "content": "Hello."}]});
    let answers = rt.block_on(post_all(
        &proxy,
        std::slice::from_ref(&short),
        &[("x-tamp-thread-id", "streamed")],
    ));
    assert!(answers[0].ends_with("streamed unread)"), "{answers:?}");
    let view = rt.block_on(proxy.get_json("/tamp/ui/api/thread?id=streamed"));
    let request = &view["requests"][0];
    assert_eq!(request["status"], 200, "{view}");
    assert_eq!(request["outcome"], "unchanged", "{view}");
    assert_eq!(request["compacted"], false, "{view}");
    assert_eq!(
        (&request["tokens_in"], &request["tokens_out"]),
        (&Value::Null, &Value::Null),
        "{view}"
    );
    let bytes = serde_json::to_vec(&short).unwrap().len() as u64;
    let at_most = request["tokens_at_most"].as_u64().unwrap_or(0);
    assert!(
        at_most > 0 && at_most <= bytes,
        "{at_most} for {bytes} bytes: {view}"
    );
    assert_eq!(request["max_tokens"], 5000, "{view}");
    assert_eq!(
        (&view["thread"]["requests"], &view["thread"]["counted"]),
        (&json!(1), &json!(0)),
        "{view}"
    );

    // The last request, then SIGTERM at once: its record is written as the server stops.
    rt.block_on(post_all(
        &proxy,
        std::slice::from_ref(&short),
        &[("x-tamp-thread-id", "last")],
    ));
    proxy.sigterm();
    assert!(proxy.wait_exit(Duration::from_secs(30)).success());
    let store = dir.join("store.sqlite3");
    let wal = dir.join("store.sqlite3-wal");
    assert!(
        std::fs::metadata(&wal).map_or(true, |m| m.len() == 0),
        "the store was left with its write-ahead log: {} bytes",
        std::fs::metadata(&wal).unwrap().len()
    );
    let file = rusqlite::Connection::open(&store).unwrap();
    let recorded: i64 = file
        .query_row(
            "SELECT count(*) FROM activity_requests WHERE thread = 'last'",
            [],
            |row| row.get(0),
        )
        .unwrap();
    assert_eq!(recorded, 1);
}
