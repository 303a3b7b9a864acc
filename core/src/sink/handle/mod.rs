//! The sink's handle, [`LocalSink`]: the [`Sink`] its callers hold. It sends writes to the writer
//! thread and reads the projection and the log; opening it is in `super::open`.

use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};

use super::log_fs::Reader;
use super::projection::counters::JobCounters;
#[cfg(any(test, feature = "testing"))]
use super::projection::index_runs;
use super::projection::parked::ParkedSet;
use super::projection::publish_state::{PendingKey, PublishState};
use super::projection::reads::TreeView;
use super::projection::{applier, keys};
use super::writer::log_retention::LogFloor;
use super::writer::{Claim, Request};
use super::{Appended, Backlog, LateAnswer, Parked, Sink, SinkError};
use crate::domain::command::Command;
use crate::domain::event::{EncodedEvent, Event};
use crate::domain::projection::StoredItem;

mod scan;

/// A raw key and value, as stored.
#[cfg(any(test, feature = "testing"))]
pub type KeyValue = (Vec<u8>, Vec<u8>);

/// The sled-backed sink. Cheap to clone; all clones share one database and one writer.
#[derive(Clone)]
pub struct LocalSink {
    pub(super) inner: Arc<Inner>,
}

pub(super) struct Inner {
    pub(super) tree: sled::Tree,
    pub(super) node_id: String,
    pub(super) requests: mpsc::Sender<Request>,
    pub(super) store_timeout: Duration,
    /// Reads the durable events of the log.
    pub(super) log: Reader,
    /// How far the projection is applied; queries wait for it.
    pub(super) applied: Arc<applier::Applied>,
    /// Which events the bus acknowledged.
    pub(super) publish: Arc<Mutex<PublishState>>,
    /// The switches the writer and the applier check (tests and drills).
    #[cfg(any(test, feature = "testing"))]
    pub(super) faults: super::Faults,
    /// The log segments anti-entropy needs kept.
    pub(super) log_floor: LogFloor,
    /// How many times [`Sink::sync_publish_marks`] made the publish marks durable (tests).
    #[cfg(any(test, feature = "testing"))]
    pub(super) marks_synced: std::sync::atomic::AtomicU64,
    /// How many scans of the tree's item keys the writer merged (tests).
    #[cfg(any(test, feature = "testing"))]
    pub(super) item_scans: Arc<std::sync::atomic::AtomicU64>,
    pub(super) writer: Mutex<Option<JoinHandle<()>>>,
}

impl LocalSink {
    /// How many scans of the projection's item keys the writer has merged since the sink
    /// opened (tests: decisions skip sled's read of a new item only after one).
    #[cfg(any(test, feature = "testing"))]
    pub fn item_scans(&self) -> u64 {
        self.inner
            .item_scans
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Fault switches for drills and tests (the `testing` feature).
    #[cfg(any(test, feature = "testing"))]
    pub fn faults(&self) -> &super::Faults {
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
        self.items_under(keys::ITEM.to_vec())
    }

    /// The items of one job, in item-id order: a seek to the job's key prefix, so the items of
    /// other jobs are never read.
    pub fn job_items(
        &self,
        job_id: &str,
    ) -> impl Iterator<Item = Result<StoredItem, SinkError>> + '_ {
        self.items_under(keys::items_of_job(job_id))
    }

