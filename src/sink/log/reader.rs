//! Recovery (what opening finds in the segments) and reading events back.

use std::collections::VecDeque;

use super::error::LogError;
use super::frame::FrameError;
use super::io::LogFs;
use super::segment::{self, Kind};

/// What opening found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Recovery {
    /// Segments found, by first sequence.
    pub segments: Vec<u64>,
    /// The last intact event (0 when there is none).
    pub last_seq: u64,
    /// The first sequence the writer may hand out: above every event and every name found.
    pub next_seq: u64,
    /// Torn tails found (file, offset, what was torn), each the end of an append a crash or a
    /// failed write cut short; the events before them are kept, the bytes ignored.
    pub torn: Vec<(String, usize, FrameError)>,
    /// Segments whose creation never finished (`*.seg.tmp`), to be deleted.
    pub unfinished: Vec<String>,
}

/// Scans every segment of the directory. Fails on damage no crash leaves.
pub fn recover<F: LogFs>(fs: &F) -> Result<Recovery, LogError> {
    let names = fs.list().map_err(|source| LogError::List { source })?;
    let mut segments = Vec::new();
    let mut unfinished = Vec::new();
    let mut reserved = 0;
    for name in names {
        match segment::classify(&name) {
            Kind::Segment(seq) => segments.push(seq),
            Kind::Unfinished(seq) => {
                reserved = reserved.max(seq);
                unfinished.push(name);
            }
            Kind::Other => {}
        }
    }
    segments.sort_unstable();
    let mut recovery = Recovery {
        segments,
        last_seq: 0,
        next_seq: 1,
        torn: Vec::new(),
        unfinished,
    };
    for &first_seq in &recovery.segments {
        let file = segment::name(first_seq);
        if recovery.last_seq >= first_seq {
            return Err(LogError::Overlap {
                file,
                first_seq,
                previous_last: recovery.last_seq,
            });
        }
        let (scan, _) = scan_file(fs, first_seq)?;
        if let Some(reason) = scan.torn.clone() {
            recovery.torn.push((file, scan.valid_len, reason));
        }
        recovery.last_seq = scan.last_seq().unwrap_or(recovery.last_seq);
        reserved = reserved.max(first_seq);
    }
    recovery.next_seq = recovery.last_seq.max(reserved).saturating_add(1);
    Ok(recovery)
}

fn scan_file<F: LogFs>(fs: &F, first_seq: u64) -> Result<(segment::Scan, Vec<u8>), LogError> {
    let file = segment::name(first_seq);
    let bytes = fs.read(&file).map_err(|source| LogError::Read {
        file: file.clone(),
        source,
    })?;
    match segment::scan(&bytes, first_seq) {
        Ok(scan) => Ok((scan, bytes)),
        Err((offset, damage)) => Err(LogError::Damaged {
            file,
            offset,
            damage,
        }),
    }
}

/// An event read back from the log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// Its sequence.
    pub seq: u64,
    /// Its bytes, as appended.
    pub payload: Vec<u8>,
}

/// The events from one sequence on, in order, never past a durable mark; reads one segment at
/// a time.
#[derive(Debug)]
pub struct Records<'a, F> {
    fs: &'a F,
    /// First sequences of the segments still to read.
    segments: VecDeque<u64>,
    from: u64,
    through: u64,
    ready: VecDeque<Record>,
}

impl<'a, F: LogFs> Records<'a, F> {
    /// Reads the events `from..=through` of the segments starting at `segments` (sorted).
    pub(super) fn new(fs: &'a F, segments: &[u64], from: u64, through: u64) -> Self {
        let wanted = segments
            .iter()
            .enumerate()
            .filter(|(i, &first)| {
                let next = segments.get(i + 1).copied().unwrap_or(u64::MAX);
                first <= through && next > from
            })
            .map(|(_, &first)| first)
            .collect();
        Records {
            fs,
            segments: wanted,
            from,
            through,
            ready: VecDeque::new(),
        }
    }
}

impl<F: LogFs> Iterator for Records<'_, F> {
    type Item = Result<Record, LogError>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            if let Some(record) = self.ready.pop_front() {
                return Some(Ok(record));
            }
            let first_seq = self.segments.pop_front()?;
            let (scan, bytes) = match scan_file(self.fs, first_seq) {
                Ok(found) => found,
                Err(err) => {
                    self.segments.clear();
                    return Some(Err(err));
                }
            };
            for (seq, range) in scan.frames {
                if seq >= self.from && seq <= self.through {
                    let payload = bytes.get(range).unwrap_or_default().to_vec();
                    self.ready.push_back(Record { seq, payload });
                }
            }
        }
    }
}
