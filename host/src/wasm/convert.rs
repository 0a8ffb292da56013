//! The ABI types (`tamp-plugin-abi`) to and from their WIT mirrors (`bindings`).

use tamp_plugin_api as abi;
use tamp_plugin_api::{FfiOption, FfiString, FfiVec};

use super::bindings::tamp::strategy::types as wit;

fn text(s: String) -> FfiString {
    FfiString::from(s)
}

fn option<T, U>(o: Option<T>, f: impl FnOnce(T) -> U) -> FfiOption<U> {
    match o {
        Some(v) => FfiOption::RSome(f(v)),
        None => FfiOption::RNone,
    }
}

fn role(r: abi::Role) -> wit::Role {
    match r {
        abi::Role::System => wit::Role::System,
        abi::Role::User => wit::Role::User,
        abi::Role::Assistant => wit::Role::Assistant,
        abi::Role::Tool => wit::Role::Tool,
    }
}

fn role_back(r: wit::Role) -> abi::Role {
    match r {
        wit::Role::System => abi::Role::System,
        wit::Role::User => abi::Role::User,
        wit::Role::Assistant => abi::Role::Assistant,
        wit::Role::Tool => abi::Role::Tool,
    }
}

fn status(s: abi::SummaryStatus) -> wit::SummaryStatus {
    match s {
        abi::SummaryStatus::Final => wit::SummaryStatus::Final,
        abi::SummaryStatus::Pending => wit::SummaryStatus::Pending,
    }
}

fn status_back(s: wit::SummaryStatus) -> abi::SummaryStatus {
    match s {
        wit::SummaryStatus::Final => abi::SummaryStatus::Final,
        wit::SummaryStatus::Pending => abi::SummaryStatus::Pending,
    }
}

fn part(p: &abi::ToolResultPart) -> wit::ToolResultPart {
    match p {
        abi::ToolResultPart::Text { text } => wit::ToolResultPart::Text(text.to_string()),
        abi::ToolResultPart::Opaque { json } => wit::ToolResultPart::Opaque(json.to_string()),
    }
}

fn part_back(p: wit::ToolResultPart) -> abi::ToolResultPart {
    match p {
        wit::ToolResultPart::Text(t) => abi::ToolResultPart::Text { text: text(t) },
        wit::ToolResultPart::Opaque(j) => abi::ToolResultPart::Opaque { json: text(j) },
    }
}

fn block(b: &abi::ContentBlock) -> wit::ContentBlock {
    match b {
        abi::ContentBlock::Text { text, extra_json } => wit::ContentBlock::Text(wit::TextBlock {
            text: text.to_string(),
            extra_json: extra_json.to_string(),
        }),
        abi::ContentBlock::ToolUse {
            id,
            name,
            input_json,
            extra_json,
        } => wit::ContentBlock::ToolUse(wit::ToolUse {
            id: id.to_string(),
            name: name.to_string(),
            input_json: input_json.to_string(),
            extra_json: extra_json.to_string(),
        }),
        abi::ContentBlock::ToolResult {
            tool_use_id,
            content,
            is_error,
            extra_json,
        } => wit::ContentBlock::ToolResult(wit::ToolResult {
            tool_use_id: tool_use_id.to_string(),
            content: content.iter().map(part).collect(),
            is_error: *is_error,
            extra_json: extra_json.to_string(),
        }),
        abi::ContentBlock::Opaque { json } => wit::ContentBlock::Opaque(json.to_string()),
    }
}

pub fn block_back(b: wit::ContentBlock) -> abi::ContentBlock {
    match b {
        wit::ContentBlock::Text(t) => abi::ContentBlock::Text {
            text: text(t.text),
            extra_json: text(t.extra_json),
        },
        wit::ContentBlock::ToolUse(u) => abi::ContentBlock::ToolUse {
            id: text(u.id),
            name: text(u.name),
            input_json: text(u.input_json),
            extra_json: text(u.extra_json),
        },
        wit::ContentBlock::ToolResult(r) => abi::ContentBlock::ToolResult {
            tool_use_id: text(r.tool_use_id),
            content: r.content.into_iter().map(part_back).collect(),
            is_error: r.is_error,
            extra_json: text(r.extra_json),
        },
        wit::ContentBlock::Opaque(j) => abi::ContentBlock::Opaque { json: text(j) },
    }
}

pub fn message(m: &abi::Message) -> wit::Message {
    wit::Message {
        role: role(m.role),
        content: m.content.iter().map(block).collect(),
        summary: m.summary_info().map(|s| wit::SummaryInfo {
            page_ref: s.page_ref.to_string(),
            strategy: s.strategy.to_string(),
            status: status(s.status),
        }),
        extra_json: m.extra_json.to_string(),
    }
}

pub fn messages(m: &[abi::Message]) -> Vec<wit::Message> {
    m.iter().map(message).collect()
}

pub fn message_back(m: wit::Message) -> abi::Message {
    abi::Message {
        role: role_back(m.role),
        content: m.content.into_iter().map(block_back).collect(),
        summary: option(m.summary, |s| abi::SummaryInfo {
            page_ref: text(s.page_ref),
            strategy: text(s.strategy),
            status: status_back(s.status),
        }),
        extra_json: text(m.extra_json),
    }
}

pub fn messages_back(m: Vec<wit::Message>) -> FfiVec<abi::Message> {
    m.into_iter().map(message_back).collect()
}

pub fn budget(b: &abi::Budget) -> wit::Budget {
    wit::Budget {
        max_tokens: b.max_tokens,
        high_watermark: b.high_watermark,
        low_watermark: b.low_watermark,
        keep_recent: b.keep_recent,
        current_tokens: b.current_tokens,
    }
}

