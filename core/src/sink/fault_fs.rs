//! The sink's log file system: the real disk (or, for crash tests, a simulated one), with the
//! faults [`Faults::set_log_fault`] injects (ENOSPC, EIO on any kind of call), so tests and
//! drills can fail the real sink at every I/O point of its log. Test machinery: a release
//! build writes the log to [`RealFs`] directly (`super::log_fs`).

use std::io;
use std::path::Path;

use super::faults::LogOp;
use super::log::io::{LogFs, RealFile, RealFs, SegmentFile};
use super::log::sim::{SimFile, SimFs};
use super::Faults;

/// Where the log's files are.
#[derive(Debug, Clone)]
pub(crate) enum Backend {
    /// The data directory's `log/`.
    Real(RealFs),
    /// A simulated directory that records every call (crash tests).
    Sim(SimFs),
}

/// The log's directory, with injected faults.
#[derive(Debug, Clone)]
pub(crate) struct FaultFs {
    pub(crate) backend: Backend,
    pub(crate) faults: Faults,
}

/// A segment open for appending, with injected faults.
#[derive(Debug)]
pub(crate) struct FaultFile {
    file: File,
    faults: Faults,
}

#[derive(Debug)]
enum File {
    Real(RealFile),
    Sim(SimFile),
}

impl FaultFs {
    /// The log on `real`, or on `sim` when given, with the switches of `faults`.
    pub(crate) fn new(real: RealFs, sim: Option<SimFs>, faults: Faults) -> Self {
        let backend = match sim {
            Some(sim) => Backend::Sim(sim),
            None => Backend::Real(real),
        };
        FaultFs { backend, faults }
    }

    /// The directory on the real disk (`None` when simulated).
    pub(crate) fn dir(&self) -> Option<&Path> {
        match &self.backend {
            Backend::Real(real) => Some(real.dir()),
            Backend::Sim(_) => None,
        }
    }

    fn check(&self, op: LogOp) -> io::Result<()> {
        check(&self.faults, op)
    }
}

fn check(faults: &Faults, op: LogOp) -> io::Result<()> {
    match faults.log_fault(op) {
        Some(err) => Err(err),
        None => Ok(()),
    }
}

/// Calls `$call` on whichever backend `$fs` has.
macro_rules! on_backend {
    ($fs:expr, $backend:ident => $call:expr) => {
        match &$fs.backend {
            Backend::Real($backend) => $call,
            Backend::Sim($backend) => $call,
        }
    };
}

impl LogFs for FaultFs {
    type File = FaultFile;

    fn create(&self, name: &str) -> io::Result<FaultFile> {
        self.check(LogOp::Create)?;
        let file = match &self.backend {
            Backend::Real(real) => File::Real(real.create(name)?),
            Backend::Sim(sim) => File::Sim(sim.create(name)?),
        };
        let faults = self.faults.clone();
        Ok(FaultFile { file, faults })
    }

    fn read(&self, name: &str) -> io::Result<Vec<u8>> {
        self.check(LogOp::Read)?;
        on_backend!(self, fs => fs.read(name))
    }

    fn read_at(&self, name: &str, offset: u64, len: usize) -> io::Result<Vec<u8>> {
        self.check(LogOp::Read)?;
        on_backend!(self, fs => fs.read_at(name, offset, len))
    }

    fn list(&self) -> io::Result<Vec<String>> {
        self.check(LogOp::Read)?;
        on_backend!(self, fs => fs.list())
    }

    fn rename(&self, from: &str, to: &str) -> io::Result<()> {
        self.check(LogOp::Rename)?;
        on_backend!(self, fs => fs.rename(from, to))
    }

    fn remove(&self, name: &str) -> io::Result<()> {
        self.check(LogOp::Remove)?;
        on_backend!(self, fs => fs.remove(name))
    }

    fn sync_dir(&self) -> io::Result<()> {
        self.check(LogOp::SyncDir)?;
        on_backend!(self, fs => fs.sync_dir())
    }

    fn sync_file(&self, name: &str) -> io::Result<()> {
        self.check(LogOp::Sync)?;
        on_backend!(self, fs => fs.sync_file(name))
    }

    fn len(&self, name: &str) -> io::Result<u64> {
        self.check(LogOp::Read)?;
        on_backend!(self, fs => fs.len(name))
    }

    fn truncate(&self, name: &str, len: u64) -> io::Result<()> {
        self.check(LogOp::Write)?;
        self.check(LogOp::Sync)?;
        on_backend!(self, fs => fs.truncate(name, len))
    }

    fn store(&self, name: &str, bytes: &[u8]) -> io::Result<()> {
        self.check(LogOp::Store)?;
        on_backend!(self, fs => fs.store(name, bytes))
    }
}

impl SegmentFile for FaultFile {
    fn append(&mut self, bytes: &[u8]) -> io::Result<()> {
        check(&self.faults, LogOp::Write)?;
        match &mut self.file {
            File::Real(file) => file.append(bytes),
            File::Sim(file) => file.append(bytes),
        }
    }

    fn sync_data(&mut self) -> io::Result<()> {
        check(&self.faults, LogOp::Sync)?;
        match &mut self.file {
            File::Real(file) => file.sync_data(),
            File::Sim(file) => file.sync_data(),
        }
    }

    fn cut(&mut self, len: u64) -> io::Result<()> {
        check(&self.faults, LogOp::Write)?;
        check(&self.faults, LogOp::Sync)?;
        match &mut self.file {
            File::Real(file) => file.cut(len),
            File::Sim(file) => file.cut(len),
        }
    }

    fn seal(&mut self) -> io::Result<()> {
        match &mut self.file {
            File::Real(file) => file.seal(),
            File::Sim(file) => file.seal(),
        }
    }
}
