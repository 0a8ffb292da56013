//! Which upstream a request goes to, at which URL, with which headers; and which requests
//! are compacted on the way.

use axum::http::{header, HeaderMap, HeaderName, Method};

use crate::config::proxy::ProxyConfig;
use crate::wire::WireFormat;

/// The two APIs the proxy speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Provider {
    Anthropic,
    OpenAi,
}

/// Where a request goes and what happens to its body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Route {
    pub provider: Provider,
    /// The body is a conversation in this format, compacted before it is forwarded.
    pub compact: Option<WireFormat>,
    /// OpenAI's server-side compaction endpoint (`POST /v1/responses/compact`): forwarded, or
    /// answered by tamp (`[proxy] openai_compaction`).
    pub server_compaction: bool,
    /// The route's name in the metrics: the compacted routes by path, the rest by provider
    /// only (a path may carry ids: one series per batch would grow without bound).
    pub label: &'static str,
}

/// Routes a request by its path, and where the path is shared by both APIs (`/v1/models`,
/// `/v1/files`, ...) or belongs to neither by its headers: the Anthropic SDKs always send
/// `anthropic-version`, and only Anthropic takes the key in `x-api-key`; an OpenAI client
/// sends its key in `Authorization`. `None` for a request that carries none of them on such a
/// path (Claude Code's `HEAD /api/hello`): it belongs to no API the proxy serves, and goes to
/// no upstream, where a guess would hand it to another company's server.
pub fn route(method: &Method, path: &str, headers: &HeaderMap) -> Option<Route> {
    let post = method == Method::POST;
    let (provider, compact, label) = match path {
        "/v1/messages" if post => (
            Provider::Anthropic,
            Some(WireFormat::Anthropic),
            "POST /v1/messages",
        ),
        "/v1/messages/count_tokens" if post => (
            Provider::Anthropic,
            Some(WireFormat::Anthropic),
            "POST /v1/messages/count_tokens",
        ),
        "/v1/chat/completions" if post => (
            Provider::OpenAi,
            Some(WireFormat::OpenAi),
            "POST /v1/chat/completions",
        ),
        "/v1/responses" if post => (
            Provider::OpenAi,
            Some(WireFormat::Responses),
            "POST /v1/responses",
        ),
        "/v1/responses/compact" if post => (Provider::OpenAi, None, "POST /v1/responses/compact"),
        p if p == "/v1/messages" || p.starts_with("/v1/messages/") || p == "/v1/complete" => {
            (Provider::Anthropic, None, "anthropic (passed through)")
        }
        p if p.starts_with("/v1/chat/")
            || p == "/v1/responses"
            || p.starts_with("/v1/responses/") =>
        {
            (Provider::OpenAi, None, "openai (passed through)")
        }
        _ if headers.contains_key("anthropic-version") || headers.contains_key("x-api-key") => {
            (Provider::Anthropic, None, "anthropic (passed through)")
        }
        _ if headers.contains_key("authorization") => {
            (Provider::OpenAi, None, "openai (passed through)")
        }
        _ => return None,
    };
    Some(Route {
        provider,
        compact,
        server_compaction: label == "POST /v1/responses/compact",
        label,
    })
}

/// The upstream URL of a request: only the base changes, the request target (path and
/// query) is forwarded as the client sent it. Anthropic's base URL is spelled without `/v1`
/// (`ANTHROPIC_BASE_URL`): the whole target follows it. The OpenAI base URL is spelled with
/// it (`OPENAI_BASE_URL`) and stands for the proxy's `/v1`: a target under `/v1` follows it
/// less its `/v1`, and one outside `/v1` follows the base less its `/v1`, so it arrives
/// upstream as it was sent, never with a `/v1` put in front.
///
/// The HTTP client reads a URL by the WHATWG rules, which resolve `.` and `..` segments
/// (percent-encoded ones too) and escape some characters: `/v1/../tamp/healthz` would reach
/// the upstream as `/tamp/healthz`. A target that would not arrive as sent is an error (the
/// message says what it would have become): forwarded as sent, or not at all.
pub fn upstream_url(
    config: &ProxyConfig,
    provider: Provider,
    target: &str,
) -> Result<reqwest::Url, String> {
    let (base, rest) = match provider {
        Provider::Anthropic => (config.anthropic.as_str(), target),
        Provider::OpenAi => {
            let base = config.openai.trim_end_matches('/');
            let under_v1 = target
                .strip_prefix("/v1")
                .filter(|rest| rest.is_empty() || rest.starts_with(['/', '?']));
            match (under_v1, base.strip_suffix("/v1")) {
                (Some(rest), _) => (base, rest),
                (None, Some(root)) => (root, target),
                (None, None) => {
                    return Err(format!(
                        "{target} is outside /v1, and the OpenAI base URL ([proxy] openai = \
                         \"{}\") does not end in /v1, so nothing says where it goes; send \
                         OpenAI requests under /v1",
                        crate::redact::url(&config.openai)
                    ))
                }
            }
        }
    };
    let base = base.trim_end_matches('/');
    let shown = || crate::redact::url(base);
    let base_path = reqwest::Url::parse(base)
        .map_err(|e| format!("the upstream base URL {}: {e}", shown()))?
        .path()
        .trim_end_matches('/')
        .to_string();
    let url = reqwest::Url::parse(&format!("{base}{rest}"))
        .map_err(|e| format!("{target} makes no URL under {}: {e}", shown()))?;
    let wanted = format!("{base_path}{rest}");
    let arriving = match url.query() {
        Some(query) => format!("{}?{query}", url.path()),
        None => url.path().to_string(),
    };
    if arriving != wanted {
        return Err(format!(
            "the request target {target} would reach the upstream as {} (the HTTP client \
             resolves `.` and `..` segments, percent-encoded ones too, and escapes some \
             characters); tamp proxy forwards a target as it was sent, or not at all",
            &arriving[base_path.len().min(arriving.len())..]
        ));
    }
    Ok(url)
}

