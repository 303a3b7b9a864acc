//! The POSIX model of what a crash keeps, and the enumeration of every crash state (pure code).
//!
//! A [`Disk`] is one directory and its files, changed by the [`Op`]s of a trace. For each file
//! it keeps the **durable** bytes (covered by a completed `fdatasync`) and the **unsynced
//! writes** after them; for the directory, the durable entries and the **unsynced directory
//! operations** (create, rename, unlink) since the last directory fsync.
//!
//! A crash may keep, of each file, the durable bytes plus any prefix of its unsynced writes,
//! the last kept write possibly torn (cut at any byte), bytes a failed `fdatasync` left
//! doubtful either kept or zeroed (a hole), and the file written last also followed by zeros
//! (the space [`super::io::RealFile`] reserves ahead of its appends, [`RESERVED_TAIL`] bytes
//! of it); and of the directory, the durable
//! entries plus any subset of the unsynced operations, applied in their order (a prefix only,
//! when more than [`MAX_SUBSET_OPS`] are pending). To keep the count of states finite in
//! practice, torn cuts are enumerated for the file written last only; other files (segments a
//! failed write abandoned) take each prefix of whole writes. [`Disk::crash_states`] lists all of them;
//! [`for_each_crash_state`] does it after every prefix of a trace.

use std::collections::BTreeMap;
use std::ops::ControlFlow;

/// One state-changing operation of a trace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    /// A new, empty file `name` (inode `ino`).
    Create {
        /// The file's name.
        name: String,
        /// Its inode number, unique in the trace.
        ino: usize,
    },
    /// Bytes appended to inode `ino`.
    Write {
        /// The inode written.
        ino: usize,
        /// The bytes appended.
        bytes: Vec<u8>,
    },
    /// A completed `fdatasync` of inode `ino`.
    SyncData {
        /// The inode synced.
        ino: usize,
    },
    /// A failed `fdatasync` of inode `ino`: its unsynced writes become **doubtful**, on disk
    /// or a hole of zeros, and no later `fdatasync` settles them (Linux marks the pages clean).
    FailedSync {
        /// The inode.
        ino: usize,
    },
    /// Inode `ino` cut back to its first `len` bytes (`ftruncate`). Until the next completed
    /// `fdatasync` of the inode a crash may also keep it as it was before the cut.
    Cut {
        /// The inode cut.
        ino: usize,
        /// Its length after the cut.
        len: usize,
    },
    /// A rename in the directory.
    Rename {
        /// The old name.
        from: String,
        /// The new name.
        to: String,
    },
    /// An unlink.
    Remove {
        /// The name removed.
        name: String,
    },
    /// A completed fsync of the directory.
    SyncDir,
}

/// Zeros after each version of the file written last: reserved space a crash leaves.
pub const RESERVED_TAIL: usize = 100;

/// Above this many unsynced directory operations, only their prefixes are enumerated.
pub const MAX_SUBSET_OPS: usize = 10;

/// The files of a crash state: name to content.
pub type Files = BTreeMap<String, Vec<u8>>;

#[derive(Debug, Clone, Default)]
struct Inode {
    durable: Vec<u8>,
    /// Byte ranges of `durable` a failed `fdatasync` left doubtful.
    doubtful: Vec<std::ops::Range<usize>>,
    unsynced: Vec<Vec<u8>>,
    /// The inode as it was before a cut no `fdatasync` has completed since: a crash may keep
    /// that version (or any it may keep) instead.
    before_cut: Option<Box<Inode>>,
}

impl Inode {
    /// The inode cut back to `len` bytes, remembering what it was until a sync.
    fn cut(&mut self, len: usize) {
        let before = self.clone();
        let durable_len = self.durable.len().min(len);
        let mut kept = len - durable_len;
        self.durable.truncate(durable_len);
        self.doubtful = self
            .doubtful
            .iter()
            .map(|range| range.start..range.end.min(durable_len))
            .filter(|range| !range.is_empty())
            .collect();
        let mut unsynced = Vec::new();
        for mut write in std::mem::take(&mut self.unsynced) {
            if kept == 0 {
                break;
            }
            write.truncate(kept);
            kept -= write.len();
            unsynced.push(write);
        }
        self.unsynced = unsynced;
        self.before_cut = Some(Box::new(before));
    }
}

