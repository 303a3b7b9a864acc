//! `dlq export`: streaming writers for JSON, JSON Lines, CSV and the legacy directory
//! layout, written to a temporary path and renamed into place, so a failed export leaves
//! nothing half-written.
//!
//! * `json`: one array of items (one compact item per line).
//! * `jsonl`: one compact item per line.
//! * `csv`: one row per item, columns [`CSV_COLUMNS`] (see [`csv_record`]).
//! * `dir`: `PATH/{job_id}/items/{item_id}.json` (pretty item JSON) and
//!   `PATH/{job_id}/index.json` (`job_id`, `item_count`, `item_ids`, `updated_at`), the layout of
//!   the runner dlq replaces, with one directory per job. In file and directory names `%`, `/`, `\` and a
//!   leading `.` are written as `%XX` ([`file_name`]).
//!
//! Items stream from the sink one at a time through a buffered writer; the directory writer
//! keeps only the ids of the job being written (at most the job's capacity). A failure part-way
//! (a record that does not decode, a full disk) removes the temporary and ends in
//! [`QueryError::Export`], naming the target and how many items had been written: the target
//! is never left partial. The process's peak memory still grows with the DLQ, inside sled's
//! scan, not here (see docs/benchmarks.md, "Export memory").

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use chrono::Utc;
use serde::{Deserialize, Serialize};

use super::list::ItemSummary;
use super::QueryError;
use dlq::domain::model::DeadLetteredItem;
use dlq::sink::LocalSink;

/// The CSV header: stable, in this order.
pub const CSV_COLUMNS: [&str; 17] = [
    "job_id",
    "item_id",
    "first_attempt",
    "last_attempt",
    "failure_count",
    "error_type",
    "exit_code",
    "error_signature",
    "error_pattern",
    "reprocess_eligible",
    "manual_review_required",
    "last_error",
    "step_failed",
    "agent_id",
    "item_data",
    "worktree_path",
    "branch_name",
];

/// Export file formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ExportFormat {
    /// A JSON array of items.
    Json,
    /// One item per line.
    Jsonl,
    /// One row per item.
    Csv,
    /// The legacy layout: one JSON file per item, a directory per job.
    Dir,
}

impl ExportFormat {
    /// The format a file name suggests: `.csv`, `.jsonl`/`.ndjson`, otherwise JSON.
    pub fn infer(path: &Path) -> Self {
        match path.extension().and_then(|e| e.to_str()) {
            Some("csv") => ExportFormat::Csv,
            Some("jsonl" | "ndjson") => ExportFormat::Jsonl,
            _ => ExportFormat::Json,
        }
    }
}

/// The `index.json` of one job directory.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobIndex {
    /// The job.
    pub job_id: String,
    /// Number of items.
    pub item_count: u64,
    /// Their ids.
    pub item_ids: Vec<String>,
    /// When the index was written.
    pub updated_at: chrono::DateTime<Utc>,
}

/// What an export wrote.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ExportReport {
    /// The format.
    pub format: ExportFormat,
    /// Where.
    pub path: PathBuf,
    /// Items written.
    pub items: u64,
    /// Jobs they belong to.
    pub jobs: u64,
}

/// One CSV row of `item`, in the order of [`CSV_COLUMNS`]: times in RFC 3339, booleans as
/// `true`/`false`, `exit_code` empty unless `CommandFailed`, `item_data` as compact JSON, the
/// `last_error`, `step_failed` and `agent_id` of the most recent failure, and the worktree's
/// path and branch (empty without artifacts).
pub fn csv_record(item: DeadLetteredItem) -> Vec<String> {
    let (worktree_path, branch_name) = item
        .worktree_artifacts
        .as_ref()
        .map(|w| (w.worktree_path.clone(), w.branch_name.clone()))
        .unwrap_or_default();
    let s = ItemSummary::of(item);
    vec![
        s.job_id,
        s.item_id,
        s.first_attempt.to_rfc3339(),
        s.last_attempt.to_rfc3339(),
        s.failure_count.to_string(),
        s.error_type.to_owned(),
        s.exit_code.map(|c| c.to_string()).unwrap_or_default(),
        s.error_signature,
        s.error_pattern,
        s.reprocess_eligible.to_string(),
        s.manual_review_required.to_string(),
        s.last_error,
        s.step_failed,
        s.agent_id,
        s.item_data.to_string(),
        worktree_path,
        branch_name,
    ]
}

