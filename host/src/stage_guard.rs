//! Calling a stage under the guard every caller of a strategy needs: its future polled inline
//! under `catch_unwind` (an `FfiFuture` re-raises a plugin-side panic when polled, and it is
//! caught at this frame instead of unwinding through the caller), and cut off at a deadline
//! (a stage that never finishes is dropped). The chain runs every stage through it, and the
//! conformance kit runs the plugin under test through it, so a plugin meets one guard.
//!
//! Polling inline rather than on a spawned task saves a task and a cross-thread wake per
//! stage, which matters with thousands of compactions in flight.

use std::future::Future;
use std::panic::AssertUnwindSafe;

use futures::FutureExt as _;
use tamp_plugin_api::{CompactOutcome, ErrorKind, FfiResult, PluginError};
use tokio::time::Instant;

/// Why a guarded stage call gave no outcome.
#[derive(Debug)]
pub enum GuardedFailure {
    /// No result by the deadline, or an error that came at it: a sandboxed guest is stopped
    /// by its own deadline, which can beat the timer when the worker is busy running the
    /// guest (the timer wheel is turned between polls).
    Timeout,
    /// A panic that escaped the plugin's future, caught here: its message.
    Unwound(String),
    /// The stage's own error (of kind [`ErrorKind::Panicked`] when the plugin's adapter caught
    /// a panic of its own: see [`GuardedFailure::is_panic`]).
    Error(PluginError),
}

impl GuardedFailure {
    /// Whether the stage panicked, caught here or by the plugin's adapter.
    pub fn is_panic(&self) -> bool {
        match self {
            GuardedFailure::Unwound(_) => true,
            GuardedFailure::Error(e) => e.kind == ErrorKind::Panicked,
            GuardedFailure::Timeout => false,
        }
    }
}

/// Awaits `call` (a strategy's `compact`) under the guard, until `deadline`.
pub async fn call_stage<F>(call: F, deadline: Instant) -> Result<CompactOutcome, GuardedFailure>
where
    F: Future<Output = FfiResult<CompactOutcome, PluginError>>,
{
    let guarded = AssertUnwindSafe(call).catch_unwind();
    match tokio::time::timeout_at(deadline, guarded).await {
        Err(_) => Err(GuardedFailure::Timeout),
        Ok(Ok(FfiResult::RErr(_))) if Instant::now() >= deadline => Err(GuardedFailure::Timeout),
        Ok(Err(payload)) => Err(GuardedFailure::Unwound(
            tamp_plugin_api::strategy::panic_message(&*payload),
        )),
        Ok(Ok(FfiResult::RErr(e))) => Err(GuardedFailure::Error(e)),
        Ok(Ok(FfiResult::ROk(outcome))) => Ok(outcome),
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tamp_plugin_api::StageReport;

    use super::*;

    fn outcome() -> CompactOutcome {
        CompactOutcome::with_edits([], StageReport::skipped("nothing"))
    }

    fn soon() -> Instant {
        Instant::now() + Duration::from_secs(5)
    }

    #[tokio::test]
    async fn an_outcome_passes_through() {
        let got = call_stage(async { FfiResult::ROk(outcome()) }, soon()).await;
        assert_eq!(got.unwrap().report.reason, "nothing");
    }

    #[tokio::test]
    async fn a_panic_is_caught_with_its_message() {
        fn blow_up() -> FfiResult<CompactOutcome, PluginError> {
            panic!("stage blew up")
        }
        let failure = call_stage(async { blow_up() }, soon()).await.unwrap_err();
        assert!(failure.is_panic());
        assert!(
            matches!(&failure, GuardedFailure::Unwound(m) if m.contains("stage blew up")),
            "{failure:?}"
        );
    }

    #[tokio::test]
    async fn errors_keep_their_kind() {
        let error = |kind| async move { FfiResult::RErr(PluginError::new(kind, "no")) };
        let failure = call_stage(error(ErrorKind::Llm), soon()).await.unwrap_err();
        assert!(!failure.is_panic());
        assert!(matches!(failure, GuardedFailure::Error(ref e) if e.kind == ErrorKind::Llm));
        let caught = call_stage(error(ErrorKind::Panicked), soon())
            .await
            .unwrap_err();
        assert!(caught.is_panic());
    }

    #[tokio::test]
    async fn a_stage_past_its_deadline_is_cut_off() {
        let never = futures::future::pending::<FfiResult<CompactOutcome, PluginError>>();
        let deadline = Instant::now() + Duration::from_millis(50);
        let failure = call_stage(never, deadline).await.unwrap_err();
        assert!(matches!(failure, GuardedFailure::Timeout));
        // An error that only comes at the deadline is the deadline's doing.
        let late = async {
            tokio::time::sleep(Duration::from_millis(50)).await;
            FfiResult::RErr(PluginError::internal("stopped"))
        };
        let deadline = Instant::now() + Duration::from_millis(50);
        let failure = call_stage(late, deadline).await.unwrap_err();
        assert!(matches!(failure, GuardedFailure::Timeout), "{failure:?}");
    }
}