/// A directory as the model sees it.
#[derive(Debug, Clone, Default)]
pub struct Disk {
    inodes: BTreeMap<usize, Inode>,
    durable_dir: BTreeMap<String, usize>,
    dir: BTreeMap<String, usize>,
    unsynced_dir: Vec<Op>,
    /// The inode written last: the only one whose writes are enumerated torn.
    last_written: Option<usize>,
}

impl Disk {
    /// A disk whose files are all durable.
    pub fn from_files(files: &Files) -> Self {
        let mut disk = Disk::default();
        for (ino, (name, bytes)) in files.iter().enumerate() {
            let inode = Inode {
                durable: bytes.clone(),
                ..Inode::default()
            };
            disk.inodes.insert(ino, inode);
            disk.dir.insert(name.clone(), ino);
        }
        disk.durable_dir = disk.dir.clone();
        disk
    }

    /// The next free inode number.
    pub fn next_ino(&self) -> usize {
        self.inodes.keys().next_back().map_or(0, |ino| ino + 1)
    }

    /// The inode a name points to now.
    pub fn lookup(&self, name: &str) -> Option<usize> {
        self.dir.get(name).copied()
    }

    /// The names in the directory now.
    pub fn names(&self) -> Vec<String> {
        self.dir.keys().cloned().collect()
    }

    /// The content of inode `ino` as a reader sees it now (durable and unsynced).
    pub fn content(&self, ino: usize) -> Vec<u8> {
        self.inodes.get(&ino).map_or_else(Vec::new, |inode| {
            let mut bytes = inode.durable.clone();
            inode
                .unsynced
                .iter()
                .for_each(|w| bytes.extend_from_slice(w));
            bytes
        })
    }

    /// Applies one operation.
    pub fn apply(&mut self, op: &Op) {
        match op {
            Op::Create { name, ino } => {
                self.inodes.insert(*ino, Inode::default());
                self.dir.insert(name.clone(), *ino);
                self.unsynced_dir.push(op.clone());
            }
            Op::Write { ino, bytes } => {
                self.last_written = Some(*ino);
                if let Some(inode) = self.inodes.get_mut(ino) {
                    inode.unsynced.push(bytes.clone());
                }
            }
            Op::SyncData { ino } => {
                if let Some(inode) = self.inodes.get_mut(ino) {
                    for write in inode.unsynced.drain(..) {
                        inode.durable.extend_from_slice(&write);
                    }
                    inode.before_cut = None;
                }
            }
            Op::Cut { ino, len } => {
                if let Some(inode) = self.inodes.get_mut(ino) {
                    inode.cut(*len);
                }
            }
            Op::FailedSync { ino } => {
                if let Some(inode) = self.inodes.get_mut(ino) {
                    let start = inode.durable.len();
                    for write in inode.unsynced.drain(..) {
                        inode.durable.extend_from_slice(&write);
                    }
                    let end = inode.durable.len();
                    if end > start {
                        inode.doubtful.push(start..end);
                    }
                }
            }
            Op::Rename { .. } | Op::Remove { .. } => {
                apply_dir_op(&mut self.dir, op);
                self.unsynced_dir.push(op.clone());
            }
            Op::SyncDir => {
                self.durable_dir = self.dir.clone();
                self.unsynced_dir.clear();
            }
        }
    }

    /// Every state a crash now may leave, each as the files it holds.
    pub fn crash_states(&self) -> Vec<Files> {
        let mut states = Vec::new();
        for dir in self.crash_dirs() {
            let mut partial: Vec<Files> = vec![Files::new()];
            for (name, ino) in &dir {
                let versions = self.crash_versions(*ino, self.last_written == Some(*ino));
                let mut next = Vec::with_capacity(partial.len() * versions.len());
                for files in &partial {
                    for version in &versions {
                        let mut files = files.clone();
                        files.insert(name.clone(), version.clone());
                        next.push(files);
                    }
                }
                partial = next;
            }
            states.extend(partial);
        }
        states
    }

