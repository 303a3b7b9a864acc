//! Operator queries over the sink: filters, paged listing, statistics, failure analysis,
//! export and import. Used by the `dlq` command line; written to be called by an admin API too.
//!
//! Everything streams: a query walks the sink's items one at a time
//! ([`dlq::sink::LocalSink::scan_items`]) and keeps only what its answer needs (a page of keys,
//! one counter per error type, signature or hour). The aggregations themselves are pure
//! accumulators (`StatsAccumulator`, `AnalysisAccumulator`), fed item by item, so they are
//! testable without a disk.

pub(crate) mod analyze;
pub mod cel;
pub mod delete;
pub(crate) mod export;
pub(crate) mod import;
pub mod list;
pub mod redrive;
pub mod stats;

use std::path::PathBuf;

use chrono::{DateTime, NaiveDate, NaiveDateTime, Utc};
use serde::{Deserialize, Serialize};
use thiserror::Error;

use dlq::domain::model::{DeadLetteredItem, ErrorType};
use dlq::sink::SinkError;

/// Every error type name a filter accepts.
pub const ERROR_TYPE_NAMES: [&str; 8] = ErrorType::NAMES;

/// Why a query failed.
#[derive(Debug, Error)]
pub enum QueryError {
    /// Reading the sink failed (including a corrupt record, named by its key).
    #[error(transparent)]
    Sink(#[from] SinkError),
    /// No item with this id.
    #[error("{}", not_found_message(item_id, job_id.as_deref()))]
    ItemNotFound {
        /// The id asked for.
        item_id: String,
        /// The job searched, if one was named.
        job_id: Option<String>,
    },
    /// The job holds no items.
    #[error(
        "job '{0}' has no items in this data directory (see `dlq stats` for the jobs it holds)"
    )]
    JobNotFound(String),
    /// The item id exists in several jobs and no job was named.
    #[error("item '{item_id}' exists in {} jobs ({}); pass --job-id to choose one", jobs.len(), jobs.join(", "))]
    Ambiguous {
        /// The id asked for.
        item_id: String,
        /// The jobs holding it.
        jobs: Vec<String>,
    },
    /// An argument is malformed (a time, a cursor, an error type, a window too large).
    #[error("{0}")]
    Invalid(String),
    /// A file to import is not valid; nothing was imported.
    #[error("{path}: {reason}; nothing was imported")]
    BadInput {
        /// The file (and line or element), as given.
        path: String,
        /// What is wrong with it.
        reason: String,
    },
    /// An export stopped part-way: its temporary file was removed, the target left untouched.
    #[error("export to {} stopped after {items} items: {source}; nothing was written to {}: fix the cause and run the export again", path.display(), path.display())]
    Export {
        /// The target file or directory.
        path: PathBuf,
        /// Items written to the temporary file before it stopped.
        items: u64,
        /// Why it stopped.
        source: Box<QueryError>,
    },
    /// Reading or writing a file failed.
    #[error("{path}: {source}")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
}

fn not_found_message(item_id: &str, job_id: Option<&str>) -> String {
    match job_id {
        Some(job) => format!("item '{item_id}' not found in job '{job}' (list the job's items with `dlq list --job-id {job}`)"),
        None => format!("item '{item_id}' not found in any job (find ids with `dlq list`)"),
    }
}

impl QueryError {
    /// An I/O error on `path`.
    pub fn io(path: impl Into<PathBuf>) -> impl FnOnce(std::io::Error) -> QueryError {
        let path = path.into();
        move |source| QueryError::Io { path, source }
    }

    /// Whether the error means that a named job or item does not exist.
    pub fn is_not_found(&self) -> bool {
        match self {
            QueryError::Export { source, .. } => source.is_not_found(),
            other => matches!(
                other,
                QueryError::ItemNotFound { .. } | QueryError::JobNotFound(_)
            ),
        }
    }

    /// Whether the error is the caller's input (bad argument, ambiguous id).
    pub fn is_usage(&self) -> bool {
        match self {
            QueryError::Export { source, .. } => source.is_usage(),
            other => matches!(other, QueryError::Invalid(_) | QueryError::Ambiguous { .. }),
        }
    }

    /// Which kind of failure this is for the one who asked.
    pub fn class(&self) -> dlq::ErrorClass {
        if self.is_not_found() {
            dlq::ErrorClass::NotFound
        } else if self.is_usage() {
            dlq::ErrorClass::Usage
        } else {
            dlq::ErrorClass::Failure
        }
    }
}

/// A `(job_id, item_id)` pair naming one item.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct ItemRef {
    /// The job.
    pub job_id: String,
    /// The item inside the job.
    pub item_id: String,
}

