//! [`SledSink`]: the [`Sink`] backed by sled 0.34, with its writer thread.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use chrono::{DateTime, Utc};
use sha2::{Digest, Sha256};
use tokio::sync::{mpsc, oneshot};
use tracing::{info, warn};

use super::counters::JobCounters;
use super::epoch::Epoch;
use super::journal::{self, Journal};
use super::parked::ParkedSet;
use super::reads::TreeView;
use super::seq_floor::SeqFloor;
use super::writer::{Claim, Request, Writer};
use super::{keys, show_key, Backlog, Faults, Parked, Sink, SinkError};
use crate::domain::command::{Command, Limits};
use crate::domain::event::{EncodedEvent, Event};
use crate::domain::projection::StoredItem;

/// sled segment size. sled 0.34 stores values larger than a quarter segment as separate blob
/// files that it never fsyncs; with 8 MiB segments that threshold (2 MiB) is far above
/// [`MAX_VALUE_BYTES`], so every accepted value lives in the log that we fsync.
pub const SEGMENT_SIZE: usize = 8 << 20;
/// Largest value (an event, or an item with its history) the sink stores.
pub const MAX_VALUE_BYTES: usize = 1 << 20;

/// A raw key and value, as stored.
pub type KeyValue = (Vec<u8>, Vec<u8>);

/// How the sled sink is opened.
#[derive(Debug, Clone)]
pub struct SinkConfig {
    /// Directory of the database (created if missing).
    pub path: PathBuf,
    /// Node id for new databases; must match an existing database's id when given.
    pub node_id: Option<String>,
    /// sled page cache size in bytes.
    pub cache_capacity_bytes: u64,
    /// Longest an append waits for durability before giving up (default 2 s).
    pub store_timeout: Duration,
    /// Most items per job before FIFO eviction (default 10,000).
    pub capacity_per_job: u64,
    /// Largest accepted event, in bytes (default 512 KiB, under NATS's 1 MiB payload limit;
    /// at most [`MAX_VALUE_BYTES`]).
    pub max_event_bytes: usize,
    /// Most requests the writer commits in one group.
    pub max_group: usize,
    /// Requests that may wait for the writer before appends queue up (backpressure).
    pub queue_depth: usize,
    /// How often the writer checkpoints (flushes sled and starts a new journal segment) when
    /// anything changed (default 1 s). Longer means fewer sled flushes and more journal to
    /// replay after a crash.
    pub checkpoint_every: Duration,
}

impl SinkConfig {
    /// Defaults for a database in `path`.
    pub fn new(path: impl Into<PathBuf>) -> Self {
        SinkConfig {
            path: path.into(),
            node_id: None,
            cache_capacity_bytes: 64 * 1024 * 1024,
            store_timeout: Duration::from_secs(2),
            capacity_per_job: 10_000,
            max_event_bytes: 512 * 1024,
            max_group: 1024,
            queue_depth: 8192,
            checkpoint_every: Duration::from_secs(1),
        }
    }
}

/// The sled-backed sink. Cheap to clone; all clones share one database and one writer.
#[derive(Clone)]
pub struct SledSink {
    inner: Arc<Inner>,
}

struct Inner {
    tree: sled::Tree,
    node_id: String,
    requests: mpsc::Sender<Request>,
    store_timeout: Duration,
    unpublished: Arc<AtomicU64>,
    marks_dirty: Arc<AtomicBool>,
    faults: Faults,
    writer: Mutex<Option<JoinHandle<()>>>,
}

const LOCK_HINT: &str = "Another process holds this data directory: stop it, or point --data-dir elsewhere (`dlq serve` and `dlq run` hold it while they run).";
const RECOVERY_HINT: &str = "See docs/operations.md, 'Recovering a data directory': move the directory aside, start with an empty one, and rebuild from the NATS stream; nothing was changed.";

