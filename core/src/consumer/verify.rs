//! Comparing a consumer's projection with an emitter's sink: every difference, by item.

use serde::Serialize;

use super::fold::HeldItems;
use crate::domain::event::Event;
use crate::domain::projection::{MemoryProjection, StoredItem};

/// One difference between the sink and the consumer.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Difference {
    /// In the sink, not in the consumer's projection: lost on the way.
    Missing {
        /// The job.
        job_id: String,
        /// The item.
        item_id: String,
    },
    /// In the consumer's projection, not in the sink.
    Extra {
        /// The job.
        job_id: String,
        /// The item.
        item_id: String,
    },
    /// In the consumer's projection, not in the sink or ahead of it, and its last event is a
    /// volatile one: published when the sink failed to store it (the caller was told
    /// `NotStored`). Not a loss and not an extra: published, not stored on this node.
    Unstored {
        /// The job.
        job_id: String,
        /// The item.
        item_id: String,
        /// The volatile event id it was published under.
        event_id: String,
    },
    /// In the sink, and held back in the consumer: a stub of this node stood in for one of its
    /// events, too large for the bus, and the full event has not come yet. Not a loss: it
    /// comes once the bus takes it (`dlq reconcile --retry-parked` after raising the
    /// server's `max_payload`).
    Held {
        /// The job.
        job_id: String,
        /// The item.
        item_id: String,
        /// The node holding the full event.
        node: String,
        /// Why the bus refused it.
        reason: String,
        /// Its size in bytes.
        size_bytes: u64,
    },
    /// In both, but not equal.
    Diverging {
        /// The job.
        job_id: String,
        /// The item.
        item_id: String,
        /// Version in the sink.
        sink_version: u64,
        /// Version in the consumer.
        consumer_version: u64,
    },
}

/// Compares the sink's items (any order) with a projection; returns every difference.
pub fn compare<E>(
    sink_items: impl IntoIterator<Item = Result<StoredItem, E>>,
    consumer: &MemoryProjection,
) -> Result<Vec<Difference>, E> {
    compare_node(sink_items, consumer, None)
}

/// Like [`compare`], for a projection that also holds other nodes' items (a durable consumer
/// fed by several emitters): with `node`, an item the sink lacks counts as extra only when
/// that node wrote its last event.
pub fn compare_node<E>(
    sink_items: impl IntoIterator<Item = Result<StoredItem, E>>,
    consumer: &MemoryProjection,
    node: Option<&str>,
) -> Result<Vec<Difference>, E> {
    let mut remaining = consumer.items.clone();
    let mut differences = Vec::new();
    for stored in sink_items {
        let stored = stored?;
        let key = (stored.item.job_id.clone(), stored.item.item_id.clone());
        match remaining.remove(&key) {
            None => differences.push(Difference::Missing {
                job_id: key.0,
                item_id: key.1,
            }),
            // The consumer applied a volatile event the sink could not store (before or after
            // the stored ones): published, not stored on this node, as for an item the sink
            // lacks.
            Some(theirs) if theirs != stored => match unstored_event(&theirs) {
                Some(event_id) => differences.push(Difference::Unstored {
                    job_id: key.0,
                    item_id: key.1,
                    event_id: event_id.to_owned(),
                }),
                None => differences.push(Difference::Diverging {
                    job_id: key.0,
                    item_id: key.1,
                    sink_version: stored.version,
                    consumer_version: theirs.version,
                }),
            },
            Some(_) => {}
        }
    }
    differences.extend(
        remaining
            .into_iter()
            .filter(|(_, theirs)| node.is_none_or(|node| written_by(theirs, node)))
            .map(|((job_id, item_id), theirs)| {
                if let Some(event_id) = unstored_event(&theirs).map(str::to_owned) {
                    Difference::Unstored {
                        job_id,
                        item_id,
                        event_id,
                    }
                } else {
                    Difference::Extra { job_id, item_id }
                }
            }),
    );
    Ok(differences)
}

/// The volatile event an item of a consumer's projection holds, if any: the last one recorded
/// on it, or (for items saved before volatile events were recorded) its last event.
fn unstored_event(item: &StoredItem) -> Option<&str> {
    item.unstored_event_ids
        .last()
        .map(String::as_str)
        .or_else(|| {
            Event::is_volatile_id(&item.last_event_id).then_some(item.last_event_id.as_str())
        })
}

impl Difference {
    /// Whether the sink and the consumer disagree: every difference but
    /// [`Difference::Unstored`] and [`Difference::Held`], which both sides explain.
    pub fn is_disagreement(&self) -> bool {
        !matches!(self, Difference::Unstored { .. } | Difference::Held { .. })
    }

