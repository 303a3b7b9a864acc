//! Which logged events the bus has acknowledged: a watermark plus exceptions, not one marker
//! per event.
//!
//! * Every logged event at or below the **watermark** is published or parked, except the
//!   **pending** ones: events put back after the watermark passed them (unparked), and the
//!   unpublished events of a directory migrated from the old format. Pending events keep one
//!   `u/seq` key each in sled.
//! * Above the watermark, an event is unpublished unless it is in **done**: published or
//!   parked out of order (a publish acknowledged before an earlier one). The watermark moves up
//!   over done events as soon as nothing unpublished is below them.
//! * Parked events (`p/seq` keys, [`crate::sink::projection::parked`]) are remembered here too, so they are
//!   skipped.
//!
//! The watermark and the done set are saved in sled at each checkpoint (`m/published`);
//! after a crash the state is the last checkpoint's, so events published since are published
//! again, with the same ids (duplicates, never loss). Pure bookkeeping: the caller does the
//! sled writes and gives the log's index.

use std::collections::BTreeSet;

use crate::sink::log::LogIndex;

/// The publish state of a log.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct PublishState {
    watermark: u64,
    done: BTreeSet<u64>,
    pending: BTreeSet<u64>,
    parked: BTreeSet<u64>,
    dirty: bool,
}

/// What a change asks of the sled keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PendingKey {
    /// Nothing to write.
    Keep,
    /// Delete the `u/seq` key.
    Remove,
    /// Write the `u/seq` key.
    Insert,
}

impl PublishState {
    /// The state saved as `saved` (from [`PublishState::encode`]; `None`: nothing saved), with
    /// the pending and parked sequences found in sled.
    pub(crate) fn load(
        saved: Option<&[u8]>,
        pending: impl IntoIterator<Item = u64>,
        parked: impl IntoIterator<Item = u64>,
    ) -> Option<Self> {
        let (watermark, done) = match saved {
            None => (0, BTreeSet::new()),
            Some(bytes) => decode(bytes)?,
        };
        Some(Self {
            watermark,
            done,
            pending: pending.into_iter().collect(),
            parked: parked.into_iter().collect(),
            dirty: false,
        })
    }

    /// A state whose watermark is `watermark` (everything up to it published, except the
    /// pending sequences).
    pub(crate) fn at(watermark: u64, pending: impl IntoIterator<Item = u64>) -> Self {
        Self {
            watermark,
            pending: pending.into_iter().collect(),
            ..Self::default()
        }
    }

    /// Every event at or below it is published or parked, except the pending ones.
    pub(crate) fn watermark(&self) -> u64 {
        self.watermark
    }

    /// Whether `seq` still needs publishing.
    pub(crate) fn is_unpublished(&self, seq: u64) -> bool {
        if self.pending.contains(&seq) {
            return true;
        }
        seq > self.watermark && !self.done.contains(&seq) && !self.parked.contains(&seq)
    }