impl SledSink {
    /// Opens (or creates) the database and starts its writer thread.
    pub fn open(config: SinkConfig) -> Result<Self, SinkError> {
        if config.max_event_bytes > MAX_VALUE_BYTES {
            return Err(SinkError::Rejected(format!(
                "max_event_bytes {} is above the sink's limit of {MAX_VALUE_BYTES} bytes",
                config.max_event_bytes
            )));
        }
        if let Some(node_id) = &config.node_id {
            crate::domain::command::validate_id::<SinkError>("node_id", node_id)
                .map_err(|err| SinkError::Rejected(err.to_string()))?;
        }
        let db = open_db(&config)?;
        // sled's flush ends in sync_file_range on Linux, which neither flushes the device's
        // write cache nor the file size: the writer fdatasyncs the log file after each flush.
        let log_file =
            std::fs::File::open(config.path.join("db")).map_err(|err| SinkError::Open {
                path: config.path.clone(),
                reason: format!("cannot open sled's log file for fsync: {err}"),
                hint: RECOVERY_HINT,
            })?;
        let tree: sled::Tree = (*db).clone();
        let replayed = journal::replay(&config.path, &tree)?;
        if replayed.records > 0 {
            info!(
                records = replayed.records,
                segments = replayed.segments,
                "replayed the sink's journal (the last run did not close cleanly)"
            );
        }
        let journal = Journal::start(&config.path)?;
        let node_id = resolve_node_id(&tree, &config)?;
        let seq_floor = SeqFloor::open(&config.path)?;
        let stored_next = match tree.scan_prefix(keys::LOG).next_back() {
            Some(entry) => keys::seq_of(&entry?.0).map_or(1, |seq| seq + 1),
            None => 1,
        };
        if stored_next < seq_floor.floor() {
            warn!(
                stored_next,
                floor = seq_floor.floor(),
                "continuing the event sequence above the reserved floor (after a crash this is expected)"
            );
        }
        let next_seq = stored_next.max(seq_floor.floor()).max(1);
        let unpublished = Arc::new(AtomicU64::new(
            tree.scan_prefix(keys::UNPUBLISHED).count() as u64
        ));
        let marks_dirty = Arc::new(AtomicBool::new(false));
        let faults = Faults::default();
        let (requests, rx) = mpsc::channel(config.queue_depth.max(1));
        let mut writer = Writer {
            db,
            log_file,
            blobs_dir: config.path.join("blobs"),
            synced_blobs: Default::default(),
            seq_floor,
            journal,
            tree: tree.clone(),
            node_id: node_id.clone(),
            epoch: Epoch::open(&config.path, &tree)?,
            next_seq,
            limits: Limits {
                capacity_per_job: config.capacity_per_job,
            },
            max_event_bytes: config.max_event_bytes,
            max_group: config.max_group.max(1),
            faults: faults.clone(),
            unpublished: unpublished.clone(),
            marks_dirty: marks_dirty.clone(),
        };
        writer.ensure_projection_format()?;
        if replayed.segments > 0 {
            writer.settle_replay()?;
        }
        let handle = std::thread::Builder::new()
            .name("dlq-sink-writer".into())
            .spawn(move || writer.run(rx))
            .map_err(|err| SinkError::Io(format!("cannot start the writer thread: {err}")))?;
        spawn_ticker(requests.downgrade(), config.checkpoint_every)?;
        Ok(SledSink {
            inner: Arc::new(Inner {
                tree,
                node_id,
                requests,
                store_timeout: config.store_timeout,
                unpublished,
                marks_dirty,
                faults,
                writer: Mutex::new(Some(handle)),
            }),
        })
    }

    /// Fault switches for drills and tests.
    pub fn faults(&self) -> &Faults {
        &self.inner.faults
    }

    /// One item, if present.
    pub fn item(&self, job_id: &str, item_id: &str) -> Result<Option<StoredItem>, SinkError> {
        self.view().item(job_id, item_id)
    }

    /// How many items a job holds.
    pub fn job_len(&self, job_id: &str) -> Result<u64, SinkError> {
        self.view().job_len(job_id)
    }

    /// Every job holding items, in job-id order, with its running counters.
    pub fn jobs(&self) -> Result<Vec<(String, JobCounters)>, SinkError> {
        self.view().jobs_with_counters().collect()
    }

    /// One job's running counters (all zero when it holds no items).
    pub fn counters(&self, job_id: &str) -> Result<JobCounters, SinkError> {
        self.view().counters(job_id)
    }

