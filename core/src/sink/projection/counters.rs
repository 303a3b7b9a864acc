//! Per-job running counters, kept in the `c` key of each job so that `dlq stats` and the job
//! length never scan items. Pure: encoding and arithmetic, no I/O.
//!
//! The writer adds an item's contribution when the item is put and subtracts the contribution
//! of the state it replaces or deletes, in the same sled batch as the item itself, so the
//! counters always equal a fold over the job's items (a property test checks this).

use crate::domain::model::{DeadLetteredItem, ErrorType};

/// Number of error types counted (one slot per [`ErrorType::NAMES`] entry).
const TYPES: usize = ErrorType::NAMES.len();
/// Encoded size: items, failures, eligible, manual review, then one count per error type.
pub(crate) const ENCODED_LEN: usize = 8 * (4 + TYPES);

/// What a job's items add up to.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct JobCounters {
    /// Items in the job.
    pub items: u64,
    /// Sum of their `failure_count`.
    pub failures: u64,
    /// Items that may be retried automatically.
    pub eligible: u64,
    /// Items that need a person first.
    pub manual_review: u64,
    /// Items by the error type of their most recent failure, indexed like [`ErrorType::NAMES`]
    /// (an item without history counts as `Unknown`).
    pub by_error_type: [u64; TYPES],
}

/// The slot of an item's error type.
fn type_slot(item: &DeadLetteredItem) -> usize {
    item.last_error_type()
        .map_or(ErrorType::Unknown.index(), ErrorType::index)
}

impl JobCounters {
    /// Counts `item` in.
    pub fn add(&mut self, item: &DeadLetteredItem) {
        self.items += 1;
        self.failures += u64::from(item.failure_count);
        self.eligible += u64::from(item.reprocess_eligible);
        self.manual_review += u64::from(item.manual_review_required);
        if let Some(slot) = self.by_error_type.get_mut(type_slot(item)) {
            *slot += 1;
        }
    }

    /// Counts `item` out (it was counted in before).
    pub fn remove(&mut self, item: &DeadLetteredItem) {
        self.items = self.items.saturating_sub(1);
        self.failures = self.failures.saturating_sub(u64::from(item.failure_count));
        self.eligible = self
            .eligible
            .saturating_sub(u64::from(item.reprocess_eligible));
        self.manual_review = self
            .manual_review
            .saturating_sub(u64::from(item.manual_review_required));
        if let Some(slot) = self.by_error_type.get_mut(type_slot(item)) {
            *slot = slot.saturating_sub(1);
        }
    }

    /// Adds another job's counters (for totals over jobs).
    pub fn merge(&mut self, other: &JobCounters) {
        self.items += other.items;
        self.failures += other.failures;
        self.eligible += other.eligible;
        self.manual_review += other.manual_review;
        for (mine, theirs) in self.by_error_type.iter_mut().zip(other.by_error_type) {
            *mine += theirs;
        }
    }

    /// The big-endian encoding stored under the job's `c` key.
    pub fn encode(&self) -> Vec<u8> {
        let mut bytes = Vec::with_capacity(ENCODED_LEN);
        for value in [self.items, self.failures, self.eligible, self.manual_review]
            .iter()
            .chain(self.by_error_type.iter())
        {
            bytes.extend_from_slice(&value.to_be_bytes());
        }
        bytes
    }

    /// Reads [`JobCounters::encode`]'s output; `None` if it is not that.
    pub fn decode(bytes: &[u8]) -> Option<JobCounters> {
        if bytes.len() != ENCODED_LEN {
            return None;
        }
        let mut values = bytes
            .chunks_exact(8)
            .filter_map(|chunk| <[u8; 8]>::try_from(chunk).ok().map(u64::from_be_bytes));
        let mut counters = JobCounters {
            items: values.next()?,
            failures: values.next()?,
            eligible: values.next()?,
            manual_review: values.next()?,
            ..JobCounters::default()
        };
        for slot in counters.by_error_type.iter_mut() {
            *slot = values.next()?;
        }
        Some(counters)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::model::FailureDetail;
    use chrono::{TimeZone, Utc};
    use proptest::prelude::*;

    fn item(kind: u8, failures: u32, eligible: bool, manual: bool) -> DeadLetteredItem {
        let error_type = match kind % 3 {
            0 => ErrorType::Timeout,
            1 => ErrorType::CommandFailed { exit_code: 1 },
            _ => ErrorType::PermissionError,
        };
        let at = Utc.timestamp_opt(1_700_000_000, 0).unwrap();
        let history = (1..=failures.max(1))
            .map(|n| FailureDetail {
                attempt_number: n,
                timestamp: at,
                error_type: error_type.clone(),
                error_message: "boom".into(),
                stack_trace: None,
                agent_id: "a".into(),
                step_failed: "s".into(),
                duration_ms: 1,
                json_log_location: None,
            })
            .collect();
        let mut item = DeadLetteredItem::new("j", "i", serde_json::json!({}), history).unwrap();
        item.reprocess_eligible = eligible;
        item.manual_review_required = manual;
        item
    }

    proptest! {
        /// Adding and removing in any order equals counting the survivors from scratch, and the
        /// encoding round-trips.
        #[test]
        fn add_remove_equals_fold_of_survivors(
            specs in proptest::collection::vec((0u8..3, 1u32..5, any::<bool>(), any::<bool>(), any::<bool>()), 0..40)
        ) {
            let mut running = JobCounters::default();
            let mut survivors = Vec::new();
            for (kind, failures, eligible, manual, keep) in specs {
                let it = item(kind, failures, eligible, manual);
                running.add(&it);
                if keep { survivors.push(it) } else { running.remove(&it) }
            }
            let mut fresh = JobCounters::default();
            for it in &survivors {
                fresh.add(it);
            }
            prop_assert_eq!(running, fresh);
            prop_assert_eq!(JobCounters::decode(&running.encode()), Some(running));
        }
    }

    #[test]
    fn malformed_encodings_are_refused() {
        assert_eq!(JobCounters::decode(&7u64.to_be_bytes()), None);
        assert_eq!(JobCounters::decode(&[]), None);
    }
}
