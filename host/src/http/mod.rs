//! What `tamp serve` and `tamp proxy` share as HTTP servers; `serve/` and `proxy/` hold only
//! their own routes and handlers.
//!
//! - [`server`]: the flags both take ([`server::ServerOptions`]) and the one startup path
//!   (`Startup::start`, then `Started::serve`): the accept loop, connection limits and
//!   shutdown; the token; the worker.
//! - [`limits`]: the per-request limits ([`limits::Gate`]) and the requests in flight.
//! - [`error`]: the error answer (`{"error": {"code", "message"}}`) and its stable codes.
//! - [`answers`]: the page, health and 405 answers both give.
//! - [`access`]: the Host check and the bearer token, one middleware for both.
//! - [`active`]: a chain built from its file, and the hash that identifies it;
//!   [`reload`]: its slot, the directory watcher, debounce and swap.
//! - [`metrics`]: the Prometheus registry both render (reloads, requests, latency).

pub mod access;
pub mod active;
pub mod answers;
pub mod error;
pub mod limits;
pub mod listener;
pub mod metrics;
pub mod reload;
mod socket;
