//! What `tamp serve` and `tamp proxy` share as HTTP servers.
//!
//! - [`error`]: the error answer (`{"error": {"code", "message"}}`) and its stable codes.

pub mod error;