    /// The item the difference is about.
    fn key(&self) -> (&str, &str) {
        match self {
            Difference::Missing { job_id, item_id }
            | Difference::Extra { job_id, item_id }
            | Difference::Unstored {
                job_id, item_id, ..
            }
            | Difference::Held {
                job_id, item_id, ..
            }
            | Difference::Diverging {
                job_id, item_id, ..
            } => (job_id, item_id),
        }
    }
}

/// Explains the differences of items the consumer holds back ([`HeldItems`]): a missing or
/// diverging item waiting for its full event is [`Difference::Held`], not a disagreement.
pub fn explain_held(differences: Vec<Difference>, held: &HeldItems) -> Vec<Difference> {
    differences
        .into_iter()
        .map(|difference| {
            let (job, item) = difference.key();
            let waiting = held.get(&(job.to_owned(), item.to_owned()));
            match (waiting, &difference) {
                (Some(waiting), Difference::Missing { .. } | Difference::Diverging { .. }) => {
                    Difference::Held {
                        job_id: job.to_owned(),
                        item_id: item.to_owned(),
                        node: waiting.node.clone(),
                        reason: waiting.reason.clone(),
                        size_bytes: waiting.size_bytes,
                    }
                }
                _ => difference,
            }
        })
        .collect()
}

/// Whether `node` wrote the item's last event (see [`Event::id_written_by`]).
fn written_by(item: &StoredItem, node: &str) -> bool {
    Event::id_written_by(&item.last_event_id, node)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;
    use crate::testing::stored_item;

    #[test]
    fn other_nodes_items_are_not_extra_for_one_node() {
        let mine = stored_item("job-a", "1", "node-a:3");
        let theirs = stored_item("job-b", "1", "node-b:7");
        let mut consumer = MemoryProjection::default();
        for item in [&mine, &theirs] {
            let key = (item.item.job_id.clone(), item.item.item_id.clone());
            consumer.items.insert(key, item.clone());
        }
        let sink = || vec![Ok::<_, ()>(mine.clone())];
        let all = compare(sink(), &consumer).unwrap();
        assert_eq!(
            all,
            vec![Difference::Extra {
                job_id: "job-b".into(),
                item_id: "1".into()
            }]
        );
        assert!(compare_node(sink(), &consumer, Some("node-a"))
            .unwrap()
            .is_empty());
        let unstored = stored_item("job-a", "2", "node-a:v17-0");
        consumer
            .items
            .insert(("job-a".into(), "2".into()), unstored);
        let apart = compare_node(sink(), &consumer, Some("node-a")).unwrap();
        assert_eq!(
            apart,
            vec![Difference::Unstored {
                job_id: "job-a".into(),
                item_id: "2".into(),
                event_id: "node-a:v17-0".into()
            }]
        );
        assert!(!apart[0].is_disagreement());
        consumer.items.remove(&("job-a".into(), "2".into()));
        let lost = compare_node(
            Vec::<Result<StoredItem, ()>>::new(),
            &consumer,
            Some("node-a"),
        );
        assert_eq!(
            lost.unwrap(),
            vec![Difference::Extra {
                job_id: "job-a".into(),
                item_id: "1".into()
            }]
        );
    }

    /// A volatile copy of an item, then a stored dead-letter of the same item (the sink stored
    /// it anew later), in either order: the consumer's item holds both, the sink's one; verify
    /// says why (unstored), not that they diverge.
    #[test]
    fn a_volatile_event_beneath_a_stored_one_is_reported_apart() {
        use crate::domain::event::EventKind;
        use crate::testing::{item, removal};
        let dead_letter = |event_id: String, seq: u64| {
            let mut event = removal(None, seq, None, chrono::Utc::now());
            event.event_id = event_id;
            event.job_id = "job-a".into();
            event.kind = EventKind::DeadLettered {
                item: item("job-a", "1").into(),
            };
            event
        };
        let volatile = dead_letter(Event::volatile_id("node-a", 5, 0), 0);
        let stored = dead_letter("node-a:1".into(), 1);
        let mut sink = MemoryProjection::default();
        sink.apply(&stored);
        let sink_items = || {
            sink.items
                .values()
                .cloned()
                .map(Ok::<_, ()>)
                .collect::<Vec<_>>()
        };
        for order in [[&volatile, &stored], [&stored, &volatile]] {
            let mut consumer = MemoryProjection::default();
            for event in order {
                consumer.apply(event);
            }
            let differences = compare(sink_items(), &consumer).unwrap();
            assert_eq!(
                differences,
                vec![Difference::Unstored {
                    job_id: "job-a".into(),
                    item_id: "1".into(),
                    event_id: volatile.event_id.clone(),
                }]
            );
        }
    }
}