    /// The items whose keys start with `prefix`; an item removed while the scan runs is
    /// skipped.
    fn items_under(
        &self,
        prefix: Vec<u8>,
    ) -> impl Iterator<Item = Result<StoredItem, SinkError>> + '_ {
        let view = self.view();
        view.tree.scan_prefix(prefix).filter_map(move |entry| {
            let loaded = entry
                .map_err(SinkError::from)
                .and_then(|(key, value)| view.load_live(&key, &value));
            loaded
                .transpose()
                .map(|entry| entry.map(|(stored, _)| stored))
        })
    }

    /// The stored event at `seq`.
    pub fn event(&self, seq: u64) -> Result<Option<Event>, SinkError> {
        match self.payload(seq)? {
            None => Ok(None),
            Some(bytes) => Event::from_json(&bytes)
                .map(Some)
                .map_err(|err| corrupt(seq, err)),
        }
    }

    /// Every stored event from `from` on, in sequence order (the log keeps done segments for
    /// its retention, see `SinkConfig::log_retention`).
    pub fn events_from(&self, from: u64) -> impl Iterator<Item = Result<Event, SinkError>> + '_ {
        self.inner.log.records(from).map(|record| {
            let record = record?;
            Event::from_json(&record.payload).map_err(|err| corrupt(record.seq, err))
        })
    }

    /// Clears the projection, puts back the items kept whole in sled (older than the log's
    /// retention) and applies the whole log again, each event once; returns the number of
    /// events applied. Refuses, changing nothing, when it would lose an item.
    pub async fn rebuild_projection(&self) -> Result<u64, SinkError> {
        let (reply, answer) = oneshot::channel();
        self.send(Request::Rebuild { reply }).await?;
        answer.await.map_err(|_| SinkError::Closed)?
    }

    /// Checkpoints now (saves the publish state, flushes sled); for tests that copy sled as of
    /// a checkpoint (the `testing` feature).
    #[cfg(any(test, feature = "testing"))]
    #[doc(hidden)]
    pub async fn checkpoint(&self) -> Result<(), SinkError> {
        self.checkpoint_now().await
    }

    /// Checkpoints now: what [`Sink::sync_publish_marks`] needs.
    async fn checkpoint_now(&self) -> Result<(), SinkError> {
        let (reply, answer) = oneshot::channel();
        self.send(Request::Checkpoint { reply }).await?;
        answer.await.map_err(|_| SinkError::Closed)?
    }

    /// How many checkpoints [`Sink::sync_publish_marks`] made: a simulated power cut keeps
    /// sled as of the last one (the `testing` feature).
    #[cfg(any(test, feature = "testing"))]
    #[doc(hidden)]
    pub fn publish_mark_syncs(&self) -> u64 {
        let synced = &self.inner.marks_synced;
        synced.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Every projection key and value, for comparing projections byte for byte: the index
    /// runs as the logical keys they hold (empty values), so two projections with the same
    /// entries compare equal however their runs were split. For tests (the `testing` feature).
    #[cfg(any(test, feature = "testing"))]
    pub fn projection_snapshot(&self) -> Result<Vec<KeyValue>, SinkError> {
        let tree = self.tree();
        let mut all = Vec::new();
        for prefix in keys::PROJECTION_PREFIXES {
            if keys::INDEX_RUNS.contains(&prefix) {
                continue;
            }
            for entry in tree.scan_prefix(prefix) {
                let (key, value) = entry?;
                all.push((key.to_vec(), value.to_vec()));
            }
        }
        for kind in keys::INDEX_KINDS {
            for key in index_runs::range(tree, kind, None) {
                all.push((key?, Vec::new()));
            }
        }
        all.sort();
        Ok(all)
    }

    /// The projection's tree for a query: once every event durable now is applied (a process
    /// reads its own writes).
    pub(super) fn tree(&self) -> &sled::Tree {
        self.inner
            .applied
            .wait_for(self.inner.log.durable_through());
        &self.inner.tree
    }

    fn payload(&self, seq: u64) -> Result<Option<Vec<u8>>, SinkError> {
        Ok(self.inner.log.read(seq)?)
    }

    fn publish_state(&self) -> Result<MutexGuard<'_, PublishState>, SinkError> {
        self.inner
            .publish
            .lock()
            .map_err(|_| SinkError::Unavailable("the publish state is unavailable"))
    }

    fn parked_set(&self) -> ParkedSet<'_> {
        ParkedSet {
            tree: &self.inner.tree,
            publish: &self.inner.publish,
            log: &self.inner.log,
        }
    }

    fn view(&self) -> TreeView<'_> {
        TreeView {
            tree: self.tree(),
            log: &self.inner.log,
        }
    }

    async fn send(&self, request: Request) -> Result<(), SinkError> {
        self.inner
            .requests
            .send(request)
            .await
            .map_err(|_| SinkError::Closed)
    }

    /// Sends an append to the writer and waits for its answer within the store timeout
    /// (`whole`: answer with the whole events, else with their bytes).
    async fn request_append(
        &self,
        command: Command,
        whole: bool,
    ) -> (Result<Vec<Appended>, SinkError>, Option<LateAnswer>) {
        let timeout = self.inner.store_timeout;
        let claim = Claim::default();
        let (reply, mut answer) = oneshot::channel();
        let deadline = tokio::time::Instant::now() + timeout;
        let request = Request::Append {
            command: Box::new(command),
            reply,
            claim: claim.clone(),
            whole,
        };
        let waited = match tokio::time::timeout_at(deadline, self.send(request)).await {
            Ok(Err(err)) => return (Err(err), None),
            Ok(Ok(())) => tokio::time::timeout_at(deadline, &mut answer).await,
            // Never queued: withdrawn below.
            Err(elapsed) => Err(elapsed),
        };
        match waited {
            Ok(Ok(result)) => (result, None),
            Ok(Err(_)) if !claim.withdraw() => (Err(SinkError::Unconfirmed(timeout)), None),
            Ok(Err(_)) => (Err(SinkError::Closed), None),
            // Withdrawn before the writer took it: it will never be stored.
            Err(_) if claim.withdraw() => (Err(SinkError::Timeout(timeout)), None),
            Err(_) => (
                Err(SinkError::Unconfirmed(timeout)),
                Some(LateAnswer::new(answer)),
            ),
        }
    }

    /// Up to `limit` unpublished sequences above `after`, ascending.
    fn unpublished_seqs(&self, after: u64, limit: usize) -> Result<Vec<u64>, SinkError> {
        let state = self.publish_state()?;
        let mut seqs: Vec<u64> = state.pending_after(after).take(limit).collect();
        if seqs.len() < limit {
            let index = self.inner.log.index();
            let mut next = index.next_after(after.max(state.watermark()));
            while let Some(seq) = next {
                if seqs.len() >= limit {
                    break;
                }
                if state.is_unpublished(seq) {
                    seqs.push(seq);
                }
                next = index.next_after(seq);
            }
        }
        Ok(seqs)
    }
}

