//! Which stream sequences of a range a reader has seen: one bit each.

/// A set of sequences within `first..=last`.
#[derive(Debug, Clone)]
pub(crate) struct SeqSet {
    first: u64,
    last: u64,
    bits: Vec<u64>,
}

impl SeqSet {
    /// An empty set over `first..=last` (empty range when `last < first`).
    pub(crate) fn new(first: u64, last: u64) -> SeqSet {
        let len = last.saturating_sub(first).saturating_add(1);
        let words = if last < first { 0 } else { len.div_ceil(64) };
        SeqSet {
            first,
            last,
            bits: vec![0; usize::try_from(words).unwrap_or(0)],
        }
    }

    fn slot(&self, seq: u64) -> Option<(usize, u64)> {
        if seq < self.first || seq > self.last {
            return None;
        }
        let offset = seq - self.first;
        Some((usize::try_from(offset / 64).ok()?, 1u64 << (offset % 64)))
    }

    /// Adds `seq`; false if it was already there or is outside the range.
    pub(crate) fn insert(&mut self, seq: u64) -> bool {
        let Some((word, bit)) = self.slot(seq) else {
            return false;
        };
        let Some(cell) = self.bits.get_mut(word) else {
            return false;
        };
        let fresh = *cell & bit == 0;
        *cell |= bit;
        fresh
    }

    /// The sequences of the range not in the set, in order.
    pub(crate) fn missing(&self) -> impl Iterator<Item = u64> + '_ {
        // Empty when last < first.
        (self.first..=self.last).filter(|&seq| {
            self.slot(seq)
                .and_then(|(word, bit)| self.bits.get(word).map(|cell| cell & bit == 0))
                .unwrap_or(false)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn missing_is_the_range_minus_what_was_inserted(first in 1u64..1000, len in 0u64..300, picks in proptest::collection::vec(0u64..400, 0..200)) {
            let last = first + len;
            let mut set = SeqSet::new(first, last);
            let mut model = std::collections::BTreeSet::new();
            for pick in picks {
                let seq = first + pick;
                let inside = seq <= last;
                prop_assert_eq!(set.insert(seq), inside && model.insert(seq));
            }
            let expected: Vec<u64> = (first..=last).filter(|s| !model.contains(s)).collect();
            prop_assert_eq!(set.missing().collect::<Vec<_>>(), expected);
        }
    }

    #[test]
    fn an_empty_range_has_nothing_missing() {
        let mut set = SeqSet::new(5, 4);
        assert!(!set.insert(5));
        assert_eq!(set.missing().count(), 0);
    }
}