    /// The pending sequences above `after`, ascending.
    pub(crate) fn pending_after(&self, after: u64) -> impl Iterator<Item = u64> + '_ {
        self.pending.range(after.saturating_add(1)..).copied()
    }

    /// How many events are unpublished, given the log's index.
    pub(crate) fn count(&self, index: &LogIndex) -> u64 {
        let above = index.count_between(self.watermark, index.durable_through());
        let skipped = self
            .done
            .iter()
            .chain(self.parked.range(self.watermark.saturating_add(1)..))
            .filter(|&&seq| seq <= index.durable_through() && index.locate(seq).is_some())
            .count() as u64;
        self.pending.len() as u64 + above.saturating_sub(skipped)
    }

    /// Records that the bus acknowledged `seq`; says what to do with its `u/seq` key.
    pub(crate) fn published(&mut self, seq: u64, index: &LogIndex) -> PendingKey {
        if self.pending.remove(&seq) {
            self.dirty = true;
            return PendingKey::Remove;
        }
        if seq > self.watermark && !self.parked.contains(&seq) && self.done.insert(seq) {
            self.dirty = true;
            self.advance(index);
        }
        PendingKey::Keep
    }

    /// Sets `seq` aside (parked); false when it was not unpublished.
    pub(crate) fn park(&mut self, seq: u64, index: &LogIndex) -> Option<PendingKey> {
        if !self.is_unpublished(seq) {
            return None;
        }
        self.parked.insert(seq);
        self.dirty = true;
        if self.pending.remove(&seq) {
            return Some(PendingKey::Remove);
        }
        self.advance(index);
        Some(PendingKey::Keep)
    }

    /// Puts a parked `seq` back among the unpublished; what to do with its `u/seq` key.
    pub(crate) fn unpark(&mut self, seq: u64) -> PendingKey {
        self.parked.remove(&seq);
        self.dirty = true;
        if seq <= self.watermark {
            self.pending.insert(seq);
            PendingKey::Insert
        } else {
            self.done.remove(&seq);
            PendingKey::Keep
        }
    }

    /// The lowest sequence whose log entry must stay: pending, parked or above the watermark.
    pub(crate) fn keep_from(&self) -> u64 {
        let mut keep = self.watermark.saturating_add(1);
        if let Some(&first) = self.pending.first() {
            keep = keep.min(first);
        }
        if let Some(&first) = self.parked.first() {
            keep = keep.min(first);
        }
        keep
    }

    /// Whether anything changed since the last [`PublishState::encode`].
    pub(crate) fn is_dirty(&self) -> bool {
        self.dirty
    }

    /// Marks the state changed (a save failed and must be retried).
    pub(crate) fn mark_dirty(&mut self) {
        self.dirty = true;
    }

    /// The watermark and done set, for `m/published`; clears the dirty flag.
    pub(crate) fn encode(&mut self) -> Vec<u8> {
        self.dirty = false;
        let mut bytes = Vec::with_capacity(8 * (1 + self.done.len()));
        bytes.extend_from_slice(&self.watermark.to_be_bytes());
        for seq in &self.done {
            bytes.extend_from_slice(&seq.to_be_bytes());
        }
        bytes
    }

    /// Moves the watermark up over done events that follow it in the log.
    fn advance(&mut self, index: &LogIndex) {
        while let Some(next) = index.next_after(self.watermark) {
            // The index holds durable events only, so `next` is durable.
            if !(self.parked.contains(&next) || self.done.remove(&next)) {
                break;
            }
            self.watermark = next;
        }
        // Done entries the watermark passed (a gap in the log) are no longer needed.
        let watermark = self.watermark;
        self.done.retain(|&seq| seq > watermark);
    }
}

fn decode(bytes: &[u8]) -> Option<(u64, BTreeSet<u64>)> {
    if bytes.len() < 8 || !bytes.len().is_multiple_of(8) {
        return None;
    }
    let mut words = bytes.chunks_exact(8).map(|chunk| {
        let mut word = [0u8; 8];
        word.copy_from_slice(chunk);
        u64::from_be_bytes(word)
    });
    let watermark = words.next()?;
    Some((watermark, words.collect()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sink::log::SegmentIndex;

    /// Events 1..=3 and 10..=12 (a gap between).
    fn index() -> LogIndex {
        let mut a = SegmentIndex::new(1, 8);
        a.push([10, 10, 10]);
        let mut b = SegmentIndex::new(10, 8);
        b.push([10, 10, 10]);
        LogIndex::new(vec![a, b], 12)
    }

    #[test]
    fn the_watermark_moves_over_gaps_and_out_of_order_acks() {
        let index = index();
        let mut state = PublishState::default();
        assert_eq!(state.count(&index), 6);
        state.published(2, &index);
        assert_eq!((state.watermark(), state.count(&index)), (0, 5));
        state.published(1, &index);
        assert_eq!(state.watermark(), 2);
        state.published(3, &index);
        assert_eq!(state.watermark(), 3);
        state.published(11, &index);
        state.published(10, &index);
        assert_eq!((state.watermark(), state.count(&index)), (11, 1));
        assert!(state.is_unpublished(12) && !state.is_unpublished(10));
    }

    #[test]
    fn parked_events_are_skipped_and_come_back_when_unparked() {
        let index = index();
        let mut state = PublishState::default();
        assert_eq!(state.park(1, &index), Some(PendingKey::Keep));
        assert_eq!(state.park(1, &index), None);
        state.published(2, &index);
        state.published(3, &index);
        assert_eq!((state.watermark(), state.count(&index)), (3, 3));
        assert_eq!(state.keep_from(), 1);
        assert_eq!(state.unpark(1), PendingKey::Insert);
        assert!(state.is_unpublished(1));
        assert_eq!(state.count(&index), 4);
        assert_eq!(state.published(1, &index), PendingKey::Remove);
        assert_eq!((state.count(&index), state.keep_from()), (3, 4));
    }

    #[test]
    fn the_saved_state_reads_back_and_garbage_is_refused() {
        let index = index();
        let mut state = PublishState::default();
        state.published(1, &index);
        state.published(3, &index);
        assert!(state.is_dirty());
        let bytes = state.encode();
        assert!(!state.is_dirty());
        let loaded = PublishState::load(Some(&bytes), [], []).unwrap();
        assert_eq!(loaded, state);
        assert_eq!(PublishState::load(Some(b"short"), [], []), None);
    }
}
