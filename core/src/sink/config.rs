//! How a data directory is opened ([`SinkConfig`]), and the limits and layout every part of
//! the sink shares: the largest value, the log's folder, the log's retention.

use std::path::PathBuf;
use std::time::Duration;

#[cfg(any(test, feature = "testing"))]
use super::log::sim::SimFs;
use super::log::LogConfig;

/// The log's directory inside the data directory.
pub const LOG_DIR: &str = "log";

/// Largest value (an event, or an item with its history) the sink stores.
pub(crate) const MAX_VALUE_BYTES: usize = 1 << 20;

/// How the local sink is opened.
#[derive(Debug, Clone)]
pub struct SinkConfig {
    /// Directory of the database (created if missing).
    pub path: PathBuf,
    /// Node id for new databases; must match an existing database's id when given.
    pub node_id: Option<String>,
    /// sled page cache size in bytes.
    pub cache_capacity_bytes: u64,
    /// Longest an append waits for durability before giving up (default 2 s).
    pub store_timeout: Duration,
    /// Most items per job before FIFO eviction (default 10,000).
    pub capacity_per_job: u64,
    /// Largest accepted event, in bytes (default 512 KiB, under NATS's 1 MiB payload limit;
    /// at most `MAX_VALUE_BYTES`).
    pub max_event_bytes: usize,
    /// Most requests the writer commits in one group.
    pub max_group: usize,
    /// Requests that may wait for the writer before appends queue up (backpressure).
    pub queue_depth: usize,
    /// How often the writer checkpoints (flushes sled, saves the publish state and deletes
    /// done log segments) when anything changed (default 1 s). Longer means fewer sled
    /// flushes and more of the log to apply again after a crash.
    pub checkpoint_every: Duration,
    /// A log segment is closed once it holds this many bytes (default 64 MiB).
    pub segment_bytes: u64,
    /// How long done log segments are kept, for `republish` and `verify`.
    pub log_retention: LogRetention,
    /// Test switch: the log on this simulated directory instead of the data directory's
    /// `log/` (crash tests build every crash state from its trace).
    #[cfg(any(test, feature = "testing"))]
    #[doc(hidden)]
    pub log_sim: Option<SimFs>,
    /// Test switch: acknowledge without the log's `fdatasync`. Only for proving that the crash
    /// tests see the loss; never set it otherwise.
    #[cfg(any(test, feature = "testing"))]
    #[doc(hidden)]
    pub unsafe_skip_log_fdatasync: bool,
}

impl SinkConfig {
    /// Defaults for a database in `path`.
    pub fn new(path: impl Into<PathBuf>) -> Self {
        SinkConfig {
            path: path.into(),
            node_id: None,
            cache_capacity_bytes: 64 * 1024 * 1024,
            store_timeout: Duration::from_secs(2),
            capacity_per_job: 10_000,
            max_event_bytes: 512 * 1024,
            max_group: 1024,
            queue_depth: 8192,
            checkpoint_every: Duration::from_secs(1),
            segment_bytes: 64 << 20,
            log_retention: LogRetention::default(),
            #[cfg(any(test, feature = "testing"))]
            log_sim: None,
            #[cfg(any(test, feature = "testing"))]
            unsafe_skip_log_fdatasync: false,
        }
    }

    /// How the log is run: its segment size (and, in tests, the switch that skips its
    /// `fdatasync`).
    // Without the `testing` feature every field is set and the update is a no-op.
    #[allow(clippy::needless_update)]
    pub(crate) fn log_config(&self) -> LogConfig {
        LogConfig {
            segment_bytes: self.segment_bytes,
            #[cfg(any(test, feature = "testing"))]
            unsafe_skip_fdatasync: self.unsafe_skip_log_fdatasync,
            ..LogConfig::default()
        }
    }

    /// True when the log is on a simulated directory (crash tests), not in the data directory.
    pub(crate) fn simulated_log(&self) -> bool {
        #[cfg(any(test, feature = "testing"))]
        let simulated = self.log_sim.is_some();
        #[cfg(not(any(test, feature = "testing")))]
        let simulated = false;
        simulated
    }
}

/// Retention of done log segments.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogRetention {
    /// Done segments older than this are deleted (default 7 days).
    pub max_age: Duration,
    /// Done segments are deleted, oldest first, while the log is larger (default 1 GiB).
    pub max_bytes: u64,
}

impl Default for LogRetention {
    fn default() -> Self {
        Self {
            max_age: Duration::from_secs(7 * 24 * 3600),
            max_bytes: 1 << 30,
        }
    }
}
