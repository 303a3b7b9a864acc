//! Draining: waiting for the emitter's reconciler to publish the backlog (the events stored
//! but not yet acknowledged by the bus). What a command that stored changes does before it
//! answers (the removals of [`crate::removal`], `dlq import`), and what `dlq reconcile` and the
//! end of a job wait for. The emitter publishes; this only wakes its reconciler and watches its
//! sink's backlog.

use std::time::Duration;

use super::Emitter;
use crate::bus::Bus;
use crate::sink::{Sink, SinkError};

/// How often the backlog is looked at while waiting.
const POLL: Duration = Duration::from_millis(100);

/// Whether the events of a change reached the bus.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Published {
    /// Events still unpublished when the wait ended.
    pub unpublished: u64,
    /// Whether the backlog emptied.
    pub drained: bool,
}

impl Published {
    /// One line for people.
    pub fn describe(&self) -> String {
        if self.drained {
            "all events published".to_owned()
        } else {
            format!("{} events not yet published (the bus is unreachable or slow): they are kept in the sink and published by the reconciler later (`dlq reconcile`, or any dlq process that runs one)", self.unpublished)
        }
    }
}

impl<S: Sink, B: Bus> Emitter<S, B> {
    /// Waits until the backlog is empty or `timeout` passes, waking the reconciler; true if it
    /// emptied.
    pub async fn wait_for_drain(&self, timeout: Duration) -> Result<bool, SinkError> {
        let emitter = self;
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            if emitter.sink().backlog()?.count == 0 {
                return Ok(true);
            }
            if tokio::time::Instant::now() >= deadline {
                return Ok(false);
            }
            emitter.wake_reconciler();
            tokio::time::sleep(POLL).await;
        }
    }

    /// Wakes the reconciler and waits up to `timeout` for the backlog to drain.
    pub async fn finish_publishing(&self, timeout: Duration) -> Result<Published, SinkError> {
        let emitter = self;
        emitter.wake_reconciler();
        let drained = emitter.wait_for_drain(timeout).await?;
        let unpublished = emitter.sink().backlog()?.count;
        Ok(Published {
            unpublished,
            drained,
        })
    }
}
