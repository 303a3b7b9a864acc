//! The pure fold of events into current state.
//!
//! [`apply`] takes an item's previous state and one event and says what changes. It has no I/O:
//! the local sink runs it inside its write path (live projection), [`MemoryProjection`] runs it
//! in memory (consumers, tests), and a rebuild replays the log through it. Because every store
//! goes through the same function, a projection rebuilt from the log alone equals the live one.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::domain::event::{Event, EventKind};
use crate::domain::merge_patch::merge_patch;
use crate::domain::model::{DeadLetteredItem, FailureDetail, Redrive, RedriveState};

/// An item as the projection keeps it: the item plus bookkeeping.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StoredItem {
    /// The item, with `job_id` set; shared, so a copy of the projection (a console's view, a
    /// group's staged state) costs a reference count per item, not the item's bytes. Its JSON
    /// is the item's.
    pub item: Arc<DeadLetteredItem>,
    /// Log sequence of the event that created it: the FIFO order for eviction.
    pub created_seq: u64,
    /// Number of events applied to the item (1 on creation).
    pub version: u64,
    /// The last event applied to the item.
    pub last_event_id: String,
    /// Volatile events applied to the item: dead-letters published when their node's sink
    /// could not store them (`Event::volatile_id`). Always empty in a sink's own projection
    /// (it never stores one); a consumer's item that holds one differs from the sink's by
    /// design, and `verify` reports it apart ("published, not stored on this node"), whatever
    /// stored events were applied before or after it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unstored_event_ids: Vec<String>,
}

/// What applying one event does to one item.
#[derive(Debug, Clone, PartialEq)]
pub enum Change {
    /// The item is created or replaced; `previous` is what it replaces (for index upkeep).
    Put {
        /// The new state.
        item: Box<StoredItem>,
        /// The state it replaces, if any.
        previous: Option<Box<StoredItem>>,
    },
    /// The item is removed.
    Delete {
        /// The state removed.
        previous: Box<StoredItem>,
    },
    /// Nothing changes (audit events, or an event about an item that is not there).
    Unchanged,
}

/// Folds one event into the previous state of the item it concerns.
///
/// `previous` must be the current state of `(event.job_id, event.kind.item_id())`.
pub fn apply(previous: Option<&StoredItem>, event: &Event) -> Change {
    let change = apply_kind(previous, event);
    if event.seq == 0 && Event::is_volatile_id(&event.event_id) {
        return note_unstored(change, &event.event_id);
    }
    change
}

/// Records the volatile event `event_id` on the item a change puts.
fn note_unstored(mut change: Change, event_id: &str) -> Change {
    if let Change::Put { item, .. } = &mut change {
        item.unstored_event_ids.push(event_id.to_owned());
    }
    change
}

fn apply_kind(previous: Option<&StoredItem>, event: &Event) -> Change {
    match (&event.kind, previous) {
        (EventKind::DeadLettered { item }, None) => {
            let mut item = Arc::clone(item);
            name_job(&mut item, &event.job_id);
            Change::Put {
                item: Box::new(StoredItem {
                    item,
                    created_seq: event.seq,
                    version: 1,
                    last_event_id: event.event_id.clone(),
                    unstored_event_ids: Vec::new(),
                }),
                previous: None,
            }
        }
        // Two nodes dead-lettered the same item: keep the first and append the newcomer's
        // history, exactly as a repeated failure would.
        (EventKind::DeadLettered { item }, Some(prev)) => {
            let mut next = prev.clone();
            merge_failure(&mut next, item, item.failure_count);
            put(next, prev, event)
        }
        (
            EventKind::FailureAppended {
                failures,
                attempts,
                last_attempt,
                error_signature,
                error_pattern,
                reprocess_eligible,
                manual_review_required,
                worktree_artifacts,
                ..
            },
            Some(prev),
        ) => {
            let mut next = prev.clone();
            let item = Arc::make_mut(&mut next.item);
            item.failure_history.extend(failures.iter().cloned());
            item.failure_count = item.failure_count.saturating_add(*attempts);
            item.last_attempt = item.last_attempt.max(*last_attempt);
            item.error_signature = error_signature.clone();
            item.error_pattern = error_pattern.clone();
            item.reprocess_eligible = *reprocess_eligible;
            item.manual_review_required = *manual_review_required;
            if worktree_artifacts.is_some() {
                item.worktree_artifacts = worktree_artifacts.clone();
            }
            put(next, prev, event)
        }
        (EventKind::ItemRemoved { .. }, Some(prev)) => Change::Delete {
            previous: Box::new(prev.clone()),
        },
        (
            EventKind::FlagsUpdated {
                reprocess_eligible,
                manual_review_required,
                ..
            },
            Some(prev),
        ) => {
            let mut next = prev.clone();
            if let Some(flag) = reprocess_eligible {
                Arc::make_mut(&mut next.item).reprocess_eligible = *flag;
            }
            if let Some(flag) = manual_review_required {
                Arc::make_mut(&mut next.item).manual_review_required = *flag;
            }
            put(next, prev, event)
        }
        (EventKind::Redriven { generation, .. }, Some(prev)) => {
            let mut next = prev.clone();
            Arc::make_mut(&mut next.item).redrive = Some(Redrive {
                generation: *generation,
                state: RedriveState::InFlight,
                at: event.timestamp,
                error: None,
            });
            put(next, prev, event)
        }
        (
            EventKind::RedriveFailed {
                generation, error, ..
            },
            Some(prev),
        ) if prev.item.generation() == *generation => {
            let mut next = prev.clone();
            Arc::make_mut(&mut next.item).redrive = Some(Redrive {
                generation: *generation,
                state: RedriveState::Failed,
                at: event.timestamp,
                error: Some(error.clone()),
            });
            put(next, prev, event)
        }
        (EventKind::ItemEdited { patch, .. }, Some(prev)) => {
            let mut next = prev.clone();
            Arc::make_mut(&mut next.item).item_data = merge_patch(&prev.item.item_data, patch);
            put(next, prev, event)
        }
        _ => Change::Unchanged,
    }
}

