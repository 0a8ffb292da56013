//! What the HTTP providers share: the API key that never shows, the client with its
//! per-attempt timeout, and the one mapping from an HTTP answer (status, headers, body) or a
//! transport failure to a [`ProviderError`].
//!
//! The mapping decides what the retry layer ([`super::retry`]) does, so it lives in one place:
//!
//! | answer | kind | retried |
//! | --- | --- | --- |
//! | 408 | `timeout` | yes |
//! | 409, 5xx (but 503) | `server` | yes |
//! | 429 | `rate_limited` | yes |
//! | 429/402/403/400 saying the quota, spend limit or credit is used up | `quota_exhausted` | no |
//! | 503, 529 | `overloaded` | yes |
//! | 400, 404, 413, 422 | `invalid_request` | no |
//! | 401, 403 | `authentication` | no |
//! | request timeout | `timeout` | yes |
//! | connection failure | `connection` | yes |
//! | a body that is not the JSON expected | `malformed` | no |
//!
//! `retry-after-ms` and `retry-after` (seconds, or an HTTP date) become
//! [`ProviderError::retry_after`].

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use reqwest::header::{HeaderMap, HeaderValue};
use reqwest::StatusCode;
use serde_json::Value;

use super::{ProviderError, ProviderErrorKind};

/// An API key. Its `Debug` prints `[redacted]`, it has no `Display`, and [`ApiKey::scrub`]
/// removes it from any text a server echoes back, so it cannot reach a log, an error or a
/// report by accident.
#[derive(Clone)]
pub struct ApiKey(Arc<str>);

impl std::fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("[redacted]")
    }
}

/// What replaces a key (or a masked echo of one) in text.
pub const REDACTED: &str = "[redacted]";

/// Among the names of set variables, the one most like `var` (a typo, another case, a word
/// left out: `ANTHROPIC_KEY` for `ANTHROPIC_API_KEY`), when one is close enough. Only names
/// are compared and said, never values.
fn near_miss(var: &str, names: impl Iterator<Item = String>) -> Option<String> {
    const CLOSE_ENOUGH: f64 = 0.7;
    let wanted = var.to_ascii_uppercase();
    names
        .filter(|name| name != var)
        .map(|name| {
            let score = strsim::normalized_damerau_levenshtein(&wanted, &name.to_ascii_uppercase());
            (score, name)
        })
        .filter(|(score, _)| *score >= CLOSE_ENOUGH)
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, name)| name)
}

impl ApiKey {
    pub fn new(key: impl Into<Arc<str>>) -> Self {
        ApiKey(key.into())
    }

    /// Reads the key from the environment variable `var`; the error names the variable (and
    /// only the variable).
    pub fn from_env(var: &str) -> Result<Self, String> {
        match std::env::var(var) {
            Ok(key) if !key.trim().is_empty() => Ok(ApiKey::new(key.trim())),
            Ok(_) => Err(format!("the environment variable {var} is empty")),
            Err(std::env::VarError::NotPresent) => {
                let names = std::env::vars_os().filter_map(|(name, value)| {
                    (!value.is_empty())
                        .then(|| name.into_string().ok())
                        .flatten()
                });
                Err(match near_miss(var, names) {
                    Some(set) => format!(
                        "the environment variable {var} is not set (but {set} is: the one meant?)"
                    ),
                    None => format!("the environment variable {var} is not set"),
                })
            }
            Err(std::env::VarError::NotUnicode(_)) => {
                Err(format!("the environment variable {var} is not valid UTF-8"))
            }
        }
    }

    /// A header value carrying the key (marked sensitive, so `reqwest` never prints it);
    /// `prefix` is e.g. `"Bearer "`.
    pub(crate) fn header(&self, prefix: &str) -> Result<HeaderValue, String> {
        let mut value = HeaderValue::from_str(&format!("{prefix}{}", self.0))
            .map_err(|_| "the API key contains characters not allowed in a header".to_string())?;
        value.set_sensitive(true);
        Ok(value)
    }

    /// `text` with the key, and any masked echo of a key (`sk-ab****wxyz`, as OpenAI quotes
    /// a wrong key back), replaced by [`REDACTED`].
    pub fn scrub(&self, text: &str) -> String {
        let text = if self.0.is_empty() {
            text.to_string()
        } else {
            text.replace(&*self.0, REDACTED)
        };
        if !text.contains("****") {
            return text;
        }
        let mut out = String::with_capacity(text.len());
        for (i, word) in text.split(' ').enumerate() {
            if i > 0 {
                out.push(' ');
            }
            if word.contains("****") {
                let trimmed = word.trim_end_matches(['.', ',', ';', '"', '\'', ')']);
                out.push_str(REDACTED);
                out.push_str(&word[trimmed.len()..]);
            } else {
                out.push_str(word);
            }
        }
        out
    }
}

