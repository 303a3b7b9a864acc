//! Recovery (what opening finds in the segments) and reading durable events back.

use std::collections::VecDeque;
use std::sync::RwLockReadGuard;

use super::error::LogError;
use super::frame::{self, FrameError};
use super::index::{LogIndex, SegmentIndex, SharedIndex};
use super::io::LogFs;
use super::segment::{self, Damage, Kind};
use super::sidecar;

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
    /// Torn tails of the newest segment with intact frames after a hole (file, offset): cut
    /// off at open, before anything is appended after them (`super::segment`'s module doc).
    pub cut: Vec<(String, usize)>,
    /// Segments whose creation never finished (`*.seg.tmp`), to be deleted.
    pub unfinished: Vec<String>,
    /// Segments whose frames were taken from a sidecar that fits them instead of a scan.
    pub from_sidecars: usize,
    /// Where every intact frame is.
    pub index: LogIndex,
}

/// Scans the segments of the directory. Fails on damage no crash leaves.
///
/// Segments whose events are all at or below `lazy_through` (known done by the caller) are
/// left unscanned: a reader scans them when it needs them. The newest segments are always
/// scanned, back to one that holds an event, so the last event and the next sequence are known.
pub(super) fn recover<F: LogFs>(fs: &F, lazy_through: u64) -> Result<Recovery, LogError> {
    let names = fs.list().map_err(|source| LogError::List { source })?;
    let mut segments = Vec::new();
    let mut unfinished = Vec::new();
    let mut reserved = 0;
    for name in names {
        match segment::classify(&name) {
            Kind::Segment(seq) => {
                reserved = reserved.max(seq);
                segments.push(seq);
            }
            Kind::Unfinished(seq) => {
                reserved = reserved.max(seq);
                unfinished.push(name);
            }
            Kind::Other => {}
        }
    }
    segments.sort_unstable();
    let mut indexes: Vec<SegmentIndex> = segments
        .iter()
        .map(|&first| SegmentIndex::unscanned(first))
        .collect();
    let bound = |i: usize| segments.get(i + 1).map_or(u64::MAX, |next| next - 1);
    let mut start = (0..segments.len())
        .find(|&i| bound(i) > lazy_through)
        .unwrap_or(segments.len().saturating_sub(1));
    let mut torn = Vec::new();
    let mut cut = Vec::new();
    let mut from_sidecars = 0;
    loop {
        let mut previous_last = 0;
        for (i, &first_seq) in segments.iter().enumerate().skip(start) {
            let file = segment::name(first_seq);
            if previous_last >= first_seq {
                return Err(LogError::Overlap {
                    file,
                    first_seq,
                    previous_last,
                });
            }
            if let Some(index) = indexes.get_mut(i).filter(|index| !index.is_scanned()) {
                // A sidecar that fits the segment's length as it is now (a sealed segment's,
                // or the active one's as the last clean close left it) saves the scan.
                let kept = sidecar::load(fs, first_seq);
                *index = match kept {
                    Some(kept) => {
                        from_sidecars += 1;
                        kept
                    }
                    None => {
                        let newest = i + 1 == segments.len();
                        let (scanned, tail, frames_after) = scan_segment(fs, first_seq, newest)?;
                        if frames_after.is_some() {
                            cut.push((file.clone(), scanned_len(&scanned)));
                        }
                        if let Some(reason) = tail {
                            torn.push((file, scanned_len(&scanned), reason));
                        }
                        scanned
                    }
                };
            }
            previous_last = indexes
                .get(i)
                .and_then(SegmentIndex::last_seq)
                .unwrap_or(previous_last);
        }
        let found_event = indexes.iter().skip(start).any(|index| !index.is_empty());
        if found_event || start == 0 {
            break;
        }
        start -= 1;
    }
    let last_seq = indexes
        .iter()
        .rev()
        .find_map(SegmentIndex::last_seq)
        .unwrap_or(0);
    Ok(Recovery {
        segments,
        last_seq,
        next_seq: last_seq.max(reserved).saturating_add(1),
        torn,
        cut,
        unfinished,
        from_sidecars,
        index: LogIndex::new(indexes, last_seq),
    })
}

fn scanned_len(index: &SegmentIndex) -> usize {
    let last = index.last_seq().and_then(|seq| index.frame(seq));
    let end = last.map_or(segment::MAGIC.len() as u64, |(_, end)| end);
    usize::try_from(end).unwrap_or(usize::MAX)
}