/// The proxy's own request headers (`x-tamp-thread-id`, ...): read, never forwarded.
pub const OWN_PREFIX: &str = "x-tamp-";

/// Headers that describe one connection, not the request or the answer (RFC 9110, 7.6.1),
/// plus `host` (the upstream's is set from its URL) and `expect` (the body is sent whole).
fn is_hop_by_hop(name: &HeaderName) -> bool {
    matches!(
        name.as_str(),
        "connection"
            | "keep-alive"
            | "proxy-connection"
            | "proxy-authenticate"
            | "proxy-authorization"
            | "te"
            | "trailer"
            | "transfer-encoding"
            | "upgrade"
            | "host"
            | "expect"
    )
}

/// The client's headers as the upstream gets them: every one (credentials included,
/// untouched) but the hop-by-hop ones, the proxy's own, any named by `connection`, and
/// `content-length` when the body was rewritten (the client for the upstream sets it).
pub fn request_headers(client: &HeaderMap, body_rewritten: bool) -> HeaderMap {
    let named = connection_named(client);
    let mut out = HeaderMap::with_capacity(client.len());
    for (name, value) in client {
        if is_hop_by_hop(name)
            || name.as_str().starts_with(OWN_PREFIX)
            || named.contains(name)
            || (body_rewritten && name == header::CONTENT_LENGTH)
        {
            continue;
        }
        out.append(name.clone(), value.clone());
    }
    out
}

/// The upstream's answer headers as the client gets them: all but the hop-by-hop ones, so
/// `retry-after`, `request-id`, the rate-limit headers and `content-type` arrive verbatim.
pub fn response_headers(upstream: &HeaderMap) -> HeaderMap {
    let named = connection_named(upstream);
    let mut out = HeaderMap::with_capacity(upstream.len() + 1);
    for (name, value) in upstream {
        if is_hop_by_hop(name) || named.contains(name) {
            continue;
        }
        out.append(name.clone(), value.clone());
    }
    out
}

