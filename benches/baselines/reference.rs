//! The legacy storage (one JSON file per item), re-implemented for this bench from its description (layout, file
//! names, index fields) and, for what the guide leaves open, from the behaviour of the system's
//! `DLQStorage` (`persist`, `update_index`, `load_all`) and `DeadLetterQueue` (`add`,
//! `list_items`, `get_stats`), which the guide cites as `src/cook/execution/dlq.rs`:
//!
//! * layout `{base}/mapreduce/dlq/{job_id}/items/{item_id}.json` + `{job_id}/index.json`;
//! * **add** = write the item as pretty-printed JSON (no trailing newline) to its own file,
//!   then regenerate `index.json`: list the `items/` directory, take every `*.json` stem as an
//!   id, and write `{job_id, item_count, item_ids, updated_at}` pretty-printed over the old
//!   index. Both are plain whole-file writes: **no fsync, no temp file + rename** (so neither
//!   the item nor the index is durable when `add` returns, and a crash can tear the index);
//!   then the item goes into an in-memory map. The index is rebuilt from a directory listing,
//!   not read and modified: either way every add costs O(items in the job);
//! * the system has no lock around the disk writes (concurrent adds race on `index.json`), so
//!   its adds are measured one at a time;
//! * **list** and **stats** answer from the in-memory map, which a new process (an operator
//!   command) first fills with `load_all`: list the directory, read and parse every item file.
//!   `list_items` then clones every item and sorts them all newest first; the page is the first
//!   50. The index is never read by either: its order is the directory's (hash) order, so it
//!   cannot give "newest first" anyway.
//!
//! Deliberate differences, all in the baseline's favour: synchronous `std::fs` instead of the
//! system's `tokio::fs` (one blocking-pool hop per call and per 32 directory entries); no
//! capacity check or eviction (the system evicts 10 % of a job's items once it reaches its
//! `max_items`); no event logger. The item JSON is our `DeadLetteredItem` (it also carries `job_id` and
//! `error_pattern`), so both stores write the same bytes of payload.

use std::collections::HashMap;
use std::io;
use std::path::{Path, PathBuf};

use chrono::{DateTime, Utc};
use dlq::domain::model::DeadLetteredItem;

pub struct RefDlq {
    job_id: String,
    job_dir: PathBuf,
    items: HashMap<String, DeadLetteredItem>,
}

/// What `get_stats` reports.
pub struct RefStats {
    pub total_items: usize,
    pub eligible_for_reprocess: usize,
    pub requiring_manual_review: usize,
    pub oldest_item: Option<DateTime<Utc>>,
    pub newest_item: Option<DateTime<Utc>>,
}

fn bad_json(err: serde_json::Error) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, err)
}

impl RefDlq {
    /// A queue for `job_id` under `base`, loading what is on disk (as the system does).
    pub fn open(base: &Path, job_id: &str) -> io::Result<RefDlq> {
        let job_dir = base.join("mapreduce").join("dlq").join(job_id);
        let items = load_all(&job_dir)?;
        let job_id = job_id.to_owned();
        Ok(RefDlq {
            job_id,
            job_dir,
            items,
        })
    }

    pub fn job_dir(&self) -> &Path {
        &self.job_dir
    }

    fn item_path(&self, item_id: &str) -> PathBuf {
        self.job_dir.join("items").join(format!("{item_id}.json"))
    }

    /// The add path: item file, index regeneration, in-memory map.
    pub fn add(&mut self, item: DeadLetteredItem) -> io::Result<()> {
        self.write_item(&item)?;
        self.update_index()?;
        self.items.insert(item.item_id.clone(), item);
        Ok(())
    }

    /// Writes only the item file. The bench pre-fills the queue with this and then calls
    /// [`RefDlq::update_index`] once: since every add regenerates the index from the
    /// directory listing, the files left behind are exactly those n faithful adds leave.
    pub fn write_item(&self, item: &DeadLetteredItem) -> io::Result<()> {
        let path = self.item_path(&item.item_id);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)?;
        }
        let json = serde_json::to_string_pretty(item).map_err(bad_json)?;
        std::fs::write(&path, json) // no fsync
    }

    /// Lists `items/` and rewrites `index.json` whole, pretty-printed, without fsync.
    pub fn update_index(&self) -> io::Result<()> {
        let items_dir = self.job_dir.join("items");
        let mut item_ids = Vec::new();
        if items_dir.exists() {
            for entry in std::fs::read_dir(&items_dir)? {
                let name = entry?.file_name();
                if let Some(id) = name.to_str().and_then(|n| n.strip_suffix(".json")) {
                    item_ids.push(id.to_owned());
                }
            }
        }
        let index = serde_json::json!({
            "job_id": self.job_id,
            "item_count": item_ids.len(),
            "item_ids": item_ids,
            "updated_at": Utc::now(),
        });
        std::fs::create_dir_all(&self.job_dir)?;
        let json = serde_json::to_string_pretty(&index).map_err(bad_json)?;
        std::fs::write(self.job_dir.join("index.json"), json) // no fsync
    }
}

/// Lists the directory, reads and parses every item file.
pub fn load_all(job_dir: &Path) -> io::Result<HashMap<String, DeadLetteredItem>> {
    let items_dir = job_dir.join("items");
    let mut items = HashMap::new();
    if !items_dir.exists() {
        return Ok(items);
    }
    for entry in std::fs::read_dir(&items_dir)? {
        let path = entry?.path();
        if path.extension().and_then(|e| e.to_str()) == Some("json") {
            let text = std::fs::read_to_string(&path)?;
            let item: DeadLetteredItem = serde_json::from_str(&text).map_err(bad_json)?;
            items.insert(item.item_id.clone(), item);
        }
    }
    Ok(items)
}

/// `dlq list --limit` in a new process: load everything, clone and sort all newest first,
/// keep the first `limit`.
pub fn list(job_dir: &Path, limit: usize) -> io::Result<Vec<DeadLetteredItem>> {
    let items = load_all(job_dir)?;
    let mut all: Vec<DeadLetteredItem> = items.values().cloned().collect();
    all.sort_by_key(|item| std::cmp::Reverse(item.last_attempt)); // newest first
    all.truncate(limit);
    Ok(all)
}

/// `dlq stats` in a new process: load everything, count.
pub fn stats(job_dir: &Path) -> io::Result<RefStats> {
    let items = load_all(job_dir)?;
    Ok(RefStats {
        total_items: items.len(),
        eligible_for_reprocess: items.values().filter(|i| i.reprocess_eligible).count(),
        requiring_manual_review: items.values().filter(|i| i.manual_review_required).count(),
        oldest_item: items.values().map(|i| i.first_attempt).min(),
        newest_item: items.values().map(|i| i.last_attempt).max(),
    })
}
