//! Comparing a consumer's projection with an emitter's sink: every difference, by item.

use serde::Serialize;

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
            Some(theirs) if theirs != stored => differences.push(Difference::Diverging {
                job_id: key.0,
                item_id: key.1,
                sink_version: stored.version,
                consumer_version: theirs.version,
            }),
            Some(_) => {}
        }
    }
    differences.extend(
        remaining
            .into_keys()
            .map(|(job_id, item_id)| Difference::Extra { job_id, item_id }),
    );
    Ok(differences)
}
