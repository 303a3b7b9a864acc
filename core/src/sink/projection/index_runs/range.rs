//! Walking an index in order: the logical keys of a range, read run by run.

use super::run::Run;
use super::{codec, logical_key, run_kind};
use crate::sink::{show_key, SinkError};

/// The logical index keys from `from` (included) to `to` (excluded; `None`: the end of the
/// index), in order. `from` names the index by its first byte (`a`, `r` or `f`); anything else
/// yields nothing. Holds one run at a time.
pub(crate) fn range(tree: &sled::Tree, from: &[u8], to: Option<&[u8]>) -> RunRange {
    let Some(kind) = run_kind(from) else {
        return RunRange::empty();
    };
    let target = [&[kind][..], &from[1..]].concat();
    // The run holding `from`: the last keyed at or below it (the sentinel keys the first).
    let start = match tree.range(vec![kind]..=target).next_back() {
        Some(Ok((key, _))) => key.to_vec(),
        Some(Err(err)) => return RunRange::failed(err.into()),
        None => vec![kind],
    };
    RunRange {
        kind,
        from: from.to_vec(),
        to: to.map(<[u8]>::to_vec),
        runs: Some(tree.range(start..vec![kind + 1])),
        pending: Run::default(),
        taken: 0,
        last: None,
        error: None,
    }
}

/// The iterator [`range`] returns.
pub(crate) struct RunRange {
    kind: u8,
    from: Vec<u8>,
    to: Option<Vec<u8>>,
    /// The runs not read yet; `None` once the walk is over.
    runs: Option<sled::Iter>,
    /// The current run, and how many of its entries were returned.
    pending: Run,
    taken: usize,
    /// The last key returned: a run rewritten during the walk may repeat entries.
    last: Option<Vec<u8>>,
    error: Option<SinkError>,
}

impl RunRange {
    fn empty() -> Self {
        RunRange {
            kind: 0,
            from: Vec::new(),
            to: None,
            runs: None,
            pending: Run::default(),
            taken: 0,
            last: None,
            error: None,
        }
    }

    fn failed(error: SinkError) -> Self {
        RunRange {
            error: Some(error),
            ..Self::empty()
        }
    }

    /// Reads the next run into `pending`; `false` at the end.
    fn next_run(&mut self) -> Result<bool, SinkError> {
        let Some(runs) = self.runs.as_mut() else {
            return Ok(false);
        };
        let Some(found) = runs.next() else {
            self.runs = None;
            return Ok(false);
        };
        let (key, value) = found?;
        if let Some(to) = &self.to {
            // Runs keyed at or past the end hold nothing before it.
            if key.get(1..) >= to.get(1..) {
                self.runs = None;
                return Ok(false);
            }
        }
        let entries = codec::decode(&value).ok_or_else(|| SinkError::Corrupt {
            key: show_key(&key),
            reason: "malformed index run".into(),
            source: None,
        })?;
        (self.pending, self.taken) = (entries, 0);
        Ok(true)
    }
}

impl Iterator for RunRange {
    type Item = Result<Vec<u8>, SinkError>;

    fn next(&mut self) -> Option<Self::Item> {
        if let Some(err) = self.error.take() {
            self.runs = None;
            return Some(Err(err));
        }
        loop {
            if self.taken >= self.pending.len() {
                match self.next_run() {
                    Ok(true) => continue,
                    Ok(false) => return None,
                    Err(err) => {
                        self.runs = None;
                        return Some(Err(err));
                    }
                }
            }
            let key = logical_key(self.kind, self.pending.get(self.taken));
            self.taken += 1;
            if key < self.from || self.last.as_ref().is_some_and(|last| key <= *last) {
                continue;
            }
            if self.to.as_ref().is_some_and(|to| key >= *to) {
                self.runs = None;
                self.pending = Run::default();
                return None;
            }
            self.last = Some(key.clone());
            return Some(Ok(key));
        }
    }
}
