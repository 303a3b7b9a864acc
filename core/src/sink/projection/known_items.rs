//! The item keys the tree may hold, so that the writer decides a new item without reading sled.
//!
//! Deciding a dead-letter reads the item first: a new one is a miss in sled. sled 0.34 takes
//! a process-wide read lock for every read, and the applier's `apply_batch` holds the write lock
//! for its whole (gathered) batch, so that miss made the writer wait for the applier on nearly
//! every new item (docs/benchmarks.md, seventh round).
//!
//! [`KnownItems`] holds a 64-bit hash of every item key the tree holds or may hold: the item keys
//! of one scan of the tree, made on a thread of its own once this process has appended
//! [`SCAN_AFTER_EVENTS`] events (a command that appends a few never pays for it), joined with
//! every item the writer staged since it started. Once the scan is in, a key whose hash is not
//! there is surely not in the tree; a hash that is there (the item, an item removed since, or a
//! collision) is read from the tree as before. Whatever puts items in the tree other than the
//! writer's own groups (a catch-up of the projection from the log, a rebuild) makes it
//! [`forget`](KnownItems::forget) the scan, and a new one follows.

use std::hash::BuildHasher;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, TryRecvError};
use std::sync::Arc;
use std::thread::JoinHandle;

use foldhash::HashSet;
use tracing::{debug, warn};

use crate::sink::projection::keys;

/// Events this process appends before the tree's item keys are scanned.
pub(crate) const SCAN_AFTER_EVENTS: u64 = 1024;
/// Hashes held beyond twice the last scan's before a new scan replaces them (items removed from
/// the tree keep their hash until then).
const REFRESH_SLACK: usize = 1 << 16;

/// Hashes of the item keys the tree may hold (see the module doc).
pub(crate) struct KnownItems {
    hasher: foldhash::fast::RandomState,
    hashes: HashSet<u64>,
    scan: Scan,
    /// Events appended since the last scan was forgotten (or since the start).
    appended: u64,
    /// Item keys the last merged scan found.
    scanned: usize,
    /// Scans merged since the sink opened, for tests and the status of the sink.
    scans: Arc<AtomicU64>,
}

enum Scan {
    NotStarted,
    Running(Running),
    /// Every item key of the tree is in `hashes`.
    Done,
}

/// A scan on its thread. Dropped, it stops the scan and joins the thread: the thread holds
/// the tree, and sled keeps its files locked until the last handle goes, so a sink closed
/// mid-scan could not be opened again at once.
struct Running {
    results: Receiver<Result<Vec<u64>, ScanError>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Drop for Running {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            if thread.join().is_err() {
                warn!("the thread scanning the tree's item keys panicked");
            }
        }
    }
}

/// Why a scan gave no hashes.
#[derive(Debug, thiserror::Error)]
enum ScanError {
    #[error(transparent)]
    Sled(#[from] sled::Error),
    #[error("stopped")]
    Stopped,
}

/// Keys scanned between two looks at the stop flag.
const STOP_EVERY: usize = 1024;

impl KnownItems {
    /// Nothing known yet: every item is read from the tree until a scan is in. `scans` counts
    /// the scans merged.
    pub(crate) fn new(scans: Arc<AtomicU64>) -> Self {
        KnownItems {
            hasher: foldhash::fast::RandomState::default(),
            hashes: HashSet::default(),
            scan: Scan::NotStarted,
            appended: 0,
            scanned: 0,
            scans,
        }
    }

    /// True when the tree surely holds no item `job_id`/`item_id`.
    pub(crate) fn surely_absent(&self, job_id: &str, item_id: &str) -> bool {
        matches!(self.scan, Scan::Done)
            && !self
                .hashes
                .contains(&self.hasher.hash_one(keys::item(job_id, item_id).as_slice()))
    }

