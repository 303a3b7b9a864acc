//! Starting and resuming jobs: setup, item selection, the map phase, reduce and the summary.
//!
//! [`start`] runs the setup steps, selects the work items, saves the job and runs it;
//! [`resume`] continues a saved job with its pending items (optionally re-running its
//! dead-lettered ones). Both end with [`JobReport`]: the counts, how the map phase ended and
//! whether reduce ran.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use chrono::Utc;
use serde::Serialize;
use tokio_util::sync::CancellationToken;

use super::agent::{run_agent, AgentSpec, AgentStatus};
use super::context::{step_env, JobContext, RunOptions};
use super::error::RunError;
use super::input::{load_input, select_items, InputSource, SelectOptions};
use super::job_events::JobEventKind;
use super::job_store::{
    default_job_id, jobs_dir, validate_job_id, JobRecord, JobStore, OutcomeRecord,
};
use super::job_summary::{JobSummary, Outcome, Tally};
use super::map::{run_map, MapEnd, Work};
use super::progress::{Progress, ProgressMode};
use super::workflow::{item_map_vars, Input, Isolation, Step, Workflow};
use dlq::bus::Bus;
use dlq::emitter::Emitter;
use dlq::sink::LocalSink;

/// How much of reduce's output a report carries.
const REDUCE_OUTPUT_BYTES: usize = 4096;

/// What a job session achieved.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct JobReport {
    /// The job.
    pub job_id: String,
    /// Counts, rate, error types and patterns (over the whole job, not only this session).
    pub summary: JobSummary,
    /// Why the map phase ended early, if it did (`interrupted` for Ctrl-C).
    pub stopped: Option<String>,
    /// The reduce phase: `None` when it did not run, else its result.
    pub reduce: Option<Result<(), String>>,
    /// The last 4 KiB of what reduce printed on stdout (the whole output is in the job's
    /// `reduce/stdout.log`).
    pub reduce_output: Option<String>,
    /// Dead-lettered items found in the DLQ without a recorded outcome (the runner was killed
    /// between the two) and recorded now instead of running again.
    pub recovered: u64,
}

impl JobReport {
    /// Whether everything ran and reduce (if any) succeeded.
    pub fn complete(&self) -> bool {
        self.stopped.is_none() && self.summary.pending == 0 && !matches!(self.reduce, Some(Err(_)))
    }
}

/// Runs a new job from the workflow file at `workflow_path`.
pub async fn start<B: Bus>(
    emitter: Emitter<LocalSink, B>,
    workflow_path: &Path,
    job_id: Option<String>,
    options: RunOptions,
    cancel: CancellationToken,
    mode: ProgressMode,
) -> Result<JobReport, RunError> {
    let workflow = Workflow::load(workflow_path)?;
    let workflow_path = absolute(workflow_path);
    let base_dir = workflow_path
        .parent()
        .map_or_else(|| PathBuf::from("."), Path::to_path_buf);
    let job_id = job_id.unwrap_or_else(|| default_job_id(&workflow.name));
    validate_job_id(&job_id)?;
    if jobs_dir(&options.data_dir)
        .join(&job_id)
        .join("job.json")
        .exists()
    {
        return Err(RunError::JobExists(job_id));
    }
    let scratch = jobs_dir(&options.data_dir).join(&job_id);
    run_steps(
        &workflow,
        &workflow.setup,
        &base_dir,
        &scratch.join("setup"),
        &BTreeMap::new(),
        &options,
        &cancel,
    )
    .await
    .map_err(|(step, message)| RunError::Setup { step, message })?;
    let source = match &workflow.map.input {
        Input::File(path) => InputSource::File(path),
        Input::Command(command) => InputSource::Command(command),
    };
    let doc = load_input(source, &base_dir, &workflow.env).await?;
    let map = &workflow.map;
    let items = select_items(&doc, &SelectOptions::of(map))?;
    // A field the agent template names and an item lacks: refused before the job is saved
    // and before any item runs (setup may have made the input, so this is the first chance).
    workflow.check_items(&items)?;
    let record = JobRecord {
        job_id: job_id.clone(),
        workflow,
        workflow_path,
        base_dir,
        created_at: Utc::now(),
        items,
    };
    let store = JobStore::create(&options.data_dir, &record)?;
    store.append_event(JobEventKind::SetupCompleted)?;
    let pending = (0..record.items.len())
        .map(|i| Work::new(i, false))
        .collect();
    let tally = Tally::new(record.items.len() as u64);
    run(Session {
        emitter,
        store,
        record,
        options,
        cancel,
        mode,
        pending,
        tally,
        recovered: 0,
        resumed: false,
    })
    .await
}

