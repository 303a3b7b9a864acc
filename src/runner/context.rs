//! What every task of a running job shares: the emitter, the job's record and store, the
//! options and the cancellation token.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use tokio_util::sync::CancellationToken;
use tracing::warn;

use super::agent::AgentSpec;
use super::input::WorkItem;
use super::job_events::JobEventKind;
use super::job_store::{JobRecord, JobStore};
use super::job_summary::{Outcome, Tally};
use super::workflow::{Step, Workflow};
use dlq::bus::Bus;
use dlq::emitter::Emitter;
use dlq::metrics as m;
use dlq::sink::LocalSink;

/// The command `claude:` steps run when neither the config nor `DLQ_AGENT_COMMAND` says
/// otherwise: Claude Code in print mode; the prompt is appended as one argument.
pub(crate) const DEFAULT_AGENT_COMMAND: &str = "claude --print";

/// The topic failed items are dead-lettered under (per-topic retry settings apply).
pub(crate) const DEFAULT_TOPIC: &str = "mapreduce";

/// Options of a run that are not part of the workflow.
#[derive(Debug, Clone)]
pub struct RunOptions {
    /// The data directory (sink and job state).
    pub data_dir: PathBuf,
    /// Program and arguments for `claude:` steps.
    pub agent_command: Vec<String>,
    /// DLQ topic.
    pub topic: String,
}

impl RunOptions {
    /// Defaults for a data directory.
    pub fn new(data_dir: impl Into<PathBuf>) -> Self {
        RunOptions {
            data_dir: data_dir.into(),
            agent_command: DEFAULT_AGENT_COMMAND
                .split(' ')
                .map(str::to_owned)
                .collect(),
            topic: DEFAULT_TOPIC.to_owned(),
        }
    }
}

/// Shared state of a running job.
pub(super) struct JobContext<B: Bus> {
    /// Where failures go.
    pub emitter: Emitter<LocalSink, B>,
    /// The job's state on disk.
    pub store: JobStore,
    /// The job.
    pub record: JobRecord,
    /// Run options.
    pub options: RunOptions,
    /// Fired on Ctrl-C / SIGTERM: agents are killed, their items stay pending.
    pub cancel: CancellationToken,
    /// `${map.*}` values available to templates.
    pub map_vars: BTreeMap<String, String>,
}

impl<B: Bus> JobContext<B> {
    /// Records a job event; a failure to write it is logged, never fatal.
    pub(super) fn event(&self, kind: JobEventKind) {
        if let Err(err) = self.store.append_event(kind) {
            warn!(error = %err, "could not write a job event");
        }
    }

    /// The agent spec that runs `steps` for `item`.
    pub(super) fn agent_spec(&self, item: &WorkItem, steps: &[Step]) -> AgentSpec {
        let workflow = &self.record.workflow;
        AgentSpec {
            job_id: self.record.job_id.clone(),
            item_id: item.id.clone(),
            agent_id: super::convert::agent_id(&item.id),
            steps: steps.to_vec(),
            item: item.data.clone(),
            map_vars: self.map_vars.clone(),
            env: step_env(workflow, &self.record.base_dir),
            work_dir: self.store.agent_dir(&item.id),
            cwd: None,
            timeout: workflow
                .map
                .agent_timeout_secs
                .map(std::time::Duration::from_secs),
            isolation: workflow.map.isolation,
            repo_dir: self.record.base_dir.clone(),
            agent_command: self.options.agent_command.clone(),
        }
    }

    /// Removes an item of this job from the DLQ because it now succeeded (a `resolved`
    /// removal event naming `by`, the operator whose retry it was), durably; the removal is
    /// published in the background. An item already gone is not an error.
    pub(super) async fn remove_resolved(
        &self,
        item_id: &str,
        by: Option<&dlq::domain::event::RemovedBy>,
    ) -> Result<(), dlq::emitter::EmitError> {
        let command = dlq::domain::command::Command::Remove {
            job_id: self.record.job_id.clone(),
            item_id: item_id.to_owned(),
            reason: dlq::domain::event::RemovalReason::Resolved,
            by: by.cloned(),
        };
        match self
            .emitter
            .submit_stored(&self.options.topic, command)
            .await
        {
            Ok(_) | Err(dlq::emitter::EmitError::NotFound { .. }) => Ok(()),
            Err(err) => Err(err),
        }
    }

    /// Exports the job's counts as Prometheus gauges.
    pub(super) fn export_counts(&self, tally: &Tally) {
        let job = self.record.job_id.clone();
        for (outcome, value) in [
            ("succeeded", tally.count(Outcome::Succeeded)),
            ("dead_lettered", tally.count(Outcome::DeadLettered)),
            ("skipped", tally.count(Outcome::Skipped)),
            ("pending", tally.pending()),
        ] {
            metrics::gauge!(m::JOB_ITEMS, "job_id" => job.clone(), "outcome" => outcome)
                .set(value as f64);
        }
        metrics::gauge!(m::JOB_FAILURE_RATE, "job_id" => job).set(tally.failure_rate());
    }
}

/// The environment of every step: the workflow's `env` and `DLQ_WORKFLOW_DIR`, the directory
/// relative paths of the workflow resolve against.
pub(super) fn step_env(workflow: &Workflow, base_dir: &Path) -> BTreeMap<String, String> {
    let mut env = workflow.env.clone();
    env.insert("DLQ_WORKFLOW_DIR".into(), base_dir.display().to_string());
    env
}
