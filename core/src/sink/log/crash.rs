//! The POSIX model of what a crash keeps, and the enumeration of every crash state (pure code).
//!
//! A [`Disk`] is one directory and its files, changed by the [`Op`]s of a trace. For each file
//! it keeps the **durable** bytes (as the last completed `fdatasync` left them) and the
//! **pending changes** since (writes at an offset, `fallocate`s); for the directory, the
//! durable entries and the **unsynced directory operations** (create, rename, unlink) since the
//! last directory fsync.
//!
//! # What a crash keeps of a file
//!
//! As weak as POSIX allows, page by page ([`PAGE`] bytes): the kernel writes dirty pages back
//! in any order, a file system may persist a size or an extent before the data in it (no
//! `fallocate`, unwritten-extent conversion, XFS or ext4 `data=writeback`), so a crash keeps
//!
//! * the durable bytes;
//! * of the pending changes, a prefix in their order, the last kept write possibly **torn**
//!   (applied up to any byte), and then **any subset of the pages** they touched reverted to
//!   what they held before (zeros past the durable bytes): later pages may survive while
//!   earlier ones read as zeros;
//! * of bytes a failed `fdatasync` left **doubtful**, any subset of their pages as zeros (no
//!   later `fdatasync` settles them: Linux marks the pages clean);
//! * after a cut (`ftruncate`) no `fdatasync` has completed since, also any version of the file
//!   as it was before the cut.
//!
//! Of the directory: the durable entries plus any subset of the unsynced operations, applied in
//! their order (a prefix only, when more than [`MAX_SUBSET_OPS`] are pending).
//!
//! # Keeping the count finite
//!
//! A [`Model`] says how much of that is enumerated: every file torn at every byte
//! ([`Tears::EveryByte`], for small cases) or the file written last torn at sampled bytes
//! ([`Tears::Sampled`]: the first 40 bytes, every 61st, the last, and each page boundary;
//! other files keep whole writes, in any subset of pages: a workload whose failing creates
//! leave several half-written files would otherwise multiply their tears); every subset of the touched pages up to
//! [`Model::exhaustive_pages`] pages, above that the empty and the full subset, each page
//! alone, and [`Model::samples`] subsets drawn from [`Model::seed`] (the same seed gives the
//! same states). Identical contents of a file are visited once. [`Disk::for_each_state`]
//! visits all of them; [`for_each_crash_state`] does it after every prefix of a trace.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::hash::{Hash, Hasher};
use std::ops::{ControlFlow, Range};

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
    /// Bytes written to inode `ino` at offset `at` (past the end: the gap reads as zeros).
    Write {
        /// The inode written.
        ino: usize,
        /// Where the bytes go.
        at: usize,
        /// The bytes written.
        bytes: Vec<u8>,
    },
    /// Blocks reserved (`fallocate`): inode `ino` is at least `len` bytes long, zeros past its
    /// data. Until the next completed `fdatasync` a crash may keep the old length.
    Allocate {
        /// The inode.
        ino: usize,
        /// Its length afterwards (at least).
        len: usize,
    },
    /// A completed `fdatasync` of inode `ino`.
    SyncData {
        /// The inode synced.
        ino: usize,
    },
    /// A failed `fdatasync` of inode `ino`: the bytes of its pending writes become
    /// **doubtful**, on disk or a hole of zeros page by page, and no later `fdatasync` settles
    /// them (Linux marks the pages clean).
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

/// The unit in which a crash keeps or loses unsynced data: a 4 KiB page.
pub const PAGE: usize = 4096;

/// Above this many unsynced directory operations, only their prefixes are enumerated.
pub const MAX_SUBSET_OPS: usize = 10;

/// The files of a crash state: name to content.
pub type Files = BTreeMap<String, Vec<u8>>;

/// Where a torn write is cut.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tears {
    /// At every byte: for small cases.
    EveryByte,
    /// The file written last only, at the points of [`tear_points`] and at each page
    /// boundary; other files keep whole writes (in any subset of pages).
    Sampled,
}

/// How much of the model's crash states are enumerated (see the module doc).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Model {
    /// Where torn writes are cut.
    pub tears: Tears,
    /// Up to this many touched pages, every subset of them is reverted in turn.
    pub exhaustive_pages: usize,
    /// Above [`Model::exhaustive_pages`], how many seeded subsets are drawn besides the
    /// empty, the full and the single-page ones.
    pub samples: usize,
    /// The seed of the drawn subsets.
    pub seed: u64,
}