    /// Every item of every job, in key order (job, then item id).
    pub fn items(&self) -> impl Iterator<Item = Result<StoredItem, SinkError>> + '_ {
        self.inner.tree.scan_prefix(keys::ITEM).map(|entry| {
            let (key, value) = entry?;
            TreeView::decode_item(&key, &value)
        })
    }

    /// The items of one job, in item-id order: a seek to the job's key prefix, so the items of
    /// other jobs are never read.
    pub fn job_items(
        &self,
        job_id: &str,
    ) -> impl Iterator<Item = Result<StoredItem, SinkError>> + '_ {
        self.inner
            .tree
            .scan_prefix(keys::items_of_job(job_id))
            .map(|entry| {
                let (key, value) = entry?;
                TreeView::decode_item(&key, &value)
            })
    }

    /// The stored event at `seq`.
    pub fn event(&self, seq: u64) -> Result<Option<Event>, SinkError> {
        self.view().event(seq)
    }

    /// Every stored event from `from` on, in sequence order.
    pub fn events_from(&self, from: u64) -> impl Iterator<Item = Result<Event, SinkError>> + '_ {
        self.inner
            .tree
            .range(keys::log(from)..keys::log(u64::MAX))
            .map(|entry| {
                let (key, value) = entry?;
                Event::from_json(&value).map_err(|err| SinkError::Corrupt {
                    key: show_key(&key),
                    reason: err.to_string(),
                })
            })
    }

    /// Replays the whole log into a fresh projection; returns the number of events replayed.
    pub async fn rebuild_projection(&self) -> Result<u64, SinkError> {
        let (reply, answer) = oneshot::channel();
        self.send(Request::Rebuild { reply }).await?;
        answer.await.map_err(|_| SinkError::Closed)?
    }

    /// Every projection key and value, for comparing projections byte for byte.
    pub fn projection_snapshot(&self) -> Result<Vec<KeyValue>, SinkError> {
        let mut all = Vec::new();
        for prefix in keys::PROJECTION_PREFIXES {
            for entry in self.inner.tree.scan_prefix(prefix) {
                let (key, value) = entry?;
                all.push((key.to_vec(), value.to_vec()));
            }
        }
        Ok(all)
    }

    /// The tree, for the read scans of sibling modules.
    pub(super) fn tree(&self) -> &sled::Tree {
        &self.inner.tree
    }

    fn parked_set(&self) -> ParkedSet<'_> {
        ParkedSet {
            tree: &self.inner.tree,
            unpublished: &self.inner.unpublished,
            marks_dirty: &self.inner.marks_dirty,
        }
    }

    fn view(&self) -> TreeView<'_> {
        TreeView {
            tree: &self.inner.tree,
        }
    }

    async fn send(&self, request: Request) -> Result<(), SinkError> {
        self.inner
            .requests
            .send(request)
            .await
            .map_err(|_| SinkError::Closed)
    }
}

impl Sink for SledSink {
    async fn append(&self, command: Command) -> Result<Vec<Event>, SinkError> {
        let timeout = self.inner.store_timeout;
        let claim = Claim::default();
        let attempt = async {
            let (reply, answer) = oneshot::channel();
            let command = Box::new(command);
            let claim = claim.clone();
            self.send(Request::Append {
                command,
                reply,
                claim,
            })
            .await?;
            answer.await.map_err(|_| SinkError::Closed)?
        };
        match tokio::time::timeout(timeout, attempt).await {
            Ok(Err(SinkError::Closed)) if !claim.withdraw() => Err(SinkError::Unconfirmed(timeout)),
            Ok(result) => result,
            // Withdrawn before the writer took it: it will never be stored.
            Err(_) if claim.withdraw() => Err(SinkError::Timeout(timeout)),
            Err(_) => Err(SinkError::Unconfirmed(timeout)),
        }
    }

    fn mark_published(&self, seq: u64) -> Result<(), SinkError> {
        if self.inner.tree.remove(keys::unpublished(seq))?.is_some() {
            self.inner.unpublished.fetch_sub(1, Ordering::SeqCst);
            self.inner.marks_dirty.store(true, Ordering::SeqCst);
        }
        Ok(())
    }

    fn unpublished(&self, after: u64, limit: usize) -> Result<Vec<EncodedEvent>, SinkError> {
        let start = keys::unpublished(after.saturating_add(1));
        let end = keys::unpublished(u64::MAX);
        let view = self.view();
        let mut events = Vec::new();
        for entry in self.inner.tree.range(start..end).take(limit) {
            let (key, _) = entry?;
            let Some(seq) = keys::seq_of(&key) else {
                continue;
            };
            match view.encoded_event(seq) {
                Ok(Some(event)) => events.push(event),
                Ok(None) => {
                    return Err(SinkError::Unreadable {
                        seq,
                        reason: "unpublished marker without a log entry".into(),
                    })
                }
                Err(SinkError::Corrupt { key, reason }) => {
                    return Err(SinkError::Unreadable {
                        seq,
                        reason: format!("corrupt log entry {key}: {reason}"),
                    })
                }
                Err(err) => return Err(err),
            }
        }
        Ok(events)
    }

    fn stored(&self, seq: u64) -> Result<Option<EncodedEvent>, SinkError> {
        self.view().encoded_event(seq)
    }

    fn park(&self, seq: u64, event_id: Option<&str>, reason: &str) -> Result<bool, SinkError> {
        self.parked_set().park(seq, event_id, reason)
    }

    fn parked(&self) -> Result<Vec<Parked>, SinkError> {
        self.parked_set().list()
    }

    fn unpark_all(&self) -> Result<u64, SinkError> {
        self.parked_set().unpark_all()
    }

