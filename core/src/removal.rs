//! Removals an operator asks for (`dlq clear`, `dlq purge`, `dlq delete`, and the admin API's
//! routes for them): each removes items through the sink's one removal path
//! ([`crate::sink::clear`], [`crate::sink::purge`], [`crate::sink::delete`]) on a running emitter, then waits a while for its reconciler to
//! publish the `item_removed` events ([`Emitter::finish_publishing`](crate::Emitter::finish_publishing)), and answers what happened.

use std::time::Duration;

use chrono::{DateTime, Utc};
use serde_json::json;

use crate::domain::event::RemovedBy;
use crate::emitter::NodeEmitter;
use crate::emitter::Published;
use crate::sink::{LocalSink, SinkError};

/// How long a removal waits for its events to be published when not told.
pub const DEFAULT_DRAIN: Duration = Duration::from_secs(5);

/// The outcome of a removal: a JSON summary for scripts and a line for people.
#[derive(Debug, Clone, PartialEq)]
pub struct Removal {
    /// `job_id`, `removed` (or `would_remove`), `cutoff` for purges, and `unpublished` and
    /// `drained` once events were written.
    pub summary: serde_json::Value,
    /// What happened, in words.
    pub line: String,
}

/// Removes every item of `job` (each event naming `by`), then waits up to `drain_timeout` for the events to be
/// published. Publishing is waited for even when a chunk failed; the failure is returned after.
pub async fn clear_job(
    emitter: &NodeEmitter,
    job: &str,
    drain_timeout: Duration,
    by: Option<&RemovedBy>,
) -> Result<Removal, SinkError> {
    let cleared = crate::sink::clear(emitter.sink(), job, by).await;
    let published = emitter.finish_publishing(drain_timeout).await;
    let removed = cleared?;
    Ok(published_removal(
        json!({ "job_id": job, "removed": removed }),
        format!("removed {removed} items of job {job}"),
        published?,
    ))
}

/// The cutoff of `--older-than-days`: items first failed before it are purged. More days than
/// time can go back (over about 95 million) give the earliest representable time: nothing is
/// that old, so nothing is purged (the subtraction used to panic; `fuzz/regressions/api_body/`).
pub fn purge_cutoff(older_than_days: u32) -> DateTime<Utc> {
    Utc::now()
        .checked_sub_signed(chrono::Duration::days(i64::from(older_than_days)))
        .unwrap_or(DateTime::<Utc>::MIN_UTC)
}

/// "job 'x'" or "any job", for messages about a removal's scope.
pub fn scope_of(job: Option<&str>) -> String {
    job.map_or("any job".to_owned(), |j| format!("job '{j}'"))
}

/// How many items of `job` (or of all) first failed before `cutoff`.
pub fn count_purgeable(
    sink: &LocalSink,
    cutoff: DateTime<Utc>,
    job: Option<&str>,
) -> Result<u64, SinkError> {
    let mut n = 0u64;
    for stored in sink.scan_items(job) {
        n += u64::from(stored?.item.first_attempt < cutoff);
    }
    Ok(n)
}

/// The answer of a purge that found nothing to remove (nothing was written).
pub fn nothing_to_purge(job: Option<&str>, cutoff: DateTime<Utc>) -> Removal {
    Removal {
        summary: json!({ "job_id": job, "cutoff": cutoff, "removed": 0 }),
        line: format!("no items of {} first failed before {cutoff}", scope_of(job)),
    }
}

/// The answer of a dry-run purge: what it would remove.
pub fn would_purge(job: Option<&str>, cutoff: DateTime<Utc>, n: u64) -> Removal {
    Removal {
        summary: json!({ "job_id": job, "cutoff": cutoff, "would_remove": n }),
        line: format!(
            "would remove {n} items of {} first failed before {cutoff}",
            scope_of(job)
        ),
    }
}

/// Removes the items of `job` (or of all) first failed before `cutoff`, then waits up to
/// `drain_timeout` for the events to be published.
pub async fn purge_items(
    emitter: &NodeEmitter,
    cutoff: DateTime<Utc>,
    job: Option<&str>,
    drain_timeout: Duration,
    by: Option<&RemovedBy>,
) -> Result<Removal, SinkError> {
    let purged = crate::sink::purge(emitter.sink(), cutoff, job, by).await;
    let published = emitter.finish_publishing(drain_timeout).await;
    let removed = purged?;
    Ok(published_removal(
        json!({ "job_id": job, "cutoff": cutoff, "removed": removed }),
        format!(
            "purged {removed} items of {} first failed before {cutoff}",
            scope_of(job)
        ),
        published?,
    ))
}

/// Removes the named `(job_id, item_id)` items that still exist (each an `item_removed` event
/// with reason `deleted`), then waits up to `drain_timeout` for the events to be published.
pub async fn delete_items(
    emitter: &NodeEmitter,
    items: &[(String, String)],
    drain_timeout: Duration,
    by: Option<&RemovedBy>,
) -> Result<Removal, SinkError> {
    let deleted = crate::sink::delete(emitter.sink(), items, by).await;
    let published = emitter.finish_publishing(drain_timeout).await;
    let removed = deleted?;
    Ok(published_removal(
        json!({ "removed": removed }),
        format!("deleted {removed} items"),
        published?,
    ))
}

/// The answer of a dry-run delete: how many items it would remove, and which.
pub fn would_delete(items: &[(String, String)]) -> Removal {
    let n = items.len();
    let ids: Vec<_> = items
        .iter()
        .map(|(job_id, item_id)| json!({ "job_id": job_id, "item_id": item_id }))
        .collect();
    Removal {
        summary: json!({ "would_remove": n, "items": ids }),
        line: format!("would delete {n} items"),
    }
}

/// The answer of a delete that found nothing to remove (nothing was written).
pub fn nothing_to_delete() -> Removal {
    Removal {
        summary: json!({ "removed": 0 }),
        line: "no items to delete".to_owned(),
    }
}

fn published_removal(
    mut summary: serde_json::Value,
    line: String,
    published: Published,
) -> Removal {
    summary["unpublished"] = json!(published.unpublished);
    summary["drained"] = json!(published.drained);
    Removal {
        summary,
        line: format!("{line}\n{}", published.describe()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cutoff_beyond_representable_time_purges_nothing() {
        assert_eq!(purge_cutoff(u32::MAX), DateTime::<Utc>::MIN_UTC);
        let month = Utc::now() - purge_cutoff(30);
        assert!((29..=30).contains(&month.num_days()), "{month}");
    }
}
