//! `dlq list`: the items a filter selects, newest first, one page at a time.
//!
//! **Order**: by `last_attempt` descending (the most recently failed item first), ties broken by
//! job id then item id ascending, so the order is total and stable.
//!
//! **How**: the sink keeps a per-job recency index (`r` keys) in exactly this order; the listing
//! merges the jobs' index walks ([`LocalSink::newest_first`]), reads each item, applies the
//! filter, and stops as soon as the page is full. A page of 50 unfiltered items reads about 51
//! items whatever the queue's size; a selective filter reads until it has found a page.
//!
//! **Paging**: `--limit` items per page, after skipping `--offset` items, or starting after a
//! cursor (`next_cursor` of the previous page, opaque hex). Cursor paging is exact even while
//! items are added: a page holds the items whose sort key is strictly after the cursor.
//!
//! **Counting**: `matched` is exact when the walk reached the end, or when the per-job counters
//! answer it (no filter, or only one of job, `--eligible`, `--error-type`); otherwise it is
//! unknown (`null`) unless the caller asks to count, which walks every matching item.

use std::cmp::Reverse;

use chrono::{DateTime, Utc};
use serde::Serialize;

use super::cel::CelFilter;
use super::{Criteria, ItemRef, QueryError};
use dlq::domain::model::{DeadLetteredItem, ErrorType};
use dlq::sink::{JobCounters, LocalSink};

/// Largest `offset + limit` of one page.
pub const MAX_WINDOW: usize = 100_000;

/// A page request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListRequest {
    /// Which items.
    pub filter: Criteria,
    /// Items per page.
    pub limit: usize,
    /// Items skipped before the page.
    pub offset: usize,
    /// Start strictly after this position (from [`Cursor::decode`]).
    pub after: Option<Cursor>,
    /// Count every matching item even when that means walking all of them.
    pub count: bool,
}

/// A position in the listing order: an item's `last_attempt`, job id and item id.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Cursor {
    /// Newest first: a later time sorts before an earlier one.
    time: Reverse<DateTime<Utc>>,
    /// Then by job and item, ascending.
    item: ItemRef,
}

impl Cursor {
    /// The position of `item`.
    pub fn of(item: &DeadLetteredItem) -> Self {
        Cursor {
            time: Reverse(item.last_attempt),
            item: ItemRef::of(item),
        }
    }

    /// The opaque text form (hex of a small JSON array).
    pub fn encode(&self) -> String {
        let parts = (
            self.time.0.to_rfc3339(),
            &self.item.job_id,
            &self.item.item_id,
        );
        let json = serde_json::to_vec(&parts).unwrap_or_default();
        json.iter().map(|b| format!("{b:02x}")).collect()
    }

    /// Reads a cursor produced by [`Cursor::encode`].
    pub fn decode(text: &str) -> Result<Self, QueryError> {
        let bad = || {
            QueryError::Invalid(format!(
                "malformed cursor '{text}': pass the next_cursor of a previous page"
            ))
        };
        if !text.len().is_multiple_of(2) || !text.is_ascii() {
            return Err(bad());
        }
        let bytes = (0..text.len())
            .step_by(2)
            .map(|i| {
                text.get(i..i + 2)
                    .and_then(|pair| u8::from_str_radix(pair, 16).ok())
            })
            .collect::<Option<Vec<u8>>>()
            .ok_or_else(bad)?;
        let (time, job_id, item_id): (String, String, String) =
            serde_json::from_slice(&bytes).map_err(|_| bad())?;
        let time = DateTime::parse_from_rfc3339(&time).map_err(|_| bad())?;
        Ok(Cursor {
            time: Reverse(time.with_timezone(&Utc)),
            item: ItemRef { job_id, item_id },
        })
    }

    /// The item at this position.
    pub fn item(&self) -> &ItemRef {
        &self.item
    }
}

/// One page: its items and where the next page starts.
#[derive(Debug, Clone, PartialEq)]
pub struct Page {
    /// The page's items, in listing order.
    pub items: Vec<DeadLetteredItem>,
    /// Where the next page starts, if there are more items.
    pub next_cursor: Option<Cursor>,
    /// How many items match (after the cursor, if one was given), when known.
    pub matched: Option<u64>,
}

