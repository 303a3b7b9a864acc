//! Commands, and the pure decision of which events a command produces.
//!
//! A [`Command`] is what a caller asks for ("dead-letter this item", "clear this job"). The sink's
//! single writer calls [`decide`] against the current state to turn it into event drafts, stamps
//! them with sequence numbers and applies them through [`crate::domain::projection::apply`]. Keeping the
//! decision pure makes capacity, eviction and merge rules unit-testable without a disk.

use std::sync::Arc;

use chrono::{DateTime, Utc};
use thiserror::Error;

use crate::domain::event::{EventKind, RedriveTarget, RemovalReason, RemovedBy};
use crate::domain::merge_patch::{merge_patch, reverse_patch};
use crate::domain::model::{DeadLetteredItem, RedriveState};
use crate::domain::projection::{renumber, StateView};

/// Longest accepted `job_id`, `item_id` or topic, in bytes.
pub const MAX_ID_BYTES: usize = 256;

/// A change a caller asks the sink to make.
#[derive(Debug, Clone, PartialEq)]
pub enum Command {
    /// Record a failed item: a new entry, or more history for an existing one.
    DeadLetter {
        /// Scheduler topic the failure came from.
        topic: String,
        /// The failed item; its `job_id` names the job.
        item: Arc<DeadLetteredItem>,
    },
    /// Remove one item.
    Remove {
        /// The item's job.
        job_id: String,
        /// The item.
        item_id: String,
        /// Why.
        reason: RemovalReason,
        /// The operator who asked (e.g. the retry that resolved it), named on the event.
        by: Option<RemovedBy>,
    },
    /// Change an item's flags.
    UpdateFlags {
        /// The item's job.
        job_id: String,
        /// The item.
        item_id: String,
        /// New eligibility, if it changes.
        reprocess_eligible: Option<bool>,
        /// New review flag, if it changes.
        manual_review_required: Option<bool>,
    },
    /// Audit that an event could not be published.
    RecordEmitFailure {
        /// Job of the failed event.
        job_id: String,
        /// Topic of the failed event.
        topic: String,
        /// The event that was not published.
        failed_event_id: String,
        /// Attempts made.
        attempts: u32,
        /// Last error.
        error: String,
    },
    /// Remove up to `limit` items of a job (callers repeat until nothing is left).
    Clear {
        /// The job.
        job_id: String,
        /// Most items removed by this command.
        limit: usize,
        /// The operator who asked, named on each event.
        by: Option<RemovedBy>,
    },
    /// Remove up to `limit` items first failed before `cutoff`.
    Purge {
        /// Items first failed before this are removed.
        cutoff: DateTime<Utc>,
        /// Restrict to one job.
        job_id: Option<String>,
        /// Most items removed by this command.
        limit: usize,
        /// The operator who asked (none for retention), named on each event.
        by: Option<RemovedBy>,
    },
    /// Remove the named items that exist (an operator's delete); absent ones are skipped.
    Delete {
        /// `(job_id, item_id)` of each item.
        items: Vec<(String, String)>,
        /// The operator who asked, named on each event.
        by: Option<RemovedBy>,
    },
    /// Hand an item back (an operator's redrive), only if its generation is still `expected`:
    /// one `redriven` event, or nothing when another redrive took that generation already.
    Redrive {
        /// The item's job.
        job_id: String,
        /// The item.
        item_id: String,
        /// The generation the caller saw.
        expected: u32,
        /// Where it is handed back to.
        target: RedriveTarget,
        /// The operator who asked.
        by: Option<RemovedBy>,
    },
    /// What the handler of a redrive answered: `item_removed` (resolved) on success,
    /// `redrive_failed` on failure; nothing unless the item's redrive of `generation` is still
    /// in flight (the item is gone, a later redrive owns it, or its outcome is recorded).
    RedriveOutcome {
        /// The item's job.
        job_id: String,
        /// The item.
        item_id: String,
        /// The generation the outcome is of.
        generation: u32,
        /// `Ok` when the handler succeeded, else its error.
        result: Result<(), String>,
    },
    /// Edit an item's data with a JSON merge patch (RFC 7396): one `item_edited` event, or
    /// nothing when the patch changes nothing.
    Edit {
        /// The item's job.
        job_id: String,
        /// The item.
        item_id: String,
        /// The merge patch.
        patch: serde_json::Value,
        /// The operator who edited.
        by: Option<RemovedBy>,
    },
}

/// An event before the sink gives it a sequence number and a timestamp.
#[derive(Debug, Clone, PartialEq)]
pub struct Draft {
    /// The job it concerns.
    pub job_id: String,
    /// The scheduler topic.
    pub topic: String,
    /// What happens.
    pub kind: EventKind,
}

/// Limits that shape decisions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Most items one job holds; the oldest is evicted to make room (FIFO).
    pub capacity_per_job: u64,
}