/// What an HTTP provider is built from (the `[provider]` section, the key read).
#[derive(Debug, Clone)]
pub struct ClientSettings {
    /// The model name sent to the API.
    pub model: String,
    /// The API's base URL (the provider's public endpoint when not configured).
    pub base_url: String,
    /// The key, when the provider needs or was given one.
    pub key: Option<ApiKey>,
    pub structured: super::StructuredMode,
    /// The limit of each attempt.
    pub timeout: Duration,
}

/// Builds the HTTP client of a provider: `timeout` bounds each attempt (connect, send and
/// the whole body). A loopback `base_url` bypasses proxies: a local server needs none, and a
/// proxy set in the environment must not swallow it.
pub(crate) fn client(timeout: Duration, base_url: &str) -> Result<reqwest::Client, String> {
    let mut builder = reqwest::Client::builder()
        .timeout(timeout)
        .user_agent(concat!("tamp/", env!("CARGO_PKG_VERSION")));
    if is_loopback(base_url) {
        builder = builder.no_proxy();
    }
    builder
        .build()
        .map_err(|e| format!("cannot build the HTTP client: {e}"))
}

pub(crate) fn is_loopback(url: &str) -> bool {
    let rest = url.split_once("://").map(|(_, rest)| rest).unwrap_or(url);
    let host = rest.split(['/', '?']).next().unwrap_or("");
    let host = host.rsplit_once('@').map(|(_, h)| h).unwrap_or(host);
    let host = if let Some(v6) = host.strip_prefix('[') {
        v6.split(']').next().unwrap_or("")
    } else {
        host.split(':').next().unwrap_or("")
    };
    host == "localhost"
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// `base_url` without trailing slashes, joined with `path` (which starts with `/`).
pub(crate) fn endpoint(base_url: &str, path: &str) -> String {
    format!("{}{path}", base_url.trim_end_matches('/'))
}

/// The largest answer body read, and the longest line of a batch's results: far above any
/// real answer (a summary, one result line), and a bound on what a broken or hostile server
/// streaming an endless body can make tamp hold before the attempt's timeout.
pub(crate) const MAX_ANSWER_BYTES: usize = 64 << 20;

/// Why an answer's body could not be read.
pub(crate) enum BodyError {
    Transport(reqwest::Error),
    /// It ran past [`MAX_ANSWER_BYTES`].
    TooLarge,
}

/// The answer's body as text (invalid UTF-8 replaced), read chunk by chunk up to
/// [`MAX_ANSWER_BYTES`].
pub(crate) async fn read_body(mut response: reqwest::Response) -> Result<String, BodyError> {
    let mut bytes = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(BodyError::Transport)? {
        if bytes.len() + chunk.len() > MAX_ANSWER_BYTES {
            return Err(BodyError::TooLarge);
        }
        bytes.extend_from_slice(&chunk);
    }
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}

impl BodyError {
    /// The provider error it is: a transport failure, or a malformed answer.
    pub(crate) fn into_provider_error(
        self,
        provider: &str,
        status: StatusCode,
        scrub: &dyn Fn(String) -> String,
    ) -> ProviderError {
        match self {
            BodyError::Transport(e) => transport_error(provider, &e, scrub),
            BodyError::TooLarge => ProviderError::new(
                provider,
                ProviderErrorKind::Malformed,
                format!(
                    "HTTP {} answer is larger than {} MiB; not read further",
                    status.as_u16(),
                    MAX_ANSWER_BYTES >> 20
                ),
            ),
        }
    }
}

/// Sends one attempt and returns the answer's JSON body, or the error the answer (or the
/// failure to get one) means. `key` is scrubbed from every message.
pub(crate) async fn post_json(
    provider: &str,
    request: reqwest::RequestBuilder,
    body: &Value,
    key: Option<&ApiKey>,
) -> Result<Value, ProviderError> {
    let scrub = |text: String| match key {
        Some(k) => k.scrub(&text),
        None => text,
    };
    let response = request
        .json(body)
        .send()
        .await
        .map_err(|e| transport_error(provider, &e, &scrub))?;
    let status = response.status();
    let headers = response.headers().clone();
    let text = read_body(response)
        .await
        .map_err(|e| e.into_provider_error(provider, status, &scrub))?;
    if !status.is_success() {
        return Err(error_from_response(
            provider,
            status,
            &headers,
            &scrub(text),
            SystemTime::now(),
        ));
    }
    serde_json::from_str(&text).map_err(|e| {
        ProviderError::new(
            provider,
            ProviderErrorKind::Malformed,
            format!(
                "HTTP {} answer is not JSON ({e}): {}",
                status.as_u16(),
                excerpt(&scrub(text))
            ),
        )
    })
}

/// A failure before a complete answer arrived.
pub(crate) fn transport_error(
    provider: &str,
    e: &reqwest::Error,
    scrub: &dyn Fn(String) -> String,
) -> ProviderError {
    let kind = if e.is_timeout() {
        ProviderErrorKind::Timeout
    } else if e.is_connect() || e.is_request() || e.is_body() {
        ProviderErrorKind::Connection
    } else if e.is_decode() {
        ProviderErrorKind::Malformed
    } else {
        ProviderErrorKind::Other
    };
    // reqwest's Display stops at the outermost error; the cause ("connection refused",
    // "operation timed out") is in the source chain.
    let message = crate::redact::urls_in(&crate::error_text::error_chain(&e)).into_owned();
    ProviderError::new(provider, kind, scrub(message))
}

/// The error an unsuccessful HTTP answer means (see the module docs). The message is
/// `HTTP <status> <error type>: <the provider's message>`, the provider's words verbatim; a
/// body without a recognizable error envelope is quoted (shortened). `now` dates
/// `retry-after` HTTP dates.
pub fn error_from_response(
    provider: &str,
    status: StatusCode,
    headers: &HeaderMap,
    body: &str,
    now: SystemTime,
) -> ProviderError {
    let envelope = ErrorEnvelope::parse(body);
    let code = status.as_u16();
    let quota = envelope.says_quota_exhausted();
    let kind = match code {
        429 | 402 | 403 | 400 if quota => ProviderErrorKind::QuotaExhausted,
        402 => ProviderErrorKind::QuotaExhausted,
        429 => ProviderErrorKind::RateLimited,
        408 => ProviderErrorKind::Timeout,
        503 | 529 => ProviderErrorKind::Overloaded,
        409 | 500..=599 => ProviderErrorKind::Server,
        401 | 403 => ProviderErrorKind::Authentication,
        400 | 404 | 405 | 413 | 415 | 422 => ProviderErrorKind::InvalidRequest,
        _ => ProviderErrorKind::Other,
    };
    let described = match (&envelope.error_type, &envelope.message) {
        (Some(t), Some(m)) => format!("{t}: {m}"),
        (None, Some(m)) => m.clone(),
        (Some(t), None) => t.clone(),
        (None, None) if body.trim().is_empty() => "(empty body)".to_string(),
        (None, None) => excerpt(body),
    };
    let mut error = ProviderError::new(provider, kind, format!("HTTP {code} {described}"));
    if let Some(wait) = retry_after(headers, now) {
        error = error.with_retry_after(wait);
    }
    error
}

/// The wait a server asks for: `retry-after-ms` (milliseconds, fractional allowed), else
/// `retry-after` (seconds, or an HTTP date, counted from `now`; a date in the past is 0).
pub fn retry_after(headers: &HeaderMap, now: SystemTime) -> Option<Duration> {
    let header = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::trim)
    };
    if let Some(ms) = header("retry-after-ms").and_then(|v| v.parse::<f64>().ok()) {
        // A wait past what a duration can hold (`1e300`) is clamped, never a panic: the
        // retry policy gives up on waits that long anyway.
        if ms.is_finite() && ms >= 0.0 {
            return Some(crate::bounded::saturating_seconds(ms / 1000.0));
        }
    }
    let value = header("retry-after")?;
    if let Ok(secs) = value.parse::<f64>() {
        return (secs.is_finite() && secs >= 0.0).then(|| crate::bounded::saturating_seconds(secs));
    }
    let at = httpdate::parse_http_date(value).ok()?;
    Some(at.duration_since(now).unwrap_or(Duration::ZERO))
}

