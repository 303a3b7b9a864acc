//! Runs one work item's steps as an agent: real processes, bounded in time, killed as a whole.
//!
//! The orchestrator hands [`run_agent`] an [`AgentSpec`] and gets back an [`AgentResult`] whose
//! message, exit code, stderr tail, JSON log location and worktree artifacts feed the
//! dead-letter entry of a failed item.
//!
//! **Processes.** Every step runs in its own process group with stdin closed. A `shell:` step is
//! `sh -c <script>`, rendered by [`crate::runner::template::render_shell`] so that item data reaches the
//! shell only as environment variables. A `claude:` step runs `agent_command` directly, with the
//! prompt (rendered by [`crate::runner::template::render_text`]) appended as one argv element; no shell is
//! involved. stdout and stderr are appended to `stdout.log` and `stderr.log` in the work
//! directory: files, not pipes, so a grandchild that keeps an output open cannot hang us. On
//! timeout or cancellation the step's whole group gets `SIGKILL` (grandchildren included) and
//! the shell is reaped. Processes a step leaves running in the background live on for the
//! following steps and are killed, group by group, when the agent ends, whatever the outcome,
//! and also if the `run_agent` future is dropped. A process that leaves its group (`setsid`)
//! escapes this.
//!
//! **Templates first.** Every step is rendered before anything starts, so a template error (a
//! missing field) fails the agent without side effects.
//!
//! **JSON log protocol.** An agent command reports where its JSON session log is by printing, on
//! its stdout, either a line `json_log_location: <path>` or a JSON object line with a string
//! field `json_log_location` (or `session_log`). The last such line of a `claude:` step wins,
//! and the last `claude:` step that reported one sets [`AgentResult::json_log_location`].
//!
//! **Isolation.** With [`Isolation::Worktree`] the steps run in a fresh git worktree of
//! `repo_dir` at `<work_dir>/worktree` on branch `dlq/<job_id>/<item_id>`. A successful agent's
//! worktree and branch are removed (its commits with them); a failed, timed out or cancelled
//! one's are kept and described in [`AgentResult::worktree`].

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::process_group::{sleep_until, Groups};
use super::workflow::{Isolation, Step};
use dlq::domain::model::WorktreeArtifacts;

mod output;
mod step;
mod worktree;

use output::read_tail;
use step::{base_env, open_logs, prepare, run_step, StepIo};

/// How many trailing bytes of stderr an [`AgentResult`] keeps.
pub(super) const STDERR_TAIL_BYTES: usize = 4096;

/// Everything needed to run one work item.
#[derive(Debug, Clone)]
pub(super) struct AgentSpec {
    /// The job the item belongs to (`DLQ_JOB_ID`, branch name).
    pub job_id: String,
    /// The work item's id (`DLQ_ITEM_ID`, branch name, sanitised).
    pub item_id: String,
    /// This agent's id (`DLQ_AGENT_ID`).
    pub agent_id: String,
    /// The steps, run in order until one fails.
    pub steps: Vec<Step>,
    /// The work item, for `${item...}` templates.
    pub item: serde_json::Value,
    /// `map.NAME` template variables.
    pub map_vars: BTreeMap<String, String>,
    /// The workflow's environment, set on every process.
    pub env: BTreeMap<String, String>,
    /// Created if missing; cwd of the steps (unless isolated or `cwd` is set) and home of
    /// the output logs.
    pub work_dir: PathBuf,
    /// Run the steps here instead of `work_dir` (setup and reduce run in the workflow's
    /// directory); ignored when isolated in a worktree.
    pub cwd: Option<PathBuf>,
    /// Time limit of the whole agent (all steps); `None` for no limit.
    pub timeout: Option<Duration>,
    /// Whether the steps run in a worktree of their own.
    pub isolation: Isolation,
    /// The repository worktrees are created from.
    pub repo_dir: PathBuf,
    /// Program and arguments of `claude:` steps; the prompt is appended as one argument.
    pub agent_command: Vec<String>,
}

/// How an agent ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum AgentStatus {
    /// Every step succeeded.
    Success,
    /// A step or the setup failed; the message says which and why.
    Failed(String),
    /// The time limit passed; every process was killed.
    Timeout,
    /// The cancellation token fired; every process was killed.
    Cancelled,
}

/// The outcome of one agent, for the orchestrator and the dead-letter entry.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct AgentResult {
    /// The work item's id.
    pub item_id: String,
    /// How the agent ended.
    pub status: AgentStatus,
    /// Exit code of the failing step; `128 + n` when killed by signal `n`.
    pub exit_code: Option<i32>,
    /// Last [`STDERR_TAIL_BYTES`] of this run's stderr, cut at a UTF-8 boundary.
    pub stderr_tail: Option<String>,
    /// Time the whole agent took, setup and cleanup included.
    pub duration: Duration,
    /// Label of the step that failed or was running (see [`Step::label`]).
    pub step_failed: Option<String>,
    /// The JSON log the agent command reported (see the module doc).
    pub json_log_location: Option<String>,
    /// The kept worktree of a failed isolated agent.
    pub worktree: Option<WorktreeArtifacts>,
}