    fn crash_dirs(&self) -> Vec<BTreeMap<String, usize>> {
        let n = self.unsynced_dir.len();
        let chosen: Vec<Vec<bool>> = if n <= MAX_SUBSET_OPS {
            (0..1u32 << n)
                .map(|mask| (0..n).map(|i| mask & (1 << i) != 0).collect())
                .collect()
        } else {
            (0..=n).map(|k| (0..n).map(|i| i < k).collect()).collect()
        };
        chosen
            .into_iter()
            .map(|keep| {
                let mut dir = self.durable_dir.clone();
                for (op, kept) in self.unsynced_dir.iter().zip(keep) {
                    if kept {
                        apply_dir_op(&mut dir, op);
                    }
                }
                dir
            })
            .collect()
    }

    fn crash_versions(&self, ino: usize, last: bool) -> Vec<Vec<u8>> {
        let Some(inode) = self.inodes.get(&ino) else {
            return vec![Vec::new()];
        };
        let mut versions = inode_versions(inode, last);
        if last {
            let reserved = versions.iter().map(|version| {
                let mut padded = version.clone();
                padded.resize(version.len() + RESERVED_TAIL, 0);
                padded
            });
            versions.extend(reserved.collect::<Vec<_>>());
        }
        versions
    }
}

/// Every content a crash may leave of `inode` (see the module doc).
fn inode_versions(inode: &Inode, torn: bool) -> Vec<Vec<u8>> {
    let mut bases = vec![inode.durable.clone()];
    if !inode.doubtful.is_empty() {
        let mut holes = inode.durable.clone();
        for range in &inode.doubtful {
            if let Some(bytes) = holes.get_mut(range.clone()) {
                bytes.fill(0);
            }
        }
        bases.push(holes);
    }
    let mut versions = Vec::new();
    for mut base in bases {
        versions.push(base.clone());
        for write in &inode.unsynced {
            for cut in tear_points(write.len()).into_iter().filter(|_| torn) {
                let mut torn = base.clone();
                torn.extend_from_slice(&write[..cut]);
                versions.push(torn);
            }
            base.extend_from_slice(write);
            versions.push(base.clone());
        }
    }
    if let Some(before) = &inode.before_cut {
        versions.extend(inode_versions(before, torn));
    }
    versions
}

/// Where a write of `len` bytes is cut in torn versions: every byte of the first 40 (frame
/// headers and the segment header), then every 61st, and the last byte (never 0 or `len`).
pub fn tear_points(len: usize) -> Vec<usize> {
    let mut cuts: Vec<usize> = (1..len.min(41)).chain((41..len).step_by(61)).collect();
    if len > 41 {
        cuts.push(len - 1);
    }
    cuts.dedup();
    cuts
}

fn apply_dir_op(dir: &mut BTreeMap<String, usize>, op: &Op) {
    match op {
        Op::Create { name, ino } => {
            dir.insert(name.clone(), *ino);
        }
        Op::Rename { from, to } => {
            if let Some(ino) = dir.remove(from) {
                dir.insert(to.clone(), ino);
            }
        }
        Op::Remove { name } => {
            dir.remove(name);
        }
        Op::Write { .. }
        | Op::SyncData { .. }
        | Op::FailedSync { .. }
        | Op::Cut { .. }
        | Op::SyncDir => {}
    }
}

/// Calls `visit(p, state)` for every crash state after every prefix `trace[..p]` of `trace`
/// (`p` from 0 to its length), starting from `initial`; returns how many states it visited.
/// `visit` may stop the walk by returning `Break`.
pub fn for_each_crash_state(
    initial: &Disk,
    trace: &[Op],
    mut visit: impl FnMut(usize, &Files) -> ControlFlow<()>,
) -> u64 {
    let mut disk = initial.clone();
    let mut count = 0;
    for p in 0..=trace.len() {
        if let Some(op) = p.checked_sub(1).and_then(|i| trace.get(i)) {
            disk.apply(op);
        }
        for state in disk.crash_states() {
            count += 1;
            if visit(p, &state).is_break() {
                return count;
            }
        }
    }
    count
}
