//! A simulated log directory for tests: the [`super::crash::Disk`] model behind the [`LogFs`] trait,
//! a trace of every state-changing operation, and injected errors.
//!
//! Reads see what a process would see (durable and unsynced bytes). Every create, write,
//! `fdatasync`, rename, unlink and directory fsync that succeeds is appended to the trace, from
//! which [`super::crash::for_each_crash_state`] builds every state a crash may leave. An injected
//! error ([`SimFs::inject`]) makes the chosen call of one kind fail with an `io::Error` of the
//! given errno; a failed write still appends the first half of its bytes (a short write), a
//! failed `fdatasync` leaves the writes doubtful: on disk or a hole of zeros after a crash,
//! whatever later `fdatasync`s do (see [`Op::FailedSync`]).

use std::collections::BTreeMap;
use std::io;
use std::sync::{Arc, Mutex, MutexGuard};

use super::crash::{Disk, Files, Op};
use super::io::{LogFs, SegmentFile};

/// ENOSPC: no space left on the device.
pub const ENOSPC: i32 = 28;
/// EIO: an I/O error.
pub const EIO: i32 = 5;

/// The kinds of calls an error can be injected into.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum OpKind {
    /// [`LogFs::create`].
    Create,
    /// [`SegmentFile::append`] and [`SegmentFile::cut`].
    Write,
    /// [`SegmentFile::sync_data`], [`LogFs::sync_file`] and the sync of [`SegmentFile::cut`].
    Sync,
    /// [`LogFs::rename`].
    Rename,
    /// [`LogFs::remove`].
    Remove,
    /// [`LogFs::sync_dir`].
    SyncDir,
    /// [`LogFs::read`] and [`LogFs::list`].
    Read,
}

#[derive(Debug, Clone)]
struct Fault {
    kind: OpKind,
    skip: usize,
    times: usize,
    errno: i32,
}

#[derive(Debug, Default)]
struct State {
    disk: Disk,
    trace: Vec<Op>,
    faults: Vec<Fault>,
    calls: BTreeMap<OpKind, usize>,
}

/// A simulated log directory; clones share it.
#[derive(Debug, Clone, Default)]
pub struct SimFs {
    state: Arc<Mutex<State>>,
}

impl SimFs {
    /// An empty directory.
    pub fn new() -> Self {
        Self::default()
    }

    /// A directory holding `files`, all durable, with an empty trace.
    pub fn from_files(files: &Files) -> Self {
        let fs = Self::default();
        fs.lock().disk = Disk::from_files(files);
        fs
    }

    /// A directory in the state of `disk` (what a killed process leaves: every written byte
    /// readable, durable only what was synced), with an empty trace.
    pub fn from_disk(disk: Disk) -> Self {
        let fs = Self::default();
        fs.lock().disk = disk;
        fs
    }

    /// The model as it is now (the start of a crash enumeration over a later trace).
    pub fn disk(&self) -> Disk {
        self.lock().disk.clone()
    }

    /// The operations recorded so far.
    pub fn trace(&self) -> Vec<Op> {
        self.lock().trace.clone()
    }

    /// How many operations the trace holds.
    pub fn trace_len(&self) -> usize {
        self.lock().trace.len()
    }

    /// Every file as a reader sees it now.
    pub fn files(&self) -> Files {
        let state = self.lock();
        let disk = &state.disk;
        disk.names()
            .into_iter()
            .filter_map(|name| Some((name.clone(), disk.content(disk.lookup(&name)?))))
            .collect()
    }

    /// Calls of `kind` fail with `errno`: after `skip` more calls of that kind succeed, the
    /// next `times` fail (`usize::MAX`: until [`SimFs::clear_faults`]).
    pub fn inject(&self, kind: OpKind, skip: usize, times: usize, errno: i32) {
        self.lock().faults.push(Fault {
            kind,
            skip,
            times,
            errno,
        });
    }

    /// Removes every injected fault: the disk works again.
    pub fn clear_faults(&self) {
        self.lock().faults.clear();
    }