/// The useful parts of an error body, from either provider's envelope:
/// Anthropic `{"type":"error","error":{"type","message"}}`, OpenAI (and vLLM, llama.cpp)
/// `{"error":{"message","type","code"}}`, Ollama `{"error":"message"}`.
#[derive(Debug, Default)]
struct ErrorEnvelope {
    error_type: Option<String>,
    code: Option<String>,
    message: Option<String>,
}

impl ErrorEnvelope {
    fn parse(body: &str) -> Self {
        let Ok(value) = serde_json::from_str::<Value>(body) else {
            return ErrorEnvelope::default();
        };
        let text = |v: Option<&Value>| match v {
            Some(Value::String(s)) => Some(s.clone()),
            Some(Value::Number(n)) => Some(n.to_string()),
            _ => None,
        };
        match value.get("error") {
            Some(Value::String(message)) => ErrorEnvelope {
                message: Some(message.clone()),
                ..Default::default()
            },
            Some(error @ Value::Object(_)) => ErrorEnvelope {
                error_type: text(error.get("type")),
                code: text(error.get("code")),
                message: text(error.get("message")),
            },
            _ => ErrorEnvelope {
                message: text(value.get("message")).or_else(|| text(value.get("detail"))),
                ..Default::default()
            },
        }
    }

