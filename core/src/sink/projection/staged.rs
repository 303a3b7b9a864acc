//! Writes staged for one group commit, and the state they imply.
//!
//! The writer stages every command of a group here and applies them as **one** sled batch:
//! sled seals and writes its log buffer for every `apply_batch`, so one batch per command would
//! cost two synchronous writebacks each. [`Staged`] is a [`StateView`]: reads see the tree, then
//! the groups that are durable in the log but not applied to sled yet (the `base` layers, see
//! `crate::sink::projection::applier`), then the group's earlier changes, so each command is decided on the
//! state the commands before it left. A command stages into its own [`Layer`] first and is
//! absorbed into the group only when all of it succeeded, so a refused command leaves no trace.
//!
//! The applier may apply a base layer to the tree while a group is being staged: reads by key
//! take the layer's value (the same as what reached the tree), and index scans skip tree entries
//! a layer changed and drop items counted twice.

use std::borrow::Cow;
use std::cell::RefCell;
use std::collections::BTreeMap;
use std::sync::Arc;

use chrono::{DateTime, Utc};
// foldhash, not std's SipHash: the group's tables are hashed several times per event on the
// writer's path (docs/benchmarks.md, fifth round). Seeded per process.
use foldhash::{HashMap, HashSet};

use crate::domain::event::Event;
use crate::domain::projection::{apply, apply_owned, Change, StateView, StoredItem};
use crate::sink::config::MAX_VALUE_BYTES;
use crate::sink::log_fs::Reader;
use crate::sink::projection::counters::JobCounters;
use crate::sink::projection::index_runs;
use crate::sink::projection::item_record::ItemRecord;
use crate::sink::projection::keys;
use crate::sink::projection::known_items::KnownItems;
use crate::sink::projection::reads::TreeView;
use crate::sink::projection::Write;
use crate::sink::SinkError;

type ItemKey = (String, String);

/// An item's state and what sled keeps of it.
pub(crate) type Entry = (StoredItem, ItemRecord);

/// Pending writes and the item state they imply.
#[derive(Default)]
pub(crate) struct Layer {
    /// Key → new value (`None`: delete).
    writes: BTreeMap<Vec<u8>, Option<Vec<u8>>>,
    /// Items changed: `None` means deleted.
    items: HashMap<ItemKey, Option<Entry>>,
    /// Counters of the jobs touched.
    counts: HashMap<String, JobCounters>,
}

impl Layer {
    /// The items this layer puts or removes, as (job, item).
    pub(crate) fn item_keys(&self) -> impl Iterator<Item = (&str, &str)> {
        self.items
            .keys()
            .map(|(job, item)| (job.as_str(), item.as_str()))
    }
}

/// The group's staged writes over the unapplied groups over the tree.
pub(crate) struct Staged<'a> {
    view: TreeView<'a>,
    /// Groups durable in the log, not yet applied to the tree, oldest first.
    base: Vec<Arc<Layer>>,
    group: Layer,
    /// The first sequence not applied to the tree when staging began: items with a
    /// `created_seq` at or above it may have no entries in the tree's indexes yet.
    first_seq: u64,
    /// Items read from the tree during this group, so deciding a command and staging its
    /// events read each once. Only the base layers change the tree while the group is staged,
    /// and they are consulted first, so a value read here stays what the tree holds.
    tree_reads: RefCell<HashMap<ItemKey, Option<Entry>>>,
    /// The item keys the tree may hold: an item surely absent is not read (the writer's).
    known: Option<&'a KnownItems>,
}

impl<'a> Staged<'a> {
    /// Starts staging a group over `tree` with nothing unapplied; its events get sequences
    /// from `first_seq` on.
    pub(crate) fn new(tree: &'a sled::Tree, log: &'a Reader, first_seq: u64) -> Self {
        Self::over(tree, log, Vec::new(), first_seq)
    }

    /// Starts staging over the unapplied groups `base` (oldest first) whose first sequence is
    /// `first_seq` (the group's own first sequence when `base` is empty).
    pub(crate) fn over(
        tree: &'a sled::Tree,
        log: &'a Reader,
        base: Vec<Arc<Layer>>,
        first_seq: u64,
    ) -> Self {
        Staged {
            view: TreeView { tree, log },
            base,
            group: Layer::default(),
            first_seq,
            tree_reads: RefCell::default(),
            known: None,
        }
    }

