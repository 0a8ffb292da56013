//! `tamp proxy`: a drop-in base URL for the Anthropic Messages, OpenAI Chat Completions and
//! OpenAI Responses APIs that runs every conversation through the chain on its way upstream.
//!
//! - [`route`]: which upstream, which URL, which headers; which requests are compacted.
//! - [`compact`]: a body through the chain, falling back to the original (never in the way);
//!   [`precount`]: a body the chain would certainly leave as it is, forwarded unread.
//! - [`session`]: the thread of an agent's session, from what the agent sends.
//! - [`server_compaction`]: OpenAI's server-side compaction, answered by tamp's chain for an
//!   upstream that lacks it.
//! - [`forward`]: the upstream clients and the answer's relay, chunk by chunk.
//! - [`error`]: the proxy's own errors in each provider's error shape.
//! - [`config`]: the chain file's `[proxy]` table; [`metrics`]: the relay's series.
//!
//! The server itself is `tamp serve`'s: its accept loop and connection limits, its body
//! reader, its hot-reloaded `ChainSlot`, its page and health answers and its metrics.
//! See `docs/proxy.md`.
//!
//! Without the `serve` feature only [`config`] is built: the chain file's `[proxy]` table
//! parses, and is checked, in every build.

#[cfg(feature = "serve")]
pub mod compact;
pub mod config;
#[cfg(feature = "serve")]
pub mod error;
#[cfg(feature = "serve")]
pub mod forward;
#[cfg(feature = "serve")]
pub mod metrics;
#[cfg(feature = "serve")]
pub mod precount;
#[cfg(feature = "serve")]
pub mod route;
#[cfg(feature = "serve")]
mod server;
#[cfg(feature = "serve")]
pub mod server_compaction;
#[cfg(feature = "serve")]
pub mod session;

#[cfg(feature = "serve")]
pub use compact::COMPACTION_HEADER;
#[cfg(feature = "serve")]
pub use server::*;
