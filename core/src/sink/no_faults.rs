//! The release build's stand-in for the fault switches of tests and drills (`faults.rs`,
//! built with the `testing` feature): zero-sized, every query answers "no fault", so the
//! writer's code is the same in both builds and the switches cost nothing here.

/// No fault is ever injected.
#[derive(Debug, Clone, Default)]
pub(crate) struct Faults;

impl Faults {
    /// Never waits: the applier is never paused.
    #[inline]
    pub(crate) fn wait_while_applier_paused(&self) {}

    /// Never waits: a checkpoint's flush is never paused.
    #[inline]
    pub(crate) fn wait_while_flush_paused(&self) {}

    /// Writes are never refused on purpose.
    #[inline]
    pub(crate) fn fail_writes(&self) -> bool {
        false
    }

    /// Flushes never fail on purpose.
    #[inline]
    pub(crate) fn fail_flush(&self) -> bool {
        false
    }

    /// Never waits: the writer is never paused.
    #[inline]
    pub(crate) fn wait_while_paused(&self) {}

    /// Never waits: the writer never stalls on purpose.
    #[inline]
    pub(crate) fn wait_stall(&self) {}
}