    /// Reads from the tree no item that `known` says it surely does not hold.
    pub(crate) fn knowing(mut self, known: &'a KnownItems) -> Self {
        self.known = Some(known);
        self
    }

    /// Makes room for a group of about `appends` commands: its items and tree reads then fill
    /// tables sized once instead of doubling (and rehashing every key) as the group grows.
    pub(crate) fn reserve(&mut self, appends: usize) {
        self.group.items.reserve(appends);
        self.tree_reads.get_mut().reserve(appends);
    }

    /// The item state the base layers give `key`, newest first.
    fn base_item(&self, key: &ItemKey) -> Option<&Option<Entry>> {
        self.base
            .iter()
            .rev()
            .find_map(|layer| layer.items.get(key))
    }

    /// Stages `events` as one unit: either all of them join the group, or none does. Each
    /// item a change puts is copied out of its event ([`Staged::stage_owned`] moves it).
    pub(crate) fn stage_events(&mut self, events: &[Event]) -> Result<(), SinkError> {
        self.stage_all(events.iter().map(Cow::Borrowed))
    }

    /// Stages `events` as one unit, as [`Staged::stage_events`], moving each item a change
    /// puts out of its event instead of copying it: the writer's path, whose callers get the
    /// events' bytes, not the events.
    pub(crate) fn stage_owned(&mut self, events: Vec<Event>) -> Result<(), SinkError> {
        self.stage_all(events.into_iter().map(Cow::Owned))
    }

    fn stage_all<'e>(
        &mut self,
        events: impl Iterator<Item = Cow<'e, Event>>,
    ) -> Result<(), SinkError> {
        let mut layer = Layer::default();
        for event in events {
            self.stage_projection(&mut layer, event)?;
        }
        self.absorb(layer);
        Ok(())
    }

    fn absorb(&mut self, layer: Layer) {
        self.group.writes.extend(layer.writes);
        self.group.items.extend(layer.items);
        self.group.counts.extend(layer.counts);
    }

    /// The state of an item as `layer` over the group over the tree sees it.
    fn current(&self, layer: &Layer, key: &ItemKey) -> Result<Option<Entry>, SinkError> {
        let staged = layer.items.get(key).or_else(|| self.group.items.get(key));
        if let Some(item) = staged.or_else(|| self.base_item(key)) {
            return Ok(item.clone());
        }
        if let Some(read) = self.tree_reads.borrow().get(key) {
            return Ok(read.clone());
        }
        let absent = self
            .known
            .is_some_and(|known| known.surely_absent(&key.0, &key.1));
        let read = if absent {
            None
        } else {
            self.view.entry(&key.0, &key.1)?
        };
        self.tree_reads
            .borrow_mut()
            .insert(key.clone(), read.clone());
        Ok(read)
    }

    fn count(&self, layer: &Layer, job_id: &str) -> Result<JobCounters, SinkError> {
        match layer
            .counts
            .get(job_id)
            .or_else(|| self.group.counts.get(job_id))
            .or_else(|| {
                let mut layers = self.base.iter().rev();
                layers.find_map(|base| base.counts.get(job_id))
            }) {
            Some(count) => Ok(*count),
            None => self.view.counters(job_id),
        }
    }

    /// Folds one event into `layer`: item value, indexes and job counters.
    fn stage_projection(&self, layer: &mut Layer, event: Cow<'_, Event>) -> Result<(), SinkError> {
        let Some(item_id) = event.kind.item_id() else {
            return Ok(());
        };
        let key = (event.job_id.clone(), item_id.to_owned());
        let current = self.current(layer, &key)?;
        let mut count = self.count(layer, &event.job_id)?;
        let (previous, record) = match current {
            Some((stored, record)) => (Some(stored), Some(record)),
            None => (None, None),
        };
        let (seq, kind) = (event.seq, event.kind.name());
        let change = match event {
            Cow::Borrowed(event) => apply(previous.as_ref(), event),
            Cow::Owned(event) => apply_owned(previous.as_ref(), event),
        };
        match change {
            Change::Put { item, previous } => {
                // A new item is one event, within `max_event_bytes`; a grown one is measured.
                let size = match &previous {
                    Some(_) => json_len(&*item)?,
                    None => 0,
                };
                if size > MAX_VALUE_BYTES {
                    return Err(SinkError::Rejected(format!(
                        "item '{}' of job '{}' would grow to {size} bytes with this {} event (limit {MAX_VALUE_BYTES}): resolve, clear or purge it",
                        key.1,
                        key.0,
                        kind,
                    )));
                }
                let record = next_record(record, &item, seq)?;
                let value = record.encode();
                if let Some(previous) = &previous {
                    unindex(&mut layer.writes, previous);
                    count.remove(&previous.item);
                }
                count.add(&item.item);
                layer.counts.insert(key.0.clone(), count);
                layer.writes.insert(keys::item(&key.0, &key.1), Some(value));
                index(&mut layer.writes, &item);
                layer.items.insert(key, Some((*item, record)));
            }
            Change::Delete { previous } => {
                unindex(&mut layer.writes, &previous);
                layer.writes.insert(keys::item(&key.0, &key.1), None);
                count.remove(&previous.item);
                layer.counts.insert(key.0.clone(), count);
                layer.items.insert(key, None);
            }
            Change::Unchanged => {}
        }
        Ok(())
    }

    /// Every key change staged: what one sled batch holds.
    pub(crate) fn into_writes(self) -> Vec<Write> {
        self.into_parts().0
    }

    /// Every key change staged, and the state they imply (items and counters, without the
    /// writes), for staging the next groups before these are applied.
    pub(crate) fn into_parts(self) -> (Vec<Write>, Layer) {
        let mut group = self.group;
        let mut writes: Vec<Write> = std::mem::take(&mut group.writes).into_iter().collect();
        for (job, count) in &group.counts {
            let value = (count.items != 0).then(|| count.encode());
            writes.push((keys::job_count(job), value));
        }
        (writes, group)
    }

    /// True when the tree's FIFO or age entry for `key` still describes the staged state.
    fn tree_entry_current(&self, key: &ItemKey, check: impl Fn(&StoredItem) -> bool) -> bool {
        match self.group.items.get(key).or_else(|| self.base_item(key)) {
            None => true,
            Some(None) => false,
            Some(Some((stored, _))) => check(stored),
        }
    }

    /// Items created since the tree's last applied group (and still present), each once.
    fn created_here(&self) -> Vec<&StoredItem> {
        let mut latest: HashMap<&ItemKey, &Option<Entry>> = HashMap::default();
        for layer in self.base.iter().map(|b| &**b).chain([&self.group]) {
            latest.extend(layer.items.iter());
        }
        latest
            .into_values()
            .flatten()
            .map(|(stored, _)| stored)
            .filter(|stored| stored.created_seq >= self.first_seq)
            .collect()
    }
}