impl Default for Model {
    /// Sampled tears, every subset of up to 4 pages, 16 drawn subsets above, seed 0.
    fn default() -> Self {
        Self {
            tears: Tears::Sampled,
            exhaustive_pages: 4,
            samples: 16,
            seed: 0,
        }
    }
}

impl Model {
    /// Every byte torn and every subset of up to 8 pages: the exhaustive model for small cases.
    pub fn exhaustive() -> Self {
        Self {
            tears: Tears::EveryByte,
            exhaustive_pages: 8,
            ..Self::default()
        }
    }

    /// Where a write of `len` bytes at offset `at` is torn (never at 0 or `len`).
    fn cuts(&self, at: usize, len: usize) -> Vec<usize> {
        match self.tears {
            Tears::EveryByte => (1..len).collect(),
            Tears::Sampled => {
                let first_page = (at / PAGE + 1) * PAGE;
                let boundaries = (first_page..at + len).step_by(PAGE).map(|b| b - at);
                let mut cuts: BTreeSet<usize> = tear_points(len).into_iter().collect();
                cuts.extend(boundaries.filter(|&c| c > 0 && c < len));
                cuts.into_iter().collect()
            }
        }
    }

    /// The sets of `pages` to revert, as described in the module doc.
    fn subsets(&self, pages: &[usize], rng: &mut SplitMix) -> Vec<Vec<usize>> {
        let n = pages.len();
        if n <= self.exhaustive_pages.min(20) {
            return (0..1u32 << n)
                .map(|mask| {
                    let chosen = pages
                        .iter()
                        .enumerate()
                        .filter(|(i, _)| mask & (1 << i) != 0);
                    chosen.map(|(_, &page)| page).collect()
                })
                .collect();
        }
        let mut subsets = vec![Vec::new(), pages.to_vec()];
        subsets.extend(pages.iter().map(|&page| vec![page]));
        for _ in 0..self.samples {
            let chosen = pages.iter().filter(|_| rng.next() & 1 == 1);
            subsets.push(chosen.copied().collect());
        }
        subsets
    }
}

/// A small seeded generator (SplitMix64): reproducible samples without a dependency.
#[derive(Debug, Clone)]
struct SplitMix(u64);

impl SplitMix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

/// A change to a file that no completed `fdatasync` covers yet.
#[derive(Debug, Clone)]
enum Change {
    Write { at: usize, bytes: Vec<u8> },
    Allocate { len: usize },
}

impl Change {
    fn apply(&self, image: &mut Vec<u8>) {
        match self {
            Change::Write { at, bytes } => write_at(image, *at, bytes),
            Change::Allocate { len } => {
                if image.len() < *len {
                    image.resize(*len, 0);
                }
            }
        }
    }

    /// The pages a write touches (an allocation touches none: its zeros are what was there).
    fn pages(&self) -> Range<usize> {
        match self {
            Change::Write { at, bytes } => pages_of(*at..at + bytes.len()),
            Change::Allocate { .. } => 0..0,
        }
    }
}

/// `bytes` written into `image` at `at`, the image grown with zeros as needed.
fn write_at(image: &mut Vec<u8>, at: usize, bytes: &[u8]) {
    let end = at + bytes.len();
    if image.len() < end {
        image.resize(end, 0);
    }
    if let Some(target) = image.get_mut(at..end) {
        target.copy_from_slice(bytes);
    }
}

/// The pages a byte range lies in.
fn pages_of(range: Range<usize>) -> Range<usize> {
    if range.is_empty() {
        0..0
    } else {
        range.start / PAGE..(range.end - 1) / PAGE + 1
    }
}

#[derive(Debug, Clone, Default)]
struct Inode {
    durable: Vec<u8>,
    /// Byte ranges of `durable` a failed `fdatasync` left doubtful.
    doubtful: Vec<Range<usize>>,
    /// The changes since the last completed `fdatasync`, in order.
    pending: Vec<Change>,
    /// The inode as it was before a cut no `fdatasync` has completed since: a crash may keep
    /// that version (or any it may keep) instead.
    before_cut: Option<Box<Inode>>,
}

impl Inode {
    /// The content a process reads now.
    fn content(&self) -> Vec<u8> {
        let mut image = self.durable.clone();
        self.pending
            .iter()
            .for_each(|change| change.apply(&mut image));
        image
    }

    fn sync(&mut self) {
        self.durable = self.content();
        self.pending.clear();
        self.before_cut = None;
    }

    fn fail_sync(&mut self) {
        let image = self.content();
        for change in &self.pending {
            if let Change::Write { at, bytes } = change {
                let end = (at + bytes.len()).min(image.len());
                if end > *at {
                    self.doubtful.push(*at..end);
                }
            }
        }
        self.durable = image;
        self.pending.clear();
    }

