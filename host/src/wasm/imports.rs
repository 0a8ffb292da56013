//! `tamp:strategy/host`: the host's services as a guest calls them, served by the services of
//! the `compact` call in progress (the same `HostServices` a native plugin gets).

use tamp_plugin_api::page::page_id;
use tamp_plugin_api::rules::{clearing, exchanges};
use tamp_plugin_api::sdk::prompt::{render_messages, render_template, wrap_content, RenderOptions};
use tamp_plugin_api::{FfiString, FfiVec, Host, PageDraft, ProgressEvent};

use super::bindings::tamp::strategy::host::{self, LogLevel};
use super::bindings::tamp::strategy::types as wit;
use super::convert;
use super::sandbox::{CallContext, GuestState};

impl GuestState {
    /// The services of the call in progress; a trap outside one (the guest called a service
    /// from `new-strategy`, where a native plugin has no host either).
    fn services(&self, function: &str) -> wasmtime::Result<&CallContext> {
        self.call.as_ref().ok_or_else(|| {
            wasmtime::format_err!(
                "host function {function} called outside compact: the host's services are \
                 available only while compact runs"
            )
        })
    }
}

/// Input messages `start..end`, or a trap naming what was asked.
fn input_range(
    call: &CallContext,
    function: &str,
    start: u32,
    end: u32,
) -> wasmtime::Result<std::ops::Range<usize>> {
    let len = call.input.messages.len();
    let (start, end) = (start as usize, end as usize);
    if start <= end && end <= len {
        Ok(start..end)
    } else {
        Err(wasmtime::format_err!(
            "host function {function}: messages {start}..{end} are not in the input's {len}"
        ))
    }
}

impl wit::Host for GuestState {}

impl host::Host for GuestState {
    async fn input_messages(
        &mut self,
        start: u32,
        end: u32,
    ) -> wasmtime::Result<Vec<wit::Message>> {
        let call = self.services("input-messages")?;
        let range = input_range(call, "input-messages", start, end)?;
        Ok(convert::messages(&call.input.messages[range]))
    }

    async fn capabilities(&mut self) -> wasmtime::Result<Vec<String>> {
        let call = self.services("capabilities")?;
        Ok(call
            .host
            .capabilities()
            .into_iter()
            .map(String::from)
            .collect())
    }

    async fn count_tokens(&mut self, text: String) -> wasmtime::Result<u64> {
        let call = self.services("count-tokens")?;
        Ok(call.host.count_tokens(text.as_str().into()))
    }

    async fn count_message_tokens(&mut self, messages: Vec<wit::Message>) -> wasmtime::Result<u64> {
        let call = self.services("count-message-tokens")?;
        let messages = convert::messages_back(messages);
        Ok(call.host.count_message_tokens(messages.as_slice().into()))
    }

    async fn input_message_tokens(&mut self, start: u32, end: u32) -> wasmtime::Result<Vec<u64>> {
        let call = self.services("input-message-tokens")?;
        let range = input_range(call, "input-message-tokens", start, end)?;
        Ok(call.input.messages[range]
            .iter()
            .map(|m| {
                call.host
                    .count_message_tokens(std::slice::from_ref(m).into())
            })
            .collect())
    }

    async fn page_id(&mut self, messages: Vec<wit::Message>) -> wasmtime::Result<String> {
        Ok(page_id(&convert::messages_back(messages)))
    }

    async fn input_page_id(
        &mut self,
        start: u32,
        end: u32,
    ) -> wasmtime::Result<Result<String, wit::PluginError>> {
        let call = self.services("input-page-id")?;
        let range = input_range(call, "input-page-id", start, end)?;
        Ok(Ok(page_id(&call.input.messages[range])))
    }

    async fn input_units(&mut self) -> wasmtime::Result<Vec<wit::Unit>> {
        let call = self.services("input-units")?;
        Ok(exchanges::units(&call.input.messages)
            .into_iter()
            .map(convert::unit)
            .collect())
    }

    async fn summary_is_smaller(
        &mut self,
        text: String,
        start: u32,
        end: u32,
    ) -> wasmtime::Result<Result<bool, wit::PluginError>> {
        let plugin = self.plugin.clone();
        let call = self.services("summary-is-smaller")?;
        let range = input_range(call, "summary-is-smaller", start, end)?;
        let host = Host::new(call.host.clone(), &plugin);
        Ok(Ok(
            host.summary_is_smaller(&text, &call.input.messages[range])
        ))
    }

    async fn render_messages(&mut self, messages: Vec<wit::Message>) -> wasmtime::Result<String> {
        let messages = convert::messages_back(messages);
        Ok(render_messages(&messages, &RenderOptions::default()))
    }

    async fn wrap_content(&mut self, material: String) -> wasmtime::Result<String> {
        Ok(wrap_content(&material))
    }

    async fn render_template(
        &mut self,
        template: String,
        values: Vec<(String, String)>,
    ) -> wasmtime::Result<Result<String, wit::PluginError>> {
        let vars: Vec<(&str, &str)> = values
            .iter()
            .map(|(name, value)| (name.as_str(), value.as_str()))
            .collect();
        Ok(render_template(&template, &vars).map_err(convert::error))
    }