/// How many bytes `value`'s JSON takes, without keeping them.
fn json_len(value: &impl serde::Serialize) -> Result<usize, SinkError> {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 += buf.len();
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    serde_json::to_writer(&mut count, value).map_err(|source| SinkError::Encode {
        what: "a record to measure its size".into(),
        source,
    })?;
    Ok(count.0)
}

/// What sled keeps of `item` after the event `seq` made it: the pointer record grown by `seq`,
/// or (for an item kept whole, see [`ItemRecord::Inline`]) the whole item again.
fn next_record(
    previous: Option<ItemRecord>,
    item: &StoredItem,
    seq: u64,
) -> Result<ItemRecord, SinkError> {
    match previous {
        None => Ok(ItemRecord::Events(vec![seq])),
        Some(ItemRecord::Events(mut seqs)) => {
            seqs.push(seq);
            Ok(ItemRecord::Events(seqs))
        }
        Some(ItemRecord::Inline(_)) => {
            serde_json::to_vec(item)
                .map(ItemRecord::Inline)
                .map_err(|source| SinkError::Encode {
                    what: format!("item {}/{}", item.item.job_id, item.item.item_id),
                    source,
                })
        }
    }
}

/// The index entries of `stored`, added to `writes`.
pub(crate) fn index(writes: &mut BTreeMap<Vec<u8>, Option<Vec<u8>>>, stored: &StoredItem) {
    let item = &stored.item;
    let (job, id) = (&item.job_id, &item.item_id);
    let ms = item.first_attempt.timestamp_millis();
    writes.insert(keys::by_age(job, ms, id), Some(Vec::new()));
    writes.insert(
        keys::by_recency(job, item.last_attempt, id),
        Some(Vec::new()),
    );
    writes.insert(keys::fifo(job, stored.created_seq, id), Some(Vec::new()));
}

fn unindex(writes: &mut BTreeMap<Vec<u8>, Option<Vec<u8>>>, stored: &StoredItem) {
    let item = &stored.item;
    let (job, id) = (&item.job_id, &item.item_id);
    let ms = item.first_attempt.timestamp_millis();
    writes.insert(keys::by_age(job, ms, id), None);
    writes.insert(keys::by_recency(job, item.last_attempt, id), None);
    writes.insert(keys::fifo(job, stored.created_seq, id), None);
}