    /// The inode cut back to `len` bytes, remembering what it was until a sync.
    fn cut(&mut self, len: usize) {
        let before = self.clone();
        self.durable.truncate(len);
        self.doubtful = self
            .doubtful
            .iter()
            .map(|range| range.start..range.end.min(len))
            .filter(|range| !range.is_empty())
            .collect();
        self.pending = std::mem::take(&mut self.pending)
            .into_iter()
            .filter_map(|change| match change {
                Change::Write { at, mut bytes } if at < len => {
                    bytes.truncate(len - at);
                    Some(Change::Write { at, bytes })
                }
                Change::Write { .. } => None,
                Change::Allocate { len: allocated } => Some(Change::Allocate {
                    len: allocated.min(len),
                }),
            })
            .collect();
        self.before_cut = Some(Box::new(before));
    }

    /// Visits every content a crash may leave of the inode (see the module doc), each distinct
    /// content once (`seen` holds the hashes of those visited); its writes torn only if `torn`.
    fn for_each_version(
        &self,
        model: &Model,
        torn: bool,
        seed: u64,
        seen: &mut HashSet<u64>,
        visit: &mut dyn FnMut(&[u8]) -> ControlFlow<()>,
    ) -> ControlFlow<()> {
        let mut rng = SplitMix(seed);
        let mut emit = |bytes: &[u8]| {
            let mut hasher = std::collections::hash_map::DefaultHasher::new();
            bytes.hash(&mut hasher);
            if seen.insert(hasher.finish()) {
                visit(bytes)
            } else {
                ControlFlow::Continue(())
            }
        };
        let doubtful: BTreeSet<usize> = self
            .doubtful
            .iter()
            .flat_map(|range| pages_of(range.clone()))
            .collect();
        let doubtful: Vec<usize> = doubtful.into_iter().collect();
        for zeroed in model.subsets(&doubtful, &mut rng) {
            let mut base = self.durable.clone();
            for page in zeroed {
                for range in &self.doubtful {
                    let start = range.start.max(page * PAGE);
                    let end = range.end.min((page + 1) * PAGE);
                    if let Some(bytes) = base.get_mut(start..end.max(start)) {
                        bytes.fill(0);
                    }
                }
            }
            emit(&base)?;
            let mut image = base.clone();
            let mut touched = BTreeSet::new();
            for change in &self.pending {
                if let (Change::Write { at, bytes }, true) = (change, torn) {
                    for cut in model.cuts(*at, bytes.len()) {
                        let mut torn = image.clone();
                        write_at(&mut torn, *at, bytes.get(..cut).unwrap_or_default());
                        let mut pages = touched.clone();
                        pages.extend(pages_of(*at..at + cut));
                        let pages: Vec<usize> = pages.into_iter().collect();
                        for revert in model.subsets(&pages, &mut rng) {
                            emit(&reverted(&torn, &revert, &base))?;
                        }
                    }
                }
                change.apply(&mut image);
                touched.extend(change.pages());
                let pages: Vec<usize> = touched.iter().copied().collect();
                for revert in model.subsets(&pages, &mut rng) {
                    emit(&reverted(&image, &revert, &base))?;
                }
            }
        }
        match &self.before_cut {
            Some(before) => before.for_each_version(model, torn, seed, seen, visit),
            None => ControlFlow::Continue(()),
        }
    }
}

/// `image` with the bytes of `pages` put back to what `base` held there (zeros past its end).
fn reverted(image: &[u8], pages: &[usize], base: &[u8]) -> Vec<u8> {
    let mut out = image.to_vec();
    for &page in pages {
        let range = page * PAGE..((page + 1) * PAGE).min(out.len());
        for at in range {
            if let Some(byte) = out.get_mut(at) {
                *byte = base.get(at).copied().unwrap_or(0);
            }
        }
    }
    out
}

/// A directory as the model sees it.
#[derive(Debug, Clone, Default)]
pub struct Disk {
    inodes: BTreeMap<usize, Inode>,
    durable_dir: BTreeMap<String, usize>,
    dir: BTreeMap<String, usize>,
    unsynced_dir: Vec<Op>,
    /// The inode written last: under [`Tears::Sampled`] the only one whose writes are torn.
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

    /// The content of inode `ino` as a reader sees it now (durable and pending).
    pub fn content(&self, ino: usize) -> Vec<u8> {
        self.inodes.get(&ino).map_or_else(Vec::new, Inode::content)
    }

