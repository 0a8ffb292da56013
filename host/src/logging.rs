//! Host-side logging: the sink plugins' tracing bridges call. (The `tamp` binary's own
//! subscriber is tamp-cli's.)

use tamp_plugin_api::{FfiStr, LogLevel, LogSink};
use tracing::level_filters::LevelFilter;

/// Re-emits a plugin's event in the host's subscriber, tagged with the plugin's name.
extern "C" fn emit(plugin: FfiStr<'_>, level: LogLevel, target: FfiStr<'_>, message: FfiStr<'_>) {
    // A panic must not unwind back into the plugin's frame.
    let _ = std::panic::catch_unwind(|| {
        let (plugin, target, message) = (plugin.as_str(), target.as_str(), message.as_str());
        match level {
            LogLevel::Error => {
                tracing::error!(target: "tamp::plugin", plugin, plugin_target = target, "{message}")
            }
            LogLevel::Warn => {
                tracing::warn!(target: "tamp::plugin", plugin, plugin_target = target, "{message}")
            }
            LogLevel::Info => {
                tracing::info!(target: "tamp::plugin", plugin, plugin_target = target, "{message}")
            }
            LogLevel::Debug => {
                tracing::debug!(target: "tamp::plugin", plugin, plugin_target = target, "{message}")
            }
            LogLevel::Trace => {
                tracing::trace!(target: "tamp::plugin", plugin, plugin_target = target, "{message}")
            }
        }
    });
}

/// The sink handed to every loaded plugin. Its level is the host's at load time.
pub fn plugin_log_sink() -> LogSink {
    let max_level = match LevelFilter::current() {
        LevelFilter::OFF | LevelFilter::ERROR => LogLevel::Error,
        LevelFilter::WARN => LogLevel::Warn,
        LevelFilter::INFO => LogLevel::Info,
        LevelFilter::DEBUG => LogLevel::Debug,
        _ => LogLevel::Trace,
    };
    LogSink { max_level, emit }
}