/// Checks the page size against [`MAX_WINDOW`].
fn check_window(request: &ListRequest) -> Result<(), QueryError> {
    let window = request.offset.saturating_add(request.limit);
    if request.limit == 0 || window > MAX_WINDOW {
        return Err(QueryError::Invalid(format!(
            "--limit must be at least 1 and --offset + --limit at most {MAX_WINDOW}: page further with --after <next_cursor>"
        )));
    }
    Ok(())
}

/// Pages `items`, which come **in listing order** and already filtered; pure. Stops reading
/// once the page and the next item are known, unless `request.count` asks for the total.
pub fn page_in_order<I>(items: I, request: &ListRequest) -> Result<Page, QueryError>
where
    I: IntoIterator<Item = Result<DeadLetteredItem, QueryError>>,
{
    check_window(request)?;
    let mut page = Vec::new();
    let (mut matched, mut more) = (0u64, false);
    let mut exhausted = true;
    for item in items {
        let item = item?;
        if let Some(after) = &request.after {
            if Cursor::of(&item) <= *after {
                continue;
            }
        }
        matched += 1;
        if matched as usize <= request.offset {
            continue;
        }
        if page.len() < request.limit {
            page.push(item);
            continue;
        }
        more = true;
        if !request.count {
            exhausted = false;
            break;
        }
    }
    let next_cursor = if more {
        page.last().map(Cursor::of)
    } else {
        None
    };
    Ok(Page {
        items: page,
        next_cursor,
        matched: exhausted.then_some(matched),
    })
}

/// The items `filter` selects, in listing order, read through the recency index. With `after`,
/// the walk starts at the cursor's time (items at that very time before the cursor are still
/// yielded: [`page_in_order`] skips them).
pub fn in_listing_order<'a>(
    sink: &'a LocalSink,
    filter: &'a Criteria,
    after: Option<&Cursor>,
) -> Result<impl Iterator<Item = Result<DeadLetteredItem, QueryError>> + 'a, QueryError> {
    let from = [after.map(|cursor| cursor.time.0), filter.until]
        .into_iter()
        .flatten()
        .min();
    let since = filter.since;
    let walk = sink.newest_first(filter.job_id.as_deref(), from)?;
    Ok(walk
        .map_while(move |entry| match entry {
            Ok(recent) if since.is_some_and(|since| recent.last_attempt.0 < since) => None,
            other => Some(other),
        })
        .filter_map(move |entry| {
            let recent = match entry {
                Ok(recent) => recent,
                Err(err) => return Some(Err(err.into())),
            };
            match sink.item(&recent.job_id, &recent.item_id) {
                // Gone, or changed since the index entry was read: it is listed (or not) where
                // its current state puts it.
                Ok(None) => None,
                Ok(Some(stored)) if stored.item.last_attempt != recent.last_attempt.0 => None,
                Ok(Some(stored)) => filter
                    .matches(&stored.item)
                    .then_some(Ok(std::sync::Arc::unwrap_or_clone(stored.item))),
                Err(err) => Some(Err(err.into())),
            }
        }))
}

/// Keeps `item` if the expression (if any) selects it; an item it cannot decide about is an
/// error naming the item, never silently left out.
pub fn selected(
    expr: Option<&CelFilter>,
    item: Result<DeadLetteredItem, QueryError>,
) -> Option<Result<DeadLetteredItem, QueryError>> {
    let Some(expr) = expr else {
        return Some(item);
    };
    match item {
        Ok(item) => match expr.matches_item(&item) {
            Ok(true) => Some(Ok(item)),
            Ok(false) => None,
            Err(err) => Some(Err(QueryError::Invalid(format!(
                "item '{}' of job '{}': {err}; nothing was listed",
                item.item_id, item.job_id
            )))),
        },
        Err(err) => Some(Err(err)),
    }
}

