//! The dead-letter data model.
//!
//! Field names and JSON shapes follow the on-disk format of the runner dlq replaces exactly
//! (`item_id`, `failure_history`, `{"CommandFailed": {"exit_code": 101}}`, ...), so items can be
//! exported to and imported from that layout. Two fields are ours: `job_id` (the job an item
//! belongs to) and `error_pattern` (the readable form of the hashed `error_signature`); both
//! default when absent so that runner's files still parse.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// A work item that failed and was handed to the dead-letter queue.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DeadLetteredItem {
    /// Stable identifier of the work item inside its job.
    pub item_id: String,
    /// The job the item belongs to.
    #[serde(default)]
    pub job_id: String,
    /// The original work item, as read from the job's input.
    pub item_data: serde_json::Value,
    /// When the item first failed (used for age-based purge and retention).
    #[serde(
        serialize_with = "crate::domain::timefmt::write_utc",
        deserialize_with = "crate::domain::timefmt::utc"
    )]
    pub first_attempt: DateTime<Utc>,
    /// When the item failed most recently.
    #[serde(
        serialize_with = "crate::domain::timefmt::write_utc",
        deserialize_with = "crate::domain::timefmt::utc"
    )]
    pub last_attempt: DateTime<Utc>,
    /// Number of failed attempts recorded in `failure_history`.
    pub failure_count: u32,
    /// Every failed attempt, oldest first.
    pub failure_history: Vec<FailureDetail>,
    /// 16 hex characters grouping similar failures (see [`crate::domain::signature`]).
    pub error_signature: String,
    /// The normalised, human-readable pattern that `error_signature` hashes.
    #[serde(default)]
    pub error_pattern: String,
    /// Whether the item may be retried automatically.
    pub reprocess_eligible: bool,
    /// Whether a person should look at the item before it is retried.
    pub manual_review_required: bool,
    /// State preserved from the failed agent's worktree, when it ran in one.
    #[serde(default)]
    pub worktree_artifacts: Option<WorktreeArtifacts>,
    /// The item's last redrive, once an operator redrove it (absent before: older items and
    /// outputs are unchanged).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub redrive: Option<Redrive>,
}

/// An item's last redrive: which generation, whether it is still running or failed, since when.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Redrive {
    /// The generation this redrive started (1 for the first).
    pub generation: u32,
    /// Whether it is running or failed (a redrive that succeeded removed the item).
    pub state: RedriveState,
    /// When it started, or when it failed.
    #[serde(
        serialize_with = "crate::domain::timefmt::write_utc",
        deserialize_with = "crate::domain::timefmt::utc"
    )]
    pub at: DateTime<Utc>,
    /// What the handler answered, when it failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// The state of an item's last redrive.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RedriveState {
    /// Handed back; no outcome recorded yet.
    InFlight,
    /// The handler failed it; the item stays.
    Failed,
}

/// One failed attempt of a work item.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FailureDetail {
    /// 1-based attempt counter across the item's whole history.
    pub attempt_number: u32,
    /// When the attempt failed.
    #[serde(
        serialize_with = "crate::domain::timefmt::write_utc",
        deserialize_with = "crate::domain::timefmt::utc"
    )]
    pub timestamp: DateTime<Utc>,
    /// Classification of the failure.
    pub error_type: ErrorType,
    /// Human-readable description of the failure.
    pub error_message: String,
    /// Stack trace or stderr tail, when one was captured.
    #[serde(default)]
    pub stack_trace: Option<String>,
    /// The agent that ran the attempt.
    pub agent_id: String,
    /// The step that failed, e.g. `shell: cargo test`.
    pub step_failed: String,
    /// How long the attempt ran before failing.
    pub duration_ms: u64,
    /// Where the agent's JSON log is, when the agent reported one.
    #[serde(default)]
    pub json_log_location: Option<String>,
}

impl DeadLetteredItem {
    /// How many times the item was redriven: 0 until the first redrive. A redrive names the
    /// generation it saw, and only one redrive of each generation is written.
    pub fn generation(&self) -> u32 {
        self.redrive
            .as_ref()
            .map_or(0, |redrive| redrive.generation)
    }

    /// The most recent failure (`None` only for an item without history, which is never
    /// dead-lettered).
    pub fn last_failure(&self) -> Option<&FailureDetail> {
        self.failure_history.last()
    }

    /// The error type of the most recent failure: the item's error type everywhere it is shown,
    /// filtered or counted (`None` without history).
    pub fn last_error_type(&self) -> Option<&ErrorType> {
        self.last_failure().map(|failure| &failure.error_type)
    }

    /// The name of [`Self::last_error_type`] (`Unknown` without history).
    pub fn last_error_type_name(&self) -> &'static str {
        self.last_error_type().map_or("Unknown", ErrorType::name)
    }

    /// The exit code of the most recent failure, when it was a failed command.
    pub fn last_exit_code(&self) -> Option<i32> {
        match self.last_error_type() {
            Some(ErrorType::CommandFailed { exit_code }) => Some(*exit_code),
            _ => None,
        }
    }

    /// The message of the most recent failure (empty without history).
    pub fn last_error_message(&self) -> &str {
        self.last_failure()
            .map_or("", |failure| failure.error_message.as_str())
    }
}