    fn backlog(&self) -> Result<Backlog, SinkError> {
        let oldest = match self.inner.tree.scan_prefix(keys::UNPUBLISHED).next() {
            None => None,
            Some(entry) => {
                let (_, value) = entry?;
                keys::decode_u64(&value)
                    .and_then(|ms| i64::try_from(ms).ok())
                    .and_then(DateTime::<Utc>::from_timestamp_millis)
            }
        };
        Ok(Backlog {
            count: self.inner.unpublished.load(Ordering::SeqCst),
            oldest,
        })
    }

    fn node_id(&self) -> &str {
        &self.inner.node_id
    }

    async fn close(&self) -> Result<(), SinkError> {
        let (reply, answer) = oneshot::channel();
        if self.send(Request::Close { reply }).await.is_err() {
            return Ok(());
        }
        let result = answer.await.unwrap_or(Ok(()));
        let handle = self
            .inner
            .writer
            .lock()
            .ok()
            .and_then(|mut guard| guard.take());
        if let Some(handle) = handle {
            let _ = tokio::task::spawn_blocking(move || handle.join()).await;
        }
        result
    }
}

fn open_db(config: &SinkConfig) -> Result<sled::Db, SinkError> {
    let open_error = |reason: String, hint| SinkError::Open {
        path: config.path.clone(),
        reason,
        hint,
    };
    std::fs::create_dir_all(&config.path)
        .map_err(|err| open_error(err.to_string(), "Check that the directory is writable."))?;
    let sled_config = sled::Config::new()
        .path(&config.path)
        .cache_capacity(config.cache_capacity_bytes)
        .segment_size(SEGMENT_SIZE)
        .flush_every_ms(None);
    // sled 0.34 has been reported to panic on some damaged databases (issues 1527, 1533):
    // a panic while opening becomes an error with a recovery path, never a crash. A lock
    // conflict is retried for up to a second: sled's I/O threads can hold the file lock for a
    // moment after the last handle of a previous open in this process was dropped.
    let mut lock_retries = 10;
    loop {
        match catch_unwind(AssertUnwindSafe(|| sled_config.open())) {
            Ok(Ok(db)) => return Ok(db),
            Ok(Err(err)) => {
                let reason = err.to_string();
                let locked = reason.contains("could not acquire lock");
                if locked && lock_retries > 0 {
                    lock_retries -= 1;
                    std::thread::sleep(Duration::from_millis(100));
                    continue;
                }
                let hint = if locked { LOCK_HINT } else { RECOVERY_HINT };
                return Err(open_error(reason, hint));
            }
            Err(_) => {
                return Err(open_error(
                    "sled panicked while recovering".into(),
                    RECOVERY_HINT,
                ))
            }
        }
    }
}

fn resolve_node_id(tree: &sled::Tree, config: &SinkConfig) -> Result<String, SinkError> {
    let stored = tree
        .get(keys::NODE_ID)?
        .map(|v| String::from_utf8_lossy(&v).into_owned());
    match (stored, &config.node_id) {
        (Some(stored), Some(wanted)) if &stored != wanted => Err(SinkError::Open {
            path: config.path.clone(),
            reason: format!("the database belongs to node '{stored}', not '{wanted}'"),
            hint: "Each node needs its own data directory: pass the matching --node-id or another --data-dir.",
        }),
        (Some(stored), _) => Ok(stored),
        (None, wanted) => {
            // A given node id was validated before the database was opened.
            let node_id = match wanted {
                Some(id) => id.clone(),
                None => generated_node_id(&config.path),
            };
            tree.insert(keys::NODE_ID, node_id.as_bytes())?;
            tree.flush()?;
            Ok(node_id)
        }
    }
}

/// A new node id: stable once stored, unique enough across hosts and directories.
fn generated_node_id(path: &Path) -> String {
    let mut hasher = Sha256::new();
    hasher.update(path.to_string_lossy().as_bytes());
    hasher.update(Utc::now().timestamp_nanos_opt().unwrap_or(0).to_be_bytes());
    hasher.update(std::process::id().to_be_bytes());
    let digest = hasher.finalize();
    let hex: String = digest.iter().take(4).map(|b| format!("{b:02x}")).collect();
    format!("node-{hex}")
}

/// Asks the writer to checkpoint every `every`; stops when the sink is gone.
fn spawn_ticker(requests: mpsc::WeakSender<Request>, every: Duration) -> Result<(), SinkError> {
    std::thread::Builder::new()
        .name("dlq-sink-ticker".into())
        .spawn(move || loop {
            std::thread::sleep(every.max(Duration::from_millis(10)));
            let Some(sender) = requests.upgrade() else {
                return;
            };
            if let Err(mpsc::error::TrySendError::Closed(_)) = sender.try_send(Request::Tick) {
                return;
            }
        })
        .map(|_| ())
        .map_err(|err| SinkError::Io(format!("cannot start the ticker thread: {err}")))
}
