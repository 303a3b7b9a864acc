//! Who holds a data directory, and how to reach it.
//!
//! sled lets one process open a database (it takes an exclusive `flock` on the `db` file). A
//! running `dlq serve` announces itself in `<data_dir>/serve.json` ([`ServeFile`]), written
//! atomically after the sink is open and removed before it is closed, so the CLI can send its
//! request to that API instead. For a holder without an API, [`lock_holder`] finds the process
//! from `/proc/locks` (or, failing that, from the open files under `/proc/*/fd`) so that the
//! error can name it.

use std::io::Write;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// Name of the announcement file inside the data directory.
pub const STATE_FILE: &str = "serve.json";

/// What a running `dlq serve` writes into its data directory.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServeFile {
    /// Base URL of the API, e.g. `http://127.0.0.1:9465`.
    pub url: String,
    /// Process id of the server.
    pub pid: u32,
    /// Whether the API wants a bearer token.
    pub token_required: bool,
}

impl ServeFile {
    /// The path of the file for `data_dir`.
    pub fn path(data_dir: &Path) -> PathBuf {
        data_dir.join(STATE_FILE)
    }

    /// Reads the announcement of `data_dir`; `None` when there is none or it is unreadable.
    pub fn read(data_dir: &Path) -> Option<ServeFile> {
        let text = std::fs::read(Self::path(data_dir)).ok()?;
        serde_json::from_slice(&text).ok()
    }

    /// The announcement, if its process is still alive.
    pub fn read_live(data_dir: &Path) -> Option<ServeFile> {
        Self::read(data_dir).filter(|file| pid_alive(file.pid))
    }

    /// Writes the file to a temporary sibling, syncs it and renames it into place.
    pub fn write(&self, data_dir: &Path) -> std::io::Result<()> {
        let path = Self::path(data_dir);
        let temp = data_dir.join(format!(".{STATE_FILE}.tmp-{}", std::process::id()));
        let write = || -> std::io::Result<()> {
            let mut file = std::fs::File::create(&temp)?;
            file.write_all(&serde_json::to_vec_pretty(self)?)?;
            file.sync_all()?;
            std::fs::rename(&temp, &path)
        };
        write().inspect_err(|_| {
            let _ = std::fs::remove_file(&temp);
        })
    }

    /// Removes the announcement of `data_dir` (no error if it is already gone).
    pub fn remove(data_dir: &Path) -> std::io::Result<()> {
        match std::fs::remove_file(Self::path(data_dir)) {
            Err(err) if err.kind() != std::io::ErrorKind::NotFound => Err(err),
            _ => Ok(()),
        }
    }
}

/// Whether a process with this id exists (signal 0; "permission denied" still means alive).
pub fn pid_alive(pid: u32) -> bool {
    let Ok(raw) = i32::try_from(pid) else {
        return false;
    };
    if raw <= 0 {
        return false;
    }
    match nix::sys::signal::kill(nix::unistd::Pid::from_raw(raw), None) {
        Ok(()) => true,
        Err(errno) => errno == nix::errno::Errno::EPERM,
    }
}

/// A process holding a data directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Holder {
    /// Its process id.
    pub pid: u32,
    /// Its command line, when readable.
    pub command: Option<String>,
}

impl std::fmt::Display for Holder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.command {
            Some(command) => write!(f, "pid {} (`{command}`)", self.pid),
            None => write!(f, "pid {}", self.pid),
        }
    }
}

/// The process holding the sled lock of `data_dir`, if it can be found.
pub fn lock_holder(data_dir: &Path) -> Option<Holder> {
    let db = data_dir.join("db");
    let pid = std::fs::metadata(&db)
        .ok()
        .and_then(|meta| {
            let locks = std::fs::read_to_string("/proc/locks").ok()?;
            flock_owner(&locks, meta.dev(), meta.ino())
        })
        .or_else(|| open_by(&db))?;
    Some(Holder {
        pid,
        command: command_line(pid),
    })
}

