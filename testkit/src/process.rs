//! Child processes that cannot outlive this one, and reading their state and logs.

use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command};
use std::sync::{mpsc, Mutex, OnceLock};

use nix::sys::signal::Signal;

/// Spawns `cmd` so that the child gets SIGKILL if this process dies (even by SIGKILL or a
/// test timeout, when no `Drop` runs). `PR_SET_PDEATHSIG` fires when the *thread* that forked
/// the child exits, so every child is forked by one spawner thread that lives as long as the
/// process. Use it for any long-running child: nats-server, the `dlq` binary itself.
pub fn spawn_tied(mut cmd: Command) -> std::io::Result<Child> {
    type Job = (Command, mpsc::Sender<std::io::Result<Child>>);
    static SPAWNER: OnceLock<Mutex<mpsc::Sender<Job>>> = OnceLock::new();
    // SAFETY: prctl is async-signal-safe and touches no memory of the parent.
    unsafe {
        cmd.pre_exec(|| {
            nix::sys::prctl::set_pdeathsig(Signal::SIGKILL).map_err(std::io::Error::from)
        });
    }
    let spawner = SPAWNER.get_or_init(|| {
        let (tx, rx) = mpsc::channel::<Job>();
        std::thread::spawn(move || {
            rx.into_iter().for_each(|(mut c, reply)| {
                let _ = reply.send(c.spawn());
            })
        });
        Mutex::new(tx)
    });
    let (reply_tx, reply_rx) = mpsc::channel();
    let gone = || std::io::Error::other("the spawner thread is gone");
    spawner
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .send((cmd, reply_tx))
        .map_err(|_| gone())?;
    reply_rx.recv().map_err(|_| gone())?
}

/// The state letter from `/proc/PID/stat` (`R`, `S`, `T` stopped, `Z` zombie, ...).
pub fn proc_state(pid: u32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(')')?.1.trim_start().chars().next()
}

/// What a file holds from byte `offset` on (what a process logged since then).
pub fn read_from(path: &Path, offset: u64) -> String {
    let bytes = std::fs::read(path).unwrap_or_default();
    let start = usize::try_from(offset)
        .unwrap_or(usize::MAX)
        .min(bytes.len());
    String::from_utf8_lossy(&bytes[start..]).into_owned()
}

/// The last `lines` lines of a file (for failure messages); empty if it cannot be read.
pub fn tail(path: &Path, lines: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}
