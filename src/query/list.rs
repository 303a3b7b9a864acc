//! `dlq list`: the items a filter selects, newest first, one page at a time.
//!
//! **Order**: by `last_attempt` descending (the most recently failed item first), ties broken by
//! job id then item id ascending, so the order is total and stable.
//!
//! **Paging**: `--limit` items per page, after skipping `--offset` items, or starting after a
//! cursor (`next_cursor` of the previous page, opaque hex). Cursor paging is exact even while
//! items are added: a page holds the items whose sort key is strictly after the cursor.
//!
//! **Memory**: the scan keeps only the `offset + limit + 1` best sort keys (job id, item id and
//! time: no item bodies) in a bounded heap; the page's items are then read one by one. So
//! `offset + limit` is capped at [`MAX_WINDOW`]; deeper pages use the cursor.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use chrono::{DateTime, Utc};
use serde::Serialize;

use super::{Filter, ItemRef, QueryError};
use crate::model::DeadLetteredItem;
use crate::sink::SledSink;

/// Largest `offset + limit` of one page.
pub const MAX_WINDOW: usize = 100_000;

/// A page request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListRequest {
    /// Which items.
    pub filter: Filter,
    /// Items per page.
    pub limit: usize,
    /// Items skipped before the page.
    pub offset: usize,
    /// Start strictly after this position (from [`Cursor::decode`]).
    pub after: Option<Cursor>,
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

/// Keeps the `capacity` smallest cursors seen, in O(capacity) memory.
#[derive(Debug)]
pub struct TopK {
    capacity: usize,
    heap: BinaryHeap<Cursor>,
}

impl TopK {
    /// An empty selection of at most `capacity` positions.
    pub fn new(capacity: usize) -> Self {
        TopK {
            capacity,
            heap: BinaryHeap::with_capacity(capacity.min(1024)),
        }
    }

    /// Offers one position.
    pub fn offer(&mut self, cursor: Cursor) {
        if self.heap.len() < self.capacity {
            self.heap.push(cursor);
        } else if self.heap.peek().is_some_and(|worst| cursor < *worst) {
            self.heap.pop();
            self.heap.push(cursor);
        }
    }

    /// The kept positions, first in listing order first.
    pub fn into_sorted(self) -> Vec<Cursor> {
        self.heap.into_sorted_vec()
    }
}

/// One page: the positions of its items and where the next page starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Page {
    /// The page's items, in listing order.
    pub positions: Vec<Cursor>,
    /// Where the next page starts, if there are more items.
    pub next_cursor: Option<Cursor>,
    /// How many items matched the filter (after the cursor, if one was given).
    pub matched: u64,
    /// How many items were scanned.
    pub scanned: u64,
}

/// Selects a page from `items` (any order); pure, for testing and for other stores.
pub fn select_page<I>(items: I, request: &ListRequest) -> Result<Page, QueryError>
where
    I: IntoIterator<Item = Result<DeadLetteredItem, QueryError>>,
{
    let window = request.offset.saturating_add(request.limit);
    if request.limit == 0 || window > MAX_WINDOW {
        return Err(QueryError::Invalid(format!(
            "--limit must be at least 1 and --offset + --limit at most {MAX_WINDOW}: page further with --after <next_cursor>"
        )));
    }
    let mut top = TopK::new(window + 1);
    let (mut matched, mut scanned) = (0u64, 0u64);
    for item in items {
        let item = item?;
        scanned += 1;
        if !request.filter.matches(&item) {
            continue;
        }
        let cursor = Cursor::of(&item);
        if request.after.as_ref().is_some_and(|after| cursor <= *after) {
            continue;
        }
        matched += 1;
        top.offer(cursor);
    }
    let mut sorted = top.into_sorted();
    let more = sorted.len() > window;
    sorted.truncate(window);
    let positions: Vec<Cursor> = sorted.into_iter().skip(request.offset).collect();
    let next_cursor = if more {
        positions.last().cloned()
    } else {
        None
    };
    Ok(Page {
        positions,
        next_cursor,
        matched,
        scanned,
    })
}

