//! Errors of the job runner. Each says what went wrong and what to do.

use std::path::PathBuf;

use thiserror::Error;

use super::input::InputError;
use super::workflow::WorkflowError;

/// Why a job could not run (item failures are not errors: they are outcomes).
#[derive(Debug, Error)]
pub enum RunError {
    /// The workflow file is malformed or invalid.
    #[error(transparent)]
    Workflow(#[from] WorkflowError),
    /// The job's input could not be read or selected.
    #[error(transparent)]
    Input(#[from] InputError),
    /// Reading or writing the job's state failed.
    #[error("job state {path}: {source} (check the data directory's permissions and free space)")]
    JobState {
        /// The file or directory.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// A job state file is not valid.
    #[error("job state {path} is corrupt: {reason}; the job cannot be resumed from it (its DLQ items are unaffected)")]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// `dlq run --job-id` named a job that already exists.
    #[error("job {0} already exists: resume it with `dlq resume {0}` or choose another --job-id")]
    JobExists(String),
    /// No such job in this data directory.
    #[error("no job {job_id} in {data_dir} (see `dlq jobs`)")]
    JobNotFound {
        /// The job.
        job_id: String,
        /// Where we looked.
        data_dir: PathBuf,
    },
    /// `dlq retry` of a job this data directory never ran, without `--workflow`.
    #[error("job {job_id} was not run from {data_dir}, so its agent template is unknown: pass --workflow FILE to retry its items with that workflow's template")]
    NoTemplate {
        /// The job.
        job_id: String,
        /// Where we looked.
        data_dir: PathBuf,
    },
    /// A filter could not be evaluated on an item (e.g. a missing field).
    #[error("filter failed on item {item_id}: {source}")]
    Filter {
        /// The item.
        item_id: String,
        /// Why.
        source: crate::query::cel::CelError,
    },
    /// A job id is not usable.
    #[error(
        "invalid job id {0:?}: use 1-128 characters from A-Z a-z 0-9 . _ - (not starting with '.')"
    )]
    BadJobId(String),
    /// A setup step failed: no item ran.
    #[error("setup step {step:?} failed: {message}; fix it and run again (no item ran)")]
    Setup {
        /// The step.
        step: String,
        /// What happened.
        message: String,
    },
    /// The dead-letter sink could not be used.
    #[error(transparent)]
    Sink(#[from] dlq::sink::SinkError),
}

impl RunError {
    /// Which kind of failure this is: usage for a bad workflow, job id or filter, not found
    /// for an unknown job, a failure otherwise.
    pub fn class(&self) -> dlq::ErrorClass {
        match self {
            RunError::Workflow(_)
            | RunError::BadJobId(_)
            | RunError::JobExists(_)
            | RunError::Filter { .. }
            | RunError::NoTemplate { .. } => dlq::ErrorClass::Usage,
            RunError::JobNotFound { .. } => dlq::ErrorClass::NotFound,
            _ => dlq::ErrorClass::Failure,
        }
    }

    /// An I/O error on `path`, a file or directory of the job's state.
    pub(super) fn job_state(path: impl Into<PathBuf>) -> impl FnOnce(std::io::Error) -> RunError {
        let path = path.into();
        move |source| RunError::JobState { path, source }
    }

    /// A job state file at `path` that cannot be (de)serialised.
    pub(super) fn corrupt(path: impl Into<PathBuf>) -> impl FnOnce(serde_json::Error) -> RunError {
        let path = path.into();
        move |err| RunError::Corrupt {
            path,
            reason: err.to_string(),
        }
    }
}