    async fn result_placeholder(&mut self, page: String, note: String) -> wasmtime::Result<String> {
        Ok(clearing::result_placeholder(&page, &note))
    }

    async fn input_placeholder(&mut self, page: String) -> wasmtime::Result<String> {
        Ok(clearing::input_placeholder(&page))
    }

    async fn cleared_page(&mut self, block: wit::ContentBlock) -> wasmtime::Result<Option<String>> {
        let block = convert::block_back(block);
        Ok(clearing::cleared_page(&block).map(str::to_string))
    }

    async fn complete(
        &mut self,
        request: wit::LlmRequest,
    ) -> wasmtime::Result<Result<wit::LlmResponse, wit::PluginError>> {
        let call = self.services("complete")?;
        let answer = call
            .host
            .complete(convert::llm_request_back(request))
            .await
            .into_result();
        Ok(answer.map(convert::llm_response).map_err(convert::error))
    }

    async fn complete_all(
        &mut self,
        requests: Vec<wit::LlmRequest>,
        max_concurrency: u32,
    ) -> wasmtime::Result<Vec<Result<wit::LlmResponse, wit::PluginError>>> {
        let call = self.services("complete-all")?;
        let requests: FfiVec<_> = requests
            .into_iter()
            .map(convert::llm_request_back)
            .collect();
        let answers = call.host.complete_all(requests, max_concurrency).await;
        Ok(answers
            .into_iter()
            .map(|a| {
                a.into_result()
                    .map(convert::llm_response)
                    .map_err(convert::error)
            })
            .collect())
    }

    async fn archive_page(
        &mut self,
        messages: Vec<wit::Message>,
        metadata_json: String,
    ) -> wasmtime::Result<Result<String, wit::PluginError>> {
        let strategy = FfiString::from(&*self.plugin);
        let call = self.services("archive-page")?;
        let draft = PageDraft {
            messages: convert::messages_back(messages),
            strategy,
            metadata_json: metadata_json.into(),
        };
        let answer = call.host.archive_page(draft).await.into_result();
        Ok(answer.map(String::from).map_err(convert::error))
    }

    async fn load_page(
        &mut self,
        id: String,
    ) -> wasmtime::Result<Result<wit::Page, wit::PluginError>> {
        let call = self.services("load-page")?;
        let answer = call.host.load_page(id.into()).await.into_result();
        Ok(answer.map(convert::page).map_err(convert::error))
    }

    async fn cached_summary(
        &mut self,
        messages: Vec<wit::Message>,
    ) -> wasmtime::Result<Option<wit::CacheHit>> {
        let call = self.services("cached-summary")?;
        let messages = convert::messages_back(messages);
        let hit = call
            .host
            .cached_summary(messages.as_slice().into())
            .await
            .into_option();
        Ok(hit.map(|h| wit::CacheHit {
            messages_covered: h.messages_covered,
            text: h.text.into(),
        }))
    }

    async fn cache_summary(
        &mut self,
        messages: Vec<wit::Message>,
        summary: String,
    ) -> wasmtime::Result<()> {
        let call = self.services("cache-summary")?;
        let messages = convert::messages_back(messages);
        call.host
            .cache_summary(messages.as_slice().into(), summary.into())
            .await;
        Ok(())
    }

    async fn defer_summaries(
        &mut self,
        requests: Vec<wit::DeferredRequest>,
    ) -> wasmtime::Result<Result<(), wit::PluginError>> {
        let call = self.services("defer-summaries")?;
        let requests: FfiVec<_> = requests
            .into_iter()
            .map(convert::deferred_request_back)
            .collect();
        let answer = call.host.defer_summaries(requests).await.into_result();
        Ok(answer.map_err(convert::error))
    }

    async fn deferred_results(
        &mut self,
        page_ids: Vec<String>,
    ) -> wasmtime::Result<Vec<wit::DeferredState>> {
        let call = self.services("deferred-results")?;
        let ids: FfiVec<FfiString> = page_ids.into_iter().map(FfiString::from).collect();
        let states = call.host.deferred_results(ids).await;
        Ok(states.into_iter().map(convert::deferred_state).collect())
    }

    async fn progress(&mut self, done: u32, total: u32, message: String) -> wasmtime::Result<()> {
        let call = self.services("progress")?;
        call.host.progress(ProgressEvent {
            done,
            total,
            message: message.into(),
        });
        Ok(())
    }

    async fn log(&mut self, level: LogLevel, message: String) -> wasmtime::Result<()> {
        let plugin = &*self.plugin;
        match level {
            LogLevel::Error => tracing::error!(target: "tamp::plugin", plugin, "{message}"),
            LogLevel::Warn => tracing::warn!(target: "tamp::plugin", plugin, "{message}"),
            LogLevel::Info => tracing::info!(target: "tamp::plugin", plugin, "{message}"),
            LogLevel::Debug => tracing::debug!(target: "tamp::plugin", plugin, "{message}"),
            LogLevel::Trace => tracing::trace!(target: "tamp::plugin", plugin, "{message}"),
        }
        Ok(())
    }
}