/// Selects a page of the sink's items.
pub fn list(sink: &SledSink, request: &ListRequest) -> Result<Page, QueryError> {
    let items = sink
        .scan_items(request.filter.job_id.as_deref())
        .map(|stored| stored.map(|s| s.item).map_err(QueryError::from));
    select_page(items, request)
}

/// Reads the items of a page, one at a time; an item removed (or changed so that it no longer
/// matches) since the page was selected is skipped.
pub fn page_items<'a>(
    sink: &'a SledSink,
    page: &'a Page,
    filter: &'a Filter,
) -> impl Iterator<Item = Result<DeadLetteredItem, QueryError>> + 'a {
    page.positions.iter().filter_map(move |position| {
        let wanted = position.item();
        match sink.item(&wanted.job_id, &wanted.item_id) {
            Ok(Some(stored)) if filter.matches(&stored.item) => Some(Ok(stored.item)),
            Ok(_) => None,
            Err(err) => Some(Err(err.into())),
        }
    })
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
}

impl ItemSummary {
    /// The summary of `item`.
    pub fn of(item: DeadLetteredItem) -> Self {
        let last = item.failure_history.last();
        let exit_code = match last.map(|f| &f.error_type) {
            Some(crate::model::ErrorType::CommandFailed { exit_code }) => Some(*exit_code),
            _ => None,
        };
        ItemSummary {
            error_type: super::error_type_name(&item),
            exit_code,
            last_error: last.map(|f| f.error_message.clone()).unwrap_or_default(),
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
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{ErrorType, FailureDetail};

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
        crate::failure::dead_lettered_item(job, id, serde_json::json!({}), vec![failure], None)
            .unwrap()
    }

    fn ids(page: &Page) -> Vec<String> {
        page.positions
            .iter()
            .map(|p| p.item().item_id.clone())
            .collect()
    }

    #[test]
    fn newest_first_with_offset_and_cursor_paging() {
        let items: Vec<_> = (0..10).map(|i| item("j", &format!("i{i}"), i)).collect();
        let request = |offset, after| ListRequest {
            filter: Filter::default(),
            limit: 3,
            offset,
            after,
        };
        let all = || items.iter().cloned().map(Ok);
        let first = select_page(all(), &request(0, None)).unwrap();
        assert_eq!(ids(&first), ["i9", "i8", "i7"]);
        assert_eq!(first.matched, 10);
        let cursor = Cursor::decode(&first.next_cursor.unwrap().encode()).unwrap();
        let second = select_page(all(), &request(0, Some(cursor))).unwrap();
        assert_eq!(ids(&second), ["i6", "i5", "i4"]);
        let by_offset = select_page(all(), &request(3, None)).unwrap();
        assert_eq!(ids(&by_offset), ids(&second));
        let last = select_page(all(), &request(9, None)).unwrap();
        assert_eq!(ids(&last), ["i0"]);
        assert!(last.next_cursor.is_none());
    }

    #[test]
    fn ties_break_by_job_then_item_and_bad_cursors_are_errors() {
        let items = [item("b", "x", 1), item("a", "y", 1), item("a", "x", 1)];
        let request = ListRequest {
            filter: Filter::default(),
            limit: 10,
            offset: 0,
            after: None,
        };
        let page = select_page(items.into_iter().map(Ok), &request).unwrap();
        let order: Vec<_> = page.positions.iter().map(|p| p.item().clone()).collect();
        assert_eq!(order[0].job_id, "a");
        assert_eq!(order[0].item_id, "x");
        assert_eq!(order[2].job_id, "b");
        assert!(Cursor::decode("zz").is_err());
        assert!(Cursor::decode("abc").is_err());
    }
}
