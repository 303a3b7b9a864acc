//! A job's state on disk, under `<data dir>/jobs/<job id>/`:
//!
//! - `job.json` (written after the setup steps succeeded): the workflow as parsed, where it came from, and the snapshot of the selected
//!   work items. Written once (temp file, fsync, rename), so a resume runs exactly the items
//!   the job started with even if the input changed since, and `dlq retry` reuses the job's own
//!   agent template.
//! - `outcomes.jsonl`: one line per item that reached an outcome, appended and fdatasync'ed
//!   before the runner moves on. An item without a line is pending. A later line for the same
//!   item (a dead-lettered item resolved on resume) replaces the earlier one. A torn last line
//!   (the runner was killed mid-write) is cut off when the job is opened again.
//! - `events.jsonl`: the job's events (`dlq events JOB_ID`), informational, not synced.
//! - `summary.json`: the latest summary.
//! - `agents/<item>/`: each agent's working directory and output logs, removed on success.
//!
//! The data directory's sled lock (held by the runner's sink) keeps a second process from
//! writing the same job at the same time.

use std::fs::{self, File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::error::RunError;
use super::input::WorkItem;
use super::job_events::{JobEvent, JobEventKind};
use super::job_summary::Outcome;
use super::workflow::Workflow;
use dlq::domain::model::ErrorType;

/// Longest job id.
const MAX_JOB_ID_BYTES: usize = 128;

/// Everything fixed at the start of a job.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct JobRecord {
    /// The job's id.
    pub(super) job_id: String,
    /// The workflow as parsed.
    pub(super) workflow: Workflow,
    /// The workflow file.
    pub(super) workflow_path: PathBuf,
    /// Directory relative paths of the workflow resolve against (the file's directory).
    pub(super) base_dir: PathBuf,
    /// When the job was created.
    pub(super) created_at: DateTime<Utc>,
    /// The selected work items, in dispatch order.
    pub(super) items: Vec<WorkItem>,
}

/// One item's outcome.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(super) struct OutcomeRecord {
    /// The item.
    pub item_id: String,
    /// How it ended.
    pub outcome: Outcome,
    /// Attempts made in the session that recorded this.
    pub attempts: u32,
    /// When.
    pub at: DateTime<Utc>,
    /// Error type of the last failure, for failed outcomes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_type: Option<ErrorType>,
    /// Last error message, for failed outcomes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// Handle on one job's directory.
#[derive(Debug)]
pub(crate) struct JobStore {
    dir: PathBuf,
    outcomes: Mutex<File>,
    events: Mutex<File>,
}

/// Checks that `job_id` can name a directory and a DLQ job.
pub(super) fn validate_job_id(job_id: &str) -> Result<(), RunError> {
    let ok = !job_id.is_empty()
        && job_id.len() <= MAX_JOB_ID_BYTES
        && !job_id.starts_with('.')
        && job_id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'_' || b == b'-');
    if ok {
        Ok(())
    } else {
        Err(RunError::BadJobId(job_id.to_owned()))
    }
}

/// The directory holding every job of a data directory.
pub(crate) fn jobs_dir(data_dir: &Path) -> PathBuf {
    data_dir.join("jobs")
}

/// The ids of the jobs in a data directory, sorted.
pub(crate) fn list_jobs(data_dir: &Path) -> Result<Vec<String>, RunError> {
    let dir = jobs_dir(data_dir);
    let entries = match fs::read_dir(&dir) {
        Ok(entries) => entries,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(err) => return Err(RunError::job_state(dir)(err)),
    };
    let mut ids = Vec::new();
    for entry in entries {
        let entry = entry.map_err(RunError::job_state(&dir))?;
        if entry.path().join("job.json").is_file() {
            ids.push(entry.file_name().to_string_lossy().into_owned());
        }
    }
    ids.sort();
    Ok(ids)
}

