//! A sink's sled database opened directly, as tests do to rewrite it the way an older binary
//! left it.

use std::time::{Duration, Instant};

/// How long [`open`] waits for the file lock.
const LOCK_WAIT: Duration = Duration::from_secs(10);

/// Opens the database `config` names. A sink closed a moment ago in this process may still
/// hold its file lock (sled's I/O threads drop their handles after `close` returns; dlq's own
/// open retries for a second), so a lock conflict is retried for up to ten seconds; any other
/// error panics, naming the directory.
pub fn open(config: sled::Config) -> sled::Db {
    let started = Instant::now();
    loop {
        match config.open() {
            Ok(db) => return db,
            Err(err)
                if started.elapsed() < LOCK_WAIT
                    && err.to_string().contains("could not acquire lock") =>
            {
                std::thread::sleep(Duration::from_millis(50));
            }
            Err(err) => panic!("cannot open the sled database: {err}"),
        }
    }
}
