//! The console: a read-only web view of `tamp serve` and `tamp proxy` under `/tamp/ui`, and
//! the per-request record it reads.
//!
//! - [`record`]: each request, handed off the request path to a writer task that keeps it in
//!   the store (`store::activity`), where every replica's console reads it.
//! - [`api`]: the page's data under `/tamp/ui/api/` (threads, a thread's requests, a
//!   compaction, pages, savings, the chain, health); [`assets`]: the page itself, its script
//!   and its style, built into the binary (nothing is fetched from elsewhere).
//! - [`chart`]: a thread's timeline as SVG; [`conversation`]: messages as the page shows them;
//!   [`compaction`]: what stands for each page a compaction wrote; [`savings`]: what
//!   compaction saved at the configured prices; [`health`]: the health view, read from the
//!   `/metrics` exposition.
//!
//! The console's routes are behind the same Host check and token as every other route of
//! the server (`http::access`); it changes nothing and starts nothing. See `docs/serve.md`
//! and `docs/proxy.md`, "The console", and `docs/security.md`.

use std::net::IpAddr;
use std::sync::Arc;

use axum::Router;

use crate::http::reload::ChainSlot;

pub mod api;
pub mod assets;
pub mod chart;
pub mod compaction;
pub mod conversation;
pub mod health;
pub mod record;
pub mod savings;
mod settings;

pub use record::{ChainRun, Recorder};

/// The path the console is served under.
pub const PATH: &str = "/tamp/ui";

/// What the console's handlers read.
pub struct Console {
    pub slot: Arc<ChainSlot>,
    pub recorder: Arc<Recorder>,
    /// This server's `/metrics` exposition, as it would answer it now.
    pub exposition: Box<dyn Fn() -> String + Send + Sync>,
    /// `tamp serve` or `tamp proxy`.
    pub server: &'static str,
}

/// Whether the console is served: as `--console` says, else when the server listens on
/// loopback only (an address others can reach shows the console only when asked to).
pub fn enabled(flag: Option<bool>, listen: IpAddr) -> bool {
    flag.unwrap_or(listen.is_loopback())
}

/// The console's routes, for a server whose router has state `S`.
pub fn router<S: Clone + Send + Sync + 'static>(console: Arc<Console>) -> Router<S> {
    api::routes()
        .merge(assets::routes())
        .layer(axum::middleware::map_response(assets::secure))
        .with_state(console)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_console_is_on_by_default_only_on_loopback() {
        let loopback: IpAddr = "127.0.0.1".parse().unwrap();
        let any: IpAddr = "0.0.0.0".parse().unwrap();
        assert!(enabled(None, loopback));
        assert!(enabled(None, "::1".parse().unwrap()));
        assert!(!enabled(None, any));
        assert!(enabled(Some(true), any));
        assert!(!enabled(Some(false), loopback));
    }
}