/// The number of items `request` matches when the per-job counters know it (no cursor, no
/// expression, and at most one of `--eligible` and `--error-type` beside `--job-id`).
pub fn counted_total(
    sink: &LocalSink,
    request: &ListRequest,
    has_expression: bool,
) -> Result<Option<u64>, QueryError> {
    let filter = &request.filter;
    let unfilterable = has_expression
        || request.after.is_some()
        || filter.signature.is_some()
        || filter.since.is_some()
        || filter.until.is_some()
        || (filter.eligible_only && filter.error_type.is_some());
    if unfilterable {
        return Ok(None);
    }
    let mut total = JobCounters::default();
    match &filter.job_id {
        Some(job) => total.merge(&sink.counters(job)?),
        None => {
            for (_, counters) in sink.jobs()? {
                total.merge(&counters);
            }
        }
    }
    let slot = filter
        .error_type
        .and_then(|name| ErrorType::NAMES.iter().position(|n| *n == name));
    Ok(Some(match (filter.eligible_only, slot) {
        (true, _) => total.eligible,
        (false, Some(slot)) => total.by_error_type.get(slot).copied().unwrap_or(0),
        (false, None) => total.items,
    }))
}

/// A compact view of an item for listings: JSON, JSONL and CSV rows share these fields.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ItemSummary {
    /// The job.
    pub job_id: String,
    /// The item.
    pub item_id: String,
    /// First failure.
    pub first_attempt: DateTime<Utc>,
    /// Most recent failure.
    pub last_attempt: DateTime<Utc>,
    /// Failed attempts.
    pub failure_count: u32,
    /// Error type name of the most recent failure.
    pub error_type: &'static str,
    /// Exit code of the most recent failure, for `CommandFailed`.
    pub exit_code: Option<i32>,
    /// Signature grouping similar failures.
    pub error_signature: String,
    /// Readable pattern of the signature.
    pub error_pattern: String,
    /// May be retried automatically.
    pub reprocess_eligible: bool,
    /// Needs a person first.
    pub manual_review_required: bool,
    /// Message of the most recent failure.
    pub last_error: String,
    /// Step of the most recent failure.
    pub step_failed: String,
    /// Agent of the most recent failure.
    pub agent_id: String,
    /// The work item's data.
    pub item_data: serde_json::Value,
    /// The item's last redrive (generation, in flight or failed again), if it was redriven.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub redrive: Option<dlq::domain::model::Redrive>,
}

impl ItemSummary {
    /// The summary of `item`.
    pub fn of(item: DeadLetteredItem) -> Self {
        let last = item.last_failure();
        ItemSummary {
            error_type: item.last_error_type_name(),
            exit_code: item.last_exit_code(),
            last_error: item.last_error_message().to_owned(),
            step_failed: last.map(|f| f.step_failed.clone()).unwrap_or_default(),
            agent_id: last.map(|f| f.agent_id.clone()).unwrap_or_default(),
            job_id: item.job_id,
            item_id: item.item_id,
            first_attempt: item.first_attempt,
            last_attempt: item.last_attempt,
            failure_count: item.failure_count,
            error_signature: item.error_signature,
            error_pattern: item.error_pattern,
            reprocess_eligible: item.reprocess_eligible,
            manual_review_required: item.manual_review_required,
            item_data: item.item_data,
            redrive: item.redrive,
        }
    }
}

