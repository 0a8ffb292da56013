//! Driving the headless Chromium of [`crate::browser`] through the Chrome DevTools Protocol,
//! for the tests of pages that change as they are used (the console): navigate, run script in
//! the page, wait for what it shows, click at an element's place, take screenshots.
//!
//! The protocol runs over a pipe (`--remote-debugging-pipe`: the browser reads commands from
//! its descriptor 3 and writes answers and events to 4, each message JSON ended by a NUL), so
//! no port is opened and no WebSocket client is needed. The shell that starts the browser
//! puts the test's pipes on those descriptors.

use std::io::{BufRead as _, BufReader, Write as _};
use std::path::Path;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use base64::Engine as _;
use serde_json::{json, Value};

/// How long one command may take.
const COMMAND_WAIT: Duration = Duration::from_secs(30);

/// A headless browser with one page open; closed when dropped.
pub struct Browser {
    child: Child,
    commands: ChildStdin,
    messages: mpsc::Receiver<Value>,
    next_id: u64,
    session: String,
}

impl Browser {
    /// Starts the browser with a page of `width` × `height` CSS pixels.
    pub fn start(width: u32, height: u32) -> Browser {
        let chromium = crate::browser::chromium();
        let mut child = Command::new("sh")
            .arg("-c")
            .arg("exec \"$0\" \"$@\" 3<&0 4>&1 0</dev/null 1>/dev/null")
            .arg(&chromium)
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--hide-scrollbars",
                "--remote-debugging-pipe",
                "--no-first-run",
                "--disable-extensions",
                "--disable-background-networking",
                "about:blank",
            ])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("start {}: {e}", chromium.display()));
        let commands = child.stdin.take().expect("stdin piped");
        let answers = child.stdout.take().expect("stdout piped");
        let (tx, messages) = mpsc::channel();
        std::thread::spawn(move || {
            let mut reader = BufReader::new(answers);
            let mut message = Vec::new();
            while reader.read_until(0, &mut message).is_ok_and(|n| n > 0) {
                if message.last() == Some(&0) {
                    message.pop();
                }
                if let Ok(value) = serde_json::from_slice::<Value>(&message) {
                    if tx.send(value).is_err() {
                        break;
                    }
                }
                message.clear();
            }
        });
        let mut browser = Browser {
            child,
            commands,
            messages,
            next_id: 0,
            session: String::new(),
        };
        let targets = browser.call_browser("Target.getTargets", json!({}));
        let page = targets["targetInfos"]
            .as_array()
            .and_then(|t| t.iter().find(|t| t["type"] == "page"))
            .unwrap_or_else(|| panic!("no page target: {targets}"))["targetId"]
            .clone();
        let attached = browser.call_browser(
            "Target.attachToTarget",
            json!({"targetId": page, "flatten": true}),
        );
        browser.session = attached["sessionId"].as_str().unwrap().to_string();
        browser.call("Page.enable", json!({}));
        browser.call("Runtime.enable", json!({}));
        browser.call(
            "Emulation.setDeviceMetricsOverride",
            json!({"width": width, "height": height, "deviceScaleFactor": 1, "mobile": false}),
        );
        browser
    }

    fn send(&mut self, method: &str, params: Value, session: bool) -> Value {
        self.next_id += 1;
        let id = self.next_id;
        let mut command = json!({"id": id, "method": method, "params": params});
        if session {
            command["sessionId"] = json!(self.session);
        }
        let mut bytes = serde_json::to_vec(&command).unwrap();
        bytes.push(0);
        self.commands
            .write_all(&bytes)
            .unwrap_or_else(|e| panic!("{method}: the browser is gone: {e}"));
        let deadline = Instant::now() + COMMAND_WAIT;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let message = self
                .messages
                .recv_timeout(left)
                .unwrap_or_else(|_| panic!("{method}: no answer from the browser"));
            if message["id"] == id {
                if let Some(error) = message.get("error") {
                    panic!("{method}: {error}");
                }
                return message["result"].clone();
            }
        }
    }

    fn call_browser(&mut self, method: &str, params: Value) -> Value {
        self.send(method, params, false)
    }

    /// A command to the page.
    pub fn call(&mut self, method: &str, params: Value) -> Value {
        self.send(method, params, true)
    }

    /// Sends every request of the page with these headers too (a bearer token).
    pub fn headers(&mut self, headers: Value) {
        self.call("Network.enable", json!({}));
        self.call("Network.setExtraHTTPHeaders", json!({ "headers": headers }));
    }

    /// Opens `url` and waits for its document to have loaded.
    pub fn navigate(&mut self, url: &str) {
        let answer = self.call("Page.navigate", json!({ "url": url }));
        assert!(answer.get("errorText").is_none(), "{url}: {answer}");
        self.wait_for(
            "document.readyState === 'complete'",
            Duration::from_secs(20),
        );
    }

    /// The value of `expression` in the page (promises awaited); an exception fails the test.
    pub fn eval(&mut self, expression: &str) -> Value {
        let answer = self.call(
            "Runtime.evaluate",
            json!({"expression": expression, "awaitPromise": true, "returnByValue": true}),
        );
        if let Some(exception) = answer.get("exceptionDetails") {
            panic!("{expression}: {exception}");
        }
        answer["result"]["value"].clone()
    }

    /// The value of `expression` once it is truthy, tried every 100 ms for at most `limit`.
    pub fn wait_for(&mut self, expression: &str, limit: Duration) -> Value {
        let deadline = Instant::now() + limit;
        loop {
            let value = self.eval(&format!(
                "(() => {{ try {{ return {expression}; }} catch (e) {{ return null; }} }})()"
            ));
            let truthy = !matches!(&value, Value::Null | Value::Bool(false))
                && value != json!(0)
                && value != json!("");
            if truthy {
                return value;
            }
            assert!(
                Instant::now() < deadline,
                "waited {limit:?} for {expression}; the page shows: {}",
                self.eval("document.body ? document.body.innerText.slice(0, 2000) : ''")
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Clicks with the mouse at the middle of the element `element` (a script expression)
    /// gives, once there is one, as a user would: the page gets the pointer and mouse
    /// events, and a link is followed.
    pub fn click(&mut self, element: &str) {
        let at = self.wait_for(
            &format!(
                "(() => {{ const e = {element}; if (!e) return null; \
                 e.scrollIntoView({{block: 'center'}}); const r = e.getBoundingClientRect(); \
                 return r.width > 0 ? [r.x + r.width / 2, r.y + r.height / 2] : null; }})()"
            ),
            Duration::from_secs(20),
        );
        let (x, y) = (at[0].as_f64().unwrap(), at[1].as_f64().unwrap());
        for kind in ["mouseMoved", "mousePressed", "mouseReleased"] {
            self.call(
                "Input.dispatchMouseEvent",
                json!({"type": kind, "x": x, "y": y, "button": "left", "clickCount": 1}),
            );
        }
    }

    /// A screenshot of the page as it is shown, written to `path` (PNG); its bytes.
    pub fn screenshot(&mut self, path: &Path) -> Vec<u8> {
        let shot = self.call("Page.captureScreenshot", json!({"format": "png"}));
        let png = base64::engine::general_purpose::STANDARD
            .decode(shot["data"].as_str().expect("screenshot data"))
            .expect("screenshot base64");
        std::fs::write(path, &png).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        png
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