/// Runs `spec`'s steps in order and reports how they went. Never fails: every problem becomes
/// an [`AgentStatus`].
pub(super) async fn run_agent(spec: &AgentSpec, cancel: &CancellationToken) -> AgentResult {
    let started = Instant::now();
    let deadline = spec.timeout.map(|t| started + t);
    let mut observed = Observed::default();
    let end = execute(spec, cancel, deadline, &mut observed).await;
    observed.groups.kill_all();
    let stderr_tail = match &observed.stderr_log {
        Some((path, start)) => read_tail(path, *start, STDERR_TAIL_BYTES).await,
        None => None,
    };
    let worktree = match observed.worktree.take() {
        Some(tree) if matches!(end, End::Success) => {
            if let Err(e) = tree.remove().await {
                tracing::warn!(path = %tree.path.display(), error = %e, "cannot remove worktree");
            }
            None
        }
        Some(tree) => Some(artifacts(&tree, stderr_tail.clone()).await),
        None => None,
    };
    let (status, exit_code) = match end {
        End::Success => (AgentStatus::Success, None),
        End::Failed { message, exit_code } => (AgentStatus::Failed(message), exit_code),
        End::Timeout => (AgentStatus::Timeout, None),
        End::Cancelled => (AgentStatus::Cancelled, None),
    };
    AgentResult {
        item_id: spec.item_id.clone(),
        step_failed: if status == AgentStatus::Success {
            None
        } else {
            observed.step_failed
        },
        status,
        exit_code,
        stderr_tail,
        duration: started.elapsed(),
        json_log_location: observed.json_log_location,
        worktree,
    }
}

/// How the steps ended, before the result is assembled.
enum End {
    Success,
    Failed {
        message: String,
        exit_code: Option<i32>,
    },
    Timeout,
    Cancelled,
}

impl End {
    fn failed(message: String) -> End {
        End::Failed {
            message,
            exit_code: None,
        }
    }
}

/// What [`execute`] observed on the way, kept whatever the outcome.
#[derive(Default)]
struct Observed {
    step_failed: Option<String>,
    json_log_location: Option<String>,
    /// `stderr.log` and its length when this run started (the work dir may hold earlier runs).
    stderr_log: Option<(PathBuf, u64)>,
    worktree: Option<worktree::Worktree>,
    groups: Groups,
}

async fn execute(
    spec: &AgentSpec,
    cancel: &CancellationToken,
    deadline: Option<Instant>,
    p: &mut Observed,
) -> End {
    let prepared = match prepare(spec) {
        Ok(prepared) => prepared,
        Err((label, message)) => {
            p.step_failed = Some(label);
            return End::failed(message);
        }
    };
    if cancel.is_cancelled() {
        return End::Cancelled;
    }
    let (work_dir, logs) = match open_logs(&spec.work_dir).await {
        Ok(opened) => opened,
        Err(e) => {
            let dir = spec.work_dir.display();
            return End::failed(format!("cannot prepare work dir {dir}: {e}"));
        }
    };
    p.stderr_log = logs
        .stderr
        .metadata()
        .ok()
        .map(|m| (logs.stderr_path.clone(), m.len()));
    if spec.isolation == Isolation::Worktree {
        p.step_failed = Some("worktree: create".into());
        let branch = worktree::branch_name(&spec.job_id, &spec.item_id);
        let path = work_dir.join("worktree");
        let created = tokio::select! {
            biased;
            created = worktree::create(&spec.repo_dir, &path, &branch) => created,
            () = sleep_until(deadline) => return End::Timeout,
            () = cancel.cancelled() => return End::Cancelled,
        };
        match created {
            Ok(tree) => p.worktree = Some(tree),
            Err(e) => return End::failed(format!("worktree: {e}")),
        }
    }
    let tree = p.worktree.as_ref().map(|t| t.path.clone());
    let env = base_env(spec, &work_dir, tree.as_deref());
    let cwd = tree.or_else(|| spec.cwd.clone()).unwrap_or(work_dir);
    let io = StepIo {
        cwd: &cwd,
        env: &env,
        logs: &logs,
        deadline,
        cancel,
    };
    for (step, prepared) in spec.steps.iter().zip(&prepared) {
        let label = step.label();
        p.step_failed = Some(label.clone());
        let end = run_step(&label, prepared, &io, p).await;
        if !matches!(end, End::Success) {
            return end;
        }
    }
    End::Success
}

/// Describes the kept worktree of a failed agent.
async fn artifacts(tree: &worktree::Worktree, error_logs: Option<String>) -> WorktreeArtifacts {
    let uncommitted_changes = tree.uncommitted_changes().await.unwrap_or_else(|e| {
        tracing::warn!(path = %tree.path.display(), error = %e, "cannot read worktree status");
        None
    });
    WorktreeArtifacts {
        worktree_path: tree.path.display().to_string(),
        branch_name: tree.branch.clone(),
        uncommitted_changes,
        error_logs,
    }
}

#[cfg(test)]
mod tests;
