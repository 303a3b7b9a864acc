//! Processes of a drill: the pinned executable the emitters run, signals, and blocking calls
//! into the test kit.
//!
//! nats-server (alone or as the three cluster nodes) is started by `dlq_testkit`, tied to this
//! process: if the drill runner dies, even by SIGKILL, no server outlives it. Emitter children
//! stop on their own when their stdin closes.

use std::path::{Path, PathBuf};
use std::process::Stdio;

use crate::{err, Res};

static EXE: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();

/// Pins this executable for the drill: a hard link (or copy) in `work`, so that children keep
/// running this very binary even if cargo rebuilds it meanwhile.
pub fn pin_exe(work: &Path) -> Res<()> {
    let exe = std::env::current_exe()?;
    let pinned = work.join("dlq-chaos");
    if std::fs::hard_link(&exe, &pinned).is_err() {
        std::fs::copy(&exe, &pinned)?;
    }
    let _ = EXE.set(pinned);
    Ok(())
}

/// The executable children are started from (pinned, else the current one).
pub fn exe() -> Res<PathBuf> {
    match EXE.get() {
        Some(path) => Ok(path.clone()),
        None => Ok(std::env::current_exe()?),
    }
}

/// Sends `SIG<name>` to `pid` with `kill(1)`.
pub fn signal(pid: u32, name: &str) -> Res<()> {
    let status = std::process::Command::new("kill")
        .arg(format!("-{name}"))
        .arg(pid.to_string())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()?;
    if status.success() {
        Ok(())
    } else {
        Err(err(format!("kill -{name} {pid} failed ({status})")))
    }
}

/// Runs a blocking call of the test kit (starting, restarting, freezing or thawing a server
/// waits up to tens of seconds) without stalling the runtime's other tasks: the subscriber,
/// the proxy and the readers of the emitters' output go on meanwhile.
pub fn blocking<T>(call: impl FnOnce() -> T) -> T {
    tokio::task::block_in_place(call)
}
