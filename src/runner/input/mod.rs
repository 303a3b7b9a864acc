//! The work items of a job: read the input document ([`load_input`]), then pick the items out of
//! it ([`select_items`]).
//!
//! Every item gets a **stable id**, because ids key checkpoints, resume and the dead-letter
//! queue: a position would shift when the input grows or is re-read. The id is the item's own
//! `id` (or else `item_id`) field when it is a string or an integer; otherwise `item-` and the
//! first 16 hex digits of the SHA-256 of the item's canonical JSON (keys sorted, no spaces).
//! Identical items without an id get `-2`, `-3`, ... in input order. An explicit `null` id
//! counts as no id; `id` wins over `item_id` when both are set. Ids must be 1-256 bytes without
//! control characters. Two different items with one id are an error; the very same item listed
//! twice under one id is run once.
//!
//! Selection is pure: JSONPath ([RFC 9535]) → ids → filter → sort → offset → max_items. Ids
//! come before the filter so they never depend on it. A filter that fails on an item (e.g. a
//! missing field) fails the selection, naming the item, rather than dropping it silently.
//!
//! [RFC 9535]: https://www.rfc-editor.org/rfc/rfc9535

use std::collections::hash_map::Entry;
use std::collections::HashMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};
use thiserror::Error;

use crate::query::cel::{CelError, CelFilter};
use dlq::domain::command::MAX_ID_BYTES;

mod load;
mod sort;

pub(super) use load::load_input;
use sort::SortSpec;

/// Largest input document accepted, in bytes (file or command output).
const MAX_INPUT_BYTES: usize = 256 * 1024 * 1024;
/// Longest accepted `json_path`, in bytes.
const MAX_JSON_PATH_BYTES: usize = 4096;

/// One unit of work: a stable id and the item's JSON.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(super) struct WorkItem {
    /// Stable id (see the module documentation).
    pub id: String,
    /// The item as selected from the input.
    pub data: Value,
}

/// How to pick work items out of an input document.
#[derive(Debug, Clone, Copy)]
pub(super) struct SelectOptions<'a> {
    /// RFC 9535 JSONPath, e.g. `$.items[*]`, or `$[*]` for a top-level array.
    pub json_path: &'a str,
    /// Filter expression evaluated with `item` bound to each item (see [`crate::query::cel`]).
    pub filter: Option<&'a str>,
    /// `item.<field> [ASC|DESC]`; the `item.` prefix is optional, ASC is the default.
    pub sort_by: Option<&'a str>,
    /// Items to skip after filtering and sorting.
    pub offset: usize,
    /// Most items to keep after the offset.
    pub max_items: Option<usize>,
}