    /// A rate limit that waiting will not lift: OpenAI's `insufficient_quota`, Anthropic's
    /// `billing_error`, or a message about the quota, spend or usage limit, or credit.
    fn says_quota_exhausted(&self) -> bool {
        let codes = [self.error_type.as_deref(), self.code.as_deref()];
        if codes
            .iter()
            .flatten()
            .any(|c| matches!(*c, "insufficient_quota" | "billing_error"))
        {
            return true;
        }
        let Some(message) = &self.message else {
            return false;
        };
        let message = message.to_lowercase();
        [
            "quota",
            "spend limit",
            "spending limit",
            "usage limit",
            "credit balance",
            "billing",
        ]
        .iter()
        .any(|phrase| message.contains(phrase))
    }
}

/// The first 500 characters of `text`, marked when cut.
pub(crate) fn excerpt(text: &str) -> String {
    const MAX: usize = 500;
    let text = text.trim();
    match text.char_indices().nth(MAX) {
        Some((cut, _)) => format!("{}… ({} bytes)", &text[..cut], text.len()),
        None => text.to_string(),
    }
}

/// A field of a JSON answer by path (`"usage.input_tokens"`, array indices as numbers), or a
/// `malformed` error naming the provider and the missing path.
pub(crate) fn required<'v>(
    provider: &str,
    value: &'v Value,
    path: &str,
) -> Result<&'v Value, ProviderError> {
    optional(value, path).ok_or_else(|| {
        ProviderError::new(
            provider,
            ProviderErrorKind::Malformed,
            format!("the answer has no `{path}`"),
        )
    })
}

/// A field by path; `None` when absent or `null`.
pub(crate) fn optional<'v>(value: &'v Value, path: &str) -> Option<&'v Value> {
    let mut at = value;
    for part in path.split('.') {
        at = match part.parse::<usize>() {
            Ok(i) => at.get(i)?,
            Err(_) => at.get(part)?,
        };
    }
    (!at.is_null()).then_some(at)
}