fn corrupt(seq: u64, err: serde_json::Error) -> SinkError {
    SinkError::Corrupt {
        key: format!("log event {seq}"),
        reason: err.to_string(),
        source: Some(err.into()),
    }
}

impl Sink for LocalSink {
    async fn append(&self, command: Command) -> Result<Vec<Event>, SinkError> {
        // The late answer is dropped: the writer then counts and logs a late failure itself.
        self.append_with_late(command).await.0
    }

    async fn append_with_late(
        &self,
        command: Command,
    ) -> (Result<Vec<Event>, SinkError>, Option<LateAnswer>) {
        let (result, late) = self.request_append(command, true).await;
        (result.and_then(super::whole_events), late)
    }

    async fn append_encoded(
        &self,
        command: Command,
    ) -> (Result<Vec<Appended>, SinkError>, Option<LateAnswer>) {
        self.request_append(command, false).await
    }

    fn hold_log_from(&self, floor: Option<u64>) {
        self.inner.log_floor.hold_from(floor);
    }

    fn mark_published(&self, seq: u64) -> Result<(), SinkError> {
        let key = {
            let mut state = self.publish_state()?;
            state.published(seq, &self.inner.log.index())
        };
        if key == PendingKey::Remove {
            self.inner.tree.remove(keys::unpublished(seq))?;
        }
        Ok(())
    }

    fn unpublished(&self, after: u64, limit: usize) -> Result<Vec<EncodedEvent>, SinkError> {
        let seqs = self.unpublished_seqs(after, limit)?;
        let mut events = Vec::with_capacity(seqs.len());
        for (seq, read) in self.inner.log.read_many(&seqs) {
            let unreadable =
                |reason: String, source: Option<crate::error_class::Cause>| SinkError::Unreadable {
                    seq,
                    reason,
                    source,
                };
            let bytes = read
                .map_err(|err| unreadable(err.to_string(), Some(err.into())))?
                .ok_or_else(|| unreadable("unpublished event missing from the log".into(), None))?;
            let event = EncodedEvent::stored(bytes)
                .map_err(|err| unreadable(format!("corrupt log entry: {err}"), Some(err.into())))?;
            events.push(event);
        }
        Ok(events)
    }

    fn stored(&self, seq: u64) -> Result<Option<EncodedEvent>, SinkError> {
        match self.payload(seq)? {
            None => Ok(None),
            Some(bytes) => EncodedEvent::stored(bytes)
                .map(Some)
                .map_err(|err| corrupt(seq, err)),
        }
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
        let count = {
            let state = self.publish_state()?;
            let count = state.count(&self.inner.log.index());
            count
        };
        let oldest = match self.unpublished_seqs(0, 1)?.first().copied() {
            None => None,
            Some(seq) => self.event(seq).ok().flatten().map(|event| event.timestamp),
        };
        Ok(Backlog { count, oldest })
    }

    fn node_id(&self) -> &str {
        &self.inner.node_id
    }

    async fn sync_publish_marks(&self) -> Result<(), SinkError> {
        self.checkpoint_now().await?;
        #[cfg(any(test, feature = "testing"))]
        {
            let synced = &self.inner.marks_synced;
            synced.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        Ok(())
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
