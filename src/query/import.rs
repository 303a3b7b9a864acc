//! `dlq import`: reading items from the legacy directory layout (or from our JSON and
//! JSON Lines exports) and validating all of them before anything is written.
//!
//! Accepted sources:
//!
//! * a directory: every directory under it (up to [`MAX_DEPTH`] levels, not following symlinks)
//!   that has an `items/` subdirectory is one job: `items/*.json` are its items and the optional
//!   `index.json` names the job (`job_id`); without an index the directory's name is the job id.
//!   This reads `dlq export --format dir`, a single job directory, and the replaced runner's own
//!   `~/.prodigy/dlq/{repo}/{job_id}/mapreduce/dlq/{job_id}/` trees alike;
//! * a `.jsonl`/`.ndjson` file (one item per line) or a `.json` file (an array of items), as
//!   written by `dlq export`; each item must carry its `job_id`.
//!
//! Every item is checked ([`ImportSource::validate`]): it parses, its ids are valid, its file name
//! matches its `item_id`, it fits the sink's size limit, and no job exceeds its capacity. Items of
//! the replaced runner carry no `error_pattern`: they get our signature and pattern, computed from
//! their most recent failure, so they group with native items.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};

use serde::de::{Deserializer as _, Error as _, SeqAccess, Visitor};
use serde::Serialize;

use super::export::{id_of_file_name, JobIndex};
use super::QueryError;
use dlq::domain::model::DeadLetteredItem;

/// How deep below the given directory job directories are looked for.
pub const MAX_DEPTH: usize = 8;

/// Room left in an event for its envelope, beside the item.
const ENVELOPE_BYTES: usize = 1024;

/// Limits an import must respect (from the sink's configuration).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ImportLimits {
    /// Largest event the sink accepts, in bytes.
    pub max_event_bytes: usize,
    /// Most items per job.
    pub capacity_per_job: u64,
}

/// An item read from a source, with where it came from.
#[derive(Debug, Clone, PartialEq)]
pub struct ImportItem {
    /// File (and line or element) it was read from.
    pub origin: String,
    /// The item, with `job_id` set and signature filled in.
    pub item: DeadLetteredItem,
}

/// The outcome of validation.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct ImportPlan {
    /// Items found.
    pub items: u64,
    /// Items per job.
    pub jobs: BTreeMap<String, u64>,
    /// Things that are odd but do not stop the import (e.g. an index that disagrees).
    pub warnings: Vec<String>,
}

#[derive(Debug, Clone)]
struct JobDir {
    path: PathBuf,
    job_id: String,
    index: Option<JobIndex>,
}

#[derive(Debug, Clone)]
enum Kind {
    Dirs(Vec<JobDir>),
    Jsonl(PathBuf),
    Json(PathBuf),
}

/// A source of items to import.
#[derive(Debug, Clone)]
pub struct ImportSource {
    kind: Kind,
    limits: ImportLimits,
}

fn bad(path: impl fmt::Display, reason: impl fmt::Display) -> QueryError {
    QueryError::BadInput {
        path: path.to_string(),
        reason: reason.to_string(),
    }
}

impl ImportSource {
    /// Recognises the source at `path`; reads each `index.json` (a bad one is an error).
    pub fn open(path: &Path, limits: ImportLimits) -> Result<Self, QueryError> {
        let meta = std::fs::metadata(path).map_err(QueryError::io(path))?;
        let kind = if meta.is_dir() {
            let mut found = Vec::new();
            find_job_dirs(path, 0, &mut found)?;
            if found.is_empty() {
                return Err(bad(
                    path.display(),
                    "no job directory (one with an items/ subdirectory) found",
                ));
            }
            found.sort();
            let mut jobs = Vec::new();
            let mut seen = BTreeMap::new();
            for dir in found {
                let job = job_dir(dir)?;
                if let Some(first) = seen.insert(job.job_id.clone(), job.path.clone()) {
                    return Err(bad(
                        job.path.display(),
                        format!("job '{}' is also in {}", job.job_id, first.display()),
                    ));
                }
                jobs.push(job);
            }
            Kind::Dirs(jobs)
        } else {
            match path.extension().and_then(|e| e.to_str()) {
                Some("jsonl" | "ndjson") => Kind::Jsonl(path.to_owned()),
                Some("json") => Kind::Json(path.to_owned()),
                _ => {
                    return Err(bad(
                        path.display(),
                        "expected a directory, a .json or a .jsonl file",
                    ))
                }
            }
        };
        Ok(ImportSource { kind, limits })
    }