/// Why a command was refused. Nothing was written.
#[derive(Debug, Error, PartialEq)]
pub enum DecideError<E> {
    /// No such item.
    #[error("item '{item_id}' not found in job '{job_id}': check the ids with `dlq list --job-id {job_id}`")]
    NotFound {
        /// The job searched.
        job_id: String,
        /// The item asked for.
        item_id: String,
    },
    /// An id is empty, too long or has control characters.
    #[error(
        "invalid {what} '{value}': ids must be 1-{MAX_ID_BYTES} bytes without control characters"
    )]
    InvalidId {
        /// Which id.
        what: &'static str,
        /// The offending value (escaped).
        value: String,
    },
    /// Reading state failed.
    #[error("reading current state failed: {0}")]
    State(E),
}

/// Checks that an id can be used as a key: non-empty, bounded, no control characters.
pub fn validate_id<E>(what: &'static str, value: &str) -> Result<(), DecideError<E>> {
    if value.is_empty() || value.len() > MAX_ID_BYTES || value.chars().any(char::is_control) {
        let mut shown: String = value.escape_default().collect();
        shown.truncate(80);
        return Err(DecideError::InvalidId { what, value: shown });
    }
    Ok(())
}

/// Turns a command into the events it produces, given the current state. Takes the command by
/// value: a new item moves into its event instead of being copied (the sink's writer decides
/// every append on its one thread).
pub fn decide<V: StateView>(
    view: &V,
    command: Command,
    limits: Limits,
) -> Result<Vec<Draft>, DecideError<V::Error>> {
    match command {
        Command::DeadLetter { topic, item } => dead_letter(view, topic, item, limits),
        other => decide_ref(view, &other, limits),
    }
}

/// A failed item: a new entry (evicting the job's oldest beyond its capacity), or more history
/// for the item already there.
fn dead_letter<V: StateView>(
    view: &V,
    topic: String,
    item: Arc<DeadLetteredItem>,
    limits: Limits,
) -> Result<Vec<Draft>, DecideError<V::Error>> {
    validate_id("job_id", &item.job_id)?;
    validate_id("item_id", &item.item_id)?;
    validate_id("topic", &topic)?;
    let job_id = item.job_id.clone();
    if let Some(existing) = view
        .item(&job_id, &item.item_id)
        .map_err(DecideError::State)?
    {
        // The caller may still hold the item (the emitter keeps it for a volatile copy):
        // the fields the event needs are copied, not the item's data.
        let kind = EventKind::FailureAppended {
            failures: renumber(existing.item.failure_count, &item.failure_history),
            item_id: item.item_id.clone(),
            attempts: item.failure_count,
            last_attempt: item.last_attempt,
            error_signature: item.error_signature.clone(),
            error_pattern: item.error_pattern.clone(),
            reprocess_eligible: item.reprocess_eligible,
            manual_review_required: item.manual_review_required,
            worktree_artifacts: item.worktree_artifacts.clone(),
        };
        return Ok(vec![Draft {
            job_id,
            topic,
            kind,
        }]);
    }
    let len = view.job_len(&job_id).map_err(DecideError::State)?;
    let over = (len + 1).saturating_sub(limits.capacity_per_job.max(1));
    let evict = usize::try_from(over).unwrap_or(usize::MAX);
    let mut drafts = Vec::new();
    for item_id in view
        .oldest_in_job(&job_id, evict)
        .map_err(DecideError::State)?
    {
        drafts.push(Draft {
            job_id: job_id.clone(),
            topic: topic.clone(),
            kind: EventKind::ItemRemoved {
                item_id,
                reason: RemovalReason::Evicted,
                removed_by: None,
                generation: None,
            },
        });
    }
    drafts.push(Draft {
        job_id,
        topic,
        kind: EventKind::DeadLettered { item },
    });
    Ok(drafts)
}

