//! Names a host lists in [`HostServices::capabilities`](crate::HostServices::capabilities):
//! what it offers beyond the methods every host has. A capability is added without an ABI
//! change: a plugin asks for the names it knows, and an older host simply does not list them.

/// The host fills in page-transcript prompts of version 1 (`tamp-plugin-api`'s
/// `deferred::page_transcript_prompt`) when it sends a deferred request.
pub const PAGE_TRANSCRIPT_PROMPTS_V1: &str = "page-transcript-prompts/1";

/// The host queues deferred summaries and answers `deferred_results` for them.
pub const DEFERRED_SUMMARIES: &str = "deferred-summaries";

/// The host keeps a summary cache (`cached_summary` / `cache_summary` do something).
pub const SUMMARY_CACHE: &str = "summary-cache";