/// Classification of a failure. Serialised in serde's external tagging, as the runner dlq
/// replaces wrote it:
/// `"Timeout"` or `{"CommandFailed": {"exit_code": 101}}`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum ErrorType {
    /// The agent ran past its time limit.
    Timeout,
    /// A shell or agent command exited non-zero.
    CommandFailed {
        /// The command's exit code.
        exit_code: i32,
    },
    /// A post-execution validation failed.
    ValidationFailed,
    /// A git worktree operation failed.
    WorktreeError,
    /// Merging the agent's work back failed.
    MergeConflict,
    /// Memory, disk or another resource ran out.
    ResourceExhausted,
    /// The agent lacked a permission it needed.
    PermissionError,
    /// Nothing more specific is known.
    Unknown,
}

impl ErrorType {
    /// Every variant name, in declaration order ([`ErrorType::index`] indexes it).
    pub const NAMES: [&'static str; 8] = [
        "Timeout",
        "CommandFailed",
        "ValidationFailed",
        "WorktreeError",
        "MergeConflict",
        "ResourceExhausted",
        "PermissionError",
        "Unknown",
    ];

    /// The position of this variant's name in [`ErrorType::NAMES`].
    pub fn index(&self) -> usize {
        match self {
            ErrorType::Timeout => 0,
            ErrorType::CommandFailed { .. } => 1,
            ErrorType::ValidationFailed => 2,
            ErrorType::WorktreeError => 3,
            ErrorType::MergeConflict => 4,
            ErrorType::ResourceExhausted => 5,
            ErrorType::PermissionError => 6,
            ErrorType::Unknown => 7,
        }
    }

    /// The variant name without data, e.g. `CommandFailed`; used in signatures, metrics labels
    /// and filters.
    pub fn name(&self) -> &'static str {
        match self {
            ErrorType::Timeout => "Timeout",
            ErrorType::CommandFailed { .. } => "CommandFailed",
            ErrorType::ValidationFailed => "ValidationFailed",
            ErrorType::WorktreeError => "WorktreeError",
            ErrorType::MergeConflict => "MergeConflict",
            ErrorType::ResourceExhausted => "ResourceExhausted",
            ErrorType::PermissionError => "PermissionError",
            ErrorType::Unknown => "Unknown",
        }
    }
}

/// State captured from a failed agent's git worktree.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WorktreeArtifacts {
    /// Path of the worktree, kept on failure.
    pub worktree_path: String,
    /// The branch the agent worked on.
    pub branch_name: String,
    /// A description of changes left uncommitted.
    #[serde(default)]
    pub uncommitted_changes: Option<String>,
    /// Captured error output.
    #[serde(default)]
    pub error_logs: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_indexed_by_variant() {
        let all = [
            ErrorType::Timeout,
            ErrorType::CommandFailed { exit_code: 3 },
            ErrorType::ValidationFailed,
            ErrorType::WorktreeError,
            ErrorType::MergeConflict,
            ErrorType::ResourceExhausted,
            ErrorType::PermissionError,
            ErrorType::Unknown,
        ];
        for (position, kind) in all.iter().enumerate() {
            assert_eq!(kind.index(), position);
            assert_eq!(ErrorType::NAMES[kind.index()], kind.name());
        }
    }

    /// The example item of the replaced runner's documentation, with its two comment-free fields, parses as is.
    #[test]
    fn parses_reference_000_item() {
        let json = r#"{
            "item_id": "item-123",
            "item_data": { "file": "src/main.rs", "priority": 5 },
            "first_attempt": "2025-01-11T10:25:00Z",
            "last_attempt": "2025-01-11T10:30:00Z",
            "failure_count": 3,
            "failure_history": [{
                "attempt_number": 1,
                "timestamp": "2025-01-11T10:30:00Z",
                "error_type": { "CommandFailed": { "exit_code": 101 } },
                "error_message": "cargo test failed with exit code 101",
                "stack_trace": "thread 'main' panicked at src/main.rs:42...",
                "agent_id": "agent-1",
                "step_failed": "shell: cargo test",
                "duration_ms": 45000,
                "json_log_location": "/tmp/session-abc123.json"
            }],
            "error_signature": "CommandFailed::cargo test failed with exit",
            "reprocess_eligible": true,
            "manual_review_required": false,
            "worktree_artifacts": {
                "worktree_path": "/tmp/worktrees/agent-1",
                "branch_name": "agent-1",
                "uncommitted_changes": "src/main.rs modified",
                "error_logs": "error.log contents..."
            }
        }"#;
        let item: DeadLetteredItem = serde_json::from_str(json).unwrap();
        assert_eq!(item.failure_count, 3);
        assert_eq!(item.job_id, "");
        assert_eq!(
            item.failure_history[0].error_type,
            ErrorType::CommandFailed { exit_code: 101 }
        );
        let back = serde_json::to_value(&item).unwrap();
        assert_eq!(
            back["failure_history"][0]["error_type"],
            serde_json::json!({"CommandFailed": {"exit_code": 101}})
        );
        assert_eq!(back["first_attempt"], "2025-01-11T10:25:00Z");
    }

    #[test]
    fn unit_variants_serialise_as_strings() {
        assert_eq!(
            serde_json::to_string(&ErrorType::Timeout).unwrap(),
            "\"Timeout\""
        );
        assert_eq!(
            ErrorType::CommandFailed { exit_code: 2 }.name(),
            "CommandFailed"
        );
    }
}