    /// The length of inode `ino` as a reader sees it now.
    pub fn len(&self, ino: usize) -> usize {
        self.content(ino).len()
    }

    /// Applies one operation.
    pub fn apply(&mut self, op: &Op) {
        match op {
            Op::Create { name, ino } => {
                self.inodes.insert(*ino, Inode::default());
                self.dir.insert(name.clone(), *ino);
                self.unsynced_dir.push(op.clone());
            }
            Op::Write { ino, at, bytes } => {
                self.last_written = Some(*ino);
                if let Some(inode) = self.inodes.get_mut(ino) {
                    let (at, bytes) = (*at, bytes.clone());
                    inode.pending.push(Change::Write { at, bytes });
                }
            }
            Op::Allocate { ino, len } => {
                if let Some(inode) = self.inodes.get_mut(ino) {
                    inode.pending.push(Change::Allocate { len: *len });
                }
            }
            Op::SyncData { ino } => {
                if let Some(inode) = self.inodes.get_mut(ino) {
                    inode.sync();
                }
            }
            Op::Cut { ino, len } => {
                if let Some(inode) = self.inodes.get_mut(ino) {
                    inode.cut(*len);
                }
            }
            Op::FailedSync { ino } => {
                if let Some(inode) = self.inodes.get_mut(ino) {
                    inode.fail_sync();
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

    /// Every state a crash now may leave under the default [`Model`], each as the files it
    /// holds (for small cases: the list is built in memory).
    pub fn crash_states(&self) -> Vec<Files> {
        let mut states = Vec::new();
        let _ = self.for_each_state(&Model::default(), 0, &mut |files| {
            states.push(files.clone());
            ControlFlow::Continue(())
        });
        states
    }

    /// Visits every state a crash now may leave under `model` (`seed` varies its samples);
    /// `visit` may stop the walk by returning `Break`.
    pub fn for_each_state(
        &self,
        model: &Model,
        seed: u64,
        visit: &mut dyn FnMut(&Files) -> ControlFlow<()>,
    ) -> ControlFlow<()> {
        for dir in self.crash_dirs() {
            let entries: Vec<(String, usize)> = dir.into_iter().collect();
            let mut files = Files::new();
            self.product(&entries, model, seed, &mut files, visit)?;
        }
        ControlFlow::Continue(())
    }

    /// Visits each combination of the versions of `entries`' files, added to `files`.
    fn product(
        &self,
        entries: &[(String, usize)],
        model: &Model,
        seed: u64,
        files: &mut Files,
        visit: &mut dyn FnMut(&Files) -> ControlFlow<()>,
    ) -> ControlFlow<()> {
        let Some(((name, ino), rest)) = entries.split_first() else {
            return visit(files);
        };
        let empty = Inode::default();
        let inode = self.inodes.get(ino).unwrap_or(&empty);
        let seed = SplitMix(seed ^ (*ino as u64).wrapping_mul(0x2545_F491_4F6C_DD1D)).next();
        let mut seen = HashSet::new();
        let torn = model.tears == Tears::EveryByte || self.last_written == Some(*ino);
        inode.for_each_version(model, torn, seed, &mut seen, &mut |bytes| {
            files.insert(name.clone(), bytes.to_vec());
            self.product(rest, model, seed, files, visit)
        })
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
}

/// Where a write of `len` bytes is cut in sampled torn versions: every byte of the first 40
/// (frame headers and the segment header), then every 61st, and the last byte (never 0 or
/// `len`).
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
        | Op::Allocate { .. }
        | Op::SyncData { .. }
        | Op::FailedSync { .. }
        | Op::Cut { .. }
        | Op::SyncDir => {}
    }
}

/// Calls `visit(p, state)` for every crash state under the default [`Model`] after every
/// prefix `trace[..p]` of `trace` (`p` from 0 to its length), starting from `initial`; returns
/// how many states it visited. `visit` may stop the walk by returning `Break`.
pub fn for_each_crash_state(
    initial: &Disk,
    trace: &[Op],
    visit: impl FnMut(usize, &Files) -> ControlFlow<()>,
) -> u64 {
    for_each_crash_state_with(&Model::default(), initial, trace, visit)
}

/// [`for_each_crash_state`] under `model`; the samples after `trace[..p]` are drawn from the
/// model's seed and `p`, so a run is reproduced by its seed.
pub fn for_each_crash_state_with(
    model: &Model,
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
        let seed = model.seed ^ (p as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        let walk = disk.for_each_state(model, seed, &mut |files| {
            count += 1;
            visit(p, files)
        });
        if walk.is_break() {
            return count;
        }
    }
    count
}
