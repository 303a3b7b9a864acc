//! The one removal path: clear, purge, delete and retention all remove items in chunks of
//! [`REMOVE_CHUNK`], each removal an `item_removed` event in the log, so one huge removal never
//! becomes one huge group commit.

use chrono::{DateTime, Utc};

use super::{Sink, SinkError};
use crate::domain::command::Command;
use crate::domain::event::RemovedBy;

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
/// `item_removed` event with reason `purged` naming `by`. Returns how many were removed.
pub async fn purge<S: Sink>(
    sink: &S,
    cutoff: DateTime<Utc>,
    job_id: Option<&str>,
    by: Option<&RemovedBy>,
) -> Result<u64, SinkError> {
    remove_in_chunks(sink, |limit| Command::Purge {
        cutoff,
        job_id: job_id.map(str::to_owned),
        limit,
        by: by.cloned(),
    })
    .await
}

/// Removes every item of `job_id`, each removal an `item_removed` event with reason `cleared`
/// naming `by`. Returns how many were removed.
pub async fn clear<S: Sink>(
    sink: &S,
    job_id: &str,
    by: Option<&RemovedBy>,
) -> Result<u64, SinkError> {
    remove_in_chunks(sink, |limit| Command::Clear {
        job_id: job_id.to_owned(),
        limit,
        by: by.cloned(),
    })
    .await
}

/// Removes the named `(job_id, item_id)` items that exist, [`REMOVE_CHUNK`] per command, each
/// removal an `item_removed` event with reason `deleted`; absent or repeated ids are skipped.
/// Returns how many were removed. A failed chunk stops the removal: what earlier chunks removed
/// stays removed.
pub async fn delete<S: Sink>(
    sink: &S,
    items: &[(String, String)],
    by: Option<&RemovedBy>,
) -> Result<u64, SinkError> {
    let mut removed = 0;
    for chunk in items.chunks(REMOVE_CHUNK) {
        let items = chunk.to_vec();
        let by = by.cloned();
        removed += sink.append(Command::Delete { items, by }).await?.len() as u64;
    }
    Ok(removed)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;
    use crate::domain::event::{EventKind, RemovalReason};
    use crate::testing::{item, MemorySink};

    #[tokio::test]
    async fn delete_removes_the_named_items_that_exist_with_reason_deleted() {
        let sink = MemorySink::default();
        for id in ["a", "b", "c"] {
            sink.append(Command::DeadLetter {
                topic: "t".into(),
                item: item("j", id).into(),
            })
            .await
            .unwrap();
        }
        let ids = |names: &[&str]| -> Vec<(String, String)> {
            names
                .iter()
                .map(|n| ("j".to_owned(), (*n).to_owned()))
                .collect()
        };
        let by = RemovedBy {
            name: "ops".into(),
            reason: Some("bad input".into()),
        };
        let removed = delete(&sink, &ids(&["a", "c", "a", "missing"]), Some(&by))
            .await
            .unwrap();
        assert_eq!(removed, 2);
        let removals: Vec<_> = sink
            .log()
            .into_iter()
            .filter_map(|event| match event.kind {
                EventKind::ItemRemoved {
                    item_id,
                    reason,
                    removed_by,
                    ..
                } => Some((item_id, reason, removed_by)),
                _ => None,
            })
            .collect();
        assert_eq!(
            removals,
            vec![
                ("a".to_owned(), RemovalReason::Deleted, Some(by.clone())),
                ("c".to_owned(), RemovalReason::Deleted, Some(by.clone()))
            ]
        );
        assert_eq!(
            delete(&sink, &ids(&["a"]), None).await.unwrap(),
            0,
            "already gone"
        );
    }
}