impl JobStore {
    /// Creates the directory of a new job and writes `job.json`.
    pub(super) fn create(data_dir: &Path, record: &JobRecord) -> Result<JobStore, RunError> {
        validate_job_id(&record.job_id)?;
        let dir = jobs_dir(data_dir).join(&record.job_id);
        if dir.join("job.json").exists() {
            return Err(RunError::JobExists(record.job_id.clone()));
        }
        fs::create_dir_all(&dir).map_err(RunError::job_state(&dir))?;
        let bytes =
            serde_json::to_vec_pretty(record).map_err(RunError::corrupt(dir.join("job.json")))?;
        write_atomically(&dir.join("job.json"), &bytes)?;
        Self::open_dir(dir)
    }

    /// Opens an existing job; returns it with its record.
    pub(crate) fn open(data_dir: &Path, job_id: &str) -> Result<(JobStore, JobRecord), RunError> {
        validate_job_id(job_id)?;
        let dir = jobs_dir(data_dir).join(job_id);
        let path = dir.join("job.json");
        let bytes = match fs::read(&path) {
            Ok(bytes) => bytes,
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => {
                return Err(RunError::JobNotFound {
                    job_id: job_id.to_owned(),
                    data_dir: data_dir.to_owned(),
                })
            }
            Err(err) => return Err(RunError::job_state(path)(err)),
        };
        let record: JobRecord = serde_json::from_slice(&bytes).map_err(RunError::corrupt(&path))?;
        Ok((Self::open_dir(dir)?, record))
    }

    fn open_dir(dir: PathBuf) -> Result<JobStore, RunError> {
        let outcomes = open_log(&dir.join("outcomes.jsonl"))?;
        let events = open_log(&dir.join("events.jsonl"))?;
        Ok(JobStore {
            dir,
            outcomes: Mutex::new(outcomes),
            events: Mutex::new(events),
        })
    }

    /// The job's directory.
    pub(super) fn dir(&self) -> &Path {
        &self.dir
    }

    /// Every outcome recorded so far, in order.
    pub(super) fn outcomes(&self) -> Result<Vec<OutcomeRecord>, RunError> {
        read_lines(&self.dir.join("outcomes.jsonl"))
    }

    /// Records an outcome durably (written and fdatasync'ed).
    pub(super) fn append_outcome(&self, record: &OutcomeRecord) -> Result<(), RunError> {
        let path = self.dir.join("outcomes.jsonl");
        let file = append_line(&self.outcomes, &path, record)?;
        file.sync_data().map_err(RunError::job_state(&path))
    }

    /// Appends a job event (not synced: events are informational).
    pub(super) fn append_event(&self, kind: JobEventKind) -> Result<(), RunError> {
        let event = JobEvent {
            at: Utc::now(),
            kind,
        };
        append_line(&self.events, &self.dir.join("events.jsonl"), &event).map(drop)
    }

    /// The job's events, in order.
    pub(crate) fn events(&self) -> Result<Vec<JobEvent>, RunError> {
        read_lines(&self.dir.join("events.jsonl"))
    }

    /// Saves the latest summary as `summary.json`.
    pub(super) fn write_summary(&self, summary: &impl Serialize) -> Result<(), RunError> {
        let path = self.dir.join("summary.json");
        let bytes = serde_json::to_vec_pretty(summary).map_err(RunError::corrupt(&path))?;
        write_atomically(&path, &bytes)
    }

    /// The working directory of an item's agent: a readable, collision-free name.
    pub(super) fn agent_dir(&self, item_id: &str) -> PathBuf {
        self.dir.join("agents").join(agent_dir_name(item_id))
    }
}

/// A file-system-safe directory name for an item id: its safe characters (at most 48) and 12
/// hex characters of its hash, so different ids never share a directory.
fn agent_dir_name(item_id: &str) -> String {
    let readable = safe_chars(item_id, '_', 48);
    let digest = Sha256::digest(item_id.as_bytes());
    let hash: String = format!("{digest:x}").chars().take(12).collect();
    format!("{readable}-{hash}")
}

/// The id of a job started without one: `<workflow name, made id-safe>-<UTC time to the
/// millisecond>`.
pub(super) fn default_job_id(workflow_name: &str) -> String {
    let safe = safe_chars(workflow_name, '-', 64);
    let safe = safe.trim_matches('-');
    let prefix = if safe.is_empty() { "job" } else { safe };
    format!("{prefix}-{}", Utc::now().format("%Y%m%dT%H%M%S%3fZ"))
}

