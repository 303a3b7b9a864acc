//! A set of log sequences kept as ranges: acknowledged events arrive nearly in order, so a
//! second's worth of them is one range or a few, whatever the rate.

use std::collections::BTreeMap;

/// Sequences as disjoint, non-adjacent inclusive ranges (first -> last).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Seqs {
    ranges: BTreeMap<u64, u64>,
    len: u64,
}

impl Seqs {
    /// How many sequences.
    pub(crate) fn len(&self) -> u64 {
        self.len
    }

    /// How many ranges hold them (what the set costs in memory).
    pub(crate) fn ranges(&self) -> usize {
        self.ranges.len()
    }

    /// The lowest sequence.
    pub(crate) fn first(&self) -> Option<u64> {
        self.ranges.keys().next().copied()
    }

    /// Whether `seq` is in the set.
    pub(crate) fn contains(&self, seq: u64) -> bool {
        self.ranges
            .range(..=seq)
            .next_back()
            .is_some_and(|(_, &last)| seq <= last)
    }

    /// Adds `seq`; false when it was there already.
    pub(crate) fn insert(&mut self, seq: u64) -> bool {
        if self.contains(seq) {
            return false;
        }
        let before = self
            .ranges
            .range(..seq)
            .next_back()
            .filter(|(_, &last)| last.checked_add(1) == Some(seq))
            .map(|(&first, _)| first);
        let after = seq
            .checked_add(1)
            .and_then(|next| self.ranges.get(&next).copied());
        let first = before.unwrap_or(seq);
        let last = match after {
            Some(last) => {
                self.ranges.remove(&(seq + 1));
                last
            }
            None => seq,
        };
        self.ranges.insert(first, last);
        self.len += 1;
        true
    }

    /// Removes `seq`; false when it was not there.
    pub(crate) fn remove(&mut self, seq: u64) -> bool {
        let Some((&first, &last)) = self.ranges.range(..=seq).next_back() else {
            return false;
        };
        if seq > last {
            return false;
        }
        self.ranges.remove(&first);
        if first < seq {
            self.ranges.insert(first, seq - 1);
        }
        if seq < last {
            self.ranges.insert(seq + 1, last);
        }
        self.len -= 1;
        true
    }

    /// The sequences of this set that `other` lacks, in order.
    pub(crate) fn missing_from(&self, other: &Seqs) -> Vec<u64> {
        let mut missing = Vec::new();
        for (&first, &last) in &self.ranges {
            let mut seq = first;
            while seq <= last {
                // Skip whole ranges of `other` at once.
                match other.ranges.range(..=seq).next_back() {
                    Some((_, &held_last)) if seq <= held_last => {
                        seq = held_last.saturating_add(1);
                        if held_last == u64::MAX {
                            break;
                        }
                    }
                    _ => {
                        missing.push(seq);
                        seq += 1;
                    }
                }
            }
        }
        missing
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn of(seqs: &[u64]) -> Seqs {
        let mut set = Seqs::default();
        for &seq in seqs {
            set.insert(seq);
        }
        set
    }

    #[test]
    fn sequences_in_any_order_merge_into_ranges() {
        let set = of(&[3, 1, 2, 5, 7, 6]);
        assert_eq!((set.len(), set.ranges()), (6, 2));
        assert!(set.contains(2) && set.contains(7) && !set.contains(4));
        let mut set = of(&[1, 3]);
        assert!(set.insert(2));
        assert!(!set.insert(2));
        assert_eq!((set.len(), set.ranges(), set.first()), (3, 1, Some(1)));
    }

    #[test]
    fn removing_splits_a_range() {
        let mut set = of(&[1, 2, 3, 4]);
        assert!(set.remove(2));
        assert!(!set.remove(2));
        assert_eq!((set.len(), set.ranges()), (3, 2));
        assert_eq!(set.missing_from(&of(&[1])), vec![3, 4]);
    }

    #[test]
    fn what_another_set_lacks() {
        let tracked = of(&[1, 2, 3, 4, 5, 9]);
        assert_eq!(tracked.missing_from(&of(&[1, 2, 4, 5])), vec![3, 9]);
        assert_eq!(tracked.missing_from(&of(&[])), vec![1, 2, 3, 4, 5, 9]);
        assert!(tracked
            .missing_from(&of(&[0, 1, 2, 3, 4, 5, 6, 7, 8, 9]))
            .is_empty());
    }
}