/// Scans one segment (`newest`: the newest of the log, see `segment::scan_newest`): its
/// index, the torn tail after its last intact frame, if any, and where an intact frame follows
/// that tail after a hole.
fn scan_segment<F: LogFs>(
    fs: &F,
    first_seq: u64,
    newest: bool,
) -> Result<(SegmentIndex, Option<FrameError>, Option<usize>), LogError> {
    let scan = scan_file(fs, first_seq, newest)?;
    let mut index = SegmentIndex::new(first_seq, segment::MAGIC.len() as u64);
    index.push(
        scan.frames
            .iter()
            .map(|(_, payload)| frame::encoded_len(payload.len())),
    );
    Ok((index, scan.torn, scan.frames_after))
}

fn scan_file<F: LogFs>(fs: &F, first_seq: u64, newest: bool) -> Result<segment::Scan, LogError> {
    let file = segment::name(first_seq);
    let bytes = fs.read(&file).map_err(|source| LogError::Read {
        file: file.clone(),
        source,
    })?;
    let scan = if newest {
        segment::scan_newest(&bytes, first_seq)
    } else {
        segment::scan(&bytes, first_seq)
    };
    scan.map_err(|(offset, damage)| LogError::Damaged {
        file,
        offset,
        damage,
    })
}

/// An event read back from the log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// Its sequence.
    pub seq: u64,
    /// Its bytes, as appended.
    pub payload: Vec<u8>,
}

/// One event read: its bytes, `None` when the log does not hold it, or why it cannot be read.
pub(super) type ReadResult = Result<Option<Vec<u8>>, LogError>;

/// Reads durable events of a log that a writer (in this process) keeps appending to.
/// Cheap to clone.
#[derive(Debug, Clone)]
pub struct LogReader<F> {
    fs: F,
    index: SharedIndex,
}

impl<F: LogFs + Clone> LogReader<F> {
    /// A reader of the log in `fs` whose durable events `index` describes.
    pub(super) fn new(fs: F, index: SharedIndex) -> Self {
        Self { fs, index }
    }

    /// The index as of now (hold it briefly: the writer waits for it).
    pub fn index(&self) -> RwLockReadGuard<'_, LogIndex> {
        self.index
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The highest acknowledged sequence.
    pub fn durable_through(&self) -> u64 {
        self.index().durable_through()
    }

    /// The durable event `seq`, if the log holds it.
    pub fn read(&self, seq: u64) -> Result<Option<Vec<u8>>, LogError> {
        self.scan_unscanned(seq, seq)?;
        let Some(found) = self.index().locate(seq) else {
            return Ok(None);
        };
        let mut records = read_run(&self.fs, found, seq, seq)?;
        Ok(records.pop_front().map(|record| record.payload))
    }

    /// The durable events `seqs` (ascending), each `None` when the log does not hold it. Runs
    /// of neighbouring events are read with one read each; a run that cannot be read is read
    /// again event by event, so an error names the event it is about.
    pub fn read_many(&self, seqs: &[u64]) -> Vec<(u64, ReadResult)> {
        let (Some(&first), Some(&last)) = (seqs.first(), seqs.last()) else {
            return Vec::new();
        };
        if let Err(err) = self.scan_unscanned(first, last) {
            return vec![(first, Err(err))];
        }
        let mut runs: Vec<((u64, u64, u64), u64, u64)> = Vec::new();
        let mut missing = Vec::new();
        {
            let index = self.index();
            for &seq in seqs {
                let Some((segment, start, end)) = index.locate(seq) else {
                    missing.push(seq);
                    continue;
                };
                match runs.last_mut() {
                    Some(((run_segment, run_start, run_end), _, run_last))
                        if *run_segment == segment
                            && *run_last + 1 == seq
                            && end - *run_start <= CHUNK_BYTES =>
                    {
                        *run_end = end;
                        *run_last = seq;
                    }
                    _ => runs.push(((segment, start, end), seq, seq)),
                }
            }
        }
        let mut found: Vec<(u64, ReadResult)> =
            missing.into_iter().map(|seq| (seq, Ok(None))).collect();
        for (place, first, last) in runs {
            match read_run(&self.fs, place, first, last) {
                Ok(records) => {
                    found.extend(records.into_iter().map(|r| (r.seq, Ok(Some(r.payload)))));
                }
                Err(_) => found.extend((first..=last).map(|seq| (seq, self.read(seq)))),
            }
        }
        found.sort_by_key(|(seq, _)| *seq);
        found
    }

