//! Each thread's last request read and counted, so that the next request of the thread, which
//! repeats it and adds a few items, can be bounded without being read.
//!
//! The pre-count (`proxy::precount`) bounds a body's tokens by its length, which leaves a
//! large request (an agent's, 200 KB after an hour) to be read and counted whole even when its
//! count is far under the high watermark: about 5 ms a request in a release build, most of it
//! the wire reader. But an agent's request is its thread's previous request plus what is new.
//! So when the proxy reads a request and the chain leaves it as it is, it keeps, per thread:
//! the body, where its conversation list's last element ends (`prefix`: every byte before
//! it), and the chain's count of its conversation. A later request of the thread whose first
//! `prefix` bytes are those same bytes, followed by `,` or `]`, holds every element of that
//! list and every field before it unchanged, so its count is at most
//!
//! > the count kept + the pre-count's bound (`precount::bound`) of the bytes after the prefix.
//!
//! Why: each piece of text the chain counts comes from one element of the list or one
//! top-level field. Those inside the prefix are the same text as in the kept request, and
//! counted there; those after it are bounded by their bytes as in the pre-count. A message
//! costs [`MESSAGE_OVERHEAD_TOKENS`] besides its pieces: a message of the new request made of
//! the prefix's elements stands where one of the kept request stood (the readers group the
//! elements left to right, and only the kept request's last group can take in more of them),
//! and one made of new elements is framed by more bytes than its overhead. What the kept
//! request had after its prefix (its `instructions` after `input`, say) counts in the kept
//! count and not in the new request: the bound is only higher for it.
//! `last_read::tests` checks the bound against the full count over the corpus in the three
//! formats and four encodings, cut at every element, and the comparison against edited,
//! truncated and reordered bodies.
//!
//! The comparison is of the bytes themselves, never of a hash: the bound is never taken from
//! a body that merely looks the same. A kept request is keyed by its thread's name and the
//! chain's config hash and format (another chain may count otherwise); at most
//! [`MAX_THREADS`] threads and [`MAX_BYTES`] of bodies are kept, the least recently used
//! dropped first.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};

use axum::body::Bytes;
use serde::Deserialize;
use serde_json::value::RawValue;

#[cfg(doc)]
use crate::tokens::MESSAGE_OVERHEAD_TOKENS;
use crate::wire::WireFormat;

/// The most threads whose last request is kept.
pub const MAX_THREADS: usize = 256;

/// The most bytes of requests kept, all threads together.
pub const MAX_BYTES: usize = 64 * 1024 * 1024;

/// What a later request of a thread is bounded from.
struct Kept {
    config_hash: String,
    format: WireFormat,
    body: Bytes,
    /// Where the list's last element ends in `body`.
    prefix: usize,
    /// The chain's count of `body`'s conversation.
    tokens: u64,
    /// When it was last recorded or used (a tick of [`LastReads`]), for the LRU.
    used: u64,
}

/// What bounds a request from its thread's last read request: its tokens are at most
/// `counted` plus the pre-count's bound of its bytes after `repeated`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bound {
    /// The tokens counted in the last read request.
    pub counted: u64,
    /// The bytes this request repeats of it.
    pub repeated: usize,
}

/// Each thread's last request read and counted (see the module's documentation).
#[derive(Default)]
pub struct LastReads {
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    threads: HashMap<String, Kept>,
    bytes: usize,
    tick: u64,
}

impl State {
    fn remove(&mut self, thread: &str) {
        if let Some(old) = self.threads.remove(thread) {
            self.bytes -= old.body.len();
        }
    }
}

