//! Where each durable event is: per segment, its first sequence and the offset of every frame.
//!
//! The writer keeps the index as it appends and deletes; readers share it
//! ([`SharedIndex`]) to read one event with one positioned read, or a run of events with one
//! read per chunk. Only events up to the durable mark are in it. Old segments may be left
//! **unscanned** when the log opens (everything in them is known done): they count as empty
//! here until a reader scans them (`LogReader`). Pure bookkeeping: no I/O.

use std::sync::{Arc, RwLock};

/// One segment: its first sequence and where its durable frames start and end.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SegmentIndex {
    /// The sequence of its first frame (and its file name).
    pub first_seq: u64,
    /// The byte offset of each durable frame; frame `i` holds `first_seq + i`.
    starts: Vec<u32>,
    /// Where the last durable frame ends.
    end: u64,
    /// False until its frames were read (see the module doc).
    scanned: bool,
}

impl SegmentIndex {
    /// An empty segment whose frames will start at `header_len`.
    pub fn new(first_seq: u64, header_len: u64) -> Self {
        Self {
            first_seq,
            starts: Vec::new(),
            end: header_len,
            scanned: true,
        }
    }

    /// A segment whose frames have not been read yet.
    pub fn unscanned(first_seq: u64) -> Self {
        Self {
            scanned: false,
            ..Self::new(first_seq, 0)
        }
    }

    /// A scanned segment from its frames' offsets and where the last one ends (as its
    /// sidecar file keeps them, `super::sidecar`).
    pub(super) fn from_parts(first_seq: u64, starts: Vec<u32>, end: u64) -> Self {
        Self {
            first_seq,
            starts,
            end,
            scanned: true,
        }
    }

    /// Its frames' offsets and where the last one ends.
    pub(super) fn parts(&self) -> (&[u32], u64) {
        (&self.starts, self.end)
    }

    /// Whether its frames were read.
    pub fn is_scanned(&self) -> bool {
        self.scanned
    }

    /// How many durable events it holds.
    pub fn len(&self) -> u64 {
        self.starts.len() as u64
    }

    /// True when it holds no durable event.
    pub fn is_empty(&self) -> bool {
        self.starts.is_empty()
    }

    /// Its last durable sequence, if any.
    pub fn last_seq(&self) -> Option<u64> {
        (!self.starts.is_empty()).then(|| self.first_seq + self.len() - 1)
    }

    /// The byte range of the frame of `seq`, if it is here.
    pub fn frame(&self, seq: u64) -> Option<(u64, u64)> {
        let i = usize::try_from(seq.checked_sub(self.first_seq)?).ok()?;
        let start = u64::from(*self.starts.get(i)?);
        let end = match self.starts.get(i + 1) {
            Some(next) => u64::from(*next),
            None => self.end,
        };
        Some((start, end))
    }

    /// Records frames of `lens` bytes each, appended after the last one.
    pub fn push(&mut self, lens: impl IntoIterator<Item = usize>) {
        for len in lens {
            self.starts
                .push(u32::try_from(self.end).unwrap_or(u32::MAX));
            self.end += len as u64;
        }
    }
}

/// The durable events of a log, by segment.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LogIndex {
    segments: Vec<SegmentIndex>,
    durable_through: u64,
}

/// The index shared by the writer (who changes it) and readers.
pub(super) type SharedIndex = Arc<RwLock<LogIndex>>;

impl LogIndex {
    /// The index of `segments` (ascending) with `durable_through` as the durable mark.
    pub fn new(segments: Vec<SegmentIndex>, durable_through: u64) -> Self {
        Self {
            segments,
            durable_through,
        }
    }

    /// The highest acknowledged sequence (0 before any).
    pub fn durable_through(&self) -> u64 {
        self.durable_through
    }

    /// The segments, ascending.
    pub fn segments(&self) -> &[SegmentIndex] {
        &self.segments
    }

    /// The segment holding `seq` and the byte range of its frame.
    pub fn locate(&self, seq: u64) -> Option<(u64, u64, u64)> {
        let at = self
            .segments
            .partition_point(|segment| segment.first_seq <= seq)
            .checked_sub(1)?;
        let segment = self.segments.get(at)?;
        let (start, end) = segment.frame(seq)?;
        Some((segment.first_seq, start, end))
    }