    /// The durable events from `from` on, in order, up to the durable mark of now.
    pub fn records(&self, from: u64) -> Records<F> {
        let through = self.durable_through();
        let failed = self.scan_unscanned(from, u64::MAX).err();
        Records {
            reader: self.clone(),
            next: from,
            through,
            ready: VecDeque::new(),
            failed,
        }
    }

    /// Scans the segments left unscanned at open that may hold sequences in `from..=to`.
    fn scan_unscanned(&self, from: u64, to: u64) -> Result<(), LogError> {
        let wanted = self.index().unscanned_from(from);
        for first_seq in wanted.into_iter().filter(|&first| first <= to) {
            let kept = sidecar::load(&self.fs, first_seq);
            let scanned = match kept {
                Some(index) => index,
                None => {
                    // An unscanned segment is an old, sealed one: its sidecar stays valid.
                    let (scanned, _, _) = scan_segment(&self.fs, first_seq, false)?;
                    sidecar::store(&self.fs, &scanned);
                    scanned
                }
            };
            let next = self.index().next_segment(first_seq);
            if let (Some(next), Some(last)) = (next, scanned.last_seq()) {
                if last >= next {
                    return Err(LogError::Overlap {
                        file: segment::name(next),
                        first_seq: next,
                        previous_last: last,
                    });
                }
            }
            self.index
                .write()
                .unwrap_or_else(|poisoned| poisoned.into_inner())
                .fill(scanned);
        }
        Ok(())
    }
}

/// Most bytes one read of a run of events takes.
const CHUNK_BYTES: u64 = 1 << 20;

/// The durable events from one sequence on, in order, never past a durable mark; reads runs of
/// frames of up to [`CHUNK_BYTES`] with one positioned read each.
#[derive(Debug)]
pub struct Records<F> {
    reader: LogReader<F>,
    next: u64,
    through: u64,
    ready: VecDeque<Record>,
    /// Scanning the segments it needs failed: the first item is this error.
    failed: Option<LogError>,
}

impl<F: LogFs + Clone> Records<F> {
    /// The next run: the segment, the byte range and the sequences it covers.
    fn next_run(&self) -> Option<((u64, u64, u64), u64, u64)> {
        let index = self.reader.index();
        let first = index.next_after(self.next.saturating_sub(1))?;
        if first > self.through {
            return None;
        }
        let (segment, start, mut end) = index.locate(first)?;
        let mut last = first;
        while last < self.through {
            match index.locate(last + 1) {
                Some((same, _, next_end)) if same == segment && next_end - start <= CHUNK_BYTES => {
                    end = next_end;
                    last += 1;
                }
                _ => break,
            }
        }
        Some(((segment, start, end), first, last))
    }
}

impl<F: LogFs + Clone> Iterator for Records<F> {
    type Item = Result<Record, LogError>;

    fn next(&mut self) -> Option<Self::Item> {
        if let Some(err) = self.failed.take() {
            self.next = u64::MAX;
            return Some(Err(err));
        }
        if let Some(record) = self.ready.pop_front() {
            return Some(Ok(record));
        }
        let (run, first, last) = self.next_run()?;
        match read_run(&self.reader.fs, run, first, last) {
            Ok(records) => {
                self.ready = records;
                self.next = last.saturating_add(1);
                self.ready.pop_front().map(Ok)
            }
            Err(err) => {
                self.next = u64::MAX;
                self.through = 0;
                Some(Err(err))
            }
        }
    }
}

/// Reads the frames `first..=last`, which lie in `segment` at bytes `start..end`.
fn read_run<F: LogFs>(
    fs: &F,
    (segment, start, end): (u64, u64, u64),
    first: u64,
    last: u64,
) -> Result<VecDeque<Record>, LogError> {
    let file = segment::name(segment);
    let len = usize::try_from(end - start).unwrap_or(usize::MAX);
    let bytes = fs
        .read_at(&file, start, len)
        .map_err(|source| LogError::Read {
            file: file.clone(),
            source,
        })?;
    let mut records = VecDeque::new();
    let mut at = 0;
    for seq in first..=last {
        let damaged = |damage| LogError::Damaged {
            file: file.clone(),
            offset: usize::try_from(start).unwrap_or(usize::MAX) + at,
            damage,
        };
        let (frame, used) = frame::decode(bytes.get(at..).unwrap_or_default())
            .map_err(|reason| damaged(Damage::Frame { reason }))?;
        if frame.seq != seq {
            return Err(damaged(Damage::Sequence {
                expected: seq,
                found: frame.seq,
            }));
        }
        records.push_back(Record {
            seq,
            payload: frame.payload.to_vec(),
        });
        at += used;
    }
    Ok(records)
}
