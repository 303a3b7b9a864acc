//! The journal of sink format 2, read once to migrate it (see `crate::sink::legacy::migrate`).
//!
//! Format 2 made a group durable by appending its exact sled key changes to
//! `journal/{number:016}.wal` and `fdatasync`ing it, and applied them to sled in memory; sled
//! was flushed at checkpoints. A directory of that format may hold journal segments written
//! after its last checkpoint: [`replay`] applies them to sled, in order, before the log moves
//! into segment files. Replaying is idempotent: a record holds the values a batch wrote, so
//! replaying all of them in order leaves each key with the value of its last write. Records:
//! [`crate::sink::legacy::journal_record`].

use std::path::{Path, PathBuf};

use tracing::warn;

use crate::sink::legacy::journal_record::Records;
use crate::sink::SinkError;

/// The journal's directory inside the data directory.
pub const DIR: &str = "journal";
const EXTENSION: &str = "wal";

/// What opening found in the journal and replayed into sled.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct Replayed {
    /// Segments read.
    pub segments: usize,
    /// Records (group commits) applied.
    pub records: u64,
    /// Segments that ended in a damaged record, copied beside the journal as
    /// `*.wal.damaged-{time}`.
    pub damaged: Vec<PathBuf>,
}

/// Applies every segment in `data_dir/journal` to `tree`, oldest first. Segments are left in
/// place: they are deleted by the first checkpoint ([`Journal::rotate`]).
pub(crate) fn replay(data_dir: &Path, tree: &sled::Tree) -> Result<Replayed, SinkError> {
    let dir = data_dir.join(DIR);
    let mut replayed = Replayed::default();
    for (number, path) in segments(&dir).map_err(|err| open_error(&dir, err))? {
        let bytes = std::fs::read(&path).map_err(|err| open_error(&path, err))?;
        let mut records = Records::new(&bytes);
        for writes in records.by_ref() {
            tree.apply_batch(batch(writes))?;
            replayed.records += 1;
        }
        replayed.segments += 1;
        if let Some(damage) = records.damage() {
            // A torn last record is what a crash mid-commit leaves: that group was never
            // acknowledged. Keep a copy anyway, so damage elsewhere can be looked at.
            let stamp = chrono::Utc::now().format("%Y%m%dT%H%M%S%.3fZ");
            let kept = path.with_extension(format!("{EXTENSION}.damaged-{stamp}"));
            warn!(
                segment = number,
                offset = damage.offset,
                discarded_bytes = damage.discarded,
                reason = damage.reason,
                kept = %kept.display(),
                "the journal segment ends in a damaged record; the records before it were replayed"
            );
            std::fs::copy(&path, &kept).map_err(|err| open_error(&kept, err))?;
            replayed.damaged.push(kept);
        }
    }
    Ok(replayed)
}

/// A sled batch of `writes`.
pub(crate) fn batch<K: Into<sled::IVec>>(
    writes: impl IntoIterator<Item = (K, Option<K>)>,
) -> sled::Batch {
    let mut batch = sled::Batch::default();
    for (key, value) in writes {
        match value {
            Some(value) => batch.insert(key, value),
            None => batch.remove(key),
        }
    }
    batch
}

fn open_error(path: &Path, err: std::io::Error) -> SinkError {
    SinkError::Open {
        path: path.to_path_buf(),
        reason: format!("cannot read the journal: {err}"),
        hint: "Check the permissions of the data directory's journal/ folder; nothing was changed.",
        source: Some(err.into()),
    }
}

/// The segments in `dir`, by number.
fn segments(dir: &Path) -> std::io::Result<Vec<(u64, PathBuf)>> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(err) => return Err(err),
    };
    let mut found = Vec::new();
    for entry in entries {
        let path = entry?.path();
        if path.extension().is_some_and(|ext| ext == EXTENSION) {
            let number = path
                .file_stem()
                .and_then(|stem| stem.to_str())
                .and_then(|stem| stem.parse::<u64>().ok());
            if let Some(number) = number {
                found.push((number, path));
            }
        }
    }
    found.sort();
    Ok(found)
}

/// The file name of segment `number`, for `crate::fuzzing`.
#[cfg(feature = "fuzzing")]
pub(crate) fn segment_file_name(number: u64) -> String {
    format!("{number:016}.{EXTENSION}")
}