/// [`apply`] taking the event by value: a new item is moved out of its `DeadLettered` event,
/// not copied (the most common event of a rebuild). Always the same change as
/// `apply(previous, &event)`.
pub(crate) fn apply_owned(previous: Option<&StoredItem>, event: Event) -> Change {
    match event {
        Event {
            kind: EventKind::DeadLettered { mut item },
            job_id,
            seq,
            event_id,
            ..
        } if previous.is_none() => {
            name_job(&mut item, &job_id);
            let unstored_event_ids = if seq == 0 && Event::is_volatile_id(&event_id) {
                vec![event_id.clone()]
            } else {
                Vec::new()
            };
            Change::Put {
                item: Box::new(StoredItem {
                    item,
                    created_seq: seq,
                    version: 1,
                    last_event_id: event_id,
                    unstored_event_ids,
                }),
                previous: None,
            }
        }
        event => apply(previous, &event),
    }
}

/// Makes the item's `job_id` the event's (they differ only in events written by hand): the
/// item is copied only then, since the caller of an emit may still share it.
fn name_job(item: &mut Arc<DeadLetteredItem>, job_id: &str) {
    if item.job_id != job_id {
        Arc::make_mut(item).job_id = job_id.to_owned();
    }
}

/// Appends `incoming`'s history to `target`, renumbering attempts after the existing ones.
pub(crate) fn merge_failure(target: &mut StoredItem, incoming: &DeadLetteredItem, attempts: u32) {
    let item = Arc::make_mut(&mut target.item);
    let renumbered = renumber(item.failure_count, &incoming.failure_history);
    item.failure_history.extend(renumbered);
    item.failure_count = item.failure_count.saturating_add(attempts);
    item.last_attempt = item.last_attempt.max(incoming.last_attempt);
    item.error_signature = incoming.error_signature.clone();
    item.error_pattern = incoming.error_pattern.clone();
    item.reprocess_eligible = incoming.reprocess_eligible;
    item.manual_review_required = incoming.manual_review_required;
    if incoming.worktree_artifacts.is_some() {
        item.worktree_artifacts = incoming.worktree_artifacts.clone();
    }
}

/// Numbers `failures` as attempts `base + 1, base + 2, ...`.
pub(crate) fn renumber(base: u32, failures: &[FailureDetail]) -> Vec<FailureDetail> {
    let mut number = base;
    failures
        .iter()
        .map(|failure| {
            number = number.saturating_add(1);
            FailureDetail {
                attempt_number: number,
                ..failure.clone()
            }
        })
        .collect()
}

fn put(mut next: StoredItem, prev: &StoredItem, event: &Event) -> Change {
    next.version = prev.version + 1;
    next.last_event_id = event.event_id.clone();
    Change::Put {
        item: Box::new(next),
        previous: Some(Box::new(prev.clone())),
    }
}

/// Read access to current state, as [`crate::domain::command`] needs it to turn commands into events.
pub trait StateView {
    /// The error reading state can fail with.
    type Error;
    /// The current state of one item.
    fn item(&self, job_id: &str, item_id: &str) -> Result<Option<StoredItem>, Self::Error>;
    /// How many items the job holds.
    fn job_len(&self, job_id: &str) -> Result<u64, Self::Error>;
    /// Up to `limit` item ids of the job, oldest created first (FIFO order).
    fn oldest_in_job(&self, job_id: &str, limit: usize) -> Result<Vec<String>, Self::Error>;
    /// Up to `limit` `(job_id, item_id)` pairs whose first failure is before `cutoff`, compared
    /// at millisecond precision (the age index's), optionally restricted to one job.
    fn first_failed_before(
        &self,
        cutoff: chrono::DateTime<chrono::Utc>,
        job_id: Option<&str>,
        limit: usize,
    ) -> Result<Vec<(String, String)>, Self::Error>;
}

