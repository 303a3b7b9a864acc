//! Opening a sled database while this process's previous handle of it lets go of its lock.
//!
//! sled's I/O threads can hold a database's file lock for a moment after the last handle of a
//! previous open in this process was dropped (a sink closed, or a consumer store dropped, just
//! before it is opened again), so a lock conflict is retried for a short while. A lock another
//! process holds still fails, once the wait is over.

use std::time::{Duration, Instant};

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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

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
