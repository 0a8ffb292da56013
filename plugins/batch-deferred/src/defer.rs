//! What a compaction queues: each page archived, its summary request deferred to the batch
//! worker, and a pending summary (the page's ledger with it) put in its place.

use std::borrow::Cow;
use std::ops::Range;

use tamp_plugin_api::deferred::page_transcript_prompt;
use tamp_plugin_api::prelude::*;
use tamp_plugin_api::sdk::ledger::{self, Sharing};
use tamp_plugin_api::sdk::summary_message;

use crate::plan::{label_of, pending_text, shown_run};
use crate::{BatchDeferred, NAME};

/// A page to defer, once its placeholder is known to be worth it.
pub(crate) struct Planned<'a> {
    range: Range<usize>,
    label: String,
    /// The pending summary's text.
    text: String,
    /// The run as its request shows it ([`shown_run`]).
    shown: Cow<'a, [Message]>,
    /// The run is summaries (a fold): its request is written whole, never from the page.
    folds: bool,
}

impl BatchDeferred {
    /// Archives each planned page, defers its summary and returns the pending summaries to
    /// put in place. A page the host will not archive or defer is left as it was.
    pub(crate) async fn defer(
        &self,
        host: &Host,
        messages: &[Message],
        pages: Vec<Range<usize>>,
        max_tokens: u64,
        warnings: &mut Vec<String>,
    ) -> Vec<Edit> {
        // The ledgers of the pages placed by this compaction, so far: the later pages share
        // the cap with them as with the summaries already in `messages`.
        let mut placed_ledgers = 0;
        // A placeholder that would not be smaller than its messages is not worth it.
        let planned: Vec<Planned> = pages
            .into_iter()
            .filter_map(|range| {
                let run = &messages[range.clone()];
                let label = label_of(run);
                // A fold's run is summaries: its request and preview show their narratives.
                let folds = run.iter().any(Message::is_summary);
                let shown = shown_run(run, &self.config.ledger);
                // The ledger goes with the placeholder: the facts are there before the batch
                // answers. The ledgers of all these summaries share the cap (a fold bounds
                // those it carries as one), and each page's has at most its share of the page.
                let cap = self.config.ledger.cap(
                    host,
                    messages,
                    &range,
                    max_tokens,
                    Sharing::WithEarlierAndPlaced {
                        placed: placed_ledgers,
                    },
                );
                let preview = self.config.preview_chars;
                let mut finished = ledger::finish(
                    &self.config.ledger,
                    host,
                    messages,
                    range.clone(),
                    &pending_text(&shown, &label, preview, 0),
                    cap,
                );
                if finished.unlisted > 0 {
                    // No room left for even a note line: the header says how many entries
                    // the page holds, so none is dropped silently.
                    finished.text = pending_text(&shown, &label, preview, finished.unlisted);
                }
                let placeholder = Message::text(sdk::SUMMARY_ROLE, finished.text.as_str());
                let smaller = host.count_message_tokens(std::slice::from_ref(&placeholder))
                    < host.count_message_tokens(run);
                // A fold carries ledgers the later pages' caps already count (they are in
                // the messages before those pages).
                if smaller && !folds {
                    placed_ledgers += host.count_tokens(&finished.ledger.render());
                }
                smaller.then_some(Planned {
                    range,
                    label,
                    text: finished.text,
                    shown,
                    folds,
                })
            })
            .collect();
        if planned.is_empty() {
            return Vec::new();
        }
        let drafts = planned
            .iter()
            .map(|p| {
                let meta = tamp_plugin_api::serde_json::json!({"deferred": true, "label": p.label});
                (messages[p.range.clone()].to_vec(), Some(meta))
            })
            .collect();
        let ids = host.archive_pages(drafts).await;
        // The host fills the transcript in from the page when it sends the request, so the
        // page's text is stored once rather than again inside the queued prompt.
        let transcript_from_page = host.renders_page_transcripts();
        let mut ready = Vec::new();
        for (p, id) in planned.into_iter().zip(ids) {
            let page_id = match id {
                Ok(id) => id,
                Err(e) => {
                    warnings.push(format!("cannot archive messages {:?}: {e}", p.range));
                    continue;
                }
            };
            // The page of a fold holds the summaries with their ledgers: its request is
            // written whole, from their narratives.
            let from_page = (transcript_from_page && !p.folds).then_some(page_id.as_str());
            match self.request_for(&p.shown, &p.label, from_page) {
                Ok(request) => ready.push((p.range, p.text, page_id, request)),
                Err(e) => warnings.push(format!("cannot build the request of {page_id}: {e}")),
            }
        }
        if ready.is_empty() {
            return Vec::new();
        }
        let (placed, requests): (Vec<_>, Vec<_>) = ready
            .into_iter()
            .map(|(range, text, page_id, request)| {
                ((range, text, page_id.clone()), (page_id, request))
            })
            .unzip();
        if let Err(e) = host.defer_summaries(requests).await {
            warnings.push(format!(
                "cannot defer {} summary request(s): {e}; messages left as they were",
                placed.len()
            ));
            return Vec::new();
        }
        // The pages are archived (the deferred requests name them): each pending summary
        // replaces exactly its page's messages, which the host checks.
        placed
            .into_iter()
            .map(|(range, text, page_id)| {
                let pending = summary_message(&text, &page_id, NAME, SummaryStatus::Pending);
                Edit::replace(range, pending)
            })
            .collect()
    }

    /// The summary request of `run`. Given the id of the page holding it, the prompt is a
    /// page-transcript prompt the host fills in from that page when it sends the request
    /// (the same text, see `tamp_plugin_api::deferred`); otherwise, or when the prompt cannot
    /// be written so, the whole prompt.
    fn request_for(
        &self,
        run: &[Message],
        label: &str,
        page_id: Option<&str>,
    ) -> Result<LlmRequest, PluginError> {
        let opts = sdk::RenderOptions::cut_at(self.config.max_block_chars);
        let count = run.len().to_string();
        let vars = [("count", count.as_str()), ("label", label)];
        let templated = match page_id {
            Some(id) => {
                page_transcript_prompt(self.prompt_template.as_str(), "messages", &vars, id, &opts)?
            }
            None => None,
        };
        let prompt = match templated {
            Some(prompt) => prompt,
            None => {
                let rendered = sdk::render_messages(run, &opts);
                self.prompt_template
                    .render(&[("messages", rendered.as_str()), vars[0], vars[1]])
            }
        };
        Ok(LlmRequest::new(
            self.config.system_prompt.as_str(),
            prompt,
            self.config.summary_max_tokens,
        )
        .with_label(format!("deferred summary of {} messages", run.len())))
    }
}