/// A name usable as a file or directory name for an id: `%`, `/`, `\` and a leading `.` become
/// `%XX`. Ids longer than the file system allows are refused.
pub fn file_name(id: &str) -> Result<String, QueryError> {
    let mut name = String::with_capacity(id.len());
    for (i, c) in id.chars().enumerate() {
        match c {
            '%' | '/' | '\\' => name.push_str(&format!("%{:02X}", c as u32)),
            '.' if i == 0 => name.push_str("%2E"),
            c => name.push(c),
        }
    }
    if name.len() > 240 {
        return Err(QueryError::Invalid(format!(
            "id '{id}' is too long to be a file name in the dir layout"
        )));
    }
    Ok(name)
}

/// The id a [`file_name`] stands for.
pub fn id_of_file_name(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    let mut rest = name;
    while let Some(pos) = rest.find('%') {
        out.push_str(&rest[..pos]);
        let code = rest.get(pos + 1..pos + 3);
        match code.and_then(|hex| u8::from_str_radix(hex, 16).ok()) {
            Some(byte) if byte.is_ascii() => {
                out.push(char::from(byte));
                rest = &rest[pos + 3..];
            }
            _ => {
                out.push('%');
                rest = &rest[pos + 1..];
            }
        }
    }
    out.push_str(rest);
    out
}

/// Exports the sink's items (of `job_id` only, when given) to `path` in `format`.
pub fn export(
    sink: &LocalSink,
    job_id: Option<&str>,
    format: ExportFormat,
    path: &Path,
) -> Result<ExportReport, QueryError> {
    if let Some(job) = job_id {
        if sink.job_len(job)? == 0 {
            return Err(QueryError::JobNotFound(job.to_owned()));
        }
    }
    let items = sink.scan_items(job_id).map(|stored| {
        stored
            .map(|s| std::sync::Arc::unwrap_or_clone(s.item))
            .map_err(QueryError::from)
    });
    write_atomically(path, format, items)
}

/// Writes `items` to `path` in `format` through a temporary sibling path that is renamed into
/// place once complete (and removed on failure). A `dir` target must not exist, or be empty.
pub fn write_atomically<I>(
    path: &Path,
    format: ExportFormat,
    items: I,
) -> Result<ExportReport, QueryError>
where
    I: Iterator<Item = Result<DeadLetteredItem, QueryError>>,
{
    let temp = temp_sibling(path)?;
    if format == ExportFormat::Dir && path.exists() {
        let empty = std::fs::read_dir(path)
            .map_err(QueryError::io(path))?
            .next()
            .is_none();
        if !empty {
            return Err(QueryError::Invalid(format!(
                "{} already exists and is not empty: choose a new directory",
                path.display()
            )));
        }
    }
    let mut count = 0u64;
    let written = match format {
        ExportFormat::Dir => write_dir(&temp, items, &mut count),
        _ => write_file(&temp, format, items, &mut count),
    };
    let finish = written.and_then(|jobs| {
        if format == ExportFormat::Dir && path.exists() {
            std::fs::remove_dir(path).map_err(QueryError::io(path))?;
        }
        std::fs::rename(&temp, path).map_err(QueryError::io(path))?;
        Ok(jobs)
    });
    match finish {
        Ok(jobs) => Ok(ExportReport {
            format,
            path: path.to_owned(),
            items: count,
            jobs,
        }),
        Err(err) => {
            let _ = std::fs::remove_dir_all(&temp);
            let _ = std::fs::remove_file(&temp);
            Err(QueryError::Export {
                path: path.to_owned(),
                items: count,
                source: Box::new(err),
            })
        }
    }
}

/// `.{name}.tmp-{pid}` beside `path`.
fn temp_sibling(path: &Path) -> Result<PathBuf, QueryError> {
    let name = path.file_name().ok_or_else(|| {
        QueryError::Invalid(format!(
            "{} is not a file or directory name",
            path.display()
        ))
    })?;
    let temp = format!(".{}.tmp-{}", name.to_string_lossy(), std::process::id());
    Ok(path.with_file_name(temp))
}