impl LastReads {
    /// Keeps `body` (in `format`, read by the chain of `config_hash`, whose count of it is
    /// `tokens`) as `thread`'s last read request. A body with no list elements replaces
    /// nothing and is not kept (it has no prefix to repeat).
    pub fn record(
        &self,
        thread: &str,
        config_hash: &str,
        format: WireFormat,
        body: &Bytes,
        tokens: u64,
    ) {
        let prefix = list_end(body, format);
        let mut state = self.lock();
        state.remove(thread);
        let Some(prefix) = prefix else { return };
        if body.len() > MAX_BYTES {
            return;
        }
        while state.threads.len() >= MAX_THREADS || state.bytes + body.len() > MAX_BYTES {
            let Some(oldest) = state
                .threads
                .iter()
                .min_by_key(|(_, k)| k.used)
                .map(|(t, _)| t.clone())
            else {
                break;
            };
            state.remove(&oldest);
        }
        state.tick += 1;
        let used = state.tick;
        state.bytes += body.len();
        state.threads.insert(
            thread.to_string(),
            Kept {
                config_hash: config_hash.to_string(),
                format,
                body: body.clone(),
                prefix,
                tokens,
                used,
            },
        );
    }

    /// What bounds `body`'s tokens from `thread`'s last read request, if `body` repeats its
    /// list and what comes before it; `None` otherwise.
    pub fn bound(
        &self,
        thread: &str,
        config_hash: &str,
        format: WireFormat,
        body: &[u8],
    ) -> Option<Bound> {
        let (kept, prefix, counted) = {
            let mut state = self.lock();
            state.tick += 1;
            let tick = state.tick;
            let kept = state.threads.get_mut(thread)?;
            if kept.config_hash != config_hash || kept.format != format {
                return None;
            }
            kept.used = tick;
            (kept.body.clone(), kept.prefix, kept.tokens)
        };
        // Compared outside the lock: a 200 KB comparison is some microseconds.
        if body.len() < prefix || body[..prefix] != kept[..prefix] {
            return None;
        }
        let next = body[prefix..].iter().find(|b| !b.is_ascii_whitespace());
        if !matches!(next, Some(b',' | b']')) {
            return None;
        }
        Some(Bound {
            counted,
            repeated: prefix,
        })
    }

    /// Whether no thread's request is kept (then no bound can come from one).
    pub fn is_empty(&self) -> bool {
        self.lock().threads.is_empty()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Where the last element of `body`'s conversation list (`messages`, or `input` as a list)
/// ends; `None` when the body is not an object with such a list, or the list is empty.
fn list_end(body: &[u8], format: WireFormat) -> Option<usize> {
    #[derive(Deserialize)]
    struct Messages<'a> {
        #[serde(borrow)]
        messages: Vec<&'a RawValue>,
    }
    #[derive(Deserialize)]
    struct Input<'a> {
        #[serde(borrow)]
        input: Vec<&'a RawValue>,
    }
    let text = std::str::from_utf8(body).ok()?;
    // A list key given twice is refused here as by the readers.
    let list = match format {
        WireFormat::Anthropic | WireFormat::OpenAi => {
            serde_json::from_str::<Messages>(text).ok()?.messages
        }
        WireFormat::Responses => serde_json::from_str::<Input>(text).ok()?.input,
    };
    let last = list.last()?.get();
    // The raw value is borrowed from `text`: its place is its offset.
    Some(last.as_ptr() as usize - text.as_ptr() as usize + last.len())
}

#[cfg(test)]
mod tests {
    use serde_json::{json, Value};

    use super::*;
    use crate::tokens::{Encoding, TokenCounter};
    use crate::wire;

    /// The bound's tokens, as the pre-count takes them (its bound of the bytes after the
    /// prefix, written out: this module does not import the pre-count, which imports it).
    fn tokens(bound: Bound, counter: &TokenCounter, len: usize) -> u64 {
        let after = (len - bound.repeated) as f64 * counter.max_tokens_per_byte();
        bound.counted + after.ceil() as u64
    }

    fn counters() -> Vec<TokenCounter> {
        [
            "o200k_base",
            "cl100k_base",
            "chars_per_token:4",
            "chars_per_token:0.3",
        ]
        .into_iter()
        .map(|e| TokenCounter::new(e.parse::<Encoding>().unwrap()).unwrap())
        .collect()
    }

    /// `body` with its list cut to its first `n` elements.
    fn cut(body: &Value, format: WireFormat, n: usize) -> String {
        let mut body = body.clone();
        let key = format.list_key();
        let list: Vec<Value> = body[key].as_array().unwrap()[..n].to_vec();
        body[key] = Value::Array(list);
        body.to_string()
    }

