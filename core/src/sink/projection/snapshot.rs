//! Making sled's snapshot current when a process that wrote is done with the data directory.
//!
//! sled 0.34 writes its snapshot (its page table) only while opening (`advance_snapshot`, from
//! `PageCache::start`): the first open after a process that wrote replays everything that
//! process wrote since its own open, 3.7–8.4 s after generating 1M items (docs/benchmarks.md,
//! "What opens sled"). [`refresh_snapshot`] opens the database once more at the end of such a
//! process, so the replay happens there and the next command opens from a current snapshot.
//! The CLI calls it at the end of `dlq generate`, `dlq run` / `resume`, `dlq retry` and
//! `dlq serve` (`cli::open::refresh_snapshot`), once the process holds no handle of the sink.

use tracing::debug;

use crate::sink::projection::sled_open::open_db;
use crate::sink::{SinkConfig, SinkError};

/// Opens the sink's sled database once more and closes it, so that sled writes a current
/// snapshot. Call it after every handle of the sink in this process is dropped (the sink
/// closed, its emitter shut down); it costs what the next open would otherwise pay. A
/// directory without a database is left alone.
pub fn refresh_snapshot(config: &SinkConfig) -> Result<(), SinkError> {
    if !config.path.join("db").exists() {
        return Ok(());
    }
    let db = open_db(config)?;
    drop(db);
    debug!(path = %config.path.display(), "sled's snapshot made current");
    Ok(())
}
