//! Step processes in process groups of their own, so that a timeout or a cancellation kills a
//! step with everything it started (grandchildren included), and nothing is left behind.
//!
//! The group id of a step is its leader's pid. A group is signalled only while its id cannot
//! have been reused: before the leader is reaped, or while members remain (a group id stays
//! taken as long as one member lives).

use std::process::ExitStatus;

use nix::errno::Errno;
use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use tokio::process::Command;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// How a step's process ended.
pub enum Ended {
    /// The leader exited (or waiting for it failed).
    Exited(std::io::Result<ExitStatus>),
    /// The deadline passed; the group was killed.
    TimedOut,
    /// The token fired; the group was killed.
    Cancelled,
}

/// The process groups this agent started that may still have members.
#[derive(Default)]
pub struct Groups(Vec<Pid>);

impl Groups {
    /// Kills `group` now and stops tracking it.
    pub fn kill(&mut self, group: Pid) {
        let _ = killpg(group, Signal::SIGKILL);
        self.0.retain(|g| *g != group);
    }

    /// Stops tracking `group` if nothing is left in it, so its id is never signalled after the
    /// kernel could have reused it.
    pub fn forget_if_empty(&mut self, group: Pid) {
        if killpg(group, None) == Err(Errno::ESRCH) {
            self.0.retain(|g| *g != group);
        }
    }

    /// Kills every tracked group: what the steps left running in the background.
    pub fn kill_all(&mut self) {
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
pub async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline).await,
        None => std::future::pending().await,
    }
}

/// The process group a child spawned with `process_group(0)` leads (its pid), if it has one.
pub fn group_of(child: &tokio::process::Child) -> Option<Pid> {
    child
        .id()
        .and_then(|id| i32::try_from(id).ok())
        .map(Pid::from_raw)
}

/// SIGKILLs the whole group, if there is one; a group already gone is fine.
pub fn kill_group(group: Option<Pid>) {
    if let Some(group) = group {
        let _ = killpg(group, Signal::SIGKILL);
    }
}

/// Spawns `cmd` as the leader of a new process group (tracked in `groups`) and waits for it
/// until `deadline` or `cancel`; then kills the whole group and reaps the leader. `Err` when
/// the process could not be started.
pub async fn run(
    cmd: &mut Command,
    deadline: Option<Instant>,
    cancel: &CancellationToken,
    groups: &mut Groups,
) -> std::io::Result<Ended> {
    let mut child = cmd.process_group(0).kill_on_drop(true).spawn()?;
    let group = group_of(&child);
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
