//! Opening a data directory of sink format 2 (the event log in sled, `l/seq` keys, with a
//! `journal/`) moves its log into segment files: format 3.
//!
//! The copy is crash-safe and repeatable:
//! 1. the old journal is replayed into sled (what the old writer would have done on open);
//! 2. every `l/seq` entry is appended, byte for byte and under its own sequence, to a log in
//!    `log.migrating/` (each group `fdatasync`ed);
//! 3. one sled batch records format 3, the `applied_through` mark and the publish watermark
//!    (the last copied sequence; the old `u/seq` markers stay as the pending set), and sled is
//!    flushed;
//! 4. `log.migrating/` is renamed to `log/` and the data directory fsynced;
//! 5. the `l/` keys and the journal are deleted.
//!
//! A crash before 3 leaves format 2 and the copy is started again from scratch; a crash after
//! 3 is finished by the next open ([`finish`]).

use std::fs::File;
use std::path::Path;

use tracing::info;

use crate::sink::config::LOG_DIR;
use crate::sink::legacy::journal;
use crate::sink::log::{io::RealFs, LogConfig, LogWriter};
use crate::sink::projection::keys;
use crate::sink::projection::publish_state::PublishState;
use crate::sink::writer::checkpoint::SledFlusher;
use crate::sink::SinkError;

pub(crate) const MIGRATING_DIR: &str = "log.migrating";

/// Events per group of the copy.
const GROUP: usize = 1000;

const HINT: &str = "The data directory was not changed in a way that loses events: fix the cause (disk space, permissions) and open it again, which restarts the migration.";

/// Brings the data directory at `path` to the current sink format; returns how many events
/// were moved into the segment log (0 when it already was current or is new).
pub(crate) fn to_current(
    path: &Path,
    tree: &sled::Tree,
    flusher: &mut SledFlusher,
    config: &LogConfig,
) -> Result<u64, SinkError> {
    let format = tree
        .get(keys::SINK_FORMAT)?
        .and_then(|bytes| keys::decode_u64(&bytes));
    match format {
        Some(keys::CURRENT_SINK_FORMAT) => return finish(path, tree, flusher).map(|()| 0),
        Some(other) => {
            return Err(open_error(
                path,
                format!(
                    "the sink format is {other}, newer than this dlq understands ({})",
                    keys::CURRENT_SINK_FORMAT
                ),
                "Run the dlq version that wrote this data directory, or a newer one.",
                None,
            ))
        }
        None => {}
    }
    if path.join(LOG_DIR).exists() {
        return adopt_log(path, tree, flusher);
    }
    let replayed = journal::replay(path, tree)?;
    let moved = copy_log(path, tree, config)?;
    let last = tree
        .scan_prefix(keys::LOG)
        .next_back()
        .transpose()?
        .and_then(|(key, _)| keys::seq_of(&key))
        .unwrap_or(0);
    let pending = tree
        .scan_prefix(keys::UNPUBLISHED)
        .filter_map(|entry| entry.ok().and_then(|(key, _)| keys::seq_of(&key)));
    let mut state = PublishState::at(last, pending);
    let mut batch = sled::Batch::default();
    batch.insert(keys::SINK_FORMAT, &keys::CURRENT_SINK_FORMAT.to_be_bytes());
    batch.insert(keys::APPLIED_THROUGH, &last.to_be_bytes());
    batch.insert(keys::PUBLISHED, state.encode());
    tree.apply_batch(batch)?;
    flusher.flush().map_err(|err| failed(path, err))?;
    if moved > 0 || replayed.records > 0 {
        info!(
            events = moved,
            journal_records = replayed.records,
            "moved the sink's event log from sled into segment files (sink format 3)"
        );
    }
    finish(path, tree, flusher)?;
    Ok(moved)
}