    /// Notes the items a group staged (new, changed or removed: each may be in the tree now)
    /// and the events it appended.
    pub(crate) fn staged<'k>(&mut self, items: impl Iterator<Item = (&'k str, &'k str)>) {
        for (job_id, item_id) in items {
            let hash = self.hasher.hash_one(keys::item(job_id, item_id).as_slice());
            self.hashes.insert(hash);
        }
    }

    /// Counts appended events, starts the scan once there were enough, and merges a finished
    /// one. Called by the writer before each group.
    pub(crate) fn poll(&mut self, tree: &sled::Tree, events: u64) {
        self.appended = self.appended.saturating_add(events);
        match std::mem::replace(&mut self.scan, Scan::NotStarted) {
            Scan::NotStarted if self.appended >= SCAN_AFTER_EVENTS => self.start(tree),
            Scan::Running(running) => match running.results.try_recv() {
                Ok(Ok(hashes)) => {
                    debug!(items = hashes.len(), "item keys of the tree scanned");
                    self.scanned = hashes.len();
                    self.hashes.extend(hashes);
                    self.scan = Scan::Done;
                    self.scans.fetch_add(1, Ordering::Relaxed);
                }
                Ok(Err(err)) => {
                    warn!(error = %err, "scanning the tree's item keys failed; new items are read from sled until a later scan succeeds");
                    self.forget();
                }
                Err(TryRecvError::Empty) => self.scan = Scan::Running(running),
                Err(TryRecvError::Disconnected) => self.forget(),
            },
            other => self.scan = other,
        }
    }

    /// Items reached the tree other than through the writer's groups: read every item from the
    /// tree again until a new scan is in.
    pub(crate) fn forget(&mut self) {
        self.scan = Scan::NotStarted;
        self.appended = 0;
    }

    /// True when the hashes hold more than twice what the last scan found (plus some slack):
    /// mostly items removed since, which a new scan drops. See [`KnownItems::refresh`].
    pub(crate) fn wants_refresh(&self) -> bool {
        matches!(self.scan, Scan::Done)
            && self.hashes.len() > self.scanned.saturating_mul(2).saturating_add(REFRESH_SLACK)
    }

    /// Drops every hash and scans the tree again. The caller makes sure every group staged so
    /// far is applied to the tree (the scan finds its items there): only the items staged from
    /// now on are noted apart.
    pub(crate) fn refresh(&mut self, tree: &sled::Tree) {
        self.hashes = HashSet::default();
        self.forget();
        self.start(tree);
    }

    fn start(&mut self, tree: &sled::Tree) {
        let (tree, hasher) = (tree.clone(), self.hasher.clone());
        let (done, results) = mpsc::channel();
        let stop = Arc::new(AtomicBool::new(false));
        let stopping = stop.clone();
        let spawned = std::thread::Builder::new()
            .name("dlq-sink-scan".into())
            .spawn(move || {
                let hashes = scan(&tree, &hasher, &stopping);
                // The writer may have forgotten this scan meanwhile: nobody to tell then.
                let _ = done.send(hashes);
            });
        match spawned {
            Ok(thread) => {
                self.scan = Scan::Running(Running {
                    results,
                    stop,
                    thread: Some(thread),
                })
            }
            Err(err) => {
                warn!(error = %err, "cannot start the thread that scans the tree's item keys; new items are read from sled");
                self.forget();
            }
        }
    }
}

