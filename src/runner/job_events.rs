//! Job events: what happened during a job, in order, for `dlq events JOB_ID`.
//!
//! These are the runner's own log (one JSON object per line in the job's `events.jsonl`),
//! separate from the dead-letter event log of [`dlq::domain::event`]: they record agent attempts,
//! circuit-breaker transitions, stops and the final summary, which the DLQ does not hold.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::job_summary::JobSummary;

/// One job event with its time.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct JobEvent {
    /// When it happened.
    pub at: DateTime<Utc>,
    /// What happened.
    #[serde(flatten)]
    pub kind: JobEventKind,
}

/// What happened.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "event")]
pub(crate) enum JobEventKind {
    /// The job started (or resumed) with this many items still to run.
    JobStarted {
        /// The workflow's name.
        workflow: String,
        /// Items in the job.
        total: usize,
        /// Items still to run in this session.
        pending: usize,
        /// Whether this is a resume.
        resumed: bool,
    },
    /// The setup steps finished.
    SetupCompleted,
    /// An agent attempt failed and will be retried after `delay_ms`.
    AgentRetrying {
        /// The item.
        item_id: String,
        /// The attempt that failed (1-based).
        attempt: u32,
        /// Its error message.
        error: String,
        /// Wait before the next attempt.
        delay_ms: u64,
    },
    /// An item succeeded.
    AgentCompleted {
        /// The item.
        item_id: String,
        /// Attempts made.
        attempts: u32,
        /// Duration of the successful attempt.
        duration_ms: u64,
    },
    /// An item failed every attempt.
    AgentFailed {
        /// The item.
        item_id: String,
        /// Attempts made.
        attempts: u32,
        /// Error type of the last attempt.
        error_type: String,
        /// Last error message.
        error: String,
    },
    /// A failed item was written to the dead-letter queue (durably; the runner does not wait
    /// for the bus: the emitter publishes in the background, or the reconciler does later).
    /// Files written before carry a `published` field, ignored when read.
    ItemDeadLettered {
        /// The item.
        item_id: String,
        /// Event ids in the DLQ log.
        event_ids: Vec<String>,
    },
    /// A failed item could not be written to the dead-letter queue; it stays pending.
    DeadLetterFailed {
        /// The item.
        item_id: String,
        /// Why.
        error: String,
    },
    /// A failed item was skipped by the policy (or handled by a custom handler).
    ItemSkipped {
        /// The item.
        item_id: String,
        /// `skip`, or `custom:<name>`.
        by: String,
    },
    /// A dead-lettered item succeeded when re-run and left the DLQ.
    ItemResolved {
        /// The item.
        item_id: String,
    },
    /// The circuit breaker opened: dispatch pauses.
    CircuitOpen {
        /// Consecutive failures that opened it, or the failed probe.
        reason: String,
    },
    /// The breaker lets probe requests through.
    CircuitHalfOpen,
    /// The breaker closed: dispatch resumes.
    CircuitClosed,
    /// A report of errors collected so far (`error_collection`).
    ErrorReport {
        /// One line per failed item.
        errors: Vec<String>,
    },
    /// The job stopped before every item ran; the rest stay pending for `dlq resume`.
    JobStopped {
        /// Why.
        reason: String,
    },
    /// The reduce phase failed.
    ReduceFailed {
        /// Why.
        error: String,
    },
    /// The job finished this session.
    JobFinished {
        /// Counts and patterns.
        summary: JobSummary,
    },
}

impl JobEventKind {
    /// The event's name, as in the JSON `event` field.
    pub(crate) fn name(&self) -> &'static str {
        match self {
            JobEventKind::JobStarted { .. } => "JobStarted",
            JobEventKind::SetupCompleted => "SetupCompleted",
            JobEventKind::AgentRetrying { .. } => "AgentRetrying",
            JobEventKind::AgentCompleted { .. } => "AgentCompleted",
            JobEventKind::AgentFailed { .. } => "AgentFailed",
            JobEventKind::ItemDeadLettered { .. } => "ItemDeadLettered",
            JobEventKind::DeadLetterFailed { .. } => "DeadLetterFailed",
            JobEventKind::ItemSkipped { .. } => "ItemSkipped",
            JobEventKind::ItemResolved { .. } => "ItemResolved",
            JobEventKind::CircuitOpen { .. } => "CircuitOpen",
            JobEventKind::CircuitHalfOpen => "CircuitHalfOpen",
            JobEventKind::CircuitClosed => "CircuitClosed",
            JobEventKind::ErrorReport { .. } => "ErrorReport",
            JobEventKind::JobStopped { .. } => "JobStopped",
            JobEventKind::ReduceFailed { .. } => "ReduceFailed",
            JobEventKind::JobFinished { .. } => "JobFinished",
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    #[test]
    fn events_are_flat_json_with_a_name() {
        let event = JobEvent {
            at: "2026-01-01T00:00:00Z".parse().unwrap(),
            kind: JobEventKind::CircuitOpen {
                reason: "5 consecutive failures".into(),
            },
        };
        let json = serde_json::to_value(&event).unwrap();
        assert_eq!(json["event"], "CircuitOpen");
        assert_eq!(json["reason"], "5 consecutive failures");
        assert_eq!(event.kind.name(), "CircuitOpen");
        let back: JobEvent = serde_json::from_value(json).unwrap();
        assert_eq!(back, event);
    }
}
