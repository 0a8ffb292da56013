//! Who may reach `tamp serve` and `tamp proxy`: one middleware, both servers.
//!
//! - **The Host a request names.** A web page can drive a server on 127.0.0.1 by rebinding
//!   its own DNS name to 127.0.0.1 (DNS rebinding): the browser then sends the page's
//!   requests there, with `Host: evil.example.com`. So a request is answered only when its
//!   host is a loopback name or address, the address the server listens on (any address,
//!   when it listens on all of them: a client that names an address chose the server, no
//!   name was rebound), or a name the chain file's `[http] allowed_hosts` lists; any other
//!   gets 421 with a JSON error. A request without a Host (HTTP/1.0) comes from no browser
//!   and is answered.
//! - **The bearer token** (`--auth-token-env`), on the paths the server guards: every route
//!   of `tamp serve` but `/healthz`; `tamp proxy`'s own `/tamp/` routes but `/tamp/healthz`
//!   (its provider routes carry the client's provider key in the same header, passed
//!   upstream untouched). Compared in constant time, never logged. The console (`/tamp/ui`)
//!   takes the same token as the password of Basic credentials too, which a browser sends
//!   on every request once its user has typed them; a refusal there asks for them.

use std::net::IpAddr;
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::reload::ChainSlot;
use crate::config::host_name;
use crate::http::error::{ApiError, ApiErrorCode};

/// The access rules of one server.
pub struct Access {
    /// The address the server listens on.
    listen: IpAddr,
    /// The bearer token the guarded paths require, when one is set.
    auth_token: Option<String>,
    /// Whether a path requires the token.
    guarded: fn(&str) -> bool,
    /// The active chain, whose `[http] allowed_hosts` is read per request (it reloads).
    slot: Arc<ChainSlot>,
}

impl Access {
    pub fn new(
        listen: IpAddr,
        auth_token: Option<String>,
        guarded: fn(&str) -> bool,
        slot: Arc<ChainSlot>,
    ) -> Arc<Access> {
        Arc::new(Access {
            listen,
            auth_token,
            guarded,
            slot,
        })
    }

    /// Whether the guarded paths require a bearer token.
    pub fn has_token(&self) -> bool {
        self.auth_token.is_some()
    }

    /// The Host check (see the module's docs).
    fn check_host(&self, request: &Request) -> Result<(), ApiError> {
        let refused = |message: String| {
            Err(ApiError::new(
                StatusCode::MISDIRECTED_REQUEST,
                ApiErrorCode::HostNotAllowed,
                message,
            ))
        };
        // HTTP/2's :authority and an absolute request target come as the URI's authority,
        // which then overrides any Host header (RFC 9112, 3.2.2).
        let named = match request.uri().authority() {
            Some(authority) => authority.as_str().to_string(),
            None => {
                let mut hosts = request.headers().get_all(header::HOST).iter();
                let (Some(first), None) = (hosts.next(), hosts.next()) else {
                    return match request.headers().contains_key(header::HOST) {
                        true => refused("more than one Host header".into()),
                        false => Ok(()),
                    };
                };
                match first.to_str() {
                    Ok(text) => text.to_string(),
                    Err(_) => return refused("the Host header is not ASCII text".into()),
                }
            }
        };
        let host = host_name(&named);
        if self.is_served(&host) {
            return Ok(());
        }
        let active = self.slot.current();
        if active.http().allows(&host) {
            return Ok(());
        }
        refused(format!(
            "this server does not answer for the host {host:?} (Host: {named}): it answers \
             for loopback names and addresses and the address it listens on; list other \
             names under [http] allowed_hosts in the chain file (a guard against DNS \
             rebinding: a web page can point its own name at 127.0.0.1)"
        ))
    }

    /// A loopback name or address, or the listen address (any address when it listens on
    /// all of them).
    fn is_served(&self, host: &str) -> bool {
        if host == "localhost" || host.ends_with(".localhost") {
            return true;
        }
        match host.parse::<IpAddr>() {
            Ok(ip) => ip.is_loopback() || ip == self.listen || self.listen.is_unspecified(),
            Err(_) => false,
        }
    }

    /// The bearer-token check of a guarded path.
    fn check_token(&self, request: &Request) -> Result<(), ApiError> {
        let Some(expected) = &self.auth_token else {
            return Ok(());
        };
        if !(self.guarded)(request.uri().path()) {
            return Ok(());
        }
        let value = request
            .headers()
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok());
        // A browser cannot send a bearer token when it follows a link; it sends Basic
        // credentials once asked. The console takes the same token as their password.
        let given = match value {
            Some(v) if is_console(request.uri().path()) => bearer_token(v)
                .map(str::to_string)
                .or_else(|| basic_password(v)),
            Some(v) => bearer_token(v).map(str::to_string),
            None => None,
        };
        match given.as_deref() {
            None => Err(ApiError::new(
                StatusCode::UNAUTHORIZED,
                ApiErrorCode::Unauthorized,
                "missing bearer token: send `Authorization: Bearer <token>`",
            )),
            Some(token) if !constant_time_eq(token.as_bytes(), expected.as_bytes()) => {
                Err(ApiError::new(
                    StatusCode::UNAUTHORIZED,
                    ApiErrorCode::Unauthorized,
                    "wrong bearer token",
                ))
            }
            Some(_) => Ok(()),
        }
    }
}

