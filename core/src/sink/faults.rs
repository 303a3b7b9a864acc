//! Deterministic fault injection for the sink's writer, for tests and chaos drills.
//!
//! The switches are checked by the writer thread before it applies or flushes a group, so a
//! drill can make the real local sink fail or stall while everything else stays real. Built
//! only for tests and the `testing` feature; a release build has the zero-sized stand-in of
//! `no_faults.rs`, which never injects anything.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

pub use super::log::sim::OpKind as LogOp;

/// Switches that make the sink's writer fail on purpose. Cloning shares the switches.
#[derive(Debug, Clone, Default)]
pub struct Faults {
    inner: Arc<Switches>,
}

#[derive(Debug, Default)]
struct Switches {
    fail_writes: AtomicBool,
    fail_flush: AtomicBool,
    stall_ms: AtomicU64,
    paused: AtomicBool,
    applier_paused: AtomicBool,
    flush_paused: AtomicBool,
    /// The kind of log call that fails, with which errno.
    log_fault: Mutex<Option<(LogOp, i32)>>,
}

impl Faults {
    /// While set, the applier thread applies nothing to sled: groups stay durable in the log
    /// and unapplied, and the writer decides on top of them.
    pub fn set_applier_paused(&self, on: bool) {
        self.inner.applier_paused.store(on, Ordering::SeqCst);
    }

    pub(crate) fn wait_while_applier_paused(&self) {
        while self.inner.applier_paused.load(Ordering::SeqCst) {
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// While set, a periodic checkpoint's sled flush waits before it starts (it runs beside
    /// the writer, which goes on taking appends).
    pub fn set_flush_paused(&self, on: bool) {
        self.inner.flush_paused.store(on, Ordering::SeqCst);
    }

    pub(crate) fn wait_while_flush_paused(&self) {
        while self.inner.flush_paused.load(Ordering::SeqCst) {
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// While set, every call of kind `op` the segment log makes on the real disk fails with
    /// `errno` (e.g. 28 ENOSPC, 5 EIO) before doing anything; `None` clears it.
    pub fn set_log_fault(&self, fault: Option<(LogOp, i32)>) {
        if let Ok(mut slot) = self.inner.log_fault.lock() {
            *slot = fault;
        }
    }

    /// The error a log call of kind `op` must fail with now, if any.
    pub(crate) fn log_fault(&self, op: LogOp) -> Option<std::io::Error> {
        let slot = self.inner.log_fault.lock().ok()?;
        match *slot {
            Some((kind, errno)) if kind == op => Some(std::io::Error::from_raw_os_error(errno)),
            _ => None,
        }
    }

    /// While set, every write is refused with an I/O error and nothing is written.
    pub fn set_fail_writes(&self, on: bool) {
        self.inner.fail_writes.store(on, Ordering::SeqCst);
    }

    /// While set, writes are applied but the flush reports an error (not durable).
    pub fn set_fail_flush(&self, on: bool) {
        self.inner.fail_flush.store(on, Ordering::SeqCst);
    }

    /// While set, the writer takes no request from its queue: appends wait there unclaimed, as
    /// behind a writer stuck on an earlier group, and a caller whose store timeout runs out
    /// withdraws its request before the writer ever sees it.
    pub fn set_paused(&self, on: bool) {
        self.inner.paused.store(on, Ordering::SeqCst);
    }

    /// Makes the writer sleep this long after it took a group holding appends, before writing
    /// it (a slow disk); zero turns it off. A caller that stops waiting meanwhile gets
    /// `SinkError::Unconfirmed`: the writer has its request and stores it afterwards.
    pub fn set_stall(&self, stall: Duration) {
        let ms = u64::try_from(stall.as_millis()).unwrap_or(u64::MAX);
        self.inner.stall_ms.store(ms, Ordering::SeqCst);
    }

    pub(crate) fn fail_writes(&self) -> bool {
        self.inner.fail_writes.load(Ordering::SeqCst)
    }

    pub(crate) fn fail_flush(&self) -> bool {
        self.inner.fail_flush.load(Ordering::SeqCst)
    }

    /// Blocks the writer thread while [`Faults::set_paused`] is on.
    pub(crate) fn wait_while_paused(&self) {
        while self.inner.paused.load(Ordering::SeqCst) {
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    pub(crate) fn stall(&self) -> Duration {
        Duration::from_millis(self.inner.stall_ms.load(Ordering::SeqCst))
    }

    /// Sleeps out the [`Faults::set_stall`] stall, ending early once it is set shorter (so a
    /// test can hold the writer for as long as it needs and then let it go).
    pub(crate) fn wait_stall(&self) {
        let started = std::time::Instant::now();
        while started.elapsed() < self.stall() {
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}