    /// Calls `f` with every item, checked and prepared, in source order; stops at the first
    /// error (of the source or of `f`).
    pub fn for_each(
        &self,
        f: &mut dyn FnMut(ImportItem) -> Result<(), QueryError>,
    ) -> Result<(), QueryError> {
        match &self.kind {
            Kind::Dirs(jobs) => jobs.iter().try_for_each(|job| self.each_in_dir(job, f)),
            Kind::Jsonl(path) => self.each_in_jsonl(path, f),
            Kind::Json(path) => self.each_in_json(path, f),
        }
    }

    /// Reads every item once; an error names the first bad file, and nothing may be imported.
    pub fn validate(&self) -> Result<ImportPlan, QueryError> {
        let mut plan = ImportPlan::default();
        self.for_each(&mut |found| {
            plan.items += 1;
            *plan.jobs.entry(found.item.job_id).or_default() += 1;
            Ok(())
        })?;
        for (job, count) in &plan.jobs {
            if *count > self.limits.capacity_per_job {
                return Err(bad(
                    format!("job '{job}'"),
                    format!("{count} items, above sink.capacity_per_job ({}): importing would evict the oldest; raise the capacity in the config", self.limits.capacity_per_job),
                ));
            }
        }
        if let Kind::Dirs(jobs) = &self.kind {
            for job in jobs {
                let Some(index) = &job.index else { continue };
                let found = plan.jobs.get(&job.job_id).copied().unwrap_or(0);
                if index.item_count != found || index.item_ids.len() as u64 != found {
                    plan.warnings.push(format!(
                        "{}: index.json lists {} items, items/ holds {found}; the files are imported",
                        job.path.display(),
                        index.item_ids.len()
                    ));
                }
            }
        }
        Ok(plan)
    }

    fn check(
        &self,
        origin: String,
        job: Option<&str>,
        mut item: DeadLetteredItem,
    ) -> Result<ImportItem, QueryError> {
        match job {
            Some(job) if !item.job_id.is_empty() && item.job_id != job => {
                return Err(bad(
                    origin,
                    format!(
                        "item job_id '{}' differs from the directory's job '{job}'",
                        item.job_id
                    ),
                ));
            }
            Some(job) => item.job_id = job.to_owned(),
            None if item.job_id.is_empty() => return Err(bad(origin, "the item has no job_id")),
            None => {}
        }
        dlq::domain::command::validate_id::<String>("job_id", &item.job_id)
            .map_err(|e| bad(&origin, e))?;
        dlq::domain::command::validate_id::<String>("item_id", &item.item_id)
            .map_err(|e| bad(&origin, e))?;
        if item.error_pattern.is_empty() {
            if let Some(last) = item.failure_history.last() {
                let sig = dlq::domain::signature::signature(&last.error_type, &last.error_message);
                item.error_signature = sig.hash;
                item.error_pattern = sig.pattern;
            }
        }
        let size = serde_json::to_vec(&item)
            .map(|v| v.len())
            .unwrap_or(usize::MAX);
        if size.saturating_add(ENVELOPE_BYTES) > self.limits.max_event_bytes {
            return Err(bad(
                origin,
                format!(
                    "the item is {size} bytes, above the sink's limit (sink.max_event_bytes {})",
                    self.limits.max_event_bytes
                ),
            ));
        }
        Ok(ImportItem { origin, item })
    }

    fn each_in_dir(
        &self,
        job: &JobDir,
        f: &mut dyn FnMut(ImportItem) -> Result<(), QueryError>,
    ) -> Result<(), QueryError> {
        let items_dir = job.path.join("items");
        let mut names = BTreeSet::new();
        for entry in std::fs::read_dir(&items_dir).map_err(QueryError::io(&items_dir))? {
            let entry = entry.map_err(QueryError::io(&items_dir))?;
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.ends_with(".json") && !name.starts_with(".tmp") {
                names.insert(name);
            }
        }
        for name in names {
            let file = items_dir.join(&name);
            let origin = file.display().to_string();
            let bytes = std::fs::read(&file).map_err(QueryError::io(&file))?;
            let item: DeadLetteredItem =
                serde_json::from_slice(&bytes).map_err(|e| bad(&origin, e))?;
            let stem = name.trim_end_matches(".json");
            if id_of_file_name(stem) != item.item_id {
                return Err(bad(
                    &origin,
                    format!(
                        "the file name says item '{}' but item_id is '{}'",
                        id_of_file_name(stem),
                        item.item_id
                    ),
                ));
            }
            f(self.check(origin, Some(&job.job_id), item)?)?;
        }
        Ok(())
    }