/// The pid of the `FLOCK` entry of `/proc/locks` on the file `(dev, ino)`. Pure, for tests.
pub fn flock_owner(locks: &str, dev: u64, ino: u64) -> Option<u32> {
    let (major, minor) = split_dev(dev);
    let wanted = format!("{major:02x}:{minor:02x}:{ino}");
    locks.lines().find_map(|line| {
        // `1: FLOCK  ADVISORY  WRITE 4242 fe:00:5406794 0 EOF`; waiters have a `->` after `1:`.
        let fields: Vec<&str> = line.split_whitespace().filter(|f| *f != "->").collect();
        match fields.as_slice() {
            [_, "FLOCK", _, _, pid, file, ..] if *file == wanted => pid.parse().ok(),
            _ => None,
        }
    })
}

/// Major and minor numbers of a Linux `dev_t` (glibc's encoding).
fn split_dev(dev: u64) -> (u64, u64) {
    let major = ((dev >> 8) & 0xfff) | ((dev >> 32) & !0xfff);
    let minor = (dev & 0xff) | ((dev >> 12) & !0xff);
    (major, minor)
}

/// A process other than this one with `file` open, from `/proc/*/fd` (only processes of the
/// same user are visible).
fn open_by(file: &Path) -> Option<u32> {
    let file = file.canonicalize().ok()?;
    let me = std::process::id();
    std::fs::read_dir("/proc")
        .ok()?
        .flatten()
        .find_map(|entry| {
            let pid: u32 = entry.file_name().to_str()?.parse().ok()?;
            if pid == me {
                return None;
            }
            let fds = std::fs::read_dir(entry.path().join("fd")).ok()?;
            fds.flatten()
                .any(|fd| std::fs::read_link(fd.path()).is_ok_and(|target| target == file))
                .then_some(pid)
        })
}

/// The command line of `pid`, arguments joined by spaces (at most 200 characters).
fn command_line(pid: u32) -> Option<String> {
    let raw = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    let words: Vec<String> = raw
        .split(|b| *b == 0)
        .filter(|w| !w.is_empty())
        .map(|w| String::from_utf8_lossy(w).into_owned())
        .collect();
    let mut text = words.join(" ");
    if text.is_empty() {
        return None;
    }
    if text.chars().count() > 200 {
        text = text.chars().take(200).collect::<String>() + "...";
    }
    Some(text)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_flock_owner_by_device_and_inode() {
        let locks = "1: POSIX  ADVISORY  WRITE 10 fe:00:77 0 EOF\n\
                     2: FLOCK  ADVISORY  WRITE 4242 fe:00:5406794 0 EOF\n\
                     2: -> FLOCK  ADVISORY  WRITE 5151 fe:00:5406794 0 EOF\n";
        assert_eq!(flock_owner(locks, 0xfe00, 5406794), Some(4242));
        assert_eq!(flock_owner(locks, 0xfe01, 5406794), None);
        assert_eq!(
            flock_owner(locks, 0xfe00, 77),
            None,
            "POSIX locks are not sled's"
        );
    }

    #[test]
    fn serve_file_round_trips_and_a_dead_pid_is_not_live() {
        let dir = tempfile::tempdir().unwrap();
        let file = ServeFile {
            url: "http://127.0.0.1:9465".into(),
            pid: std::process::id(),
            token_required: true,
        };
        file.write(dir.path()).unwrap();
        assert_eq!(ServeFile::read_live(dir.path()), Some(file.clone()));
        let dead = ServeFile {
            pid: i32::MAX as u32,
            ..file
        };
        dead.write(dir.path()).unwrap();
        assert_eq!(ServeFile::read(dir.path()), Some(dead));
        assert_eq!(ServeFile::read_live(dir.path()), None);
        ServeFile::remove(dir.path()).unwrap();
        ServeFile::remove(dir.path()).unwrap();
        assert_eq!(ServeFile::read(dir.path()), None);
    }

    #[test]
    fn finds_this_process_holding_the_sled_lock() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(lock_holder(dir.path()), None, "no db file yet");
        let db = sled::Config::new().path(dir.path()).open().unwrap();
        let holder = lock_holder(dir.path()).unwrap();
        assert_eq!(holder.pid, std::process::id());
        assert!(holder.to_string().starts_with("pid "), "{holder}");
        drop(db);
    }
}