    fn corpus() -> Vec<(WireFormat, Value)> {
        let dir =
            std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/corpus");
        let mut bodies = Vec::new();
        for (sub, format) in [
            ("anthropic", WireFormat::Anthropic),
            ("openai", WireFormat::OpenAi),
            ("responses", WireFormat::Responses),
        ] {
            let mut paths: Vec<_> = std::fs::read_dir(dir.join(sub))
                .unwrap()
                .map(|e| e.unwrap().path())
                .collect();
            paths.sort();
            for path in paths {
                let text = std::fs::read_to_string(&path).unwrap();
                bodies.push((format, serde_json::from_str(&text).unwrap()));
            }
        }
        // Reasoning items and calls at every cut: the Responses reader groups them with what
        // follows, so a cut regroups the kept request's last elements.
        let mut input = vec![json!({"role": "user", "content": "fix the build"})];
        for i in 0..6 {
            input.push(json!({"type": "reasoning", "summary": [], "encrypted_content": "gAAA"}));
            if i % 2 == 0 {
                input.push(json!({"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Looking."}]}));
            }
            input.push(json!({"type": "reasoning", "summary": [{"type": "summary_text", "text": "think"}]}));
            input.push(json!({"type": "function_call", "call_id": format!("c{i}"), "name": "shell", "arguments": "{\"cmd\":\"ls\"}"}));
            input.push(json!({"type": "function_call_output", "call_id": format!("c{i}"), "output": "a b c"}));
            input.push(
                json!({"type": "web_search_call", "id": format!("w{i}"), "status": "completed"}),
            );
        }
        input.push(json!({"type": "reasoning", "summary": []}));
        // Counted fields after `input` (`instructions`).
        bodies.push((
            WireFormat::Responses,
            json!({"input": input, "instructions": "You are Codex.", "model": "m", "tools": [{"type": "function", "name": "shell"}]}),
        ));
        bodies
    }

    #[test]
    fn the_bound_from_a_kept_request_is_at_least_the_full_count_of_every_grown_one() {
        let counters = counters();
        let mut checked = 0;
        for (format, body) in corpus() {
            let len = body[format.list_key()].as_array().unwrap().len();
            // About 12 cuts of a body (every one of the short synthetic body's), each grown
            // by one element, by seven, and to the whole list.
            let step = if len < 60 { 1 } else { len / 12 };
            let mut cuts: Vec<usize> = (1..=len).step_by(step).collect();
            cuts.push(len);
            let mut texts = std::collections::BTreeMap::new();
            for &n in &cuts {
                for m in [n, (n + 1).min(len), (n + 7).min(len), len] {
                    texts.entry(m).or_insert_with(|| {
                        let text = cut(&body, format, m);
                        let (conversation, _) = wire::parse_str(&text, Some(format)).unwrap();
                        (text, conversation.messages)
                    });
                }
            }
            for &n in &cuts {
                let (kept, kept_messages) = &texts[&n];
                let kept = Bytes::from(kept.clone());
                for m in [n, (n + 1).min(len), (n + 7).min(len), len] {
                    let (grown, grown_messages) = &texts[&m];
                    for counter in &counters {
                        let reads = LastReads::default();
                        let counted = counter.count_messages(kept_messages);
                        reads.record("t", "h", format, &kept, counted);
                        let bound = reads
                            .bound("t", "h", format, grown.as_bytes())
                            .unwrap_or_else(|| panic!("{format} cut at {n} then {m}: no bound"));
                        let full = counter.count_messages(grown_messages);
                        let most = tokens(bound, counter, grown.len());
                        assert!(
                            full <= most,
                            "{format} {:?} cut at {n} then {m}: {full} > {}",
                            counter.encoding(),
                            most
                        );
                        assert_eq!(bound.counted, counted);
                        checked += 1;
                    }
                }
            }
        }
        assert!(checked > 1000, "{checked}");
    }

    #[test]
    fn an_edited_truncated_or_reordered_body_has_no_bound_from_the_kept_one() {
        let (format, body) = corpus().pop().unwrap();
        let kept = Bytes::from(cut(&body, format, 10));
        let reads = LastReads::default();
        reads.record("t", "h", format, &kept, 100);
        let bound = |text: &str| reads.bound("t", "h", format, text.as_bytes());
        assert!(bound(&cut(&body, format, 12)).is_some());

        // An earlier element edited, by one character.
        let mut edited = body.clone();
        edited["input"][2]["content"][0]["text"] = json!("Looking!");
        assert_eq!(bound(&cut(&edited, format, 12)), None);
        // Truncated: fewer elements than the kept request.
        assert_eq!(bound(&cut(&body, format, 9)), None);
        // Two elements swapped.
        let mut reordered = body.clone();
        reordered["input"].as_array_mut().unwrap().swap(4, 5);
        assert_eq!(bound(&cut(&reordered, format, 12)), None);
        // A field put before the list.
        let mut before = serde_json::Map::new();
        before.insert("include".into(), json!(["reasoning.encrypted_content"]));
        before.extend(body.as_object().unwrap().clone());
        assert_eq!(bound(&cut(&Value::Object(before), format, 12)), None);
        // The prefix followed by anything but the list going on or ending.
        let text = std::str::from_utf8(&kept).unwrap();
        let prefix = list_end(&kept, format).unwrap();
        assert_eq!(bound(&format!("{}x]}}", &text[..prefix])), None);
        assert_eq!(bound(&text[..prefix]), None);
        assert!(bound(&format!("{} \n]}}", &text[..prefix])).is_some());

        // Another thread, chain or format.
        let grown = cut(&body, format, 12);
        assert_eq!(reads.bound("u", "h", format, grown.as_bytes()), None);
        assert_eq!(reads.bound("t", "h2", format, grown.as_bytes()), None);
        let other = WireFormat::OpenAi;
        assert_eq!(reads.bound("t", "h", other, grown.as_bytes()), None);
    }

    #[test]
    fn the_bound_is_the_kept_count_plus_the_bytes_after_the_prefix() {
        let counter = TokenCounter::new(Encoding::O200kBase).unwrap();
        let format = WireFormat::OpenAi;
        let kept =
            Bytes::from_static(br#"{"messages":[{"role":"user","content":"hi"}],"model":"m"}"#);
        let reads = LastReads::default();
        reads.record("t", "h", format, &kept, 5);
        let grown = r#"{"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"yo"}],"model":"m"}"#;
        let prefix = r#"{"messages":[{"role":"user","content":"hi"}"#.len();
        assert_eq!(
            reads.bound("t", "h", format, grown.as_bytes()),
            Some(Bound {
                counted: 5,
                repeated: prefix,
            })
        );
        let bound = reads.bound("t", "h", format, grown.as_bytes()).unwrap();
        assert_eq!(
            tokens(bound, &counter, grown.len()),
            5 + (grown.len() - prefix) as u64
        );
        // A body with no list elements is not kept, and takes the place of the last one.
        reads.record(
            "t",
            "h",
            format,
            &Bytes::from_static(br#"{"messages":[]}"#),
            0,
        );
        assert_eq!(reads.bound("t", "h", format, grown.as_bytes()), None);
    }

    #[test]
    fn the_least_recently_used_thread_goes_first() {
        let format = WireFormat::OpenAi;
        let body = Bytes::from_static(br#"{"messages":[{"role":"user","content":"hi"}]}"#);
        let reads = LastReads::default();
        for i in 0..MAX_THREADS {
            reads.record(&format!("t{i}"), "h", format, &body, 5);
        }
        // t0 used: t1 is now the least recently used.
        assert!(reads.bound("t0", "h", format, &body).is_some());
        reads.record("new", "h", format, &body, 5);
        assert!(reads.bound("t1", "h", format, &body).is_none());
        for thread in ["t0", "t2", "new"] {
            assert!(reads.bound(thread, "h", format, &body).is_some());
        }
        let state = reads.lock();
        assert_eq!(state.threads.len(), MAX_THREADS);
        assert_eq!(state.bytes, MAX_THREADS * body.len());
    }
}