/// A `log/` directory beside a database that does not record a format: sled lost its state
/// (damaged and recovered empty, or deleted) while the log survived. The log is the source of
/// truth: the projection is rebuilt from it when the sink opens, and every event is published
/// again (the stream and consumers drop duplicates by id).
fn adopt_log(path: &Path, tree: &sled::Tree, flusher: &mut SledFlusher) -> Result<u64, SinkError> {
    if tree.scan_prefix(keys::LOG).next().is_some() {
        return Err(open_error(
            path,
            "the database holds an event log of format 2 and a log/ directory exists too".into(),
            "Two logs cannot be merged safely: move log/ aside (it is not from this database) and open again; nothing was changed.",
            None,
        ));
    }
    tracing::warn!(
        path = %path.display(),
        "the database holds no sink state but log/ holds the event log: rebuilding the projection from the log and publishing every event again"
    );
    let mut batch = sled::Batch::default();
    batch.insert(keys::SINK_FORMAT, &keys::CURRENT_SINK_FORMAT.to_be_bytes());
    batch.remove(keys::PROJECTION_FORMAT);
    batch.remove(keys::APPLIED_THROUGH);
    batch.remove(keys::PUBLISHED);
    tree.apply_batch(batch)?;
    flusher.flush().map_err(|err| failed(path, err))?;
    Ok(0)
}

/// Copies every `l/seq` entry into a fresh `log.migrating/`; returns how many.
fn copy_log(path: &Path, tree: &sled::Tree, config: &LogConfig) -> Result<u64, SinkError> {
    let dir = path.join(MIGRATING_DIR);
    let io = |err: std::io::Error| {
        open_error(
            path,
            format!("{}: {err}", dir.display()),
            HINT,
            Some(err.into()),
        )
    };
    if dir.exists() {
        // An earlier migration was interrupted before it counted: start again.
        std::fs::remove_dir_all(&dir).map_err(io)?;
    }
    let fs = RealFs::open(&dir).map_err(io)?;
    let log_error = |err: crate::sink::log::LogError| failed(path, err);
    let (mut log, _) = LogWriter::open(fs, config.clone()).map_err(log_error)?;
    let mut group: Vec<sled::IVec> = Vec::new();
    let mut moved = 0;
    for entry in tree.scan_prefix(keys::LOG) {
        let (key, value) = entry?;
        let Some(seq) = keys::seq_of(&key) else {
            continue;
        };
        let next = log.next_seq() + group.len() as u64;
        if seq != next || group.len() == GROUP {
            moved += append(&mut log, &mut group).map_err(log_error)?;
            log.skip_to(seq);
        }
        group.push(value);
    }
    moved += append(&mut log, &mut group).map_err(log_error)?;
    Ok(moved)
}

fn append(
    log: &mut LogWriter<RealFs>,
    group: &mut Vec<sled::IVec>,
) -> Result<u64, crate::sink::log::LogError> {
    if group.is_empty() {
        return Ok(0);
    }
    let range = log.append(group)?;
    group.clear();
    Ok(range.end - range.start)
}

/// The steps after the format switch: the rename, then deleting the old log and journal.
fn finish(path: &Path, tree: &sled::Tree, flusher: &mut SledFlusher) -> Result<(), SinkError> {
    let (from, to) = (path.join(MIGRATING_DIR), path.join(LOG_DIR));
    let io = |err: std::io::Error| failed(path, err);
    if from.exists() && !to.exists() {
        std::fs::rename(&from, &to).map_err(io)?;
        File::open(path)
            .and_then(|dir| dir.sync_all())
            .map_err(io)?;
    }
    let mut removed_any = false;
    loop {
        let mut batch = sled::Batch::default();
        let mut count = 0;
        for entry in tree.scan_prefix(keys::LOG).take(10_000) {
            batch.remove(entry?.0);
            count += 1;
        }
        if count == 0 {
            break;
        }
        tree.apply_batch(batch)?;
        removed_any = true;
    }
    if removed_any {
        flusher.flush().map_err(|err| failed(path, err))?;
    }
    let journal = path.join(journal::DIR);
    if journal.exists() {
        std::fs::remove_dir_all(&journal).map_err(io)?;
        File::open(path)
            .and_then(|dir| dir.sync_all())
            .map_err(io)?;
    }
    Ok(())
}

fn open_error(
    path: &Path,
    reason: String,
    hint: &'static str,
    source: Option<crate::error_class::Cause>,
) -> SinkError {
    SinkError::Open {
        path: path.to_path_buf(),
        reason: format!("migrating to the segment log: {reason}"),
        hint,
        source,
    }
}

/// The open error of a migration step that `err` failed, keeping `err` as its source.
fn failed<E: std::error::Error + Send + Sync + 'static>(path: &Path, err: E) -> SinkError {
    open_error(path, err.to_string(), HINT, Some(err.into()))
}

#[cfg(test)]
mod tests;