impl ItemRef {
    /// The reference of `item`.
    pub fn of(item: &DeadLetteredItem) -> Self {
        ItemRef {
            job_id: item.job_id.clone(),
            item_id: item.item_id.clone(),
        }
    }
}

/// Which items a query selects. Times compare with `last_attempt` (the most recent failure).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Criteria {
    /// Only this job.
    pub job_id: Option<String>,
    /// Only items that may be retried automatically.
    pub eligible_only: bool,
    /// Only items whose most recent failure has this error type (a name of
    /// [`ERROR_TYPE_NAMES`]).
    pub error_type: Option<&'static str>,
    /// Only items with this `error_signature`.
    pub signature: Option<String>,
    /// Only items that last failed at or after this time.
    pub since: Option<DateTime<Utc>>,
    /// Only items that last failed before this time.
    pub until: Option<DateTime<Utc>>,
}

impl Criteria {
    /// Whether `item` is selected.
    pub fn matches(&self, item: &DeadLetteredItem) -> bool {
        self.job_id.as_ref().is_none_or(|job| *job == item.job_id)
            && (!self.eligible_only || item.reprocess_eligible)
            && self
                .error_type
                .is_none_or(|name| name == item.last_error_type_name())
            && self
                .signature
                .as_ref()
                .is_none_or(|sig| *sig == item.error_signature)
            && self.since.is_none_or(|since| item.last_attempt >= since)
            && self.until.is_none_or(|until| item.last_attempt < until)
    }
}

/// The canonical name of an error type given in any letter case, or an error listing the names.
pub fn parse_error_type(text: &str) -> Result<&'static str, QueryError> {
    ERROR_TYPE_NAMES
        .iter()
        .find(|name| name.eq_ignore_ascii_case(text))
        .copied()
        .ok_or_else(|| {
            QueryError::Invalid(format!(
                "unknown error type '{text}': expected one of {}",
                ERROR_TYPE_NAMES.join(", ")
            ))
        })
}

/// Parses a time: RFC 3339 (`2025-01-11T10:30:00Z`), a date (`2025-01-11`, midnight UTC), a
/// zone-less date and time (UTC), or a duration meaning that long before `now` (`90m`, `2h`,
/// `7d`).
pub fn parse_time(text: &str, now: DateTime<Utc>) -> Result<DateTime<Utc>, QueryError> {
    let text = text.trim();
    if let Ok(time) = DateTime::parse_from_rfc3339(text) {
        return Ok(time.with_timezone(&Utc));
    }
    if let Ok(time) = NaiveDateTime::parse_from_str(text, "%Y-%m-%dT%H:%M:%S") {
        return Ok(time.and_utc());
    }
    if let Some(time) = NaiveDate::parse_from_str(text, "%Y-%m-%d")
        .ok()
        .and_then(|date| date.and_hms_opt(0, 0, 0))
    {
        return Ok(time.and_utc());
    }
    if let Ok(ago) = humantime::parse_duration(text) {
        let ago = chrono::Duration::from_std(ago)
            .map_err(|_| QueryError::Invalid(format!("duration '{text}' is too long")))?;
        return now
            .checked_sub_signed(ago)
            .ok_or_else(|| QueryError::Invalid(format!("duration '{text}' is too long")));
    }
    Err(QueryError::Invalid(format!(
        "cannot read time '{text}': use RFC 3339 (2025-01-11T10:30:00Z), a date (2025-01-11) or a duration ago (2h, 7d)"
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_parse_in_every_documented_form() {
        let now = DateTime::parse_from_rfc3339("2025-01-11T12:00:00Z")
            .unwrap()
            .with_timezone(&Utc);
        let at = |s| parse_time(s, now).unwrap().to_rfc3339();
        assert_eq!(at("2025-01-11T10:30:00Z"), "2025-01-11T10:30:00+00:00");
        assert_eq!(at("2025-01-11T11:30:00+01:00"), "2025-01-11T10:30:00+00:00");
        assert_eq!(at("2025-01-11"), "2025-01-11T00:00:00+00:00");
        assert_eq!(at("2025-01-11T10:30:00"), "2025-01-11T10:30:00+00:00");
        assert_eq!(at("2h"), "2025-01-11T10:00:00+00:00");
        assert!(parse_time("yesterday-ish", now).is_err());
    }

    #[test]
    fn error_type_names_are_case_insensitive_and_checked() {
        assert_eq!(parse_error_type("timeout").unwrap(), "Timeout");
        let err = parse_error_type("Timeot").unwrap_err().to_string();
        assert!(err.contains("CommandFailed"), "{err}");
    }
}