/// The hash of every item key of `tree`, unless `stop` is set first.
fn scan(
    tree: &sled::Tree,
    hasher: &foldhash::fast::RandomState,
    stop: &AtomicBool,
) -> Result<Vec<u64>, ScanError> {
    let mut hashes = Vec::new();
    for key in tree.scan_prefix(keys::ITEM).keys() {
        if hashes.len() % STOP_EVERY == 0 && stop.load(Ordering::Relaxed) {
            return Err(ScanError::Stopped);
        }
        hashes.push(hasher.hash_one(key?.as_ref()));
    }
    Ok(hashes)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn scanned(known: &mut KnownItems, tree: &sled::Tree) {
        known.poll(tree, SCAN_AFTER_EVENTS);
        let before = known.scans.load(Ordering::Relaxed);
        while known.scans.load(Ordering::Relaxed) == before {
            std::thread::sleep(std::time::Duration::from_millis(1));
            known.poll(tree, 0);
        }
    }

    #[test]
    fn nothing_is_surely_absent_before_the_scan() {
        let tree = sled::Config::new().temporary(true).open().unwrap();
        let mut known = KnownItems::new(Arc::default());
        known.poll(&tree, SCAN_AFTER_EVENTS - 1);
        assert!(!known.surely_absent("job", "item"));
    }

    #[test]
    fn the_scan_finds_the_tree_items_and_the_writer_adds_its_own() {
        let tree = sled::Config::new().temporary(true).open().unwrap();
        tree.insert(keys::item("job", "old"), b"x").unwrap();
        tree.insert(keys::by_age("job", 1, "not-an-item"), b"")
            .unwrap();
        let mut known = KnownItems::new(Arc::default());
        known.staged([("job", "staged")].into_iter());
        scanned(&mut known, &tree);
        assert!(!known.surely_absent("job", "old"), "an item the tree held");
        assert!(
            !known.surely_absent("job", "staged"),
            "an item the writer staged"
        );
        assert!(known.surely_absent("job", "new"));
        assert!(known.surely_absent("job", "not-an-item"));
        assert!(
            known.surely_absent("jo", "b\0old"),
            "the key is hashed whole"
        );
    }

    #[test]
    fn forgetting_waits_for_a_new_scan() {
        let tree = sled::Config::new().temporary(true).open().unwrap();
        let mut known = KnownItems::new(Arc::default());
        scanned(&mut known, &tree);
        assert!(known.surely_absent("job", "rebuilt"));
        tree.insert(keys::item("job", "rebuilt"), b"x").unwrap();
        known.forget();
        assert!(!known.surely_absent("job", "rebuilt"));
        scanned(&mut known, &tree);
        assert!(!known.surely_absent("job", "rebuilt"));
    }

    /// A sink closed while its writer scans must open again at once: the scan stops and lets
    /// go of the tree (sled locks its files while any handle lives).
    #[test]
    fn dropping_a_running_scan_lets_go_of_the_tree() {
        let dir = tempfile::tempdir().unwrap();
        for _ in 0..5 {
            let db = sled::Config::new().path(dir.path()).open().unwrap();
            let tree = db.open_tree("t").unwrap();
            if tree.is_empty() {
                let mut batch = sled::Batch::default();
                for n in 0..100_000 {
                    batch.insert(keys::item("job", &format!("item-{n}")), b"x".as_slice());
                }
                tree.apply_batch(batch).unwrap();
            }
            let mut known = KnownItems::new(Arc::default());
            known.poll(&tree, SCAN_AFTER_EVENTS);
            assert!(matches!(known.scan, Scan::Running(_)));
            drop((known, tree, db));
        }
    }

    #[test]
    fn a_refresh_keeps_what_the_tree_holds_and_drops_the_rest() {
        let tree = sled::Config::new().temporary(true).open().unwrap();
        tree.insert(keys::item("job", "kept"), b"x").unwrap();
        let mut known = KnownItems::new(Arc::default());
        scanned(&mut known, &tree);
        let removed: Vec<String> = (0..=REFRESH_SLACK + 2).map(|n| format!("r-{n}")).collect();
        known.staged(removed.iter().map(|id| ("job", id.as_str())));
        assert!(known.wants_refresh());
        known.refresh(&tree);
        known.staged([("job", "during")].into_iter());
        scanned(&mut known, &tree);
        assert!(!known.wants_refresh());
        assert!(!known.surely_absent("job", "kept"));
        assert!(
            !known.surely_absent("job", "during"),
            "staged while the scan ran"
        );
        assert!(
            known.surely_absent("job", "r-1"),
            "removed before the refresh"
        );
    }
}
