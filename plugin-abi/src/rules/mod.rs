//! The rules a compaction keeps, which the host checks and a strategy's SDK follows: what is
//! pinned ([`pinned`]: instructions, opaque units, compaction boundaries), what a clearing
//! looks like ([`clearing`]), how messages group into units ([`exchanges`]) and what is
//! protected ([`protect`]: the system prompt and task at the head, the recent tail).
//!
//! They live here, versioned with the ABI, rather than in the SDK: a host and a plugin that
//! load each other agree on them, where an SDK-only release could otherwise let a host and
//! an older plugin disagree on what is pinned. Changing one is an ABI change, which
//! [`crate::ABI_VERSION`] (the loader's check) covers. `tamp_plugin_api::sdk` re-exports each
//! module under the same name.

pub mod clearing;
pub mod exchanges;
pub mod pinned;
pub mod protect;
mod unit;
