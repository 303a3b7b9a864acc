//! Making sled durable: its `flush`, then what sled 0.34 leaves unsynced.
//!
//! sled's flush writes its log with `sync_file_range` on Linux: data pages reach the device,
//! but neither its volatile cache nor the file size are made durable, and blob files (large
//! values, large rewritten nodes) are never synced at all. [`SledFlusher::flush`] adds an
//! `fdatasync` of sled's log file and an fsync of every new blob file and their directory.
//!
//! The consumer store (`crate::consumer`) saves through the same [`SledFlusher`].
//!
//! A periodic checkpoint's flush runs on a thread of its own ([`BackgroundFlush`]) while the
//! writer goes on taking appends: a flush after a busy second took 100–200 ms, a stall of every
//! caller when the writer made it itself.

use std::collections::HashSet;
use std::ffi::OsString;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use thiserror::Error;
use tracing::debug;

use crate::sink::Faults;

/// Why a checkpoint (making sled durable) failed. The log keeps every event until one
/// succeeds. It is cloned for every caller waiting on the same checkpoint: a clone's
/// `io::Error` keeps the kind and the text of the original (like `sled::Error`'s clone).
#[derive(Debug, Error)]
pub enum CheckpointError {
    /// sled failed: its flush, or saving the publish state into it first.
    #[error("{0}")]
    Sled(#[from] sled::Error),
    /// The `fdatasync` of sled's log file failed.
    #[error("fdatasync of sled's log failed: {0}")]
    SyncLog(#[source] std::io::Error),
    /// The fsync of a new blob file (or of their directory) failed.
    #[error("fsync of a blob file failed: {0}")]
    SyncBlobs(#[source] std::io::Error),
    /// The publish state's lock was poisoned by a panic.
    #[error("the publish state is unavailable")]
    PublishStateUnavailable,
    /// The thread running a tick's flush panicked.
    #[error("the thread flushing sled panicked")]
    Panicked,
    /// A test injected the failure (`Faults`).
    #[error("injected flush fault")]
    Injected,
}

impl Clone for CheckpointError {
    fn clone(&self) -> Self {
        let io = |err: &std::io::Error| std::io::Error::new(err.kind(), err.to_string());
        match self {
            CheckpointError::Sled(err) => CheckpointError::Sled(err.clone()),
            CheckpointError::SyncLog(err) => CheckpointError::SyncLog(io(err)),
            CheckpointError::SyncBlobs(err) => CheckpointError::SyncBlobs(io(err)),
            CheckpointError::PublishStateUnavailable => CheckpointError::PublishStateUnavailable,
            CheckpointError::Panicked => CheckpointError::Panicked,
            CheckpointError::Injected => CheckpointError::Injected,
        }
    }
}

/// The flusher, shared by the writer (checkpoints it waits for) and a [`BackgroundFlush`].
pub(crate) type SharedFlusher = Arc<Mutex<SledFlusher>>;

/// Flushes now, on the calling thread.
pub(crate) fn flush_shared(flusher: &SharedFlusher) -> Result<(), CheckpointError> {
    flusher
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
        .flush()
}

/// A sled flush running on its own thread, and what its checkpoint may delete once it succeeded.
pub(crate) struct BackgroundFlush {
    handle: JoinHandle<Result<(), CheckpointError>>,
    /// Log segments through this sequence may go after the flush (0: none).
    pub(crate) removable: u64,
}

impl BackgroundFlush {
    /// Starts flushing everything applied to sled so far.
    pub(crate) fn start(
        flusher: &SharedFlusher,
        faults: &Faults,
        removable: u64,
    ) -> std::io::Result<Self> {
        let (flusher, faults) = (flusher.clone(), faults.clone());
        let handle = std::thread::Builder::new()
            .name("dlq-sink-flush".into())
            .spawn(move || {
                faults.wait_while_flush_paused();
                flush_shared(&flusher)
            })?;
        Ok(Self { handle, removable })
    }

    /// True once the flush ended (waiting for it then takes no time).
    pub(crate) fn is_finished(&self) -> bool {
        self.handle.is_finished()
    }

    /// Waits for the flush; its result.
    pub(crate) fn wait(self) -> Result<(), CheckpointError> {
        self.handle.join().unwrap_or(Err(CheckpointError::Panicked))
    }
}

/// Flushes one sled database durably.
pub(crate) struct SledFlusher {
    pub(crate) db: sled::Db,
    /// sled's log file, fdatasync'd after each flush.
    pub(crate) log_file: File,
    /// sled's blob directory; new blob files are fsync'd after each flush.
    pub(crate) blobs_dir: PathBuf,
    /// Blob files already fsync'd.
    pub(crate) synced_blobs: HashSet<OsString>,
    /// Told the path of every file just made durable (power-cut tests copy it aside).
    #[cfg(test)]
    pub(crate) on_sync: Option<SyncHook>,
}

/// What a power-cut test runs after each file this flusher made durable.
#[cfg(test)]
pub(crate) type SyncHook = Arc<dyn Fn(&Path) + Send + Sync>;

impl SledFlusher {
    /// The flusher of the sled database `db`, opened at `dir` (sled's log is `dir/db`, its
    /// blobs `dir/blobs`).
    pub(crate) fn open(db: sled::Db, dir: &Path) -> std::io::Result<Self> {
        Ok(SledFlusher {
            log_file: File::open(dir.join("db"))?,
            db,
            blobs_dir: dir.join("blobs"),
            synced_blobs: HashSet::new(),
            #[cfg(test)]
            on_sync: None,
        })
    }

    #[cfg(test)]
    fn synced(&self, path: &Path) {
        if let Some(hook) = &self.on_sync {
            hook(path);
        }
    }

    #[cfg(not(test))]
    fn synced(&self, _path: &Path) {}

    /// Makes everything applied to the database so far survive a crash.
    pub(crate) fn flush(&mut self) -> Result<(), CheckpointError> {
        let bytes = self.db.flush()?;
        self.log_file
            .sync_data()
            .map_err(CheckpointError::SyncLog)?;
        if let Some(dir) = self.blobs_dir.parent() {
            self.synced(&dir.join("db"));
        }
        self.sync_new_blobs().map_err(CheckpointError::SyncBlobs)?;
        debug!(bytes, "sink checkpoint");
        Ok(())
    }

    /// Fsyncs blob files not synced yet, then their directory.
    fn sync_new_blobs(&mut self) -> std::io::Result<()> {
        let entries = match std::fs::read_dir(&self.blobs_dir) {
            Ok(entries) => entries,
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(err) => return Err(err),
        };
        let mut present = HashSet::new();
        let mut synced_any = false;
        for entry in entries {
            let entry = entry?;
            let name = entry.file_name();
            if !self.synced_blobs.contains(&name) {
                match File::open(entry.path()) {
                    Ok(file) => {
                        file.sync_all()?;
                        self.synced(&entry.path());
                    }
                    // sled removed it in the meantime: nothing to make durable.
                    Err(err) if err.kind() == std::io::ErrorKind::NotFound => continue,
                    Err(err) => return Err(err),
                }
                synced_any = true;
            }
            present.insert(name);
        }
        if synced_any {
            File::open(&self.blobs_dir)?.sync_all()?;
        }
        self.synced_blobs = present;
        Ok(())
    }
}