    /// The first durable sequence above `seq`, if any.
    pub fn next_after(&self, seq: u64) -> Option<u64> {
        self.segments.iter().find_map(|segment| {
            let last = segment.last_seq()?;
            (last > seq).then(|| segment.first_seq.max(seq + 1))
        })
    }

    /// The last durable sequence at or below `seq`, if any.
    pub fn last_at_or_below(&self, seq: u64) -> Option<u64> {
        self.segments.iter().rev().find_map(|segment| {
            let last = segment.last_seq()?;
            (segment.first_seq <= seq).then(|| last.min(seq))
        })
    }

    /// How many durable events have a sequence in `after + 1 ..= through`.
    pub fn count_between(&self, after: u64, through: u64) -> u64 {
        self.segments
            .iter()
            .filter_map(|segment| {
                let last = segment.last_seq()?.min(through);
                let first = segment.first_seq.max(after.saturating_add(1));
                (last >= first).then(|| last - first + 1)
            })
            .sum()
    }

    /// The first durable sequence, if any.
    #[cfg(any(test, feature = "testing"))]
    pub fn first_seq(&self) -> Option<u64> {
        self.next_after(0)
    }

    /// The first sequences of the unscanned segments that may hold sequences at or above
    /// `from` (all of them for `from` 0), ascending.
    pub fn unscanned_from(&self, from: u64) -> Vec<u64> {
        let mut found = Vec::new();
        for (i, segment) in self.segments.iter().enumerate() {
            let next = self.segments.get(i + 1).map_or(u64::MAX, |s| s.first_seq);
            if !segment.scanned && next > from {
                found.push(segment.first_seq);
            }
        }
        found
    }

    /// The first sequence of the segment after the one starting at `first_seq`, if any.
    pub fn next_segment(&self, first_seq: u64) -> Option<u64> {
        let at = self.segments.partition_point(|s| s.first_seq <= first_seq);
        self.segments.get(at).map(|s| s.first_seq)
    }

    /// Puts the scanned `segment` in place of its unscanned entry.
    pub(super) fn fill(&mut self, segment: SegmentIndex) {
        if let Some(slot) = self
            .segments
            .iter_mut()
            .find(|s| s.first_seq == segment.first_seq && !s.scanned)
        {
            *slot = segment;
        }
    }

    /// Adds an empty segment after the others.
    pub(super) fn push_segment(&mut self, segment: SegmentIndex) {
        self.segments.push(segment);
    }

    /// Records a durable group of frames (`lens` bytes each) at the end of the last segment.
    pub(super) fn push_group(&mut self, lens: impl IntoIterator<Item = usize>, through: u64) {
        if let Some(last) = self.segments.last_mut() {
            last.push(lens);
        }
        self.durable_through = through;
    }

    /// Forgets the first `count` segments (deleted).
    pub(super) fn drop_front(&mut self, count: usize) {
        self.segments.drain(..count.min(self.segments.len()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn index() -> LogIndex {
        let mut a = SegmentIndex::new(1, 8);
        a.push([20, 30, 40]);
        let empty = SegmentIndex::new(4, 8);
        let mut b = SegmentIndex::new(10, 8);
        b.push([5, 5]);
        LogIndex::new(vec![a, empty, b], 11)
    }

    #[test]
    fn frames_are_located_by_sequence() {
        let index = index();
        assert_eq!(index.locate(1), Some((1, 8, 28)));
        assert_eq!(index.locate(3), Some((1, 58, 98)));
        assert_eq!(index.locate(4), None);
        assert_eq!(index.locate(9), None);
        assert_eq!(index.locate(11), Some((10, 13, 18)));
        assert_eq!(index.locate(12), None);
        assert_eq!(index.locate(0), None);
    }

    #[test]
    fn counting_and_walking_skip_the_gaps() {
        let index = index();
        assert_eq!(index.count_between(0, 11), 5);
        assert_eq!(index.count_between(2, 10), 2);
        assert_eq!(index.count_between(3, 9), 0);
        assert_eq!(index.count_between(11, 20), 0);
        assert_eq!(index.next_after(0), Some(1));
        assert_eq!(index.next_after(3), Some(10));
        assert_eq!(index.next_after(10), Some(11));
        assert_eq!(index.next_after(11), None);
        assert_eq!(index.first_seq(), Some(1));
        assert_eq!(index.last_at_or_below(9), Some(3));
        assert_eq!(index.last_at_or_below(20), Some(11));
        assert_eq!(index.last_at_or_below(0), None);
    }
}
