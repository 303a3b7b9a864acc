//! A sink's sled database opened directly, as tests do to rewrite it the way an older binary
//! left it.

use std::path::Path;
use std::time::Duration;

use dlq::sink::test_support::{open_waiting_for_lock, SLED_SEGMENT_SIZE};

/// How long [`open`] waits for the file lock (dlq's own opens wait a second).
const LOCK_WAIT: Duration = Duration::from_secs(10);

/// Opens the sled database of the sink in `dir`, with the sink's segment size. A sink closed
/// a moment ago in this process may still hold its file lock (sled's I/O threads drop their
/// handles after `close` returns), so a lock conflict is retried for up to ten seconds; any
/// other error panics.
pub fn open(dir: &Path) -> sled::Db {
    let config = sled::Config::new()
        .path(dir)
        .segment_size(SLED_SEGMENT_SIZE);
    open_waiting_for_lock(&config, LOCK_WAIT)
        .unwrap_or_else(|err| panic!("cannot open the sled database in {}: {err}", dir.display()))
}