/// Where the input document comes from.
#[derive(Debug, Clone, Copy)]
pub(super) enum InputSource<'a> {
    /// A JSON file, relative to the base directory.
    File(&'a Path),
    /// A `sh -c` command run in the base directory; its stdout is the JSON.
    Command(&'a str),
}

/// Why the job's input could not be read or its items selected.
#[derive(Debug, Error)]
pub enum InputError {
    /// The input file could not be read.
    #[error("cannot read input file {path}: {source}; check the path (relative paths are resolved from the workflow's directory)")]
    ReadFile {
        /// The resolved path.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The input command could not be started.
    #[error("cannot start input command `{command}` with sh: {source}")]
    Spawn {
        /// The command.
        command: String,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The input command did not succeed.
    #[error("input command `{command}` {status}; stderr ends with: {stderr_tail}; fix the command (it runs with sh -c in {dir}) and run again")]
    CommandFailed {
        /// The command.
        command: String,
        /// `exited with code N` or `was killed by signal N`.
        status: String,
        /// The last bytes it wrote to stderr (`(nothing)` when none).
        stderr_tail: String,
        /// Where it ran.
        dir: PathBuf,
    },
    /// The document is larger than the input limit (256 MiB).
    #[error("{origin} is larger than the {limit}-byte input limit: select fewer items at the source or split the job")]
    TooLarge {
        /// The file path or command.
        origin: String,
        /// The limit in bytes.
        limit: usize,
    },
    /// The document is not JSON.
    #[error("{origin} is not valid JSON: {message} at line {line}, column {column} (it starts with {head}); the input must be one JSON document")]
    NotJson {
        /// The file path or command.
        origin: String,
        /// The parser's message.
        message: String,
        /// 1-based line of the error.
        line: usize,
        /// 1-based column of the error.
        column: usize,
        /// The first bytes of the document, escaped.
        head: String,
    },
    /// The json_path is not valid RFC 9535 JSONPath.
    #[error("invalid json_path {path:?}: {message}; write RFC 9535 JSONPath such as `$.items[*]` (or `$[*]` for a top-level array)")]
    JsonPath {
        /// The path as written.
        path: String,
        /// What is wrong.
        message: String,
    },
    /// The filter does not compile.
    #[error("map.filter: {0}")]
    Filter(CelError),
    /// The filter failed on one item.
    #[error("map.filter failed on work item {id}: {source}")]
    FilterItem {
        /// The item's id.
        id: String,
        /// The evaluation error.
        source: CelError,
    },
    /// The sort_by is malformed.
    #[error("invalid sort_by {spec:?}: {message}; write `item.<field> [ASC|DESC]`, e.g. `item.priority DESC`")]
    SortBy {
        /// The spec as written.
        spec: String,
        /// What is wrong.
        message: String,
    },
    /// Two different items carry the same id.
    #[error("work items at positions {first} and {second} both have id {id:?} but different data: ids must be unique; fix the input's `id`/`item_id` fields")]
    DuplicateId {
        /// The id.
        id: String,
        /// 0-based position of the first item in the json_path result.
        first: usize,
        /// 0-based position of the second.
        second: usize,
    },
    /// An item's `id`/`item_id` is unusable.
    #[error("work item at position {index} has an unusable {field} {shown}: {reason}")]
    InvalidId {
        /// 0-based position in the json_path result.
        index: usize,
        /// `id` or `item_id`.
        field: &'static str,
        /// The value, escaped and shortened.
        shown: String,
        /// What is wrong and what to do.
        reason: String,
    },
}

impl<'a> SelectOptions<'a> {
    /// The selection a workflow's `map` phase asks for.
    pub(super) fn of(map: &'a super::workflow::MapPhase) -> Self {
        SelectOptions {
            json_path: &map.json_path,
            filter: map.filter.as_deref(),
            sort_by: map.sort_by.as_deref(),
            offset: map.offset,
            max_items: map.max_items,
        }
    }
}

/// Picks the work items of `doc`: json_path, ids, filter, sort_by, offset, max_items, in that
/// order. A json_path that matches nothing gives no items; an invalid one is an error.
pub(super) fn select_items(doc: &Value, opts: &SelectOptions) -> Result<Vec<WorkItem>, InputError> {
    let sort = opts.sort_by.map(SortSpec::parse).transpose()?;
    let filter = opts
        .filter
        .map(CelFilter::parse)
        .transpose()
        .map_err(InputError::Filter)?;
    let selected = query(doc, opts.json_path)?;
    let mut items = assign_ids(selected)?;
    if let Some(filter) = &filter {
        let mut kept = Vec::with_capacity(items.len());
        for item in items {
            let keep =
                filter
                    .matches_data(&item.data)
                    .map_err(|source| InputError::FilterItem {
                        id: item.id.clone(),
                        source,
                    })?;
            if keep {
                kept.push(item);
            }
        }
        items = kept;
    }
    if let Some(sort) = &sort {
        sort.apply(&mut items);
    }
    let limit = opts.max_items.unwrap_or(usize::MAX);
    Ok(items.into_iter().skip(opts.offset).take(limit).collect())
}

fn query<'v>(doc: &'v Value, json_path: &str) -> Result<Vec<&'v Value>, InputError> {
    let invalid = |message: String| InputError::JsonPath {
        path: json_path.chars().take(200).collect(),
        message,
    };
    if json_path.len() > MAX_JSON_PATH_BYTES {
        return Err(invalid(format!(
            "it is {} bytes, over the limit of {MAX_JSON_PATH_BYTES}",
            json_path.len()
        )));
    }
    let path = serde_json_path::JsonPath::parse(json_path).map_err(|e| invalid(e.to_string()))?;
    Ok(path.query(doc).all())
}

/// Gives every item its stable id; drops later copies of an item that repeats an explicit id
/// with identical data.
fn assign_ids(selected: Vec<&Value>) -> Result<Vec<WorkItem>, InputError> {
    let mut items: Vec<WorkItem> = Vec::with_capacity(selected.len());
    // id -> (position in the json_path result, index in `items`)
    let mut seen: HashMap<String, (usize, usize)> = HashMap::with_capacity(selected.len());
    let mut hash_counts: HashMap<String, usize> = HashMap::new();
    for (index, data) in selected.into_iter().enumerate() {
        let id = match explicit_id(index, data)? {
            Some(id) => id,
            None => {
                let base = format!("item-{}", content_hash(data));
                let count = hash_counts.entry(base.clone()).or_insert(0);
                *count += 1;
                if *count == 1 {
                    base
                } else {
                    format!("{base}-{count}")
                }
            }
        };
        match seen.entry(id) {
            Entry::Occupied(entry) => {
                let (first, at) = *entry.get();
                if items[at].data == *data {
                    tracing::warn!(id = %entry.key(), first, second = index, "work item repeated with identical data: running it once");
                    continue;
                }
                return Err(InputError::DuplicateId {
                    id: entry.key().clone(),
                    first,
                    second: index,
                });
            }
            Entry::Vacant(entry) => {
                let id = entry.key().clone();
                entry.insert((index, items.len()));
                items.push(WorkItem {
                    id,
                    data: data.clone(),
                });
            }
        }
    }
    Ok(items)
}

/// The item's own id: `id`, else `item_id`, when a string or an integer (null counts as absent).
fn explicit_id(index: usize, data: &Value) -> Result<Option<String>, InputError> {
    let Value::Object(map) = data else {
        return Ok(None);
    };
    let Some((field, value)) = ["id", "item_id"]
        .into_iter()
        .find_map(|f| map.get(f).filter(|v| !v.is_null()).map(|v| (f, v)))
    else {
        return Ok(None);
    };
    let invalid = |shown: String, reason: String| InputError::InvalidId {
        index,
        field,
        shown,
        reason,
    };
    let id = match value {
        Value::String(s) => s.clone(),
        Value::Number(n) if n.is_i64() || n.is_u64() => n.to_string(),
        other => {
            let shown: String = other.to_string().chars().take(80).collect();
            return Err(invalid(
                shown,
                "ids must be strings or integers; change it, or remove it to have an id derived \
                 from the item's content"
                    .to_string(),
            ));
        }
    };
    let reason = if id.is_empty() {
        Some("it is empty".to_string())
    } else if id.len() > MAX_ID_BYTES {
        Some(format!(
            "it is {} bytes, over the limit of {MAX_ID_BYTES}",
            id.len()
        ))
    } else if id.chars().any(char::is_control) {
        Some("it contains a control character (such as NUL or a newline)".to_string())
    } else {
        None
    };
    match reason {
        Some(reason) => {
            let shown: String = format!("{:?}", id).chars().take(80).collect();
            Err(invalid(
                shown,
                format!("{reason}; ids must be 1-{MAX_ID_BYTES} bytes without control characters"),
            ))
        }
        None => Ok(Some(id)),
    }
}

/// First 16 hex digits of the SHA-256 of the item's canonical JSON.
fn content_hash(data: &Value) -> String {
    let mut canonical = String::new();
    write_canonical(data, &mut canonical);
    let digest = Sha256::digest(canonical.as_bytes());
    digest.iter().take(8).map(|b| format!("{b:02x}")).collect()
}

/// Compact JSON with object keys sorted, whatever the map type of serde_json (its
/// `preserve_order` feature would otherwise keep source order).
fn write_canonical(value: &Value, out: &mut String) {
    match value {
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_canonical(item, out);
            }
            out.push(']');
        }
        Value::Object(map) => {
            let mut entries: Vec<(&String, &Value)> = map.iter().collect();
            entries.sort_by(|a, b| a.0.cmp(b.0));
            out.push('{');
            for (i, (key, item)) in entries.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(key.clone()).to_string());
                out.push(':');
                write_canonical(item, out);
            }
            out.push('}');
        }
        scalar => out.push_str(&scalar.to_string()),
    }
}

#[cfg(test)]
mod tests;
