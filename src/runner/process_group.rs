//! Every process the runner starts (an agent's steps, the input command, git) runs as the
//! leader of a process group of its own, with stdin closed, so that a timeout, a cancellation
//! or the end of the leader kills it with everything it started (grandchildren included), and
//! nothing is left behind.
//!
//! The group id is the leader's pid. A group is signalled only while its id cannot have been
//! reused: before the leader is reaped, while members remain (a group id stays taken as long as
//! one member lives), or an instant after the leader was reaped, far too soon for the kernel to
//! hand the id to a new group.
//!
//! [`output`] runs a command whose output is read through pipes (the input command, git);
//! [`run`] runs an agent's step, whose output goes to files, and tracks the groups of an
//! agent in [`Groups`] so the agent can kill what its steps left running in the background.

use std::future::Future;
use std::process::{ExitStatus, Stdio};

use nix::errno::Errno;
use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use tokio::process::{Child, ChildStderr, ChildStdout, Command};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// Spawns `cmd` with stdin closed as the leader of a new process group, killed if its handle
/// is dropped; returns the child and its group (`None` if it already exited).
pub(super) fn spawn(cmd: &mut Command) -> std::io::Result<(Child, Option<Pid>)> {
    let child = cmd
        .stdin(Stdio::null())
        .process_group(0)
        .kill_on_drop(true)
        .spawn()?;
    let group = child
        .id()
        .and_then(|id| i32::try_from(id).ok())
        .map(Pid::from_raw);
    Ok((child, group))
}

/// SIGKILLs the whole group, if there is one; a group already gone is fine.
pub(super) fn kill_group(group: Option<Pid>) {
    if let Some(group) = group {
        let _ = killpg(group, Signal::SIGKILL);
    }
}

/// What a command run by [`output`] ended with.
pub(super) struct Output<O, E> {
    /// The leader's exit status.
    pub status: std::io::Result<ExitStatus>,
    /// What the stdout reader returned.
    pub stdout: O,
    /// What the stderr reader returned.
    pub stderr: E,
}

/// Runs `cmd` with stdout and stderr piped, reading them with `read_stdout` and `read_stderr`
/// while waiting for the leader. When the leader exits, what it left running in its group is
/// killed, so that a background process holding a pipe open cannot stall the reads.
/// `read_stdout` gets the group too, to kill it early (e.g. when the output is too large).
/// `Err` when the command could not be started.
///
/// Dropping the future (e.g. at a `tokio::time::timeout`) kills the whole group; the leader is
/// then reaped in the background.
pub(super) async fn output<O, E, FO, FE>(
    cmd: &mut Command,
    read_stdout: impl FnOnce(ChildStdout, Option<Pid>) -> FO,
    read_stderr: impl FnOnce(ChildStderr) -> FE,
) -> std::io::Result<Output<O, E>>
where
    FO: Future<Output = O>,
    FE: Future<Output = E>,
{
    let (mut child, group) = spawn(cmd.stdout(Stdio::piped()).stderr(Stdio::piped()))?;
    let mut guard = KillOnDrop(group);
    let (Some(stdout), Some(stderr)) = (child.stdout.take(), child.stderr.take()) else {
        return Err(std::io::Error::other("stdout/stderr not captured"));
    };
    let wait = async {
        let status = child.wait().await;
        guard.kill();
        status
    };
    let (status, stdout, stderr) =
        tokio::join!(wait, read_stdout(stdout, group), read_stderr(stderr));
    Ok(Output {
        status,
        stdout,
        stderr,
    })
}

/// Kills a group once: when told to, or when dropped before that.
struct KillOnDrop(Option<Pid>);

impl KillOnDrop {
    fn kill(&mut self) {
        kill_group(self.0.take());
    }
}

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        self.kill();
    }
}

/// How a step's process ended.
pub(super) enum Ended {
    /// The leader exited (or waiting for it failed).
    Exited(std::io::Result<ExitStatus>),
    /// The deadline passed; the group was killed.
    TimedOut,
    /// The token fired; the group was killed.
    Cancelled,
}

/// The process groups an agent started that may still have members.
#[derive(Default)]
pub(super) struct Groups(Vec<Pid>);

impl Groups {
    /// Kills `group` now and stops tracking it.
    fn kill(&mut self, group: Pid) {
        let _ = killpg(group, Signal::SIGKILL);
        self.0.retain(|g| *g != group);
    }

    /// Stops tracking `group` if nothing is left in it, so its id is never signalled after the
    /// kernel could have reused it.
    fn forget_if_empty(&mut self, group: Pid) {
        if killpg(group, None) == Err(Errno::ESRCH) {
            self.0.retain(|g| *g != group);
        }
    }

    /// Kills every tracked group: what the steps left running in the background.
    pub(super) fn kill_all(&mut self) {
        for group in self.0.drain(..) {
            let _ = killpg(group, Signal::SIGKILL);
        }
    }
}

impl Drop for Groups {
    fn drop(&mut self) {
        self.kill_all();
    }
}

/// Sleeps until `deadline`, or forever without one.
pub(super) async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline).await,
        None => std::future::pending().await,
    }
}

/// Spawns `cmd` as the leader of a new process group (tracked in `groups`) and waits for it
/// until `deadline` or `cancel`; then kills the whole group and reaps the leader. `Err` when
/// the process could not be started.
pub(super) async fn run(
    cmd: &mut Command,
    deadline: Option<Instant>,
    cancel: &CancellationToken,
    groups: &mut Groups,
) -> std::io::Result<Ended> {
    let (mut child, group) = spawn(cmd)?;
    if let Some(group) = group {
        groups.0.push(group);
    }
    let ended = tokio::select! {
        biased;
        status = child.wait() => Ended::Exited(status),
        () = sleep_until(deadline) => Ended::TimedOut,
        () = cancel.cancelled() => Ended::Cancelled,
    };
    if let Some(group) = group {
        // On timeout or cancellation the leader is not reaped yet, so the group id is ours.
        match ended {
            Ended::Exited(_) => groups.forget_if_empty(group),
            Ended::TimedOut | Ended::Cancelled => groups.kill(group),
        }
    }
    if matches!(ended, Ended::TimedOut | Ended::Cancelled) {
        if let Err(e) = child.wait().await {
            tracing::warn!(error = %e, "cannot reap a killed step");
        }
    }
    Ok(ended)
}