/// Continues a saved job: its pending items, and with `include_dlq_items` its items still in
/// the DLQ (those that succeed leave the DLQ through a `resolved` removal event).
pub(crate) async fn resume<B: Bus>(
    emitter: Emitter<LocalSink, B>,
    job_id: &str,
    include_dlq_items: bool,
    options: RunOptions,
    cancel: CancellationToken,
    mode: ProgressMode,
) -> Result<JobReport, RunError> {
    let (store, record) = JobStore::open(&options.data_dir, job_id)?;
    let mut latest: BTreeMap<String, OutcomeRecord> = BTreeMap::new();
    for outcome in store.outcomes()? {
        latest.insert(outcome.item_id.clone(), outcome);
    }
    let mut tally = Tally::new(record.items.len() as u64);
    for outcome in latest.values() {
        tally.record(&outcome.item_id, outcome.outcome);
        if let Some(error_type) = &outcome.error_type {
            tally.record_failure(
                &outcome.item_id,
                error_type,
                outcome.error.as_deref().unwrap_or(""),
            );
        }
    }
    let sink = emitter.sink();
    let mut pending = Vec::new();
    let mut recovered = 0;
    for (index, item) in record.items.iter().enumerate() {
        let in_dlq = sink.item(job_id, &item.id)?.is_some();
        match latest.get(&item.id).map(|o| o.outcome) {
            None if in_dlq && !include_dlq_items => {
                // Killed between the DLQ write and the outcome record: it already failed.
                let outcome = OutcomeRecord {
                    item_id: item.id.clone(),
                    outcome: Outcome::DeadLettered,
                    attempts: 0,
                    at: Utc::now(),
                    error_type: None,
                    error: Some("recovered from the DLQ on resume".into()),
                };
                store.append_outcome(&outcome)?;
                tally.record(&item.id, Outcome::DeadLettered);
                recovered += 1;
            }
            None => pending.push(Work::new(index, in_dlq)),
            Some(Outcome::DeadLettered) if include_dlq_items && in_dlq => {
                pending.push(Work::new(index, true));
            }
            Some(_) => {}
        }
    }
    run(Session {
        emitter,
        store,
        record,
        options,
        cancel,
        mode,
        pending,
        tally,
        recovered,
        resumed: true,
    })
    .await
}

/// A job session ready to run its map phase: the saved job, the handles it runs with and the
/// work left, as [`start`] and [`resume`] prepared them.
struct Session<B: Bus> {
    emitter: Emitter<LocalSink, B>,
    store: JobStore,
    record: JobRecord,
    options: RunOptions,
    cancel: CancellationToken,
    mode: ProgressMode,
    /// The items to run in this session.
    pending: Vec<Work>,
    /// The counts so far (a resumed job's earlier outcomes included).
    tally: Tally,
    /// Dead-lettered items recorded on resume instead of run again.
    recovered: u64,
    /// Whether this session resumes a saved job.
    resumed: bool,
}

/// Runs the map phase, then reduce, and writes the summary.
async fn run<B: Bus>(session: Session<B>) -> Result<JobReport, RunError> {
    let Session {
        emitter,
        store,
        record,
        options,
        cancel,
        mode,
        pending,
        mut tally,
        recovered,
        resumed,
    } = session;
    store.append_event(JobEventKind::JobStarted {
        workflow: record.workflow.name.clone(),
        total: record.items.len(),
        pending: pending.len(),
        resumed,
    })?;
    let map_vars = item_map_vars(record.items.len());
    let ctx = Arc::new(JobContext {
        emitter,
        store,
        record,
        options,
        cancel,
        map_vars,
    });
    ctx.export_counts(&tally);
    let mut progress = Progress::new(mode, pending.len() as u64);
    let end = run_map(&ctx, pending, &mut tally, &mut progress).await;
    progress.finish();
    let summary = tally.summary();
    let stopped = match end {
        MapEnd::Completed => None,
        MapEnd::Stopped(reason) => Some(reason),
        MapEnd::Interrupted => Some("interrupted".to_owned()),
    };
    let dir = ctx.store.dir().join("reduce");
    let reduce = if stopped.is_none() && !ctx.record.workflow.reduce.is_empty() {
        let workflow = &ctx.record.workflow;
        let result = run_steps(
            workflow,
            &workflow.reduce,
            &ctx.record.base_dir,
            &dir,
            &summary.map_vars(),
            &ctx.options,
            &ctx.cancel,
        )
        .await
        .map_err(|(step, message)| format!("step {step:?}: {message}"));
        if let Err(error) = &result {
            ctx.event(JobEventKind::ReduceFailed {
                error: error.clone(),
            });
        }
        Some(result)
    } else {
        None
    };
    let reduce_output = reduce.as_ref().and_then(|_| {
        let bytes = std::fs::read(dir.join("stdout.log")).ok()?;
        let tail = &bytes[bytes.len().saturating_sub(REDUCE_OUTPUT_BYTES)..];
        Some(String::from_utf8_lossy(tail).into_owned())
    });
    ctx.export_counts(&tally);
    ctx.store.write_summary(&summary)?;
    ctx.event(JobEventKind::JobFinished {
        summary: summary.clone(),
    });
    Ok(JobReport {
        job_id: ctx.record.job_id.clone(),
        summary,
        stopped,
        reduce,
        reduce_output,
        recovered,
    })
}

/// Runs setup or reduce steps once, in the workflow's directory; `Err((step, message))` on
/// the first failure.
async fn run_steps(
    workflow: &Workflow,
    steps: &[Step],
    base_dir: &Path,
    log_dir: &Path,
    map_vars: &BTreeMap<String, String>,
    options: &RunOptions,
    cancel: &CancellationToken,
) -> Result<(), (String, String)> {
    if steps.is_empty() {
        return Ok(());
    }
    let spec = AgentSpec {
        job_id: String::new(),
        item_id: String::new(),
        agent_id: "setup".into(),
        steps: steps.to_vec(),
        item: serde_json::Value::Null,
        map_vars: map_vars.clone(),
        env: step_env(workflow, base_dir),
        work_dir: log_dir.to_path_buf(),
        cwd: Some(base_dir.to_path_buf()),
        timeout: None,
        isolation: Isolation::None,
        repo_dir: base_dir.to_path_buf(),
        agent_command: options.agent_command.clone(),
    };
    let result = run_agent(&spec, cancel).await;
    match result.status {
        AgentStatus::Success => Ok(()),
        AgentStatus::Failed(message) => Err((result.step_failed.unwrap_or_default(), message)),
        AgentStatus::Timeout => Err((result.step_failed.unwrap_or_default(), "timed out".into())),
        AgentStatus::Cancelled => {
            Err((result.step_failed.unwrap_or_default(), "interrupted".into()))
        }
    }
}

fn absolute(path: &Path) -> PathBuf {
    std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf())
}
