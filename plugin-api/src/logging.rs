//! The tracing bridge: a plugin's `tracing` events reach the host's subscriber.
//!
//! Each plugin library links its own copy of `tracing`, with its own global dispatcher, so the
//! host's subscriber never sees a plugin's events on its own. When the host loads a plugin it
//! hands over a [`LogSink`](crate::LogSink); the plugin installs a small subscriber that formats each event and
//! passes it through the sink, and the host re-emits it tagged with the plugin's name.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

use tracing_core::field::{Field, Visit};
use tracing_core::span::{Attributes, Id, Record};
use tracing_core::{Event, Level, LevelFilter, Metadata, Subscriber};

pub use tamp_plugin_abi::logging::{LogLevel, LogSink};

fn level_of(level: &Level) -> LogLevel {
    match *level {
        Level::ERROR => LogLevel::Error,
        Level::WARN => LogLevel::Warn,
        Level::INFO => LogLevel::Info,
        Level::DEBUG => LogLevel::Debug,
        Level::TRACE => LogLevel::Trace,
    }
}

fn filter_of(level: LogLevel) -> LevelFilter {
    match level {
        LogLevel::Error => LevelFilter::ERROR,
        LogLevel::Warn => LevelFilter::WARN,
        LogLevel::Info => LevelFilter::INFO,
        LogLevel::Debug => LevelFilter::DEBUG,
        LogLevel::Trace => LevelFilter::TRACE,
    }
}

struct BridgeSubscriber {
    plugin: &'static str,
    sink: LogSink,
    next_span: AtomicU64,
}

#[derive(Default)]
struct EventText {
    message: String,
    fields: String,
}

impl Visit for EventText {
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            self.message.push_str(value);
        } else {
            let _ = write!(self.fields, " {}={value:?}", field.name());
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            let _ = write!(self.message, "{value:?}");
        } else {
            let _ = write!(self.fields, " {}={value:?}", field.name());
        }
    }
}

impl Subscriber for BridgeSubscriber {
    fn enabled(&self, metadata: &Metadata<'_>) -> bool {
        *metadata.level() <= filter_of(self.sink.max_level)
    }

    fn max_level_hint(&self) -> Option<LevelFilter> {
        Some(filter_of(self.sink.max_level))
    }

    fn new_span(&self, _span: &Attributes<'_>) -> Id {
        // Spans are not forwarded; ids only need to be unique and non-zero.
        Id::from_u64(self.next_span.fetch_add(1, Ordering::Relaxed))
    }

    fn record(&self, _span: &Id, _values: &Record<'_>) {}

    fn record_follows_from(&self, _span: &Id, _follows: &Id) {}

    fn event(&self, event: &Event<'_>) {
        let mut text = EventText::default();
        event.record(&mut text);
        text.message.push_str(&text.fields);
        let metadata = event.metadata();
        (self.sink.emit)(
            self.plugin.into(),
            level_of(metadata.level()),
            metadata.target().into(),
            text.message.as_str().into(),
        );
    }

    fn enter(&self, _span: &Id) {}

    fn exit(&self, _span: &Id) {}
}

static INSTALLED: OnceLock<()> = OnceLock::new();

/// Installs the bridge as this library's global `tracing` subscriber (once; later calls are
/// ignored, since a library's global dispatcher can only be set once).
pub fn install_log_bridge(plugin: &'static str, sink: LogSink) {
    INSTALLED.get_or_init(|| {
        let subscriber = BridgeSubscriber {
            plugin,
            sink,
            next_span: AtomicU64::new(1),
        };
        let _ = tracing::subscriber::set_global_default(subscriber);
    });
}