    fn each_in_jsonl(
        &self,
        path: &Path,
        f: &mut dyn FnMut(ImportItem) -> Result<(), QueryError>,
    ) -> Result<(), QueryError> {
        let reader = BufReader::new(File::open(path).map_err(QueryError::io(path))?);
        for (n, line) in reader.lines().enumerate() {
            let line = line.map_err(QueryError::io(path))?;
            if line.trim().is_empty() {
                continue;
            }
            let origin = format!("{} line {}", path.display(), n + 1);
            let item = serde_json::from_str(&line).map_err(|e| bad(&origin, e))?;
            f(self.check(origin, None, item)?)?;
        }
        Ok(())
    }

    fn each_in_json(
        &self,
        path: &Path,
        f: &mut dyn FnMut(ImportItem) -> Result<(), QueryError>,
    ) -> Result<(), QueryError> {
        let reader = BufReader::new(File::open(path).map_err(QueryError::io(path))?);
        let mut de = serde_json::Deserializer::from_reader(reader);
        let mut failed = None;
        let visitor = Elements {
            source: self,
            path,
            f,
            failed: &mut failed,
        };
        let parsed = de.deserialize_seq(visitor).and_then(|()| de.end());
        match (failed, parsed) {
            (Some(err), _) => Err(err),
            (None, Err(err)) => Err(bad(path.display(), err)),
            (None, Ok(())) => Ok(()),
        }
    }
}

/// Streams the elements of a JSON array into the callback, one at a time.
struct Elements<'a, 'f> {
    source: &'a ImportSource,
    path: &'a Path,
    f: &'a mut dyn FnMut(ImportItem) -> Result<(), QueryError>,
    failed: &'f mut Option<QueryError>,
}

impl<'de> Visitor<'de> for Elements<'_, '_> {
    type Value = ();

    fn expecting(&self, formatter: &mut fmt::Formatter) -> fmt::Result {
        formatter.write_str("an array of dead-lettered items")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let mut n = 0usize;
        while let Some(item) = seq.next_element::<DeadLetteredItem>()? {
            n += 1;
            let origin = format!("{} element {n}", self.path.display());
            let outcome = self
                .source
                .check(origin, None, item)
                .and_then(|found| (self.f)(found));
            if let Err(err) = outcome {
                *self.failed = Some(err);
                return Err(A::Error::custom("stopped"));
            }
        }
        Ok(())
    }
}

fn find_job_dirs(dir: &Path, depth: usize, found: &mut Vec<PathBuf>) -> Result<(), QueryError> {
    if dir.join("items").is_dir() {
        found.push(dir.to_owned());
        return Ok(());
    }
    if depth >= MAX_DEPTH {
        return Ok(());
    }
    for entry in std::fs::read_dir(dir).map_err(QueryError::io(dir))? {
        let entry = entry.map_err(QueryError::io(dir))?;
        let is_dir = entry
            .file_type()
            .map_err(QueryError::io(entry.path()))?
            .is_dir();
        let hidden = entry.file_name().to_string_lossy().starts_with(".");
        if is_dir && !hidden {
            find_job_dirs(&entry.path(), depth + 1, found)?;
        }
    }
    Ok(())
}

fn job_dir(path: PathBuf) -> Result<JobDir, QueryError> {
    let index_path = path.join("index.json");
    let index = if index_path.is_file() {
        let bytes = std::fs::read(&index_path).map_err(QueryError::io(&index_path))?;
        let index: JobIndex =
            serde_json::from_slice(&bytes).map_err(|e| bad(index_path.display(), e))?;
        Some(index)
    } else {
        None
    };
    let job_id = match &index {
        Some(index) => index.job_id.clone(),
        None => path
            .file_name()
            .map(|name| id_of_file_name(&name.to_string_lossy()))
            .ok_or_else(|| bad(path.display(), "cannot tell the job id: add an index.json"))?,
    };
    dlq::domain::command::validate_id::<String>("job_id", &job_id)
        .map_err(|e| bad(path.display(), e))?;
    Ok(JobDir {
        path,
        job_id,
        index,
    })
}
