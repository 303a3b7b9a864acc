//! The sink's journal: where a group commit becomes durable.
//!
//! sled's `flush` rewrites whole pages: 12–40 KiB reach the disk for every 1.9 KB event when it
//! runs once per group (see benches/README.md). So the writer makes a group durable by appending
//! the group's exact key changes to a plain file and `fdatasync`ing that file, and applies the
//! same changes to sled in memory. sled is flushed only at a **checkpoint** (about once a second,
//! when the journal grows past a size, on close), after which the journal starts a new segment
//! and the old ones are deleted. Opening replays every segment still present into sled before
//! anything else reads the tree (records: [`super::journal_record`]).
//!
//! Replaying is idempotent: a record holds the values a batch wrote, not the commands that
//! produced them, and the segments hold every batch since the last completed checkpoint, in
//! order. Whatever part of them sled had already written, replaying all of them in order leaves
//! each key with the value of its last write.
//!
//! Files: `journal/{number:016}.wal` in the data directory. A new segment is created (and the
//! directory fsynced) before older ones are deleted, so a crash between the two only leaves more
//! to replay.

use std::fs::{File, OpenOptions};
use std::io::Write as _;
use std::path::{Path, PathBuf};

use tracing::warn;

use super::journal_record::{encode, Records, Write, MAGIC};
use super::SinkError;

/// The journal's directory inside the data directory.
pub const DIR: &str = "journal";
const EXTENSION: &str = "wal";

/// What opening found in the journal and replayed into sled.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Replayed {
    /// Segments read.
    pub segments: usize,
    /// Records (group commits) applied.
    pub records: u64,
    /// Segments that ended in a damaged record, copied beside the journal as
    /// `*.wal.damaged-{time}`.
    pub damaged: Vec<PathBuf>,
}

/// The open journal: the segment the writer appends to.
pub(crate) struct Journal {
    dir: PathBuf,
    /// The current segment, or `None` after an I/O error (the writer then falls back to
    /// flushing sled until a checkpoint starts a new segment).
    file: Option<File>,
    number: u64,
    /// Bytes appended since the segment began.
    pending: u64,
    buf: Vec<u8>,
}

/// Applies every segment in `data_dir/journal` to `tree`, oldest first. Segments are left in
/// place: they are deleted by the first checkpoint ([`Journal::rotate`]).
pub(crate) fn replay(data_dir: &Path, tree: &sled::Tree) -> Result<Replayed, SinkError> {
    let dir = data_dir.join(DIR);
    let mut replayed = Replayed::default();
    for (number, path) in segments(&dir).map_err(|err| open_error(&dir, &err))? {
        let bytes = std::fs::read(&path).map_err(|err| open_error(&path, &err))?;
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
            std::fs::copy(&path, &kept).map_err(|err| open_error(&kept, &err))?;
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

fn open_error(path: &Path, err: &std::io::Error) -> SinkError {
    SinkError::Open {
        path: path.to_path_buf(),
        reason: format!("cannot read the journal: {err}"),
        hint: "Check the permissions of the data directory's journal/ folder; nothing was changed.",
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

impl Journal {
    /// Starts a new segment after any already in `data_dir/journal` (which stay until the first
    /// [`Journal::rotate`]).
    pub(crate) fn start(data_dir: &Path) -> Result<Self, SinkError> {
        let dir = data_dir.join(DIR);
        let create = || -> std::io::Result<(u64, File)> {
            std::fs::create_dir_all(&dir)?;
            let last = segments(&dir)?.last().map_or(0, |(number, _)| *number);
            let file = new_segment(&dir, last + 1)?;
            Ok((last + 1, file))
        };
        let (number, file) = create().map_err(|err| SinkError::Open {
            path: dir.clone(),
            reason: format!("cannot create a journal segment: {err}"),
            hint: "Check that the data directory is writable and the disk not full.",
        })?;
        Ok(Journal {
            dir,
            file: Some(file),
            number,
            pending: 0,
            buf: Vec::new(),
        })
    }

    /// Whether appends can go to the journal (false after an I/O error until the next rotate).
    pub(crate) fn healthy(&self) -> bool {
        self.file.is_some()
    }

    /// Bytes appended to the current segment.
    pub(crate) fn pending(&self) -> u64 {
        self.pending
    }

    /// Writes one group's changes (not yet durable: see [`Journal::sync`]). On an error the
    /// journal stops taking appends until the next rotate.
    pub(crate) fn append(&mut self, writes: &[Write]) -> Result<(), String> {
        let Some(file) = self.file.as_mut() else {
            return Err("the journal is unavailable after an earlier error".into());
        };
        self.buf.clear();
        let written = encode(writes, &mut self.buf)
            .map_err(|err| err.to_string())
            .and_then(|()| file.write_all(&self.buf).map_err(|err| err.to_string()));
        match written {
            Ok(()) => {
                self.pending += self.buf.len() as u64;
                Ok(())
            }
            Err(reason) => {
                self.file = None;
                Err(format!("journal write failed: {reason}"))
            }
        }
    }

    /// Stops taking appends until the next rotate, as after an I/O error.
    pub(crate) fn disable(&mut self) {
        self.file = None;
    }

    /// Makes every append so far durable (`fdatasync`).
    pub(crate) fn sync(&mut self) -> Result<(), String> {
        let Some(file) = self.file.as_ref() else {
            return Err("the journal is unavailable after an earlier error".into());
        };
        if let Err(err) = file.sync_data() {
            self.file = None;
            return Err(format!("fdatasync of the journal failed: {err}"));
        }
        Ok(())
    }

    /// After a checkpoint made sled durable: starts the next segment and deletes the older ones.
    pub(crate) fn rotate(&mut self) -> Result<(), String> {
        let next = self.number + 1;
        let file = new_segment(&self.dir, next)
            .map_err(|err| format!("cannot start journal segment {next}: {err}"));
        let file = match file {
            Ok(file) => file,
            Err(reason) => {
                self.file = None;
                return Err(reason);
            }
        };
        self.file = Some(file);
        self.number = next;
        self.pending = 0;
        let delete = || -> std::io::Result<()> {
            for (number, path) in segments(&self.dir)? {
                if number < next {
                    std::fs::remove_file(path)?;
                }
            }
            File::open(&self.dir)?.sync_all()
        };
        // Old segments left behind are only replayed again, which changes nothing.
        delete().map_err(|err| format!("cannot delete old journal segments: {err}"))
    }
}

/// The file name of segment `number`, for `crate::fuzzing`.
#[cfg(feature = "fuzzing")]
pub(crate) fn segment_file_name(number: u64) -> String {
    format!("{number:016}.{EXTENSION}")
}

/// Creates segment `number` with its magic, durable, directory entry included.
fn new_segment(dir: &Path, number: u64) -> std::io::Result<File> {
    let path = dir.join(format!("{number:016}.{EXTENSION}"));
    let mut file = OpenOptions::new()
        .create_new(true)
        .append(true)
        .open(&path)?;
    file.write_all(MAGIC)?;
    file.sync_all()?;
    File::open(dir)?.sync_all()?;
    Ok(file)
}