/// The headers a `connection` header names (they are hop-by-hop too).
fn connection_named(headers: &HeaderMap) -> Vec<HeaderName> {
    headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|name| HeaderName::from_bytes(name.trim().as_bytes()).ok())
        .collect()
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use axum::http::HeaderValue;

    /// A header map of `pairs`, in order (a name given twice has both values).
    pub(in crate::proxy) fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (k, v) in pairs {
            map.append(*k, HeaderValue::from_static(v));
        }
        map
    }

    #[test]
    fn conversations_are_compacted_and_the_rest_routed_by_path_then_headers() {
        let none = HeaderMap::new();
        let r = route(&Method::POST, "/v1/messages", &none).unwrap();
        assert_eq!(
            (r.provider, r.compact),
            (Provider::Anthropic, Some(WireFormat::Anthropic))
        );
        let r = route(&Method::POST, "/v1/messages/count_tokens", &none).unwrap();
        assert_eq!(r.compact, Some(WireFormat::Anthropic));
        let r = route(&Method::POST, "/v1/chat/completions", &none).unwrap();
        assert_eq!(
            (r.provider, r.compact),
            (Provider::OpenAi, Some(WireFormat::OpenAi))
        );
        let r = route(&Method::POST, "/v1/messages/batches", &none).unwrap();
        assert_eq!((r.provider, r.compact), (Provider::Anthropic, None));
        let r = route(
            &Method::POST,
            "/v1/responses",
            &headers(&[("x-api-key", "k")]),
        )
        .unwrap();
        assert_eq!(
            (r.provider, r.compact),
            (Provider::OpenAi, Some(WireFormat::Responses))
        );
        let r = route(&Method::POST, "/v1/responses/compact", &none).unwrap();
        assert_eq!(
            (r.provider, r.compact, r.server_compaction),
            (Provider::OpenAi, None, true)
        );
        let r = route(&Method::GET, "/v1/responses/resp_1", &none).unwrap();
        assert_eq!(
            (r.provider, r.compact, r.server_compaction),
            (Provider::OpenAi, None, false)
        );
        let r = route(
            &Method::GET,
            "/v1/models",
            &headers(&[("anthropic-version", "2023-06-01")]),
        )
        .unwrap();
        assert_eq!(r.provider, Provider::Anthropic);
        let r = route(
            &Method::GET,
            "/v1/models",
            &headers(&[("authorization", "Bearer k")]),
        )
        .unwrap();
        assert_eq!(r.provider, Provider::OpenAi);
        // Only POST compacts: a GET of the same path is passed through.
        assert_eq!(
            route(&Method::GET, "/v1/chat/completions", &none)
                .unwrap()
                .compact,
            None
        );
    }

    #[test]
    fn upstream_urls_follow_each_sdks_base_url_convention() {
        let config = ProxyConfig {
            anthropic: "http://a.test/".into(),
            openai: "http://o.test/openai/v1".into(),
            ..ProxyConfig::default()
        };
        let url = |provider, target| upstream_url(&config, provider, target).map(String::from);
        assert_eq!(
            url(Provider::Anthropic, "/v1/messages?beta=true").unwrap(),
            "http://a.test/v1/messages?beta=true"
        );
        assert_eq!(
            url(Provider::OpenAi, "/v1/chat/completions").unwrap(),
            "http://o.test/openai/v1/chat/completions"
        );
        assert_eq!(
            url(Provider::OpenAi, "/v1?x=1").unwrap(),
            "http://o.test/openai/v1?x=1"
        );
        // Outside /v1: the base less its /v1, the target as sent (no /v1 put in front).
        assert_eq!(
            url(Provider::OpenAi, "/v1beta/models").unwrap(),
            "http://o.test/openai/v1beta/models"
        );
        assert_eq!(
            url(Provider::OpenAi, "/models").unwrap(),
            "http://o.test/openai/models"
        );
        // Targets the HTTP client would rewrite are refused, never rewritten.
        for target in [
            "/v1/../tamp/healthz",
            "/v1/%2e%2e/tamp/healthz",
            "/v1/%2E%2e/x",
            "/v1/./messages",
            "/v1/messages/..",
        ] {
            for provider in [Provider::Anthropic, Provider::OpenAi] {
                let e = url(provider, target).unwrap_err();
                assert!(e.contains(target) && e.contains("as it was sent"), "{e}");
            }
        }
        // Odd but kept as sent.
        for target in [
            "//127.0.0.1:18002/v1/models",
            "/v1/a%2Fb?q=..&r=%2e",
            "/v1/x;y",
        ] {
            let got = url(Provider::Anthropic, target).unwrap();
            assert_eq!(got, format!("http://a.test{target}"));
        }
        // A base without /v1 has no place for a path outside /v1.
        let odd = ProxyConfig {
            openai: "http://o.test/api".into(),
            ..ProxyConfig::default()
        };
        let e = upstream_url(&odd, Provider::OpenAi, "/models").unwrap_err();
        assert!(e.contains("does not end in /v1"), "{e}");
    }

    #[test]
    fn credentials_pass_and_connection_headers_do_not() {
        let client = headers(&[
            ("x-api-key", "sk-secret"),
            ("authorization", "Bearer sk-secret"),
            ("anthropic-version", "2023-06-01"),
            ("anthropic-beta", "a,b"),
            ("anthropic-beta", "c"),
            ("host", "127.0.0.1:7475"),
            ("connection", "keep-alive, x-drop-me"),
            ("x-drop-me", "1"),
            ("x-tamp-thread-id", "t1"),
            ("content-length", "12"),
            ("transfer-encoding", "chunked"),
        ]);
        let out = request_headers(&client, true);
        assert_eq!(out["x-api-key"], "sk-secret");
        assert_eq!(out["authorization"], "Bearer sk-secret");
        assert_eq!(out.get_all("anthropic-beta").iter().count(), 2);
        for gone in [
            "host",
            "connection",
            "x-drop-me",
            "x-tamp-thread-id",
            "content-length",
            "transfer-encoding",
        ] {
            assert!(!out.contains_key(gone), "{gone}");
        }
        assert_eq!(request_headers(&client, false)["content-length"], "12");

        let upstream = headers(&[
            ("retry-after", "3"),
            ("request-id", "req_1"),
            ("anthropic-ratelimit-requests-remaining", "0"),
            ("transfer-encoding", "chunked"),
            ("keep-alive", "timeout=5"),
        ]);
        let out = response_headers(&upstream);
        assert_eq!(out["retry-after"], "3");
        assert_eq!(out["request-id"], "req_1");
        assert!(out.contains_key("anthropic-ratelimit-requests-remaining"));
        assert!(!out.contains_key("transfer-encoding") && !out.contains_key("keep-alive"));
    }
}