/// The middleware: the Host, then the token, then the route.
pub async fn enforce(
    State(access): State<Arc<Access>>,
    request: Request,
    next: Next,
) -> Result<Response, ApiError> {
    access.check_host(&request)?;
    if let Err(refused) = access.check_token(&request) {
        let mut response = refused.into_response();
        if is_console(request.uri().path()) {
            response.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Basic realm=\"tamp console\", charset=\"UTF-8\""),
            );
        }
        return Ok(response);
    }
    Ok(next.run(request).await)
}

/// The console's paths (`/tamp/ui` and under it), where the token may also come as the
/// password of Basic credentials.
fn is_console(path: &str) -> bool {
    path == "/tamp/ui" || path.starts_with("/tamp/ui/")
}

/// The password of an `Authorization: Basic <base64(user:password)>` value (the user is
/// not read).
fn basic_password(value: &str) -> Option<String> {
    use base64::Engine as _;
    let (scheme, encoded) = value.trim().split_once([' ', '\t'])?;
    if !scheme.eq_ignore_ascii_case("basic") {
        return None;
    }
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(encoded.trim())
        .ok()?;
    let text = String::from_utf8(decoded).ok()?;
    let (_, password) = text.split_once(':')?;
    (!password.is_empty()).then(|| password.to_string())
}

/// `tamp serve` guards every route but `/healthz` (health checks carry no credentials).
pub fn serve_guards(path: &str) -> bool {
    path != "/healthz"
}

/// `tamp proxy` guards its own routes under `/tamp/` but `/tamp/healthz`; the rest are the
/// providers' (matched on the raw path, as the router matches it).
pub fn proxy_guards(path: &str) -> bool {
    (path == "/tamp" || path.starts_with("/tamp/")) && path != "/tamp/healthz"
}

/// The token of an `Authorization: Bearer <token>` value. The scheme is case-insensitive
/// (RFC 9110, section 11.1), and any run of spaces may separate it from the token.
fn bearer_token(value: &str) -> Option<&str> {
    let (scheme, token) = value.trim().split_once([' ', '\t'])?;
    let token = token.trim_start_matches([' ', '\t']);
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    // `subtle` keeps the compiler from turning the comparison into an early exit; a length
    // that differs is answered at once (the length is no secret worth the trouble).
    use subtle::ConstantTimeEq as _;
    a.ct_eq(b).into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_guarded_paths_of_each_server() {
        assert!(serve_guards("/v1/compact") && serve_guards("/metrics"));
        assert!(!serve_guards("/healthz"));
        assert!(proxy_guards("/tamp/v1/pages/pg_x") && proxy_guards("/tamp/metrics"));
        assert!(!proxy_guards("/tamp/healthz"));
        assert!(!proxy_guards("/v1/messages") && !proxy_guards("/tampx"));
    }

    #[test]
    fn the_bearer_scheme_is_case_insensitive() {
        assert_eq!(bearer_token("Bearer tok"), Some("tok"));
        assert_eq!(bearer_token("BEARER tok"), Some("tok"));
        assert_eq!(bearer_token("bearer \t tok"), Some("tok"));
        assert_eq!(bearer_token("Bearer"), None);
        assert_eq!(bearer_token("Bearer   "), None);
        assert_eq!(bearer_token("Basic dG9r"), None);
        assert_eq!(bearer_token("Bearertok"), None);
    }

    #[test]
    fn the_console_takes_the_token_as_a_basic_password() {
        // base64("anyone:s3cret"), base64("s3cret"), base64("u:")
        assert_eq!(
            basic_password("Basic YW55b25lOnMzY3JldA=="),
            Some("s3cret".into())
        );
        assert_eq!(
            basic_password("basic  YW55b25lOnMzY3JldA=="),
            Some("s3cret".into())
        );
        assert_eq!(basic_password("Basic czNjcmV0"), None);
        assert_eq!(basic_password("Basic dTo="), None);
        assert_eq!(basic_password("Bearer YW55b25lOnMzY3JldA=="), None);
        assert_eq!(basic_password("Basic !!!"), None);
        assert!(is_console("/tamp/ui") && is_console("/tamp/ui/api/threads"));
        assert!(!is_console("/tamp/uix") && !is_console("/tamp/v1/threads"));
    }

    #[test]
    fn tokens_compare_by_content() {
        assert!(constant_time_eq(b"secret", b"secret"));
        assert!(!constant_time_eq(b"secret", b"secreT"));
        assert!(!constant_time_eq(b"secret", b"secret2"));
    }
}
