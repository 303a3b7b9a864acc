//! The every-crash-state check, for tests: record a workload on a [`SimFs`], then open the log
//! on every state a crash could leave after every prefix of its trace and check the promises.
//!
//! A [`Recorder`] wraps the writer's calls and notes, at which point of the trace each group
//! was acknowledged and each deletion started. [`Recorder::check`] then, for every crash state
//! of a [`Model`] ([`crash::for_each_crash_state_with`]):
//!
//! 1. opens the log on it: a crash state must always open;
//! 2. reads every event: each must carry exactly the bytes written under its sequence, in
//!    increasing order, and every event acknowledged before the crash point must be there
//!    (unless a deletion covering it had started);
//! 3. appends one more group: its sequences must be above every sequence found and every one
//!    acknowledged, and it must read back;
//! 4. opens the log once more: it must hold the same events (what the first open left, a torn
//!    tail cut off or not, opens again).

use std::collections::BTreeMap;
use std::ops::{ControlFlow, Range};

use super::crash::{self, Disk, Files, Model};
use super::sim::SimFs;
use super::{LogConfig, LogError, LogWriter};

/// What [`Recorder::check`] found.
#[derive(Debug, Clone, Default)]
pub struct Report {
    /// Crash states opened and checked.
    pub states: u64,
    /// Of those, the states whose newest segment ended in a hole followed by frames, cut off
    /// as a torn tail at open (the page model at work).
    pub holes: u64,
    /// Broken promises, each naming the crash point.
    pub violations: Vec<String>,
}

/// A workload on a simulated disk, with what it was promised.
#[derive(Debug)]
pub struct Recorder {
    fs: SimFs,
    initial: Disk,
    config: LogConfig,
    /// Every payload ever handed to the writer, by the sequence it got.
    written: BTreeMap<u64, Vec<u8>>,
    /// (trace length when acknowledged, sequences).
    acked: Vec<(usize, Range<u64>)>,
    /// (trace length when the deletion started, sequence it may delete through).
    removals: Vec<(usize, u64)>,
}

impl Recorder {
    /// A workload on an empty simulated directory.
    pub fn new(config: LogConfig) -> Self {
        let fs = SimFs::new();
        Self {
            initial: fs.disk(),
            fs,
            config,
            written: BTreeMap::new(),
            acked: Vec::new(),
            removals: Vec::new(),
        }
    }

    /// The simulated directory (to inject faults).
    pub fn fs(&self) -> &SimFs {
        &self.fs
    }

    /// Opens (or reopens, after dropping the last writer) the log.
    pub fn open(&self) -> Result<LogWriter<SimFs>, LogError> {
        LogWriter::open(self.fs.clone(), self.config.clone()).map(|(writer, _)| writer)
    }

    /// Appends through `writer`, noting what was written and what acknowledged.
    pub fn append(
        &mut self,
        writer: &mut LogWriter<SimFs>,
        events: &[Vec<u8>],
    ) -> Result<Range<u64>, LogError> {
        let first = writer.next_seq();
        let result = writer.append(events);
        if writer.next_seq() > first {
            for (seq, event) in (first..).zip(events) {
                self.written.insert(seq, event.clone());
            }
        }
        if let Ok(seqs) = &result {
            self.acked.push((self.fs.trace_len(), seqs.clone()));
        }
        result
    }

    /// Deletes through `writer`, noting from where on the deleted events may be gone.
    pub fn remove_through(
        &mut self,
        writer: &mut LogWriter<SimFs>,
        seq: u64,
    ) -> Result<usize, LogError> {
        let limit = seq.min(writer.durable_through());
        self.removals.push((self.fs.trace_len(), limit));
        writer.remove_through(seq)
    }

    /// The acknowledged sequences.
    pub fn acknowledged(&self) -> impl Iterator<Item = u64> + '_ {
        self.acked.iter().flat_map(|(_, seqs)| seqs.clone())
    }

    /// Checks every crash state of the default [`Model`] after every prefix of the trace;
    /// stops collecting after `max_violations` violations.
    pub fn check(&self, max_violations: usize) -> Report {
        self.check_with(&Model::default(), max_violations)
    }

    /// [`Recorder::check`] under `model`.
    pub fn check_with(&self, model: &Model, max_violations: usize) -> Report {
        let trace = self.fs.trace();
        let mut report = Report::default();
        crash::for_each_crash_state_with(model, &self.initial, &trace, |point, files| {
            report.states += 1;
            match self.check_state(point, files) {
                Ok(hole) => report.holes += u64::from(hole),
                Err(violation) => {
                    let total = trace.len();
                    report.violations.push(format!(
                        "crash after {point} of {total} operations: {violation}"
                    ));
                }
            }
            if report.violations.len() >= max_violations {
                ControlFlow::Break(())
            } else {
                ControlFlow::Continue(())
            }
        });
        report
    }

    /// Checks one crash state; `Ok(true)` when opening cut a hole and frames off its newest
    /// segment.
    fn check_state(&self, point: usize, files: &Files) -> Result<bool, String> {
        let fs = SimFs::from_files(files);
        let (mut writer, recovery) = LogWriter::open(fs.clone(), self.config.clone())
            .map_err(|err| format!("recovery failed: {err}"))?;
        let mut last = 0;
        let mut found = Vec::new();
        for record in writer.records(0) {
            let record = record.map_err(|err| format!("reading failed: {err}"))?;
            if record.seq <= last {
                return Err(format!("sequence {} after {last}", record.seq));
            }
            if self.written.get(&record.seq) != Some(&record.payload) {
                return Err(format!("event {} has bytes never written", record.seq));
            }
            last = record.seq;
            found.push(record.seq);
        }
        let deletable = self
            .removals
            .iter()
            .filter(|(start, _)| *start < point)
            .map(|(_, limit)| *limit)
            .max()
            .unwrap_or(0);
        let mut max_acked = 0;
        for (at, seqs) in self.acked.iter().filter(|(at, _)| *at <= point) {
            for seq in seqs.clone() {
                max_acked = max_acked.max(seq);
                if seq > deletable && found.binary_search(&seq).is_err() {
                    return Err(format!(
                        "lost acknowledged event {seq} (acknowledged at {at})"
                    ));
                }
            }
        }
        let after = writer
            .append(&[b"{\"after\":\"crash\"}".to_vec()])
            .map_err(|err| format!("appending after recovery failed: {err}"))?;
        if after.start <= last.max(max_acked) {
            return Err(format!(
                "sequence {} reused after recovery (found up to {last}, acknowledged up to {max_acked})",
                after.start
            ));
        }
        let back: Vec<u64> = writer
            .records(after.start)
            .filter_map(Result::ok)
            .map(|record| record.seq)
            .collect();
        if back != vec![after.start] {
            return Err(format!(
                "the group appended after recovery reads back as {back:?}"
            ));
        }
        // Opened once more (a restart after the recovery), the log holds the same events.
        drop(writer);
        let (writer, _) = LogWriter::open(fs, self.config.clone())
            .map_err(|err| format!("the second open after recovery failed: {err}"))?;
        let again: Result<Vec<u64>, _> = writer.records(0).map(|r| r.map(|r| r.seq)).collect();
        found.push(after.start);
        if again.as_ref().ok() != Some(&found) {
            return Err(format!(
                "the second open after recovery reads {again:?}, not {found:?}"
            ));
        }
        Ok(!recovery.cut.is_empty())
    }
}