/// Finds the item (in the named job, or in the only job holding it) or says why not.
pub fn find_item(
    sink: &LocalSink,
    item_id: &str,
    job_id: Option<&str>,
) -> Result<DeadLetteredItem, QueryError> {
    let job = match job_id {
        Some(job) => job.to_owned(),
        None => {
            let mut jobs = sink.jobs_with_item(item_id)?;
            match jobs.len() {
                0 => None,
                1 => jobs.pop(),
                _ => {
                    return Err(QueryError::Ambiguous {
                        item_id: item_id.to_owned(),
                        jobs,
                    })
                }
            }
            .ok_or_else(|| QueryError::ItemNotFound {
                item_id: item_id.to_owned(),
                job_id: None,
            })?
        }
    };
    sink.item(&job, item_id)?
        .map(|stored| std::sync::Arc::unwrap_or_clone(stored.item))
        .ok_or_else(|| QueryError::ItemNotFound {
            item_id: item_id.to_owned(),
            job_id: Some(job),
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use dlq::domain::model::{ErrorType, FailureDetail};

    fn item(job: &str, id: &str, minute: u32) -> DeadLetteredItem {
        let at = DateTime::parse_from_rfc3339(&format!("2025-01-11T10:{minute:02}:00Z"))
            .unwrap()
            .with_timezone(&Utc);
        let failure = FailureDetail {
            attempt_number: 1,
            timestamp: at,
            error_type: ErrorType::Timeout,
            error_message: "timed out".into(),
            stack_trace: None,
            agent_id: "a".into(),
            step_failed: "s".into(),
            duration_ms: 1,
            json_log_location: None,
        };
        DeadLetteredItem::new(job, id, serde_json::json!({}), vec![failure]).unwrap()
    }

    fn request(limit: usize, offset: usize, after: Option<Cursor>, count: bool) -> ListRequest {
        ListRequest {
            filter: Criteria::default(),
            limit,
            offset,
            after,
            count,
        }
    }

    fn ids(page: &Page) -> Vec<String> {
        page.items.iter().map(|i| i.item_id.clone()).collect()
    }

    /// Items in listing order, newest first.
    fn ordered() -> Vec<DeadLetteredItem> {
        (0..10)
            .rev()
            .map(|i| item("j", &format!("i{i}"), i))
            .collect()
    }

    #[test]
    fn offset_and_cursor_paging_agree() {
        let all = || ordered().into_iter().map(Ok);
        let first = page_in_order(all(), &request(3, 0, None, false)).unwrap();
        assert_eq!(ids(&first), ["i9", "i8", "i7"]);
        assert_eq!(first.matched, None, "the walk stopped early");
        let cursor = Cursor::decode(&first.next_cursor.unwrap().encode()).unwrap();
        let second = page_in_order(all(), &request(3, 0, Some(cursor), false)).unwrap();
        assert_eq!(ids(&second), ["i6", "i5", "i4"]);
        let by_offset = page_in_order(all(), &request(3, 3, None, false)).unwrap();
        assert_eq!(ids(&by_offset), ids(&second));
        let last = page_in_order(all(), &request(3, 9, None, false)).unwrap();
        assert_eq!(ids(&last), ["i0"]);
        assert!(last.next_cursor.is_none());
        assert_eq!(last.matched, Some(10));
    }

    #[test]
    fn counting_walks_to_the_end() {
        let all = ordered().into_iter().map(Ok);
        let page = page_in_order(all, &request(3, 0, None, true)).unwrap();
        assert_eq!(ids(&page), ["i9", "i8", "i7"]);
        assert_eq!(page.matched, Some(10));
        assert!(page.next_cursor.is_some());
    }

    #[test]
    fn bad_windows_and_cursors_are_errors() {
        assert!(page_in_order(ordered().into_iter().map(Ok), &request(0, 0, None, false)).is_err());
        let too_deep = request(10, MAX_WINDOW, None, false);
        assert!(page_in_order(ordered().into_iter().map(Ok), &too_deep).is_err());
        assert!(Cursor::decode("zz").is_err());
        assert!(Cursor::decode("abc").is_err());
    }

    #[test]
    fn cursor_order_is_newest_first_then_job_then_item() {
        let mut cursors = [
            item("b", "x", 1),
            item("a", "y", 1),
            item("a", "x", 1),
            item("z", "z", 2),
        ]
        .iter()
        .map(Cursor::of)
        .collect::<Vec<_>>();
        cursors.sort();
        let order: Vec<_> = cursors
            .iter()
            .map(|c| (c.item().job_id.as_str(), c.item().item_id.as_str()))
            .collect();
        assert_eq!(order, [("z", "z"), ("a", "x"), ("a", "y"), ("b", "x")]);
    }
}
