//! The one removal path: clear, purge and retention all remove items in chunks of
//! [`REMOVE_CHUNK`], each removal an `item_removed` event in the log, so one huge removal never
//! becomes one huge group commit.

use chrono::{DateTime, Utc};

use super::{Sink, SinkError};
use crate::domain::command::Command;

/// Items removed per command, so one huge removal never becomes one huge batch.
pub const REMOVE_CHUNK: usize = 1000;

/// Appends `chunk(REMOVE_CHUNK)` until a command removes nothing; returns how many were
/// removed. A failed chunk stops the removal: what earlier chunks removed stays removed.
pub async fn remove_in_chunks<S: Sink>(
    sink: &S,
    mut chunk: impl FnMut(usize) -> Command,
) -> Result<u64, SinkError> {
    let mut removed = 0;
    loop {
        let events = sink.append(chunk(REMOVE_CHUNK)).await?;
        if events.is_empty() {
            return Ok(removed);
        }
        removed += events.len() as u64;
    }
}

/// Removes every item first failed before `cutoff` (optionally of one job), each removal an
/// `item_removed` event with reason `purged`. Returns how many were removed.
pub async fn purge<S: Sink>(
    sink: &S,
    cutoff: DateTime<Utc>,
    job_id: Option<&str>,
) -> Result<u64, SinkError> {
    remove_in_chunks(sink, |limit| Command::Purge {
        cutoff,
        job_id: job_id.map(str::to_owned),
        limit,
    })
    .await
}

/// Removes every item of `job_id`, each removal an `item_removed` event with reason `cleared`.
/// Returns how many were removed.
pub async fn clear<S: Sink>(sink: &S, job_id: &str) -> Result<u64, SinkError> {
    remove_in_chunks(sink, |limit| Command::Clear {
        job_id: job_id.to_owned(),
        limit,
    })
    .await
}
