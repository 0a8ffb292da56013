//! The console's page, script and style, compiled into the binary: the console works with no
//! network beyond the server itself, and a browser fetches nothing from anywhere else.
//!
//! Every console answer carries a Content-Security-Policy that allows scripts, styles and
//! connections from the server alone and no inline script or style: were text a client sent
//! ever taken for markup, it still could not run.

use axum::http::{header, HeaderValue};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;

use std::sync::Arc;

use super::Console;

const INDEX: &str = include_str!("assets/index.html");
const SCRIPT: &str = include_str!("assets/console.js");
const STYLE: &str = include_str!("assets/console.css");

/// The policy of every console answer (see the module's documentation).
pub const POLICY: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
    img-src 'self' data:; connect-src 'self'; base-uri 'none'; form-action 'none'; \
    frame-ancestors 'none'";

pub(super) fn routes() -> Router<Arc<Console>> {
    Router::new()
        .route(super::PATH, get(index))
        .route("/tamp/ui/", get(index))
        .route("/tamp/ui/console.js", get(script))
        .route("/tamp/ui/console.css", get(style))
}

fn asset(content_type: &'static str, body: &'static str) -> Response {
    (
        [
            (header::CONTENT_TYPE, content_type),
            // Small, and changed by an upgrade: asked again each time, never stale.
            (header::CACHE_CONTROL, "no-cache"),
        ],
        body,
    )
        .into_response()
}

async fn index() -> Response {
    asset("text/html; charset=utf-8", INDEX)
}

async fn script() -> Response {
    asset("text/javascript; charset=utf-8", SCRIPT)
}

async fn style() -> Response {
    asset("text/css; charset=utf-8", STYLE)
}

/// The headers every console answer carries: the policy, no type sniffing, no framing, no
/// referrer, and no caching of data.
pub(super) async fn secure(mut response: Response) -> Response {
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(POLICY),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    headers
        .entry(header::CACHE_CONTROL)
        .or_insert(HeaderValue::from_static("no-store"));
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_page_loads_nothing_from_elsewhere_and_puts_no_data_in_as_markup() {
        for text in [INDEX, SCRIPT, STYLE] {
            assert!(
                !text.contains("http://") && !text.contains("https://") && !text.contains("//cdn")
            );
        }
        assert!(!INDEX.contains("<script>") && !INDEX.contains("style="));
        for markup_sink in [
            "innerHTML",
            "outerHTML",
            "insertAdjacentHTML",
            "document.write",
            "eval(",
        ] {
            assert!(
                !SCRIPT.contains(markup_sink),
                "console.js uses {markup_sink}"
            );
        }
    }
}