/// The first `max` characters of `text`, each outside `[A-Za-z0-9_-]` replaced by
/// `replacement`.
fn safe_chars(text: &str, replacement: char, max: usize) -> String {
    text.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                replacement
            }
        })
        .take(max)
        .collect()
}

/// Appends `value` as one JSON line to `file` (at `path`); returns the file, still locked.
fn append_line<'f>(
    file: &'f Mutex<File>,
    path: &Path,
    value: &impl Serialize,
) -> Result<MutexGuard<'f, File>, RunError> {
    let mut line = serde_json::to_vec(value).map_err(RunError::corrupt(path))?;
    line.push(b'\n');
    let file = file.lock().map_err(|_| poisoned(path))?;
    (&*file)
        .write_all(&line)
        .map_err(RunError::job_state(path))?;
    Ok(file)
}

fn poisoned(path: &Path) -> RunError {
    RunError::JobState {
        path: path.to_owned(),
        source: std::io::Error::other("a writer panicked while holding this file"),
    }
}

/// Opens an append-only JSON-lines file, cutting off a torn last line first.
/// A job's outcomes, read without opening the job for writing (a running job may be
/// appending; its torn last line is left alone and not read).
pub(super) fn read_outcomes(data_dir: &Path, job_id: &str) -> Result<Vec<OutcomeRecord>, RunError> {
    validate_job_id(job_id)?;
    read_lines(&jobs_dir(data_dir).join(job_id).join("outcomes.jsonl"))
}

/// A job's events, read like [`read_outcomes`].
pub(crate) fn read_events(data_dir: &Path, job_id: &str) -> Result<Vec<JobEvent>, RunError> {
    validate_job_id(job_id)?;
    read_lines(&jobs_dir(data_dir).join(job_id).join("events.jsonl"))
}

fn open_log(path: &Path) -> Result<File, RunError> {
    let mut file = OpenOptions::new()
        .create(true)
        .read(true)
        .append(true)
        .open(path)
        .map_err(RunError::job_state(path))?;
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes)
        .map_err(RunError::job_state(path))?;
    if !bytes.is_empty() && bytes.last() != Some(&b'\n') {
        let keep = bytes.iter().rposition(|b| *b == b'\n').map_or(0, |i| i + 1);
        file.set_len(keep as u64)
            .map_err(RunError::job_state(path))?;
        file.sync_data().map_err(RunError::job_state(path))?;
        tracing::warn!(path = %path.display(), dropped = bytes.len() - keep, "cut a torn last line (the runner was killed mid-write)");
    }
    file.seek(SeekFrom::End(0))
        .map_err(RunError::job_state(path))?;
    Ok(file)
}

fn read_lines<T: serde::de::DeserializeOwned>(path: &Path) -> Result<Vec<T>, RunError> {
    let text = match fs::read_to_string(path) {
        Ok(text) => text,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(err) => return Err(RunError::job_state(path)(err)),
    };
    let complete = match text.rfind('\n') {
        Some(end) => &text[..end],
        None => "",
    };
    complete
        .lines()
        .enumerate()
        .filter(|(_, line)| !line.trim().is_empty())
        .map(|(n, line)| {
            serde_json::from_str(line).map_err(|err| RunError::Corrupt {
                path: path.to_owned(),
                reason: format!("line {}: {err}", n + 1),
            })
        })
        .collect()
}

fn write_atomically(path: &Path, bytes: &[u8]) -> Result<(), RunError> {
    let tmp = path.with_extension("tmp");
    let mut file = File::create(&tmp).map_err(RunError::job_state(&tmp))?;
    file.write_all(bytes).map_err(RunError::job_state(&tmp))?;
    file.sync_all().map_err(RunError::job_state(&tmp))?;
    fs::rename(&tmp, path).map_err(RunError::job_state(path))?;
    if let Some(parent) = path.parent() {
        File::open(parent)
            .and_then(|dir| dir.sync_all())
            .map_err(RunError::job_state(parent))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests;