/// A token count by path: required ones must be non-negative integers; optional ones are 0
/// when absent or null.
pub(crate) fn tokens(
    provider: &str,
    value: &Value,
    path: &str,
    is_required: bool,
) -> Result<u64, ProviderError> {
    let field = if is_required {
        Some(required(provider, value, path)?)
    } else {
        optional(value, path)
    };
    match field {
        None => Ok(0),
        Some(v) => v.as_u64().ok_or_else(|| {
            ProviderError::new(
                provider,
                ProviderErrorKind::Malformed,
                format!("`{path}` is not a token count: {v}"),
            )
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn an_unset_key_variable_names_a_set_one_it_was_likely_meant_to_be() {
        let set = || {
            [
                "PATH",
                "HOME",
                "ANTHROPIC_KEY",
                "OPENAI_API_KEY",
                "anthropic_api_key2",
            ]
            .into_iter()
            .map(String::from)
        };
        assert_eq!(
            near_miss("ANTHROPIC_API_KEY", set()).as_deref(),
            Some("anthropic_api_key2")
        );
        assert_eq!(
            near_miss("OPENAI_KEY", set()).as_deref(),
            Some("OPENAI_API_KEY")
        );
        assert_eq!(near_miss("MY_TOKEN", set()), None);
        // The name itself is not a near miss of itself (it is set but empty, say).
        assert_eq!(near_miss("PATH", ["PATH".to_string()].into_iter()), None);
    }

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, HeaderValue::from_str(v).unwrap());
        }
        h
    }

    fn map(status: u16, body: Value) -> ProviderError {
        error_from_response(
            "p",
            StatusCode::from_u16(status).unwrap(),
            &HeaderMap::new(),
            &body.to_string(),
            SystemTime::now(),
        )
    }

    #[test]
    fn statuses_map_to_kinds() {
        let anthropic =
            |t: &str, m: &str| json!({"type": "error", "error": {"type": t, "message": m}});
        let cases = [
            (
                400,
                anthropic("invalid_request_error", "max_tokens: Field required"),
                ProviderErrorKind::InvalidRequest,
            ),
            (
                401,
                anthropic("authentication_error", "invalid x-api-key"),
                ProviderErrorKind::Authentication,
            ),
            (
                403,
                anthropic("permission_error", "no access to this model"),
                ProviderErrorKind::Authentication,
            ),
            (408, json!({}), ProviderErrorKind::Timeout),
            (409, json!({}), ProviderErrorKind::Server),
            (
                429,
                anthropic(
                    "rate_limit_error",
                    "Number of request tokens has exceeded your per-minute rate limit",
                ),
                ProviderErrorKind::RateLimited,
            ),
            (
                500,
                anthropic("api_error", "Internal server error"),
                ProviderErrorKind::Server,
            ),
            (502, json!({}), ProviderErrorKind::Server),
            (503, json!({}), ProviderErrorKind::Overloaded),
            (
                529,
                anthropic("overloaded_error", "Overloaded"),
                ProviderErrorKind::Overloaded,
            ),
            (
                402,
                anthropic("billing_error", "payment required"),
                ProviderErrorKind::QuotaExhausted,
            ),
            (418, json!({}), ProviderErrorKind::Other),
        ];
        for (status, body, kind) in cases {
            assert_eq!(map(status, body.clone()).kind, kind, "{status} {body}");
        }
    }

    #[test]
    fn quota_exhausted_429s_are_told_apart_from_rate_limits() {
        let openai_quota = json!({"error": {"message": "You exceeded your current quota, please check your plan and billing details.", "type": "insufficient_quota", "param": null, "code": "insufficient_quota"}});
        assert_eq!(
            map(429, openai_quota).kind,
            ProviderErrorKind::QuotaExhausted
        );
        let spend = json!({"type": "error", "error": {"type": "rate_limit_error", "message": "You have reached your workspace spend limit."}});
        assert_eq!(map(429, spend).kind, ProviderErrorKind::QuotaExhausted);
        let credit = json!({"type": "error", "error": {"type": "invalid_request_error", "message": "Your credit balance is too low to access the Anthropic API."}});
        assert_eq!(map(400, credit).kind, ProviderErrorKind::QuotaExhausted);
        let tpm = json!({"error": {"message": "Rate limit reached for gpt-4o on tokens per min (TPM): Limit 30000, Used 29000, Requested 2000.", "type": "tokens", "code": "rate_limit_exceeded"}});
        assert_eq!(map(429, tpm).kind, ProviderErrorKind::RateLimited);
    }

    #[test]
    fn messages_are_the_providers_verbatim() {
        let e = map(
            401,
            json!({"type": "error", "error": {"type": "authentication_error", "message": "invalid x-api-key"}, "request_id": "req_1"}),
        );
        assert_eq!(
            e.to_string(),
            "p: authentication: HTTP 401 authentication_error: invalid x-api-key"
        );
        let e = map(
            400,
            json!({"error": {"message": "'response_format' is not supported", "type": "invalid_request_error", "param": "response_format", "code": null}}),
        );
        assert_eq!(
            e.message,
            "HTTP 400 invalid_request_error: 'response_format' is not supported"
        );
        let e = map(
            404,
            json!({"error": "model \"llama9\" not found, try pulling it first"}),
        );
        assert_eq!(
            e.message,
            "HTTP 404 model \"llama9\" not found, try pulling it first"
        );
        let e = error_from_response(
            "p",
            StatusCode::BAD_GATEWAY,
            &HeaderMap::new(),
            "<html>bad gateway</html>",
            SystemTime::now(),
        );
        assert_eq!(e.message, "HTTP 502 <html>bad gateway</html>");
        let e = error_from_response(
            "p",
            StatusCode::BAD_GATEWAY,
            &HeaderMap::new(),
            "",
            SystemTime::now(),
        );
        assert_eq!(e.message, "HTTP 502 (empty body)");
        let long = "x".repeat(2000);
        let e = error_from_response(
            "p",
            StatusCode::INTERNAL_SERVER_ERROR,
            &HeaderMap::new(),
            &long,
            SystemTime::now(),
        );
        assert!(e.message.ends_with("… (2000 bytes)"), "{}", e.message);
    }

    #[test]
    fn retry_after_forms() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        assert_eq!(
            retry_after(&headers(&[("retry-after", "3")]), now),
            Some(Duration::from_secs(3))
        );
        assert_eq!(
            retry_after(&headers(&[("retry-after", "0.5")]), now),
            Some(Duration::from_millis(500))
        );
        assert_eq!(
            retry_after(
                &headers(&[("retry-after", "3"), ("retry-after-ms", "1250")]),
                now
            ),
            Some(Duration::from_millis(1250))
        );
        let date = httpdate::fmt_http_date(now + Duration::from_secs(7));
        assert_eq!(
            retry_after(&headers(&[("retry-after", &date)]), now),
            Some(Duration::from_secs(7))
        );
        let past = httpdate::fmt_http_date(now - Duration::from_secs(7));
        assert_eq!(
            retry_after(&headers(&[("retry-after", &past)]), now),
            Some(Duration::ZERO)
        );
        assert_eq!(retry_after(&headers(&[("retry-after", "soon")]), now), None);
        assert_eq!(retry_after(&headers(&[("retry-after", "-1")]), now), None);
        assert_eq!(retry_after(&HeaderMap::new(), now), None);
        // More than a duration holds: clamped (and then not honoured), never a panic.
        let longest = Some(crate::bounded::saturating_seconds(f64::MAX));
        for huge in ["1e300", "1e20"] {
            assert_eq!(
                retry_after(&headers(&[("retry-after", huge)]), now),
                longest
            );
            assert_eq!(
                retry_after(&headers(&[("retry-after-ms", huge)]), now),
                longest
            );
        }
        let e = error_from_response(
            "p",
            StatusCode::TOO_MANY_REQUESTS,
            &headers(&[("retry-after", "2")]),
            "{}",
            now,
        );
        assert_eq!(e.retry_after, Some(Duration::from_secs(2)));
    }

    #[test]
    fn keys_never_show() {
        let key = ApiKey::new("sk-ant-secret-1234567890");
        assert_eq!(format!("{key:?}"), "[redacted]");
        assert_eq!(format!("{:?}", Some(key.clone())), "Some([redacted])");
        assert_eq!(
            key.scrub("bad key sk-ant-secret-1234567890 given"),
            "bad key [redacted] given"
        );
        assert_eq!(
            key.scrub("Incorrect API key provided: sk-ant-s************7890. You can find..."),
            "Incorrect API key provided: [redacted]. You can find..."
        );
        let header = key.header("Bearer ").unwrap();
        assert!(header.is_sensitive());
        assert!(!format!("{header:?}").contains("secret"));
    }

    #[test]
    fn loopback_urls_are_recognized() {
        for url in [
            "http://127.0.0.1:8080/v1",
            "http://localhost:11434/v1",
            "http://[::1]:9/x",
            "http://u:p@127.0.0.1/",
        ] {
            assert!(is_loopback(url), "{url}");
        }
        for url in [
            "https://api.anthropic.com",
            "http://10.0.0.1:8080/v1",
            "http://localhost.example.com/",
        ] {
            assert!(!is_loopback(url), "{url}");
        }
    }

    #[test]
    fn fields_by_path() {
        let v = json!({"usage": {"input_tokens": 3, "cache_read_input_tokens": null}, "choices": [{"message": {"content": "hi"}}]});
        assert_eq!(
            required("p", &v, "choices.0.message.content").unwrap(),
            "hi"
        );
        let e = required("p", &v, "choices.1.message").unwrap_err();
        assert_eq!(
            e.to_string(),
            "p: malformed: the answer has no `choices.1.message`"
        );
        assert_eq!(tokens("p", &v, "usage.input_tokens", true).unwrap(), 3);
        assert_eq!(
            tokens("p", &v, "usage.cache_read_input_tokens", false).unwrap(),
            0
        );
        assert_eq!(
            tokens("p", &v, "usage.cache_creation_input_tokens", false).unwrap(),
            0
        );
        assert_eq!(
            tokens("p", &v, "usage.output_tokens", true)
                .unwrap_err()
                .kind,
            ProviderErrorKind::Malformed
        );
        let bad = json!({"usage": {"input_tokens": "many"}});
        assert!(tokens("p", &bad, "usage.input_tokens", true)
            .unwrap_err()
            .message
            .contains("not a token count"));
    }
}
