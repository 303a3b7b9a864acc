//! Retention: items first failed more than `retention_days` ago are purged, as events.

use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::domain::command::Command;
use crate::sink::{Sink, SinkError};

/// Items removed per command while purging, so one huge purge never becomes one huge batch.
pub const PURGE_CHUNK: usize = 1000;

/// How long items are kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RetentionConfig {
    /// Items first failed longer ago than this many days are purged; `None` keeps them forever.
    pub retention_days: Option<u32>,
    /// How often the check runs.
    #[serde(with = "humantime_serde")]
    pub check_interval: Duration,
}

impl Default for RetentionConfig {
    fn default() -> Self {
        RetentionConfig {
            retention_days: Some(30),
            check_interval: Duration::from_secs(3600),
        }
    }
}

impl RetentionConfig {
    /// The cutoff for `now`: items first failed before it are expired.
    pub fn cutoff(&self, now: DateTime<Utc>) -> Option<DateTime<Utc>> {
        self.retention_days
            .map(|days| now - chrono::Duration::days(i64::from(days)))
    }
}

/// Removes every item first failed before `cutoff` (optionally of one job), in chunks, each
/// removal an `item_removed` event with reason `purged`. Returns how many were removed.
pub async fn purge<S: Sink>(
    sink: &S,
    cutoff: DateTime<Utc>,
    job_id: Option<&str>,
) -> Result<u64, SinkError> {
    let mut removed = 0;
    loop {
        let command = Command::Purge {
            cutoff,
            job_id: job_id.map(str::to_owned),
            limit: PURGE_CHUNK,
        };
        let events = sink.append(command).await?;
        if events.is_empty() {
            return Ok(removed);
        }
        removed += events.len() as u64;
    }
}
