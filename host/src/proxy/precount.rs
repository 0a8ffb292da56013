//! The pre-count: a body the chain would certainly leave as it is goes upstream unread.
//!
//! Reading a request into the conversation model, checking its tool pairing, counting its
//! tokens and looking up its thread grow with the body: about 10 ms for a 200 KB Responses
//! request, all to learn that the chain does not act on it, as it does not on most of an
//! agent's requests (they grow by a turn at a time; compaction happens when one crosses the
//! high watermark). So before any of that the proxy asks, from the body's length alone,
//! whether the chain could act:
//!
//! - **the bound**: the chain's count of a conversation is at most
//!   [`TokenCounter::max_tokens_per_byte`] times the length of the body it was read from.
//!   Every counted piece (a text, a tool call's name and input, a result's text) is the
//!   decoded content of a JSON string or the text of a JSON value in the body, never longer
//!   than its JSON (an escape decodes to fewer bytes than it takes); an opaque block counts
//!   a quarter of its JSON's length; and the [`MESSAGE_OVERHEAD_TOKENS`] of a message are
//!   fewer than the bytes of JSON that frame it and are not counted (`{"role":"user",
//!   "content":""}`, `"instructions":""`, an item's `"type"`), so the bound holds for every
//!   message the readers make. A body whose bound is not above
//!   [`Chain::unchanged_up_to`] (the high watermark when every stage triggers over budget;
//!   any length for a chain with no stages) cannot be compacted;
//! - **thread continuity**: such a request may still continue a thread whose earlier
//!   compaction must be applied to it again. Its thread is named as the full path names it
//!   (`x-tamp-thread-id`, the body's `thread_id`, the agent's session), from the body's
//!   top-level fields, read without reading the conversation; when that thread has a stored
//!   answer, or when the thread could only be derived from the leading messages (which
//!   takes reading them), the full path decides.
//!
//! Not taken in strict mode (where a body tamp cannot read is refused, so every body is
//! read), for a Responses body that may hold a compaction item of tamp's (it must be written
//! anew), or when a stage runs on every call. A body forwarded on the pre-count is the
//! client's bytes, with `x-tamp-compaction: unchanged (...)` saying why; one that is not a
//! conversation at all is the upstream's to refuse.

use super::last_read::LastReads;
use super::outcome::{nothing_to_compact, Outcome};
use super::session::{RequestFields, ThreadHint};
use crate::chain::Chain;
use crate::config::proxy::ModelBudgets;
use crate::tokens::TokenCounter;
#[cfg(doc)]
use crate::tokens::MESSAGE_OVERHEAD_TOKENS;
use crate::wire::{self, WireFormat};

/// The most tokens `counter` can count in a conversation read from a body of `bytes` bytes
/// (see the module's documentation).
pub fn bound(counter: &TokenCounter, bytes: usize) -> u64 {
    (bytes as f64 * counter.max_tokens_per_byte()).ceil() as u64
}

