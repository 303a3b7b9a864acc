//! Describing one failed attempt: [`FailureDetail::builder`] takes the message and whatever else
//! the caller knows, and classifies the failure unless told its type.

use std::time::Duration;

use chrono::{DateTime, Utc};

use crate::domain::model::{ErrorType, FailureDetail};
use crate::domain::signature::{classify, Outcome};

/// Builds a [`FailureDetail`]. Defaults: attempt 1, failed now, ran 0 ms, no agent, step, stack
/// trace or log, and the error type [`classify`]-ed from the message, exit code and timeout.
///
/// ```
/// use std::time::Duration;
/// use dlq::{ErrorType, FailureDetail};
///
/// let failure = FailureDetail::builder("cargo test failed")
///     .exit_code(101)
///     .agent("agent-1")
///     .step("shell: cargo test")
///     .duration(Duration::from_millis(4_500))
///     .build();
/// assert_eq!(failure.error_type, ErrorType::CommandFailed { exit_code: 101 });
/// assert_eq!(failure.duration_ms, 4_500);
/// ```
#[derive(Debug, Clone)]
#[must_use = "call .build() to get the FailureDetail"]
pub struct FailureBuilder {
    message: String,
    exit_code: Option<i32>,
    timed_out: bool,
    error_type: Option<ErrorType>,
    attempt_number: u32,
    timestamp: Option<DateTime<Utc>>,
    duration: Duration,
    agent_id: String,
    step_failed: String,
    stack_trace: Option<String>,
    json_log_location: Option<String>,
}

impl FailureDetail {
    /// Starts describing a failed attempt whose error message is `message`.
    pub fn builder(message: impl Into<String>) -> FailureBuilder {
        FailureBuilder {
            message: message.into(),
            exit_code: None,
            timed_out: false,
            error_type: None,
            attempt_number: 1,
            timestamp: None,
            duration: Duration::ZERO,
            agent_id: String::new(),
            step_failed: String::new(),
            stack_trace: None,
            json_log_location: None,
        }
    }
}

impl FailureBuilder {
    /// The exit code of the command that failed.
    pub fn exit_code(mut self, code: i32) -> Self {
        self.exit_code = Some(code);
        self
    }

    /// The attempt ran past the time limit the caller enforces: classified as a timeout.
    pub fn timed_out(mut self) -> Self {
        self.timed_out = true;
        self
    }

    /// Sets the error type instead of classifying the failure.
    pub fn error_type(mut self, error_type: ErrorType) -> Self {
        self.error_type = Some(error_type);
        self
    }

    /// The 1-based attempt counter across the item's whole history (default 1).
    pub fn attempt(mut self, number: u32) -> Self {
        self.attempt_number = number;
        self
    }

    /// When the attempt failed (default: when [`Self::build`] is called).
    pub fn at(mut self, timestamp: DateTime<Utc>) -> Self {
        self.timestamp = Some(timestamp);
        self
    }

    /// How long the attempt ran (default 0; kept in whole milliseconds).
    pub fn duration(mut self, duration: Duration) -> Self {
        self.duration = duration;
        self
    }

    /// The agent or worker that ran the attempt.
    pub fn agent(mut self, agent_id: impl Into<String>) -> Self {
        self.agent_id = agent_id.into();
        self
    }

    /// The step that failed, e.g. `shell: cargo test`.
    pub fn step(mut self, step: impl Into<String>) -> Self {
        self.step_failed = step.into();
        self
    }

    /// A stack trace or stderr tail.
    pub fn stack_trace(mut self, trace: impl Into<String>) -> Self {
        self.stack_trace = Some(trace.into());
        self
    }

    /// Where the agent's JSON log is.
    pub fn log_location(mut self, location: impl Into<String>) -> Self {
        self.json_log_location = Some(location.into());
        self
    }

    /// The failed attempt.
    #[must_use]
    pub fn build(self) -> FailureDetail {
        let error_type = self.error_type.unwrap_or_else(|| {
            classify(&Outcome {
                message: &self.message,
                exit_code: self.exit_code,
                timed_out: self.timed_out,
            })
        });
        FailureDetail {
            attempt_number: self.attempt_number,
            timestamp: self.timestamp.unwrap_or_else(Utc::now),
            error_type,
            error_message: self.message,
            stack_trace: self.stack_trace,
            agent_id: self.agent_id,
            step_failed: self.step_failed,
            duration_ms: u64::try_from(self.duration.as_millis()).unwrap_or(u64::MAX),
            json_log_location: self.json_log_location,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::model::ErrorType::*;

    #[test]
    fn defaults() {
        let before = Utc::now();
        let failure = FailureDetail::builder("boom").build();
        assert_eq!(failure.attempt_number, 1);
        assert!(failure.timestamp >= before && failure.timestamp <= Utc::now());
        assert_eq!(failure.duration_ms, 0);
        assert_eq!(failure.error_message, "boom");
        assert_eq!(
            (failure.agent_id.as_str(), failure.step_failed.as_str()),
            ("", "")
        );
        assert_eq!(
            (failure.stack_trace, failure.json_log_location),
            (None, None)
        );
        // No code, no timeout, no keyword: nothing is known.
        assert_eq!(failure.error_type, Unknown);
    }

    #[test]
    fn every_field_is_set_as_given() {
        let at = DateTime::parse_from_rfc3339("2025-01-11T10:30:00Z").unwrap();
        let failure = FailureDetail::builder("boom")
            .attempt(3)
            .at(at.to_utc())
            .duration(Duration::from_secs(45))
            .agent("agent-1")
            .step("shell: cargo test")
            .stack_trace("thread 'main' panicked")
            .log_location("/tmp/session.json")
            .build();
        let json = serde_json::to_value(&failure).unwrap();
        let expected = serde_json::json!({
            "attempt_number": 3,
            "timestamp": "2025-01-11T10:30:00Z",
            "error_type": "Unknown",
            "error_message": "boom",
            "stack_trace": "thread 'main' panicked",
            "agent_id": "agent-1",
            "step_failed": "shell: cargo test",
            "duration_ms": 45_000,
            "json_log_location": "/tmp/session.json",
        });
        assert_eq!(json, expected);
    }

    #[test]
    fn classified_from_the_exit_code() {
        let failure = FailureDetail::builder("boom").exit_code(101).build();
        assert_eq!(failure.error_type, CommandFailed { exit_code: 101 });
    }

    #[test]
    fn classified_from_the_message() {
        let failure = FailureDetail::builder("open: Permission denied").exit_code(1);
        assert_eq!(failure.build().error_type, PermissionError);
    }

    #[test]
    fn timed_out_wins_over_message_and_code() {
        let failure = FailureDetail::builder("forbidden").exit_code(1).timed_out();
        assert_eq!(failure.build().error_type, Timeout);
    }

    #[test]
    fn an_explicit_error_type_is_kept() {
        let failure = FailureDetail::builder("forbidden")
            .exit_code(1)
            .timed_out()
            .error_type(MergeConflict);
        assert_eq!(failure.build().error_type, MergeConflict);
    }
}