/// A projection held in memory: for consumers, tests and comparisons.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct MemoryProjection {
    /// Items by `(job_id, item_id)`.
    pub items: BTreeMap<(String, String), StoredItem>,
}

impl MemoryProjection {
    /// Folds one event in.
    pub fn apply(&mut self, event: &Event) {
        let Some(item_id) = event.kind.item_id() else {
            return;
        };
        let key = (event.job_id.clone(), item_id.to_owned());
        let change = apply(self.items.get(&key), event);
        self.change(key, change);
    }

    /// Folds one event in, moving a new item out of it instead of copying it
    /// ([`apply_owned`]): the same result as [`MemoryProjection::apply`].
    pub(crate) fn apply_owned(&mut self, event: Event) {
        let Some(item_id) = event.kind.item_id() else {
            return;
        };
        let key = (event.job_id.clone(), item_id.to_owned());
        let change = apply_owned(self.items.get(&key), event);
        self.change(key, change);
    }

    fn change(&mut self, key: (String, String), change: Change) {
        match change {
            Change::Put { item, .. } => {
                self.items.insert(key, *item);
            }
            Change::Delete { .. } => {
                self.items.remove(&key);
            }
            Change::Unchanged => {}
        }
    }
}

impl StateView for MemoryProjection {
    type Error = std::convert::Infallible;

    fn item(&self, job_id: &str, item_id: &str) -> Result<Option<StoredItem>, Self::Error> {
        Ok(self
            .items
            .get(&(job_id.to_owned(), item_id.to_owned()))
            .cloned())
    }

    fn job_len(&self, job_id: &str) -> Result<u64, Self::Error> {
        Ok(self.items.keys().filter(|(job, _)| job == job_id).count() as u64)
    }

    fn oldest_in_job(&self, job_id: &str, limit: usize) -> Result<Vec<String>, Self::Error> {
        let mut in_job: Vec<&StoredItem> = self
            .items
            .iter()
            .filter(|((job, _), _)| job == job_id)
            .map(|(_, stored)| stored)
            .collect();
        in_job.sort_by_key(|stored| stored.created_seq);
        Ok(in_job
            .into_iter()
            .take(limit)
            .map(|stored| stored.item.item_id.clone())
            .collect())
    }

    fn first_failed_before(
        &self,
        cutoff: chrono::DateTime<chrono::Utc>,
        job_id: Option<&str>,
        limit: usize,
    ) -> Result<Vec<(String, String)>, Self::Error> {
        let mut hits: Vec<(&StoredItem, &(String, String))> = self
            .items
            .iter()
            .filter(|((job, _), stored)| {
                job_id.is_none_or(|j| j == job)
                    && stored.item.first_attempt.timestamp_millis() < cutoff.timestamp_millis()
            })
            .map(|(key, stored)| (stored, key))
            .collect();
        // The age index's order: whole milliseconds, then job and item id.
        hits.sort_by_key(|(stored, key)| (stored.item.first_attempt.timestamp_millis(), *key));
        Ok(hits
            .into_iter()
            .take(limit)
            .map(|(_, key)| key.clone())
            .collect())
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use std::sync::Arc;

    use super::{apply, apply_owned, Change};
    use crate::domain::event::EventKind;
    use crate::testing::{item, removal};

    /// A new item's event for `job`, carrying `shared`.
    fn dead_lettered(
        job: &str,
        shared: &Arc<crate::domain::model::DeadLetteredItem>,
    ) -> crate::domain::event::Event {
        let mut event = removal(None, 1, None, chrono::Utc::now());
        event.job_id = job.into();
        event.kind = EventKind::DeadLettered {
            item: Arc::clone(shared),
        };
        event
    }

    fn put_item(change: Change) -> Arc<crate::domain::model::DeadLetteredItem> {
        match change {
            Change::Put { item, .. } => item.item,
            other => panic!("a new item is put: {other:?}"),
        }
    }

    #[test]
    fn a_new_item_shares_its_events_item_unless_the_job_differs() {
        // The emitter keeps the caller's item for a volatile copy while the sink stores it:
        // the stored item is that allocation, not a copy.
        let shared = Arc::new(item("job-a", "1"));
        let event = dead_lettered("job-a", &shared);
        assert!(Arc::ptr_eq(&put_item(apply(None, &event)), &shared));
        assert!(Arc::ptr_eq(&put_item(apply_owned(None, event)), &shared));
        // An event naming another job than its item: the stored item is renamed, the
        // shared one left as it was.
        let event = dead_lettered("job-b", &shared);
        for stored in [
            put_item(apply(None, &event)),
            put_item(apply_owned(None, event)),
        ] {
            assert_eq!(stored.job_id, "job-b");
            assert!(!Arc::ptr_eq(&stored, &shared));
        }
        assert_eq!(shared.job_id, "job-a");
    }
}
