//! Which items a delete removes: named ids, or every item a `dlq list` filter selects
//! ([`select`]), read from the sink before anything is written; and the answer naming the ids
//! that were not found ([`Selected::answer`]).

use serde_json::json;

use super::cel::CelFilter;
use super::list::{find_item, in_listing_order, selected};
use super::{Criteria, QueryError};
use crate::request::RequestError;
use dlq::removal::{would_delete, Removal};
use dlq::sink::LocalSink;

/// One id of `dlq delete`: `JOB/ITEM` (split at the first `/`) or a bare `ITEM`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NamedId {
    /// The id as given.
    pub text: String,
    /// The job, when named.
    pub job_id: Option<String>,
    /// The item.
    pub item_id: String,
}

impl NamedId {
    /// Reads `JOB/ITEM` or `ITEM`; an empty part is a usage error.
    pub fn parse(text: &str) -> Result<NamedId, RequestError> {
        let (job_id, item_id) = match text.split_once('/') {
            Some((job, item)) => (Some(job.to_owned()), item.to_owned()),
            None => (None, text.to_owned()),
        };
        if item_id.is_empty() || job_id.as_deref() == Some("") {
            return Err(RequestError::Usage(format!(
                "'{text}' is not an item id: write JOB/ITEM (or ITEM); nothing was changed"
            )));
        }
        Ok(NamedId {
            text: text.to_owned(),
            job_id,
            item_id,
        })
    }
}

/// What a delete removes, checked ([`crate::request::delete::DeleteRequest::target`]).
#[derive(Debug, Clone)]
pub enum DeleteTarget {
    /// These items.
    Ids(Vec<NamedId>),
    /// Every item these select.
    Filter {
        /// The flag filters.
        criteria: Criteria,
        /// The CEL expression, if any.
        expr: Option<CelFilter>,
    },
}

/// The items found, as `(job_id, item_id)`, and the ids given that name no item.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Selected {
    /// The items to delete, each once.
    pub items: Vec<(String, String)>,
    /// Ids given that name no item.
    pub unknown: Vec<String>,
}

impl Selected {
    /// Ids were named and none was found: a not-found error (exit 3, HTTP 404).
    pub fn check_found(&self) -> Result<(), QueryError> {
        if !self.items.is_empty() {
            return Ok(());
        }
        match self.unknown.as_slice() {
            [] => Ok(()),
            [one] => Err(match one.split_once('/') {
                Some((job, item)) => QueryError::ItemNotFound {
                    item_id: item.to_owned(),
                    job_id: Some(job.to_owned()),
                },
                None => QueryError::ItemNotFound {
                    item_id: one.clone(),
                    job_id: None,
                },
            }),
            several => Err(QueryError::ItemNotFound {
                item_id: several.join("', '"),
                job_id: None,
            }),
        }
    }

    /// The answer of a dry run: the count and, in JSON, the items.
    pub fn dry_run(&self) -> Removal {
        self.answer(would_delete(&self.items))
    }

    /// `removal` with the ids that were not found (`unknown` in JSON, a line for people).
    pub fn answer(&self, mut removal: Removal) -> Removal {
        if !self.unknown.is_empty() {
            removal.summary["unknown"] = json!(self.unknown);
            removal.line = format!("{}\nnot found: {}", removal.line, self.unknown.join(", "));
        }
        removal
    }
}

/// Reads which items `target` names or selects. An id in several jobs is a usage error; a CEL
/// expression that cannot decide about an item is an error naming it.
pub fn select(sink: &LocalSink, target: &DeleteTarget) -> Result<Selected, QueryError> {
    let mut chosen = Selected::default();
    match target {
        DeleteTarget::Ids(ids) => {
            let mut seen = std::collections::HashSet::new();
            for id in ids {
                match find_item(sink, &id.item_id, id.job_id.as_deref()) {
                    Ok(item) => {
                        if seen.insert((item.job_id.clone(), item.item_id.clone())) {
                            chosen.items.push((item.job_id, item.item_id));
                        }
                    }
                    Err(err) if err.is_not_found() => chosen.unknown.push(id.text.clone()),
                    Err(err) => return Err(err),
                }
            }
        }
        DeleteTarget::Filter { criteria, expr } => {
            for item in in_listing_order(sink, criteria, None)?
                .filter_map(|item| selected(expr.as_ref(), item))
            {
                let item = item?;
                chosen.items.push((item.job_id, item.item_id));
            }
        }
    }
    Ok(chosen)
}