/// What becomes of `body` without reading it, if that can be known: the outcome to answer
/// with, the body forwarded as it is; `None` when the chain must read it. `last` holds the
/// threads' last read requests (see [`super::last_read`]), read by the chain of
/// `config_hash`: a body over the bound of its length may be under the bound from its
/// thread's last request. The limit is the chain's under the budget the request would be
/// compacted with: its model's, from `models` (`[proxy.models]`), else the chain's own.
pub async fn decide(
    chain: &Chain,
    format: WireFormat,
    body: &[u8],
    thread: &ThreadHint,
    last: &LastReads,
    config_hash: &str,
    models: &ModelBudgets,
) -> Option<Outcome> {
    let own_limit = chain.unchanged_up_to()?;
    let by_length = bound(chain.tokens(), body.len());
    // Without per-model budgets, a body over the bound of its length with no earlier request
    // to bound it from is read at once; with them, its model may have a larger budget.
    if by_length > own_limit && last.is_empty() && models.is_empty() {
        return None;
    }
    // The store is asked about the header's thread (which wins over any the body names)
    // while the body is scanned: the answer, from the store's blocking pool, is then
    // usually in by the time it is needed, rather than waited for after the scan.
    let mut given_stored = std::pin::pin!(futures::future::maybe_done(async {
        match (&thread.given, chain.thread_config()) {
            (Some(id), Some(_)) => Some(chain.has_thread_state(id).await),
            _ => None,
        }
    }));
    let _ = futures::poll!(given_stored.as_mut());
    let text = std::str::from_utf8(body).ok()?;
    if format == WireFormat::Responses && wire::carries_own_compaction(text) {
        return None;
    }
    // A body that is not an object, or whose fields have other types than these, takes the
    // full path, which says what is wrong with it.
    let top = RequestFields::read(text)?;
    if format == WireFormat::Responses {
        if let Some(field) = top.server_side() {
            return Some(nothing_to_compact(field));
        }
    }
    let limit = match models.for_model(top.model.as_deref(), chain.budget()) {
        Some(budget) => chain.unchanged_up_to_with(&budget)?,
        None => own_limit,
    };
    let named = top.thread(thread);
    let (reason, most) = if by_length <= limit {
        (under_the_watermark(body.len(), by_length, limit), by_length)
    } else {
        let from_last = last.bound(named.as_deref()?, config_hash, format, body)?;
        let after = body.len() - from_last.repeated;
        let new = bound(chain.tokens(), after);
        let most = from_last.counted.saturating_add(new);
        if most > limit {
            return None;
        }
        let reason = format!(
            "at most {most} tokens: {} counted in the thread's last request read, whose first \
             {} bytes it repeats, and at most {new} in the {after} bytes after them; not above \
             the high watermark of {limit}",
            from_last.counted, from_last.repeated,
        );
        (reason, most)
    };
    let thread = match (chain.thread_config(), named) {
        (None, _) => None,
        (Some(_), Some(id)) => {
            given_stored.as_mut().await;
            let stored = match given_stored.as_mut().take_output().flatten() {
                Some(stored) => stored,
                None => chain.has_thread_state(&id).await,
            };
            if stored {
                return None;
            }
            Some(id)
        }
        (Some(config), None) if config.derive_key => return None,
        (Some(_), None) => None,
    };
    Some(Outcome::Unchanged {
        reason: format!("{reason}: forwarded unread"),
        thread,
        model: top.model.as_deref().map(str::to_string),
        tokens: None,
        at_most: Some(most),
        run: None,
    })
}

/// What becomes of a body the proxy does not even collect (it streams to the upstream as it
/// arrives), if the request's headers and the chain already settle it: the outcome to answer
/// with; `None` when the body must be read (then [`decide`] may still forward it unread).
///
/// Settled when the chain cannot act on any body the request may carry, and no stored
/// answer of its thread can apply to it:
/// - the chain has no stages: nothing is compacted, and no thread has an answer of this
///   chain to continue (a state is written only when a stage acted, and a chain continues
///   only its own, `store::threads`); or
/// - its `Content-Length` holds at most the lowest high watermark the request could be
///   compacted with (the chain's own, or any `[proxy.models]` budget: its model is in the
///   body), and its thread is named by `x-tamp-thread-id` (which wins over anything the body
///   names) with no stored answer, or the chain keeps no thread states.
///
/// Never for a Responses request when tamp answers OpenAI's compaction (`tamp_compacts`): its
/// body may end in the trigger or carry a compaction item of tamp's, which must be read.
pub async fn decide_from_headers(
    chain: &Chain,
    format: WireFormat,
    declared_length: u64,
    thread: &ThreadHint,
    models: &ModelBudgets,
    tamp_compacts: bool,
) -> Option<Outcome> {
    if format == WireFormat::Responses && tamp_compacts {
        return None;
    }
    let own = chain.unchanged_up_to()?;
    // The body is never read: its length's bound is all that is known of its tokens.
    let bytes = usize::try_from(declared_length).ok()?;
    let most = bound(chain.tokens(), bytes);
    if own == u64::MAX {
        return Some(Outcome::Unchanged {
            reason: format!("{}: streamed unread", under_the_watermark(bytes, most, own)),
            thread: thread.given.clone(),
            model: None,
            tokens: None,
            at_most: Some(most),
            run: None,
        });
    }
    let mut limit = own;
    for budget in models.all(chain.budget()) {
        limit = limit.min(chain.unchanged_up_to_with(&budget)?);
    }
    if most > limit {
        return None;
    }
    let named = match (chain.thread_config(), &thread.given) {
        (None, _) => None,
        (Some(_), Some(id)) if !chain.has_thread_state(id).await => Some(id.clone()),
        (Some(_), _) => return None,
    };
    Some(Outcome::Unchanged {
        reason: format!(
            "{}: streamed unread",
            under_the_watermark(bytes, most, limit)
        ),
        thread: named,
        model: None,
        tokens: None,
        at_most: Some(most),
        run: None,
    })
}

