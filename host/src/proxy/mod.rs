//! `tamp proxy`: a drop-in base URL for the Anthropic Messages, OpenAI Chat Completions and
//! OpenAI Responses APIs that runs every conversation through the chain on its way upstream.
//!
//! - [`route`]: which upstream, which URL, which headers; which requests are compacted.
//! - [`compact`]: a body through the chain, falling back to the original (never in the way);
//!   [`precount`]: a body the chain would certainly leave as it is, forwarded unread;
//!   [`last_read`]: each thread's last request read, which bounds the next one's tokens.
//! - [`outcome`]: what the proxy made of a body, and the headers that say so;
//!   [`access_log`]: one line per request, and the recent threads' totals.
//! - [`session`]: the thread a request counts under (the agent's session, from what it sends)
//!   and the top-level fields the proxy reads.
//! - [`owner`]: whose the pages a request's compaction writes are (its credential's keyed
//!   hash), for `/tamp/mcp`, the MCP server (`crate::mcp`) that reads them back.
//! - [`server_compaction`]: OpenAI's server-side compaction, answered by tamp's chain for an
//!   upstream that lacks it.
//! - [`forward`]: the upstream clients and the answer's relay, chunk by chunk.
//! - [`error`]: the proxy's own errors in each provider's error shape.
//! - [`metrics`]: the relay's series. The chain file's `[proxy]` table is `config::proxy`.
//!
//! The server pieces are `crate::http`'s, shared with `tamp serve`: the accept loop and
//! connection limits, the body reader, the hot-reloaded `ChainSlot`, the page and health
//! answers and the metrics.
//! See `docs/proxy.md`.

pub mod access_log;
pub mod compact;
pub mod error;
pub mod forward;
pub mod last_read;
pub mod metrics;
pub mod outcome;
pub mod owner;
pub mod precount;
pub mod route;
mod routes;
pub mod server_compaction;
pub mod session;
mod settings;

pub use compact::COMPACTION_HEADER;
pub use routes::*;