/// Every command but a dead letter, decided by reference.
fn decide_ref<V: StateView>(
    view: &V,
    command: &Command,
    limits: Limits,
) -> Result<Vec<Draft>, DecideError<V::Error>> {
    let draft = |job_id: &str, topic: &str, kind| Draft {
        job_id: job_id.to_owned(),
        topic: topic.to_owned(),
        kind,
    };
    match command {
        Command::DeadLetter { topic, item } => {
            dead_letter(view, topic.clone(), Arc::clone(item), limits)
        }
        Command::Remove {
            job_id,
            item_id,
            reason,
            by,
        } => {
            let existing = view.item(job_id, item_id).map_err(DecideError::State)?;
            let Some(_) = existing else {
                return Err(DecideError::NotFound {
                    job_id: job_id.clone(),
                    item_id: item_id.clone(),
                });
            };
            let kind = EventKind::ItemRemoved {
                item_id: item_id.clone(),
                reason: *reason,
                removed_by: by.clone(),
                generation: None,
            };
            Ok(vec![draft(job_id, "", kind)])
        }
        Command::UpdateFlags {
            job_id,
            item_id,
            reprocess_eligible,
            manual_review_required,
        } => {
            if view
                .item(job_id, item_id)
                .map_err(DecideError::State)?
                .is_none()
            {
                return Err(DecideError::NotFound {
                    job_id: job_id.clone(),
                    item_id: item_id.clone(),
                });
            }
            let kind = EventKind::FlagsUpdated {
                item_id: item_id.clone(),
                reprocess_eligible: *reprocess_eligible,
                manual_review_required: *manual_review_required,
            };
            Ok(vec![draft(job_id, "", kind)])
        }
        Command::RecordEmitFailure {
            job_id,
            topic,
            failed_event_id,
            attempts,
            error,
        } => {
            let kind = EventKind::EmitFailed {
                failed_event_id: failed_event_id.clone(),
                attempts: *attempts,
                error: error.clone(),
            };
            Ok(vec![draft(job_id, topic, kind)])
        }
        Command::Clear { job_id, limit, by } => {
            let ids = view
                .oldest_in_job(job_id, *limit)
                .map_err(DecideError::State)?;
            Ok(ids
                .into_iter()
                .map(|item_id| {
                    let reason = RemovalReason::Cleared;
                    let removed_by = by.clone();
                    let kind = EventKind::ItemRemoved {
                        item_id,
                        reason,
                        removed_by,
                        generation: None,
                    };
                    draft(job_id, "", kind)
                })
                .collect())
        }
        Command::Purge {
            cutoff,
            job_id,
            limit,
            by,
        } => {
            let hits = view
                .first_failed_before(*cutoff, job_id.as_deref(), *limit)
                .map_err(DecideError::State)?;
            Ok(hits
                .into_iter()
                .map(|(job, item_id)| {
                    let reason = RemovalReason::Purged;
                    let removed_by = by.clone();
                    let kind = EventKind::ItemRemoved {
                        item_id,
                        reason,
                        removed_by,
                        generation: None,
                    };
                    draft(&job, "", kind)
                })
                .collect())
        }
        Command::Redrive { .. } | Command::RedriveOutcome { .. } | Command::Edit { .. } => {
            operator_change(view, command)
        }
        Command::Delete { items, by } => {
            let mut drafts = Vec::new();
            let mut seen = std::collections::HashSet::new();
            for (job_id, item_id) in items {
                if !seen.insert((job_id, item_id)) {
                    continue;
                }
                if view
                    .item(job_id, item_id)
                    .map_err(DecideError::State)?
                    .is_some()
                {
                    let kind = EventKind::ItemRemoved {
                        item_id: item_id.clone(),
                        reason: RemovalReason::Deleted,
                        removed_by: by.clone(),
                        generation: None,
                    };
                    drafts.push(draft(job_id, "", kind));
                }
            }
            Ok(drafts)
        }
    }
}

/// The current state of an item that must exist.
fn existing<V: StateView>(
    view: &V,
    job_id: &str,
    item_id: &str,
) -> Result<DeadLetteredItem, DecideError<V::Error>> {
    match view.item(job_id, item_id).map_err(DecideError::State)? {
        Some(stored) => Ok(std::sync::Arc::unwrap_or_clone(stored.item)),
        None => Err(DecideError::NotFound {
            job_id: job_id.to_owned(),
            item_id: item_id.to_owned(),
        }),
    }
}

/// Redrive, its outcome and edits: the operator's changes to one item.
fn operator_change<V: StateView>(
    view: &V,
    command: &Command,
) -> Result<Vec<Draft>, DecideError<V::Error>> {
    let draft = |job_id: &str, kind| {
        vec![Draft {
            job_id: job_id.to_owned(),
            topic: String::new(),
            kind,
        }]
    };
    match command {
        Command::Redrive {
            job_id,
            item_id,
            expected,
            target,
            by,
        } => {
            let item = existing(view, job_id, item_id)?;
            if item.generation() != *expected {
                return Ok(Vec::new());
            }
            let kind = EventKind::Redriven {
                item_id: item_id.clone(),
                generation: expected.saturating_add(1),
                target: *target,
                by: by.clone(),
            };
            Ok(draft(job_id, kind))
        }
        Command::RedriveOutcome {
            job_id,
            item_id,
            generation,
            result,
        } => {
            let Some(stored) = view.item(job_id, item_id).map_err(DecideError::State)? else {
                return Ok(Vec::new());
            };
            let in_flight = stored.item.redrive.as_ref().is_some_and(|redrive| {
                redrive.generation == *generation && redrive.state == RedriveState::InFlight
            });
            if !in_flight {
                return Ok(Vec::new());
            }
            let kind = match result {
                Ok(()) => EventKind::ItemRemoved {
                    item_id: item_id.clone(),
                    reason: RemovalReason::Resolved,
                    removed_by: None,
                    generation: Some(*generation),
                },
                Err(error) => EventKind::RedriveFailed {
                    item_id: item_id.clone(),
                    generation: *generation,
                    error: error.clone(),
                },
            };
            Ok(draft(job_id, kind))
        }
        Command::Edit {
            job_id,
            item_id,
            patch,
            by,
        } => {
            let item = existing(view, job_id, item_id)?;
            if merge_patch(&item.item_data, patch) == item.item_data {
                return Ok(Vec::new());
            }
            let kind = EventKind::ItemEdited {
                item_id: item_id.clone(),
                patch: patch.clone(),
                previous: reverse_patch(&item.item_data, patch),
                by: by.clone(),
            };
            Ok(draft(job_id, kind))
        }
        _ => Ok(Vec::new()),
    }
}
