//! One step of an agent: rendering it ([`prepare`]), the work dir and its output logs
//! ([`open_logs`]), the environment ([`base_env`]) and running the step's process
//! ([`run_step`]). Process groups, logs and the JSON log protocol are described in the parent
//! module doc.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::output::{failure_message, read_tail, scan_json_log, short_label};
use super::{AgentSpec, End, Observed, STDERR_TAIL_BYTES};
use crate::runner::process_group::{self, Ended};
use crate::runner::template::{render_shell, render_text, ItemVars, ShellCommand};
use crate::runner::workflow::Step;

/// A step ready to run: nothing left to render.
pub(super) enum Prepared {
    Shell(ShellCommand),
    Program(Vec<String>),
}

/// The output logs of an agent, opened for appending.
pub(super) struct Logs {
    pub(super) stdout: std::fs::File,
    pub(super) stderr: std::fs::File,
    pub(super) stdout_path: PathBuf,
    pub(super) stderr_path: PathBuf,
}

/// Where and how the steps run.
pub(super) struct StepIo<'a> {
    pub(super) cwd: &'a Path,
    pub(super) env: &'a [(OsString, OsString)],
    pub(super) logs: &'a Logs,
    pub(super) deadline: Option<Instant>,
    pub(super) cancel: &'a CancellationToken,
}

/// Renders every step; on error, the failing step's label and the message.
pub(super) fn prepare(spec: &AgentSpec) -> Result<Vec<Prepared>, (String, String)> {
    let vars = ItemVars {
        item: Some(&spec.item),
        map: &spec.map_vars,
    };
    let mut prepared = Vec::with_capacity(spec.steps.len());
    for step in &spec.steps {
        let fail = |message: String| (step.label(), message);
        prepared.push(match step {
            Step::Shell(t) => {
                Prepared::Shell(render_shell(t, &vars).map_err(|e| fail(e.to_string()))?)
            }
            Step::Claude(t) => {
                if spec.agent_command.is_empty() {
                    let hint =
                        "a claude step needs an agent command: set the workflow's agent command";
                    return Err(fail(hint.into()));
                }
                let prompt = render_text(t, &vars).map_err(|e| fail(e.to_string()))?;
                let mut argv = spec.agent_command.clone();
                argv.push(prompt);
                Prepared::Program(argv)
            }
        });
    }
    Ok(prepared)
}

/// Creates the work dir and opens its logs; returns the work dir made absolute.
pub(super) async fn open_logs(work_dir: &Path) -> std::io::Result<(PathBuf, Logs)> {
    let work_dir = std::path::absolute(work_dir)?;
    tokio::fs::create_dir_all(&work_dir).await?;
    let open = |path: PathBuf| async move {
        let file = tokio::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .await?;
        Ok::<_, std::io::Error>((file.into_std().await, path))
    };
    let (stdout, stdout_path) = open(work_dir.join("stdout.log")).await?;
    let (stderr, stderr_path) = open(work_dir.join("stderr.log")).await?;
    Ok((
        work_dir,
        Logs {
            stdout,
            stderr,
            stdout_path,
            stderr_path,
        },
    ))
}

/// The environment every process gets on top of ours: the workflow's, then the agent's ids.
pub(super) fn base_env(
    spec: &AgentSpec,
    work_dir: &Path,
    tree: Option<&Path>,
) -> Vec<(OsString, OsString)> {
    let mut env: Vec<(OsString, OsString)> =
        spec.env.iter().map(|(k, v)| (k.into(), v.into())).collect();
    env.push(("DLQ_JOB_ID".into(), spec.job_id.clone().into()));
    env.push(("DLQ_ITEM_ID".into(), spec.item_id.clone().into()));
    env.push(("DLQ_AGENT_ID".into(), spec.agent_id.clone().into()));
    env.push(("DLQ_WORK_DIR".into(), work_dir.into()));
    if let Some(tree) = tree {
        env.push(("DLQ_WORKTREE".into(), tree.into()));
    }
    env
}

/// Runs one prepared step to its end, killing its group on timeout or cancellation.
pub(super) async fn run_step(
    label: &str,
    prepared: &Prepared,
    io: &StepIo<'_>,
    p: &mut Observed,
) -> End {
    let out_start = io.logs.stdout.metadata().map_or(0, |m| m.len());
    let err_start = io.logs.stderr.metadata().map_or(0, |m| m.len());
    let mut cmd = match prepared {
        Prepared::Shell(shell) => {
            let mut cmd = tokio::process::Command::new("sh");
            cmd.arg("-c")
                .arg(&shell.script)
                .envs(io.env.iter().cloned());
            cmd.envs(shell.env.iter().map(|(k, v)| (k, v)));
            cmd
        }
        Prepared::Program(argv) => {
            let mut cmd = tokio::process::Command::new(argv.first().map_or("", String::as_str));
            cmd.args(argv.iter().skip(1)).envs(io.env.iter().cloned());
            cmd
        }
    };
    let (stdout, stderr) = match (io.logs.stdout.try_clone(), io.logs.stderr.try_clone()) {
        (Ok(out), Ok(err)) => (out, err),
        (Err(e), _) | (_, Err(e)) => return End::failed(format!("cannot share output logs: {e}")),
    };
    cmd.current_dir(io.cwd).stdout(stdout).stderr(stderr);
    let ended = match process_group::run(&mut cmd, io.deadline, io.cancel, &mut p.groups).await {
        Ok(ended) => ended,
        Err(e) => {
            let exit_code = (e.kind() == std::io::ErrorKind::NotFound).then_some(127);
            let message = format!("step \"{}\" could not start: {e}", short_label(label));
            return End::Failed { message, exit_code };
        }
    };
    if matches!(prepared, Prepared::Program(_)) {
        if let Some(location) = scan_json_log(&io.logs.stdout_path, out_start).await {
            p.json_log_location = Some(location);
        }
    }
    match ended {
        Ended::TimedOut => End::Timeout,
        Ended::Cancelled => End::Cancelled,
        Ended::Exited(Err(e)) => End::failed(format!(
            "step \"{}\" could not be waited for: {e}",
            short_label(label)
        )),
        Ended::Exited(Ok(status)) if status.success() => End::Success,
        Ended::Exited(Ok(status)) => {
            let tail = read_tail(&io.logs.stderr_path, err_start, STDERR_TAIL_BYTES).await;
            let (message, exit_code) = failure_message(label, status, tail.as_deref());
            End::Failed { message, exit_code }
        }
    }
}
