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
//!
//! A [`SimFile`] reserves its blocks ahead of its appends as [`super::io::RealFile`] does
//! (`fallocate`, recorded as [`Op::Allocate`], [`SIM_PREALLOCATE_BYTES`] at a time) and writes
//! at its own offset; sealing and cutting it are recorded cuts. Sidecars
//! ([`LogFs::store`]) are recorded too: created under a temporary name, written, synced,
//! renamed. So the crash enumeration covers all of them.

use std::collections::BTreeMap;
use std::io;
use std::sync::{Arc, Mutex, MutexGuard};

use super::crash::{Disk, Files, Op, PAGE};
use super::io::{self as log_io, LogFs, SegmentFile};

/// How much of a simulated segment is reserved at a time ahead of its appends: one page, so
/// the crash states hold the zeros a reservation leaves without files of megabytes.
pub const SIM_PREALLOCATE_BYTES: u64 = PAGE as u64;

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
    /// The `fallocate` ahead of an append (a failure only means the append allocates).
    Allocate,
    /// [`LogFs::store`] (a sidecar).
    Store,
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
    /// Bytes appended: where the next append goes.
    written: u64,
    /// The file's length: reserved up to here (zeros past `written`).
    reserved: u64,
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
            written: 0,
            reserved: 0,
        })
    }

    fn len(&self, name: &str) -> io::Result<u64> {
        let state = self.lock();
        let ino = state.ino(name)?;
        Ok(state.disk.len(ino) as u64)
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

    fn truncate(&self, name: &str, len: u64) -> io::Result<()> {
        let mut state = self.lock();
        state.check(OpKind::Write)?;
        let ino = state.ino(name)?;
        let len = usize::try_from(len).unwrap_or(usize::MAX);
        state.record(Op::Cut { ino, len });
        state.sync(ino)
    }

    fn store(&self, name: &str, bytes: &[u8]) -> io::Result<()> {
        let mut state = self.lock();
        state.check(OpKind::Store)?;
        let tmp = format!("{name}.tmp");
        if state.disk.lookup(&tmp).is_some() {
            state.record(Op::Remove { name: tmp.clone() });
        }
        let ino = state.disk.next_ino();
        state.record(Op::Create {
            name: tmp.clone(),
            ino,
        });
        let bytes = bytes.to_vec();
        state.record(Op::Write { ino, at: 0, bytes });
        state.record(Op::SyncData { ino });
        let to = name.to_owned();
        state.record(Op::Rename { from: tmp, to });
        Ok(())
    }
}

impl SimFile {
    /// Reserves blocks for `len` more bytes, as [`super::io::RealFile`] does.
    fn reserve(&mut self, state: &mut State, len: u64) {
        let want = log_io::reservation(self.written, self.reserved, len, SIM_PREALLOCATE_BYTES);
        if let Some(want) = want {
            if state.check(OpKind::Allocate).is_ok() {
                let len = usize::try_from(want).unwrap_or(usize::MAX);
                state.record(Op::Allocate { ino: self.ino, len });
                self.reserved = want;
            }
        }
    }

    /// Records a cut to `len` (its `fdatasync` is the caller's).
    fn cut_to(&mut self, state: &mut State, len: u64) {
        let cut = usize::try_from(len).unwrap_or(usize::MAX);
        state.record(Op::Cut {
            ino: self.ino,
            len: cut,
        });
        (self.written, self.reserved) = (len, len);
    }
}

impl SegmentFile for SimFile {
    fn append(&mut self, bytes: &[u8]) -> io::Result<()> {
        let fs = self.fs.clone();
        let mut state = fs.lock();
        let (ino, at) = (
            self.ino,
            usize::try_from(self.written).unwrap_or(usize::MAX),
        );
        self.reserve(&mut state, bytes.len() as u64);
        if let Err(err) = state.check(OpKind::Write) {
            let half = bytes.get(..bytes.len() / 2).unwrap_or_default().to_vec();
            if !half.is_empty() {
                state.record(Op::Write {
                    ino,
                    at,
                    bytes: half,
                });
            }
            return Err(err);
        }
        state.record(Op::Write {
            ino,
            at,
            bytes: bytes.to_vec(),
        });
        self.written += bytes.len() as u64;
        self.reserved = self.reserved.max(self.written);
        Ok(())
    }

    fn sync_data(&mut self) -> io::Result<()> {
        self.fs.lock().sync(self.ino)
    }

    fn cut(&mut self, len: u64) -> io::Result<()> {
        let fs = self.fs.clone();
        let mut state = fs.lock();
        state.check(OpKind::Write)?;
        self.cut_to(&mut state, len);
        state.sync(self.ino)
    }

    /// Gives the reserved space back: a cut and its `fdatasync`, recorded; no injected fault
    /// reaches it (the writer only logs a failed seal, and faults aimed at the appends' calls
    /// must reach those).
    fn seal(&mut self) -> io::Result<()> {
        if self.reserved > self.written {
            let fs = self.fs.clone();
            let mut state = fs.lock();
            self.cut_to(&mut state, self.written);
            state.record(Op::SyncData { ino: self.ino });
        }
        Ok(())
    }
}
