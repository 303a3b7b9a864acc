//! Streaming read scans of the items, for operator queries (`dlq list`, `stats`, `analyze`,
//! `export`) and a future admin API.
//!
//! Every scan is an iterator over sled's own iterator: it holds one item at a time, never the
//! whole queue. Items come in key order (job id, then item id), so the items of one job are
//! contiguous and a job-scoped scan stops as soon as it has passed them. A record that does not
//! decode ends the scan with [`SinkError::Corrupt`] naming its key.
//!
//! These scans go through [`SledSink::items`] (the tree itself is private to `sled_sink`), so a
//! job-scoped scan decodes the items of the jobs before it too; with access to the tree it
//! could seek to the job's key prefix, and `dlq list` could walk the age index instead.

use super::{SinkError, SledSink};
use crate::projection::StoredItem;

impl SledSink {
    /// Every item, or only those of `job_id`, in key order (job id, then item id).
    pub fn scan_items<'a>(
        &'a self,
        job_id: Option<&'a str>,
    ) -> impl Iterator<Item = Result<StoredItem, SinkError>> + 'a {
        let mut inside = false;
        let mut done = false;
        self.items()
            .filter_map(move |entry| {
                if done {
                    return None;
                }
                let Some(job) = job_id else {
                    return Some(Some(entry));
                };
                match entry {
                    Ok(stored) if stored.item.job_id == job => {
                        inside = true;
                        Some(Some(Ok(stored)))
                    }
                    Ok(_) if inside => {
                        // Past the job's contiguous key range: nothing more can match.
                        done = true;
                        Some(None)
                    }
                    Ok(_) => None,
                    Err(err) => Some(Some(Err(err))),
                }
            })
            .map_while(|entry| entry)
    }

    /// The jobs that hold an item with id `item_id`, in job order (one entry per job).
    pub fn jobs_with_item(&self, item_id: &str) -> Result<Vec<String>, SinkError> {
        let mut jobs = Vec::new();
        for stored in self.items() {
            let stored = stored?;
            if stored.item.item_id == item_id {
                jobs.push(stored.item.job_id);
            }
        }
        Ok(jobs)
    }
}