/// Writes `items` to the file `temp` one at a time through a buffer; returns the number of
/// jobs, `count` the items written so far (also when it fails).
fn write_file<I>(
    temp: &Path,
    format: ExportFormat,
    items: I,
    count: &mut u64,
) -> Result<u64, QueryError>
where
    I: Iterator<Item = Result<DeadLetteredItem, QueryError>>,
{
    let io = |source| QueryError::Io {
        path: temp.to_owned(),
        source,
    };
    let out = BufWriter::new(File::create(temp).map_err(io)?);
    let mut jobs = JobCounter::default();
    let mut out = if format == ExportFormat::Csv {
        let mut csv = csv::Writer::from_writer(out);
        csv.write_record(CSV_COLUMNS).map_err(|e| io(e.into()))?;
        for item in items {
            let item = item?;
            jobs.see(&item.job_id);
            csv.write_record(csv_record(item))
                .map_err(|e| io(e.into()))?;
            *count += 1;
        }
        csv.into_inner().map_err(|e| io(e.into_error()))?
    } else {
        let mut out = out;
        if format == ExportFormat::Json {
            out.write_all(b"[").map_err(io)?;
        }
        for item in items {
            let item = item?;
            jobs.see(&item.job_id);
            let separator: &[u8] = match (format, *count) {
                (ExportFormat::Json, 0) => b"\n",
                (ExportFormat::Json, _) => b",\n",
                _ => b"",
            };
            out.write_all(separator).map_err(io)?;
            serde_json::to_writer(&mut out, &item).map_err(|e| io(e.into()))?;
            if format != ExportFormat::Json {
                out.write_all(b"\n").map_err(io)?;
            }
            *count += 1;
        }
        if format == ExportFormat::Json {
            out.write_all(b"\n]\n").map_err(io)?;
        }
        out
    };
    out.flush().map_err(io)?;
    out.get_ref().sync_all().map_err(io)?;
    Ok(jobs.count)
}

/// Counts jobs in a scan where each job's items are contiguous.
#[derive(Default)]
struct JobCounter {
    last: Option<String>,
    count: u64,
}

impl JobCounter {
    fn see(&mut self, job_id: &str) {
        if self.last.as_deref() != Some(job_id) {
            self.last = Some(job_id.to_owned());
            self.count += 1;
        }
    }
}

/// Writes `items` into the directory `temp` in the legacy layout; returns the number of jobs,
/// `count` the items written so far (also when it fails).
fn write_dir<I>(temp: &Path, items: I, count: &mut u64) -> Result<u64, QueryError>
where
    I: Iterator<Item = Result<DeadLetteredItem, QueryError>>,
{
    std::fs::create_dir(temp).map_err(QueryError::io(temp))?;
    let mut jobs = 0u64;
    let mut current: Option<(String, PathBuf, Vec<String>)> = None;
    for item in items {
        let item = item?;
        if current.as_ref().is_none_or(|(job, ..)| *job != item.job_id) {
            if let Some((job, dir, ids)) = current.take() {
                write_index(&dir, job, ids)?;
            }
            let dir = temp.join(file_name(&item.job_id)?);
            let items_dir = dir.join("items");
            std::fs::create_dir_all(&items_dir).map_err(QueryError::io(&items_dir))?;
            current = Some((item.job_id.clone(), dir, Vec::new()));
            jobs += 1;
        }
        if let Some((_, dir, ids)) = current.as_mut() {
            let file = dir
                .join("items")
                .join(format!("{}.json", file_name(&item.item_id)?));
            let mut json = serde_json::to_vec_pretty(&item)
                .map_err(|err| QueryError::io(&file)(err.into()))?;
            json.push(b'\n');
            std::fs::write(&file, json).map_err(QueryError::io(&file))?;
            ids.push(item.item_id);
        }
        *count += 1;
    }
    if let Some((job, dir, ids)) = current {
        write_index(&dir, job, ids)?;
    }
    Ok(jobs)
}

fn write_index(dir: &Path, job_id: String, item_ids: Vec<String>) -> Result<(), QueryError> {
    let index = JobIndex {
        job_id,
        item_count: item_ids.len() as u64,
        item_ids,
        updated_at: Utc::now(),
    };
    let path = dir.join("index.json");
    let mut json =
        serde_json::to_vec_pretty(&index).map_err(|err| QueryError::io(&path)(err.into()))?;
    json.push(b'\n');
    std::fs::write(&path, json).map_err(QueryError::io(&path))
}

#[cfg(test)]
mod tests;