/// A unit of the input, for `input-units`.
pub fn unit(u: tamp_plugin_api::rules::exchanges::Unit) -> wit::Unit {
    use tamp_plugin_api::rules::exchanges::UnitKind;
    wit::Unit {
        span: wit::Span {
            start: u.range.start as u32,
            end: u.range.end as u32,
        },
        kind: match u.kind {
            UnitKind::System => wit::UnitKind::Pinned,
            UnitKind::Summary => wit::UnitKind::Summary,
            UnitKind::ToolExchange => wit::UnitKind::ToolExchange,
            UnitKind::Message => wit::UnitKind::Message,
        },
    }
}

fn span_back(s: wit::Span) -> abi::Span {
    abi::Span {
        start: s.start,
        end: s.end,
    }
}

pub fn outcome_back(o: wit::CompactOutcome) -> abi::CompactOutcome {
    let edits = o.edits.into_iter().map(|e| {
        match e {
            wit::Edit::Summarize(s) => abi::Edit::Summarize {
                span: span_back(s.span),
                text: text(s.text),
                status: status_back(s.status),
                metadata_json: text(s.metadata_json),
            },
            wit::Edit::Replace(r) => abi::Edit::Replace {
                span: span_back(r.span),
                message: message_back(r.message),
            },
            wit::Edit::Finalize(f) => abi::Edit::Finalize {
                index: f.index,
                text: text(f.text),
            },
            wit::Edit::Clear(c) => abi::Edit::Clear {
                index: c.index,
                message: message_back(c.message),
            },
        }
        .into_ffi()
    });
    abi::CompactOutcome {
        edits: edits.collect(),
        report: abi::StageReport {
            acted: o.report.acted,
            reason: text(o.report.reason),
            warnings: o.report.warnings.into_iter().map(text).collect(),
            details_json: text(o.report.details_json),
        },
    }
}

pub fn error_kind_back(k: wit::ErrorKind) -> abi::ErrorKind {
    match k {
        wit::ErrorKind::InvalidConfig => abi::ErrorKind::InvalidConfig,
        wit::ErrorKind::InvalidInput => abi::ErrorKind::InvalidInput,
        wit::ErrorKind::Llm => abi::ErrorKind::Llm,
        wit::ErrorKind::Host => abi::ErrorKind::Host,
        wit::ErrorKind::Panicked => abi::ErrorKind::Panicked,
        wit::ErrorKind::Internal => abi::ErrorKind::Internal,
    }
}

pub fn error_back(e: wit::PluginError) -> abi::PluginError {
    abi::PluginError::new(error_kind_back(e.kind), e.message)
}

/// A host error for the guest. Kinds a later ABI adds (which this WIT does not list yet)
/// read as `host`.
pub fn error(e: abi::PluginError) -> wit::PluginError {
    let kind = match e.kind {
        abi::ErrorKind::InvalidConfig => wit::ErrorKind::InvalidConfig,
        abi::ErrorKind::InvalidInput => wit::ErrorKind::InvalidInput,
        abi::ErrorKind::Llm => wit::ErrorKind::Llm,
        abi::ErrorKind::Panicked => wit::ErrorKind::Panicked,
        abi::ErrorKind::Internal => wit::ErrorKind::Internal,
        _ => wit::ErrorKind::Host,
    };
    wit::PluginError {
        kind,
        message: e.message.into(),
    }
}

pub fn llm_request_back(r: wit::LlmRequest) -> abi::LlmRequest {
    abi::LlmRequest {
        system: text(r.system),
        prompt: text(r.prompt),
        max_output_tokens: r.max_output_tokens,
        temperature: option(r.temperature, |t| t),
        response_schema_json: option(r.response_schema_json, text),
        label: text(r.label),
    }
}

pub fn llm_response(r: abi::LlmResponse) -> wit::LlmResponse {
    wit::LlmResponse {
        text: r.text.into(),
        structured_json: r.structured_json.into_option().map(Into::into),
        usage: wit::Usage {
            input_tokens: r.usage.input_tokens,
            output_tokens: r.usage.output_tokens,
            cache_read_tokens: r.usage.cache_read_tokens,
            cache_write_tokens: r.usage.cache_write_tokens,
        },
        model: r.model.into(),
        stop_reason: r.stop_reason.into(),
    }
}

pub fn page(p: abi::Page) -> wit::Page {
    wit::Page {
        id: p.id.into(),
        thread_id: p.thread_id.into_option().map(Into::into),
        strategy: p.strategy.into(),
        messages: messages(&p.messages),
        metadata_json: p.metadata_json.into(),
        created_at: p.created_at,
    }
}

pub fn deferred_request_back(r: wit::DeferredRequest) -> abi::DeferredRequest {
    abi::DeferredRequest {
        page_id: text(r.page_id),
        request: llm_request_back(r.request),
    }
}

pub fn deferred_state(s: abi::DeferredState) -> wit::DeferredState {
    let status = match s.status {
        abi::DeferredStatus::Queued => wit::DeferredStatus::Queued,
        abi::DeferredStatus::Submitted => wit::DeferredStatus::Submitted,
        abi::DeferredStatus::Done => wit::DeferredStatus::Done,
        abi::DeferredStatus::Failed => wit::DeferredStatus::Failed,
        _ => wit::DeferredStatus::Unknown,
    };
    wit::DeferredState {
        page_id: s.page_id.into(),
        status,
        text: s.text.into(),
        reason: s.reason.into(),
    }
}
