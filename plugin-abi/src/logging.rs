//! Log events a plugin sends the host: each plugin library links its own copy of `tracing`,
//! so the host hands it a [`LogSink`] to forward its events through (the SDK's tracing bridge
//! does the forwarding).

use abi_stable::std_types::RStr;
use abi_stable::StableAbi;

/// A log level, as it crosses the boundary.
#[repr(u8)]
#[derive(StableAbi, Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum LogLevel {
    Error = 1,
    Warn = 2,
    Info = 3,
    Debug = 4,
    Trace = 5,
}

/// Where a plugin sends its log events: a host function, and the most verbose level the host
/// wants (so the plugin skips formatting events nobody reads).
#[repr(C)]
#[derive(StableAbi, Clone, Copy)]
pub struct LogSink {
    pub max_level: LogLevel,
    /// `(plugin name, level, event target, formatted message and fields)`.
    pub emit: extern "C" fn(RStr<'_>, LogLevel, RStr<'_>, RStr<'_>),
}