/// Why a body of `bytes` holding at most `most` tokens is left as it is, against the `limit`
/// the chain acts above (`u64::MAX`: a chain of no stages).
fn under_the_watermark(bytes: usize, most: u64, limit: u64) -> String {
    if limit == u64::MAX {
        "the chain has no stages".to_string()
    } else {
        format!("{bytes} bytes hold at most {most} tokens, not above the high watermark of {limit}")
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;
    use std::sync::Arc;

    use super::*;
    use crate::budget::BudgetConfig;
    use crate::chain::ChainBuilder;
    use crate::plugin_api::{Message, Role};
    use crate::store::threads::ThreadsConfig;
    use crate::store::{SqliteStore, ThreadLimits, ThreadState, ThreadStore};
    use crate::tokens::Encoding;

    fn corpus_dir() -> PathBuf {
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/corpus")
    }

    #[test]
    fn the_bound_is_above_the_count_of_every_conversation_read_from_the_body() {
        let counters: Vec<TokenCounter> = ["o200k_base", "cl100k_base", "chars_per_token:4"]
            .into_iter()
            .chain(["chars_per_token:0.3"])
            .map(|e| TokenCounter::new(e.parse::<Encoding>().unwrap()).unwrap())
            .collect();
        let mut bodies = Vec::new();
        for (dir, format) in [
            ("anthropic", WireFormat::Anthropic),
            ("openai", WireFormat::OpenAi),
            ("responses", WireFormat::Responses),
        ] {
            for entry in std::fs::read_dir(corpus_dir().join(dir)).unwrap() {
                let text = std::fs::read_to_string(entry.unwrap().path()).unwrap();
                bodies.push((format, text));
            }
        }
        // Bodies made to count as many tokens per byte as they can: many empty messages (the
        // overhead against the framing), text of rare characters, tiny reasoning items.
        let empty = vec![serde_json::json!({"role": "user", "content": ""}); 500];
        bodies.push((
            WireFormat::OpenAi,
            serde_json::json!({ "messages": empty }).to_string(),
        ));
        let rare: String = ['\u{10FFFD}', '\u{1F9E9}', 'ǅ', '\u{0378}', '\u{2028}']
            .iter()
            .cycle()
            .take(3000)
            .collect();
        bodies.push((
            WireFormat::Anthropic,
            serde_json::json!({"system": "s", "messages": [{"role": "user", "content": rare}]})
                .to_string(),
        ));
        let tiny = vec![serde_json::json!({"type": "reasoning", "summary": []}); 500];
        bodies.push((
            WireFormat::Responses,
            serde_json::json!({ "instructions": "", "input": tiny }).to_string(),
        ));
        for (format, body) in &bodies {
            let (conversation, _) = wire::parse_str(body, Some(*format)).unwrap();
            for counter in &counters {
                let count = counter.count_messages(&conversation.messages);
                let bound = bound(counter, body.len());
                assert!(
                    count <= bound,
                    "{format} {:?}: {count} tokens > bound {bound}",
                    counter.encoding()
                );
            }
        }
    }

    fn chain(store: &Arc<SqliteStore>, derive_key: bool) -> Chain {
        let config = ThreadsConfig {
            derive_key,
            ..ThreadsConfig::default()
        };
        ChainBuilder::new(BudgetConfig::default())
            .threads(Arc::clone(store) as Arc<dyn ThreadStore>, config)
            .build()
            .unwrap()
    }

    fn hint(given: Option<&str>, header_session: Option<&str>) -> ThreadHint {
        ThreadHint {
            given: given.map(str::to_string),
            header_session: header_session.map(str::to_string),
        }
    }

    async fn decided(chain: &Chain, format: WireFormat, body: &str, t: &ThreadHint) -> String {
        match decide(
            chain,
            format,
            body.as_bytes(),
            t,
            &LastReads::default(),
            "h",
            &ModelBudgets::default(),
        )
        .await
        {
            None => "read".to_string(),
            Some(outcome) => format!(
                "{} / {}",
                outcome.header().to_str().unwrap(),
                outcome
                    .thread_header()
                    .map_or("-".into(), |h| h.to_str().unwrap().to_string())
            ),
        }
    }

    #[tokio::test]
    async fn a_chain_of_no_stages_streams_every_body_unless_tamp_may_answer_a_compaction() {
        let store = Arc::new(SqliteStore::in_memory().unwrap());
        let chain = chain(&store, true);
        let models = ModelBudgets::default();
        let streamed =
            |outcome: Option<Outcome>| outcome.map(|o| o.header().to_str().unwrap().to_string());
        for format in [
            WireFormat::Anthropic,
            WireFormat::OpenAi,
            WireFormat::Responses,
        ] {
            let outcome = decide_from_headers(
                &chain,
                format,
                10_000_000,
                &hint(Some("t"), None),
                &models,
                false,
            )
            .await;
            assert_eq!(
                streamed(outcome).as_deref(),
                Some("unchanged (the chain has no stages: streamed unread)"),
                "{format}"
            );
        }
        // Its tokens are not counted; the bound of its declared length is recorded instead.
        let outcome = decide_from_headers(
            &chain,
            WireFormat::Anthropic,
            1_000,
            &hint(Some("t"), None),
            &models,
            false,
        )
        .await
        .unwrap();
        assert_eq!(
            (outcome.tokens(), outcome.at_most()),
            (None, Some(bound(chain.tokens(), 1_000)))
        );
        // A Responses body may end in OpenAI's compaction trigger, which tamp answers: read.
        let outcome = decide_from_headers(
            &chain,
            WireFormat::Responses,
            10,
            &hint(None, None),
            &models,
            true,
        )
        .await;
        assert!(outcome.is_none());
        let outcome = decide_from_headers(
            &chain,
            WireFormat::OpenAi,
            10,
            &hint(None, None),
            &models,
            true,
        )
        .await;
        assert!(outcome.is_some());
    }

    #[tokio::test]
    async fn a_named_thread_with_no_stored_answer_is_forwarded_unread_and_one_with_is_read() {
        let store = Arc::new(SqliteStore::in_memory().unwrap());
        let chain = chain(&store, true);
        let r = WireFormat::Responses;
        let body =
            r#"{"model":"m","input":[{"role":"user","content":"hi"}],"prompt_cache_key":"s1"}"#;
        let none = hint(None, None);
        let unread = "unchanged (the chain has no stages: forwarded unread)";
        assert_eq!(
            decided(&chain, r, body, &none).await,
            format!("{unread} / session:s1")
        );
        // The header wins; then the body's thread id; then the session in the headers.
        assert_eq!(
            decided(&chain, r, body, &hint(Some("t9"), None)).await,
            format!("{unread} / t9")
        );
        let with_id = r#"{"thread_id":"t8","messages":[{"role":"user","content":"hi"}]}"#;
        assert_eq!(
            decided(&chain, WireFormat::OpenAi, with_id, &hint(None, Some("h1"))).await,
            format!("{unread} / t8")
        );
        let plain = r#"{"messages":[{"role":"user","content":"hi"}]}"#;
        assert_eq!(
            decided(&chain, WireFormat::OpenAi, plain, &hint(None, Some("h1"))).await,
            format!("{unread} / session:h1")
        );
        // A thread named only by its leading messages must be read to be named.
        assert_eq!(
            decided(&chain, WireFormat::OpenAi, plain, &none).await,
            "read"
        );
        // Unless the chain derives no keys: then it has no thread.
        let no_derive = self::chain(&store, false);
        assert_eq!(
            decided(&no_derive, WireFormat::OpenAi, plain, &none).await,
            format!("{unread} / -")
        );

        // A thread with a stored answer is continued: the chain reads the request.
        let state = ThreadState {
            covered: 1,
            prefix_hash: "h".into(),
            output: vec![Message::text(Role::User, "hi")],
            chain: String::new(),
        };
        let limits = ThreadLimits {
            ttl_secs: 3600,
            max_threads: 10,
        };
        store
            .put_thread("id:session:s1", &state, limits)
            .await
            .unwrap();
        assert_eq!(decided(&chain, r, body, &none).await, "read");
        assert_eq!(
            decided(&chain, r, body, &hint(Some("t9"), None)).await,
            format!("{unread} / t9")
        );
        // The header's thread, looked up while the body is scanned: read once it has one.
        store.put_thread("id:t9", &state, limits).await.unwrap();
        assert_eq!(
            decided(&chain, r, body, &hint(Some("t9"), None)).await,
            "read"
        );
    }

    #[tokio::test]
    async fn server_side_state_own_compactions_and_odd_bodies() {
        let store = Arc::new(SqliteStore::in_memory().unwrap());
        let chain = chain(&store, false);
        let r = WireFormat::Responses;
        let none = hint(None, None);
        let continuing = r#"{"input":"go on","previous_response_id":"resp_1"}"#;
        assert!(decided(&chain, r, continuing, &none).await.starts_with(
            "skipped (the request continues server-side state (previous_response_id)"
        ));
        let own = format!(
            r#"{{"input":[{{"type":"compaction","encrypted_content":"{}[]"}}]}}"#,
            wire::OWN_COMPACTION
        );
        assert_eq!(decided(&chain, r, &own, &none).await, "read");
        for odd in ["not json", "[1]", r#"{"thread_id":7,"input":"x"}"#] {
            assert_eq!(decided(&chain, r, odd, &none).await, "read", "{odd}");
        }
        assert_eq!(
            decide(
                &chain,
                r,
                b"{\"input\":\"\xff\"}",
                &none,
                &LastReads::default(),
                "h",
                &ModelBudgets::default()
            )
            .await
            .map(|_| ()),
            None
        );
    }
}
