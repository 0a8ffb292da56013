//! A panic inside a plugin, told once: in the error the boundary returns, with its place.
//!
//! The boundary (`strategy.rs`, `module.rs`) catches every panic, and the host reports the
//! stage rolled back with the panic's message. But a plugin library carries its own copy of
//! std and, with it, std's default panic hook, which also printed the message to the host's
//! stderr (and, with `RUST_BACKTRACE` set, a backtrace of a hundred lines): the same failure
//! told twice, once outside the host's logging. The hook installed here when the host loads
//! the library keeps the panic's place for the error instead and sends the message to the
//! host's log at debug level. It is this library's hook only: the host's std has its own.

use std::cell::RefCell;
use std::sync::Once;

thread_local! {
    /// Where the last panic on this thread happened (`file:line:column`): the hook runs on
    /// the panicking thread, before the unwind reaches the boundary's `catch_unwind` there.
    static PLACE: RefCell<Option<String>> = const { RefCell::new(None) };
}

/// Replaces std's default panic hook in this library, once.
pub(crate) fn install_hook() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        std::panic::set_hook(Box::new(|info| {
            let place = info
                .location()
                .map(|l| format!("{}:{}:{}", l.file(), l.line(), l.column()));
            tracing::debug!(place = place.as_deref().unwrap_or("?"), "panicked: {info}");
            PLACE.with(|p| *p.borrow_mut() = place);
        }));
    });
}

/// The place of the panic this thread is unwinding from, taken (so a later panic without a
/// place is not given this one's).
pub(crate) fn take_place() -> Option<String> {
    PLACE.with(|p| p.borrow_mut().take())
}
