//! One run's entries in memory: every entry in one buffer, so loading, editing and writing a
//! run of 32 entries costs two allocations, not one per entry. Pure code, no I/O.

use std::ops::Range;

/// Sorted, distinct entries, stored back to back.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Run {
    bytes: Vec<u8>,
    /// Where each entry ends in `bytes`.
    ends: Vec<usize>,
}

impl Run {
    /// An empty run with room for `bytes` bytes of entries.
    pub(crate) fn with_capacity(bytes: usize) -> Self {
        Run {
            bytes: Vec::with_capacity(bytes),
            ends: Vec::new(),
        }
    }

    /// How many entries the run holds.
    pub(crate) fn len(&self) -> usize {
        self.ends.len()
    }

    /// True when the run holds no entry.
    pub(crate) fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    /// The `index`th entry (empty past the end).
    pub(crate) fn get(&self, index: usize) -> &[u8] {
        self.bytes.get(self.span(index)).unwrap_or_default()
    }

    /// The last entry, if any.
    pub(crate) fn last(&self) -> Option<&[u8]> {
        self.len().checked_sub(1).map(|last| self.get(last))
    }

    /// The entries in order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = &[u8]> + '_ {
        (0..self.len()).map(|index| self.get(index))
    }

    /// A run of the entries at `indexes` (clamped to the run).
    pub(crate) fn slice(&self, indexes: Range<usize>) -> Run {
        let end = indexes.end.min(self.len());
        let start = indexes.start.min(end);
        let from = self.span(start).start;
        let to = match end {
            0 => 0,
            _ => self.span(end - 1).end,
        };
        Run {
            bytes: self.bytes.get(from..to).unwrap_or_default().to_vec(),
            ends: self
                .ends
                .get(start..end)
                .unwrap_or_default()
                .iter()
                .map(|e| e - from)
                .collect(),
        }
    }

    /// Where `entry` is (`Ok`) or would go (`Err`).
    pub(crate) fn search(&self, entry: &[u8]) -> Result<usize, usize> {
        let (mut low, mut high) = (0, self.len());
        while low < high {
            let middle = low + (high - low) / 2;
            match self.get(middle).cmp(entry) {
                std::cmp::Ordering::Less => low = middle + 1,
                std::cmp::Ordering::Greater => high = middle,
                std::cmp::Ordering::Equal => return Ok(middle),
            }
        }
        Err(low)
    }

    /// Appends `entry`, which the caller knows sorts after every entry.
    pub(crate) fn push(&mut self, entry: &[u8]) {
        self.bytes.extend_from_slice(entry);
        self.ends.push(self.bytes.len());
    }

    /// Appends an entry made of the first `shared` bytes of the last entry and then `own`;
    /// `None` (nothing changed) if there is no such prefix.
    pub(crate) fn push_shared(&mut self, shared: usize, own: &[u8]) -> Option<()> {
        let start = self.span(self.len().checked_sub(1)?).start;
        if shared > 0 {
            let last_end = *self.ends.last()?;
            if start + shared > last_end {
                return None;
            }
            self.bytes.extend_from_within(start..start + shared);
        }
        self.bytes.extend_from_slice(own);
        self.ends.push(self.bytes.len());
        Some(())
    }

    /// Inserts `entry` at `index` (from [`Run::search`]).
    pub(crate) fn insert(&mut self, index: usize, entry: &[u8]) {
        let at = self.span(index).start;
        self.bytes.splice(at..at, entry.iter().copied());
        for end in self.ends.iter_mut().skip(index) {
            *end += entry.len();
        }
        self.ends.insert(index, at + entry.len());
    }

    /// Removes the entry at `index`.
    pub(crate) fn remove(&mut self, index: usize) {
        if index >= self.len() {
            return;
        }
        let span = self.span(index);
        let removed = span.len();
        self.bytes.drain(span);
        self.ends.remove(index);
        for end in self.ends.iter_mut().skip(index) {
            *end -= removed;
        }
    }

    /// The bytes of entry `index`; an empty span at the end past the last entry.
    fn span(&self, index: usize) -> Range<usize> {
        let start = match index {
            0 => 0,
            _ => self
                .ends
                .get(index - 1)
                .copied()
                .unwrap_or(self.bytes.len()),
        };
        let end = self.ends.get(index).copied().unwrap_or(start);
        start..end
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run_of(entries: &[&[u8]]) -> Run {
        let mut run = Run::default();
        entries.iter().for_each(|entry| run.push(entry));
        run
    }

    #[test]
    fn inserts_and_removes_keep_the_entries_in_place() {
        let mut run = run_of(&[b"b", b"dd"]);
        let at = run.search(b"a").unwrap_err();
        run.insert(at, b"a");
        let at = run.search(b"ccc").unwrap_err();
        run.insert(at, b"ccc");
        let at = run.search(b"e").unwrap_err();
        run.insert(at, b"e");
        assert_eq!(
            run.iter().collect::<Vec<_>>(),
            [&b"a"[..], b"b", b"ccc", b"dd", b"e"]
        );
        assert_eq!(run.search(b"dd"), Ok(3));
        run.remove(2);
        run.remove(0);
        run.remove(7);
        assert_eq!(run.iter().collect::<Vec<_>>(), [&b"b"[..], b"dd", b"e"]);
        assert_eq!(run.last(), Some(&b"e"[..]));
        run.remove(2);
        run.remove(1);
        run.remove(0);
        assert!(run.is_empty() && run.last().is_none());
        assert_eq!(run, Run::default());
    }

    #[test]
    fn a_slice_holds_the_entries_it_names() {
        let run = run_of(&[b"a", b"bb", b"ccc", b"dddd"]);
        assert_eq!(run.slice(1..3), run_of(&[b"bb", b"ccc"]));
        assert_eq!(run.slice(0..4), run);
        assert_eq!(run.slice(3..9), run_of(&[b"dddd"]));
        assert_eq!(run.slice(2..2), Run::default());
        assert_eq!(run.slice(5..9), Run::default());
    }

    #[test]
    fn a_shared_prefix_comes_from_the_last_entry() {
        let mut run = run_of(&[b"job-1"]);
        assert_eq!(run.push_shared(4, b"2"), Some(()));
        assert_eq!(run.get(1), b"job-2");
        assert_eq!(run.push_shared(6, b"x"), None);
        assert_eq!(Run::default().push_shared(0, b"x"), None);
        assert_eq!(run.len(), 2);
    }
}