    /// How many calls of `kind` were made (failed ones included).
    pub fn calls(&self, kind: OpKind) -> usize {
        self.lock().calls.get(&kind).copied().unwrap_or(0)
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl State {
    /// Counts a call of `kind` and returns the injected error, if this call gets one.
    fn check(&mut self, kind: OpKind) -> io::Result<()> {
        *self.calls.entry(kind).or_default() += 1;
        for fault in self.faults.iter_mut().filter(|f| f.kind == kind) {
            if fault.skip > 0 {
                fault.skip -= 1;
            } else if fault.times > 0 {
                fault.times -= 1;
                return Err(io::Error::from_raw_os_error(fault.errno));
            }
        }
        Ok(())
    }

    fn record(&mut self, op: Op) {
        self.disk.apply(&op);
        self.trace.push(op);
    }

    /// An `fdatasync`; a failed one leaves the unsynced writes doubtful (fsyncgate).
    fn sync(&mut self, ino: usize) -> io::Result<()> {
        if let Err(err) = self.check(OpKind::Sync) {
            self.record(Op::FailedSync { ino });
            return Err(err);
        }
        self.record(Op::SyncData { ino });
        Ok(())
    }

    fn ino(&self, name: &str) -> io::Result<usize> {
        self.disk
            .lookup(name)
            .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, format!("no file {name}")))
    }
}

/// A file of a [`SimFs`], open for appending.
#[derive(Debug)]
pub struct SimFile {
    fs: SimFs,
    ino: usize,
}

impl LogFs for SimFs {
    type File = SimFile;

    fn create(&self, name: &str) -> io::Result<SimFile> {
        let mut state = self.lock();
        state.check(OpKind::Create)?;
        if state.disk.lookup(name).is_some() {
            return Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                name.to_owned(),
            ));
        }
        let ino = state.disk.next_ino();
        let name = name.to_owned();
        state.record(Op::Create { name, ino });
        Ok(SimFile {
            fs: self.clone(),
            ino,
        })
    }

    fn read(&self, name: &str) -> io::Result<Vec<u8>> {
        let mut state = self.lock();
        state.check(OpKind::Read)?;
        let ino = state.ino(name)?;
        Ok(state.disk.content(ino))
    }

    fn read_at(&self, name: &str, offset: u64, len: usize) -> io::Result<Vec<u8>> {
        let content = self.read(name)?;
        usize::try_from(offset)
            .ok()
            .and_then(|start| content.get(start..start.checked_add(len)?))
            .map(<[u8]>::to_vec)
            .ok_or_else(|| io::Error::new(io::ErrorKind::UnexpectedEof, name.to_owned()))
    }

    fn list(&self) -> io::Result<Vec<String>> {
        let mut state = self.lock();
        state.check(OpKind::Read)?;
        Ok(state.disk.names())
    }

    fn rename(&self, from: &str, to: &str) -> io::Result<()> {
        let mut state = self.lock();
        state.check(OpKind::Rename)?;
        state.ino(from)?;
        let (from, to) = (from.to_owned(), to.to_owned());
        state.record(Op::Rename { from, to });
        Ok(())
    }

    fn remove(&self, name: &str) -> io::Result<()> {
        let mut state = self.lock();
        state.check(OpKind::Remove)?;
        state.ino(name)?;
        let name = name.to_owned();
        state.record(Op::Remove { name });
        Ok(())
    }

    fn sync_dir(&self) -> io::Result<()> {
        let mut state = self.lock();
        state.check(OpKind::SyncDir)?;
        state.record(Op::SyncDir);
        Ok(())
    }

    fn sync_file(&self, name: &str) -> io::Result<()> {
        let mut state = self.lock();
        let ino = state.ino(name)?;
        state.sync(ino)
    }
}

impl SegmentFile for SimFile {
    fn append(&mut self, bytes: &[u8]) -> io::Result<()> {
        let mut state = self.fs.lock();
        let ino = self.ino;
        if let Err(err) = state.check(OpKind::Write) {
            let half = bytes.get(..bytes.len() / 2).unwrap_or_default().to_vec();
            if !half.is_empty() {
                state.record(Op::Write { ino, bytes: half });
            }
            return Err(err);
        }
        state.record(Op::Write {
            ino,
            bytes: bytes.to_vec(),
        });
        Ok(())
    }

    fn sync_data(&mut self) -> io::Result<()> {
        self.fs.lock().sync(self.ino)
    }

    fn cut(&mut self, len: u64) -> io::Result<()> {
        let mut state = self.fs.lock();
        state.check(OpKind::Write)?;
        let len = usize::try_from(len).unwrap_or(usize::MAX);
        state.record(Op::Cut { ino: self.ino, len });
        state.sync(self.ino)
    }
}