impl StateView for Staged<'_> {
    type Error = SinkError;

    fn item(&self, job_id: &str, item_id: &str) -> Result<Option<StoredItem>, SinkError> {
        let key = (job_id.to_owned(), item_id.to_owned());
        Ok(self
            .current(&Layer::default(), &key)?
            .map(|(stored, _)| stored))
    }

    fn job_len(&self, job_id: &str) -> Result<u64, SinkError> {
        Ok(self.count(&Layer::default(), job_id)?.items)
    }

    fn oldest_in_job(&self, job_id: &str, limit: usize) -> Result<Vec<String>, SinkError> {
        if limit == 0 {
            // The common case (the job is below its capacity): no index walk at all.
            return Ok(Vec::new());
        }
        let prefix = keys::fifo_of_job(job_id);
        let end = keys::prefix_end(&prefix);
        let mut ids = Vec::new();
        for key in index_runs::range(self.view.tree, &prefix, Some(&end)) {
            if ids.len() >= limit {
                return Ok(ids);
            }
            let key = key?;
            let corrupt = || SinkError::Corrupt {
                key: crate::sink::show_key(&key),
                reason: "malformed FIFO index key".into(),
                source: None,
            };
            let id = keys::item_of_fifo(&key, prefix.len()).ok_or_else(corrupt)?;
            let seq = key
                .get(prefix.len()..prefix.len() + 8)
                .and_then(keys::decode_u64)
                .ok_or_else(corrupt)?;
            let item_key = (job_id.to_owned(), id);
            if self.tree_entry_current(&item_key, |s| s.created_seq == seq) {
                ids.push(item_key.1);
            }
        }
        // Items created since the last applied group are newer than everything in the tree
        // (the applier may have put some of them in the tree meanwhile: each counts once).
        let mut fresh: Vec<&StoredItem> = self
            .created_here()
            .into_iter()
            .filter(|s| s.item.job_id == job_id)
            .collect();
        fresh.sort_by_key(|s| s.created_seq);
        let mut seen: HashSet<String> = ids.iter().cloned().collect();
        for stored in fresh {
            if ids.len() >= limit {
                break;
            }
            if seen.insert(stored.item.item_id.clone()) {
                ids.push(stored.item.item_id.clone());
            }
        }
        Ok(ids)
    }

    fn first_failed_before(
        &self,
        cutoff: DateTime<Utc>,
        job_id: Option<&str>,
        limit: usize,
    ) -> Result<Vec<(String, String)>, SinkError> {
        let cutoff_ms = cutoff.timestamp_millis();
        let jobs = match job_id {
            Some(job) => vec![job.to_owned()],
            None => self.view.jobs().collect::<Result<_, _>>()?,
        };
        let mut hits: Vec<(i64, String, String)> = Vec::new();
        for job in jobs {
            // Each job's first `limit` hits: the `limit` overall are among them.
            let prefix = keys::ages_of_job(&job);
            let mut taken = 0;
            let bound = keys::age_bound(&job, cutoff_ms);
            for key in index_runs::range(self.view.tree, &prefix, Some(&bound)) {
                if taken >= limit {
                    break;
                }
                let key = key?;
                let (ms, item) =
                    keys::ms_item_of_age(&key, prefix.len()).ok_or_else(|| SinkError::Corrupt {
                        key: crate::sink::show_key(&key),
                        reason: "malformed age index key".into(),
                        source: None,
                    })?;
                let item_key = (job.clone(), item);
                if self.tree_entry_current(&item_key, |s| {
                    s.item.first_attempt.timestamp_millis() == ms
                }) {
                    taken += 1;
                    hits.push((ms, item_key.0, item_key.1));
                }
            }
        }
        for stored in self.created_here() {
            // `hits.dedup()` below drops an item the tree already holds too.
            let item = &stored.item;
            let ms = item.first_attempt.timestamp_millis();
            if ms < cutoff_ms && job_id.is_none_or(|wanted| wanted == item.job_id) {
                hits.push((ms, item.job_id.clone(), item.item_id.clone()));
            }
        }
        hits.sort();
        hits.dedup();
        hits.truncate(limit);
        Ok(hits.into_iter().map(|(_, job, item)| (job, item)).collect())
    }
}
