//! The MapReduce job runner (`dlq run`): reads a workflow, runs one agent per work item,
//! applies the workflow's error policy and dead-letters items that keep failing through the
//! embedded [`dlq::emitter`].
//!
//! # Use as a library
//!
//! [`start`] runs a workflow file as a new job with an emitter of yours and returns its
//! [`JobReport`]; [`RunOptions`] says where the job's state lives and which command runs
//! `claude:` steps, [`ProgressMode`] whether progress is shown. Failures to run a job at all
//! are [`RunError`]s; items that fail are outcomes, counted in the report's [`JobSummary`].
//!
//! # Layout
//!
//! Pure parts, without I/O:
//! - `workflow`: the workflow file's schema, parsing and validation (its `error_policy`
//!   section in `workflow::error_policy`);
//! - `on_failure`: what the error policy decides for an item that failed every attempt, and
//!   when the job stops;
//! - `backoff`: delays between retries; `breaker`: the circuit breaker;
//! - `template`: `${...}` rendering of steps, item data never executed;
//! - `convert`: an agent's result as a failure record;
//! - `job_summary`: the running tally of outcomes and the summary made from it;
//! - `job_events`: what happened during a job (`dlq events`).
//!
//! Parts that do I/O:
//! - `process_group`: every process the runner starts, in a process group of its own;
//! - `agent`: one work item's steps as processes, optionally in a git worktree;
//! - `input`: reading the input document and selecting the work items;
//! - `job_store`: a job's state on disk (`<data dir>/jobs/<job id>/`);
//! - `job`: starting and resuming jobs (setup, map, reduce); `map`: the map phase;
//!   `retry`: `dlq retry` of dead-lettered items;
//! - `context`, `progress`, `error_collection`, `error`: what they share.

mod agent;
mod backoff;
mod breaker;
mod context;
mod convert;
mod error;
mod error_collection;
mod input;
mod job;
mod job_events;
mod job_store;
mod job_summary;
mod job_view;
mod map;
mod on_failure;
mod process_group;
mod progress;
mod retry;
mod template;
mod workflow;

pub use context::RunOptions;
pub use error::RunError;
pub use input::InputError;
pub use job::{start, JobReport};
pub use job_summary::{FailurePattern, JobSummary};
pub use progress::ProgressMode;
pub use template::TemplateError;
pub use workflow::WorkflowError;

pub(crate) use context::{DEFAULT_AGENT_COMMAND, DEFAULT_TOPIC};
pub(crate) use job::resume;
pub(crate) use job_store::{list_jobs, JobStore};
pub(crate) use job_view::{current_summary, item_events};
pub(crate) use retry::{retry_job, RetryJob, RetryOptions, RetryReport};

/// Reads and validates the workflow file at `path` as [`start`] does, running nothing: `dlq
/// run` checks it before it opens (and so creates) the data directory. With an input file and
/// no setup step (which could make the file), the items are selected and the agent template
/// checked against each of them too; an input command runs only once, in the job (which checks
/// its items before the first one runs).
pub(crate) async fn check_workflow(path: &std::path::Path) -> Result<(), RunError> {
    let workflow = workflow::Workflow::load(path)?;
    let workflow::Input::File(file) = &workflow.map.input else {
        return Ok(());
    };
    if !workflow.setup.is_empty() {
        return Ok(());
    }
    let base_dir = std::path::absolute(path)
        .ok()
        .and_then(|p| p.parent().map(std::path::Path::to_path_buf))
        .unwrap_or_else(|| std::path::PathBuf::from("."));
    let doc = input::load_input(input::InputSource::File(file), &base_dir, &workflow.env).await?;
    let map = &workflow.map;
    let items = input::select_items(&doc, &input::SelectOptions::of(map))?;
    workflow.check_items(&items)?;
    Ok(())
}

/// Parses and validates workflow YAML as `dlq run` does (the entry point of `crate::fuzzing`).
#[cfg(feature = "fuzzing")]
pub(crate) fn parse_workflow(text: &str) -> Result<(), WorkflowError> {
    workflow::Workflow::parse(text).map(|_| ())
}
