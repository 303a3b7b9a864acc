//! Opening a sled database while this process's previous handle of it lets go of its lock.
//!
//! sled's I/O threads can hold a database's file lock for a moment after the last handle of a
//! previous open in this process was dropped (a sink closed, or a consumer store dropped, just
//! before it is opened again), so a lock conflict is retried for a short while. A lock another
//! process holds still fails, once the wait is over. The sink's own database is opened here
//! too ([`open_db`]), with the segment size and the hints its errors give.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::{Duration, Instant};

use crate::error_class::Cause;
use crate::sink::{SinkConfig, SinkError};

/// How long dlq's own opens retry a lock conflict.
pub(crate) const LOCK_WAIT: Duration = Duration::from_secs(1);

/// `config.open()`, retrying a lock conflict for up to `wait`.
pub fn open_waiting_for_lock(config: &sled::Config, wait: Duration) -> sled::Result<sled::Db> {
    let started = Instant::now();
    loop {
        match config.open() {
            Err(err) if is_lock_conflict(&err) && started.elapsed() < wait => {
                std::thread::sleep(Duration::from_millis(50));
            }
            opened => return opened,
        }
    }
}

/// Whether `err` says another handle holds the database's file lock.
pub(crate) fn is_lock_conflict(err: &sled::Error) -> bool {
    err.to_string().contains("could not acquire lock")
}

/// sled segment size. sled 0.34 stores values larger than a quarter segment as separate blob
/// files that it never fsyncs; with 8 MiB segments that threshold (2 MiB) is far above
/// [`crate::sink::MAX_VALUE_BYTES`], so every accepted value lives in the log that we fsync.
pub const SEGMENT_SIZE: usize = 8 << 20;
pub(crate) const LOCK_HINT: &str = "Another process holds this data directory: stop it, or point --data-dir elsewhere (`dlq serve` and `dlq run` hold it while they run).";
/// The hint of an open that failed because the disk is full: nothing to recover.
pub(crate) const SPACE_HINT: &str = "The data directory's filesystem is full (or over its quota): free space there and run the command again. Nothing was changed and nothing needs moving.";
/// The hint of an open that failed because the data directory cannot be written.
pub(crate) const NOT_WRITABLE_HINT: &str = "The data directory cannot be written (a read-only filesystem or missing permissions): make it writable and run the command again. Nothing was changed and nothing needs moving.";
pub(crate) const RECOVERY_HINT: &str = "Nothing was changed. Keep log/ (the events) and move sled's files aside: db, conf, blobs/ and every snap.* file. The next open rebuilds the projection from log/ under the same node id and publishes every event again (the stream and consumers drop duplicates by id); items older than the log's retention, kept whole only in sled, are then only in the NATS stream. See docs/operations.md, 'Recovering a data directory'.";

/// Opens the sink's sled database; a panic of sled while recovering becomes an error.
pub(crate) fn open_db(config: &SinkConfig) -> Result<sled::Db, SinkError> {
    let open_error = |reason: String, hint, source: Option<Cause>| SinkError::Open {
        path: config.path.clone(),
        reason,
        hint,
        source,
    };
    std::fs::create_dir_all(&config.path).map_err(|err| {
        open_error(
            err.to_string(),
            "Check that the directory is writable.",
            Some(err.into()),
        )
    })?;
    let sled_config = sled::Config::new()
        .path(&config.path)
        .cache_capacity(config.cache_capacity_bytes)
        .segment_size(SEGMENT_SIZE)
        .flush_every_ms(None);
    // sled 0.34 has been reported to panic on some damaged databases (issues 1527, 1533):
    // a panic while opening becomes an error with a recovery path, never a crash.
    let opened = catch_unwind(AssertUnwindSafe(|| {
        open_waiting_for_lock(&sled_config, LOCK_WAIT)
    }));
    match opened {
        Ok(Ok(db)) => Ok(db),
        Ok(Err(err)) => {
            let hint = open_hint(&err);
            Err(open_error(err.to_string(), hint, Some(err.into())))
        }
        Err(_) => Err(open_error(
            "sled panicked while recovering".into(),
            RECOVERY_HINT,
            None,
        )),
    }
}

/// What an operator should do about a failed open of sled: a held lock, a full or read-only
/// disk (the directory is fine: retry once that is fixed) or, for anything else, recovery.
fn open_hint(err: &sled::Error) -> &'static str {
    match err {
        _ if is_lock_conflict(err) => LOCK_HINT,
        sled::Error::Io(io) => io_hint(io).unwrap_or(RECOVERY_HINT),
        _ => RECOVERY_HINT,
    }
}

/// The hint for an I/O error of an open that says nothing about the directory's contents: a
/// full disk or one that cannot be written. `None`: the recovery hint applies.
pub(crate) fn io_hint(err: &std::io::Error) -> Option<&'static str> {
    use std::io::ErrorKind;
    match err.kind() {
        ErrorKind::StorageFull | ErrorKind::QuotaExceeded => Some(SPACE_HINT),
        ErrorKind::ReadOnlyFilesystem | ErrorKind::PermissionDenied => Some(NOT_WRITABLE_HINT),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// A full or read-only disk is not a damaged directory: the hint says to fix the disk and
    /// retry, never to move sled's files aside (which would rebuild the projection for nothing
    /// and leave older items only in the stream). Seen in a drill with the real binary on a
    /// full tmpfs, where the open advised exactly that.
    #[test]
    fn a_full_or_read_only_disk_is_not_sent_to_recovery() {
        let os = |code| sled::Error::Io(std::io::Error::from_raw_os_error(code));
        assert_eq!(open_hint(&os(28)), SPACE_HINT, "ENOSPC");
        assert_eq!(open_hint(&os(122)), SPACE_HINT, "EDQUOT");
        assert_eq!(open_hint(&os(30)), NOT_WRITABLE_HINT, "EROFS");
        assert_eq!(open_hint(&os(13)), NOT_WRITABLE_HINT, "EACCES");
        assert_eq!(open_hint(&os(5)), RECOVERY_HINT, "EIO");
        let unsupported = sled::Error::Unsupported("a newer format".into());
        assert_eq!(open_hint(&unsupported), RECOVERY_HINT);
    }

    #[test]
    fn a_held_lock_fails_once_the_wait_is_over_and_is_waited_out_when_let_go() {
        let dir = tempfile::tempdir().unwrap();
        let config = sled::Config::new().path(dir.path());
        let held = config.open().unwrap();
        let err = open_waiting_for_lock(&config, Duration::ZERO).unwrap_err();
        assert!(is_lock_conflict(&err), "{err}");
        let letting_go = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(200));
            drop(held);
        });
        open_waiting_for_lock(&config, Duration::from_secs(30)).unwrap();
        letting_go.join().unwrap();
    }
}
