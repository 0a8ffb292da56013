//! Filling in page-transcript prompts when a deferred request is sent.
//!
//! A plugin may queue a request whose prompt is a page-transcript prompt
//! (`tamp_plugin_api::deferred`): the prompt around a slot, and the id of the page whose
//! messages go in it. The page already holds those messages, so the compaction stores them
//! once, not a second time inside the queued request. The worker fills the prompt in from the
//! page store, with the plugin SDK's own rendering, right before it sends the request (in a
//! batch, or through the sync fallback): the text sent is the one the plugin would have
//! rendered. Any other prompt, including every request queued before this existed, is sent as
//! it is.

use std::borrow::Cow;
use std::sync::{Arc, OnceLock};

use futures::future::BoxFuture;
use tamp_plugin_api::deferred::{is_page_transcript_prompt, PageTranscriptPrompt};
use tamp_plugin_api::{LlmRequest, LlmResponse};

use crate::providers::{Provider, ProviderError, ProviderErrorKind};
use crate::store::{PageStore, StoreError};

/// Why a request could not be filled in.
#[derive(Debug, thiserror::Error)]
pub enum RenderError {
    /// The page store could not be read: a later pass may succeed.
    #[error(transparent)]
    Store(StoreError),
    /// The request can never be filled in: no such page, a malformed prompt, or no store.
    #[error("{0}")]
    Unfillable(String),
}
/// Where the worker reads pages from; set once, after the worker is built
/// (`Worker::with_pages`), and shared by its clones and its sync fallback.
#[derive(Clone, Default)]
pub struct PageSource(Arc<OnceLock<Arc<dyn PageStore>>>);

impl PageSource {
    /// Sets the page store; a source that has one keeps it.
    pub fn set(&self, pages: Arc<dyn PageStore>) {
        let _ = self.0.set(pages);
    }

    /// The request to send for `request`: its page-transcript prompt filled in from its page,
    /// or `request` itself when its prompt is an ordinary one.
    pub async fn render<'r>(
        &self,
        request: &'r LlmRequest,
    ) -> Result<Cow<'r, LlmRequest>, RenderError> {
        if !is_page_transcript_prompt(&request.prompt) {
            return Ok(Cow::Borrowed(request));
        }
        let prompt = PageTranscriptPrompt::parse(&request.prompt)
            .map_err(|e| RenderError::Unfillable(e.message.into_string()))?;
        let id = prompt.page_id();
        let Some(pages) = self.0.get() else {
            return Err(RenderError::Unfillable(format!(
                "the request's prompt is to be filled in from page {id}, and this worker has \
                 no page store to read it from"
            )));
        };
        let page = pages.get_page(id).await.map_err(|e| match e {
            StoreError::Backend { .. } => RenderError::Store(e),
            e => RenderError::Unfillable(format!("cannot fill the request's prompt in: {e}")),
        })?;
        // Field by field: the template prompt is not worth copying.
        Ok(Cow::Owned(LlmRequest {
            system: request.system.clone(),
            prompt: prompt.fill(&page.page.messages).into(),
            max_output_tokens: request.max_output_tokens,
            temperature: request.temperature,
            response_schema_json: request.response_schema_json.clone(),
            label: request.label.clone(),
        }))
    }

    /// `provider`, filling page-transcript prompts in before it is asked (the worker's sync
    /// fallback, which is handed queued requests as they are).
    pub fn filling(&self, provider: Arc<dyn Provider>) -> Arc<dyn Provider> {
        Arc::new(Filling {
            provider,
            pages: self.clone(),
        })
    }
}

struct Filling {
    provider: Arc<dyn Provider>,
    pages: PageSource,
}

impl Provider for Filling {
    fn name(&self) -> &str {
        self.provider.name()
    }

    fn cacheable(&self) -> bool {
        self.provider.cacheable()
    }

    fn complete<'a>(
        &'a self,
        request: &'a LlmRequest,
    ) -> BoxFuture<'a, Result<LlmResponse, ProviderError>> {
        Box::pin(async move {
            let request = self.pages.render(request).await.map_err(|e| {
                let kind = match e {
                    RenderError::Store(_) => ProviderErrorKind::Connection,
                    RenderError::Unfillable(_) => ProviderErrorKind::InvalidRequest,
                };
                ProviderError::new(self.provider.name(), kind, e.to_string())
            })?;
            self.provider.complete(&request).await
        })
    }
}
