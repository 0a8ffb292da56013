//! Thread continuity: a request continued from its thread's last answer, and that answer
//! stored for the next (see [`crate::store::threads`]).

use tamp_plugin_api::{Conversation, Message};

use super::{Chain, ChainError, CompactOptions, Compacted, StageStatus};
use crate::invariants::infer_format;
use crate::store::threads::{
    common_prefix, continuation, prefix_hashes, remarked, ThreadKey, ThreadReport, ThreadState,
    ThreadStore, ThreadsConfig,
};
use crate::wire::check_tool_pairing;

impl Chain {
    /// Whether the thread of `thread_id` has a stored answer that [`Chain::compact`] with
    /// thread continuity would continue from. A store that cannot be read counts as having
    /// one: the caller then takes the path that reports its error.
    pub async fn has_thread_state(&self, thread_id: &str) -> bool {
        let Some((store, config)) = &self.threads else {
            return false;
        };
        let Some(key) = ThreadKey::of(Some(thread_id), &[], false) else {
            return false;
        };
        !matches!(store.get_thread(&key.key, config.ttl_secs).await, Ok(None))
    }

    /// [`Chain::compact`] with thread continuity, for the thread of `key`.
    pub(super) async fn continue_thread(
        &self,
        conversation: Conversation,
        options: &CompactOptions,
        (store, config, key): (&dyn ThreadStore, &ThreadsConfig, ThreadKey),
        unrecognized: u32,
    ) -> Result<Compacted, ChainError> {
        // Checked before anything is read or stored for it.
        let format = options
            .format
            .unwrap_or_else(|| infer_format(&conversation.messages));
        check_tool_pairing(&conversation.messages, format)?;
        let mut error = None;
        let mut refused = false;
        let previous = match store.get_thread(&key.key, config.ttl_secs).await {
            Ok(state) => state,
            // Altered in the store: not a word of it is used, and this call's answer, stored
            // below, replaces it.
            Err(e) if e.is_damaged() => {
                tracing::warn!(
                    "thread state refused, the thread starts again from the request's raw \
                     history: {e}"
                );
                error = Some(e.to_string());
                refused = true;
                None
            }
            Err(e) => {
                tracing::warn!("thread state not read, compacting from the request: {e}");
                error = Some(e.to_string());
                None
            }
        };
        // A last answer another chain made (the chain file edited, or another chain file on
        // the same store) is not continued: the request starts from its raw history.
        let started_over = previous
            .as_ref()
            .filter(|state| state.chain != self.identity)
            .map(|_| "its last answer was made by another chain".to_string());
        let previous = previous.filter(|state| state.chain == self.identity);
        // The request's prefix hashes (every message serialized and hashed): to continue from
        // a stored answer, or to store this call's. Not made for a request with no stored
        // answer that no stage can act on, as most of an agent's requests are.
        let hashes = (previous.is_some() || self.may_act(&conversation.messages, options))
            .then(|| prefix_hashes(&conversation.messages));
        let resumed = previous
            .as_ref()
            .zip(hashes.as_ref())
            .and_then(|(s, hashes)| continuation(s, hashes));
        let raw_len = conversation.messages.len();
        let covered = previous.as_ref().map_or(0, |s| s.covered as usize);
        let input = match resumed {
            Some(output) => {
                // The answer with the request's own marks (see `threads::remarked`).
                let mut messages = remarked(output, &conversation.messages[..covered]);
                // The request's new messages are moved, not copied: the rest of it is dropped.
                let raw: Vec<Message> = conversation.messages.into();
                messages.extend(raw.into_iter().skip(covered));
                Conversation {
                    thread_id: conversation.thread_id,
                    messages: messages.into(),
                    metadata_json: conversation.metadata_json,
                }
            }
            None => conversation,
        };
        let mut compacted = self.run_chain(input, options, unrecognized).await?;
        let acted = compacted
            .report
            .stages
            .iter()
            .any(|r| r.status == StageStatus::Acted);
        let mut stored = false;
        // `hashes` is there whenever a stage could act (`may_act`).
        if let (true, Some(hashes)) = (acted, &hashes) {
            let state = ThreadState {
                covered: raw_len as u64,
                prefix_hash: hashes[raw_len].clone(),
                output: compacted.conversation.messages.to_vec(),
                chain: self.identity.clone(),
            };
            match store.put_thread(&key.key, &state, config.limits()).await {
                Ok(()) => stored = true,
                Err(e) => {
                    tracing::warn!("thread state not stored: {e}");
                    error.get_or_insert(e.to_string());
                }
            }
        }
        let kept = previous.as_ref().map_or(0, |p| {
            common_prefix(&p.output, &compacted.conversation.messages)
        });
        let prefix_kept_tokens = self
            .ctx
            .tokens
            .count_messages(&compacted.conversation.messages[..kept]);
        if resumed.is_some() {
            compacted.report.reason = format!(
                "thread continued from its last answer ({covered} message(s) of the request \
                 stand behind it); {}",
                compacted.report.reason
            );
        } else if let Some(why) = &started_over {
            compacted.report.reason = format!(
                "thread started over from the request's raw history ({why}); {}",
                compacted.report.reason
            );
        }
        compacted.report.thread = Some(ThreadReport {
            key: if key.derived { "derived" } else { "given" },
            continued: resumed.is_some(),
            messages_covered: if resumed.is_some() { covered as u64 } else { 0 },
            prefix_kept_tokens,
            stored,
            state_refused: refused,
            started_over,
            error,
        });
        Ok(compacted)
    }
}
