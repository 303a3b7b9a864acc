//! The console's projection of every node, pure: the items of a durable consumer's fold, each
//! with the node that owns it, in listing order, and the queries the read API answers from it.
//!
//! An item's node is the node of the event that created or last changed it (the node part of
//! `StoredItem::last_event_id`, matched against the nodes the fold knows).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use serde::Serialize;

use crate::query::list::{page_in_order, Cursor, ItemSummary, Page};
use crate::query::stats::{Stats, StatsAccumulator};
use crate::query::QueryError;
use crate::request::list::ListQuery;
use dlq::consumer::Fold;
use dlq::domain::model::DeadLetteredItem;

/// One node as the console knows it from the stream.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NodeView {
    /// The node id.
    pub node: String,
    /// Its items in the console's projection.
    pub items: u64,
    /// Its events waiting behind a gap in the stream.
    pub waiting: usize,
}

/// The items of every node, in listing order (newest failure first). The items are the fold's,
/// shared: building a view copies no item.
#[derive(Debug, Clone, Default)]
pub struct ConsoleView {
    items: Vec<(Arc<DeadLetteredItem>, String)>,
    index: HashMap<(String, String), usize>,
    nodes: Vec<NodeView>,
}

impl ConsoleView {
    /// The view of `fold`'s projection.
    pub fn from_fold(fold: &Fold) -> Self {
        let known: Vec<&str> = fold.nodes.keys().map(String::as_str).collect();
        let mut items: Vec<(Arc<DeadLetteredItem>, String)> = fold
            .projection
            .items
            .values()
            .map(|stored| (stored.item.clone(), node_of(&stored.last_event_id, &known)))
            .collect();
        items.sort_by_cached_key(|(item, _)| Cursor::of(item));
        let index = items
            .iter()
            .enumerate()
            .map(|(n, (item, _))| ((item.job_id.clone(), item.item_id.clone()), n))
            .collect();
        let mut counts: BTreeMap<&str, u64> = known.iter().map(|n| (*n, 0)).collect();
        for (_, node) in &items {
            *counts.entry(node.as_str()).or_default() += 1;
        }
        let nodes = counts
            .into_iter()
            .map(|(node, count)| NodeView {
                node: node.to_owned(),
                items: count,
                waiting: fold.nodes.get(node).map_or(0, |c| c.waiting()),
            })
            .collect();
        ConsoleView {
            items,
            index,
            nodes,
        }
    }

    /// Every node seen in the stream, with its item count.
    pub fn nodes(&self) -> &[NodeView] {
        &self.nodes
    }

    /// The item `item_id` of `job_id` and its node.
    pub fn find(&self, job_id: &str, item_id: &str) -> Option<(&DeadLetteredItem, &str)> {
        let n = *self.index.get(&(job_id.to_owned(), item_id.to_owned()))?;
        self.items
            .get(n)
            .map(|(item, node)| (&**item, node.as_str()))
    }

    /// The items `item_id` names in every job, with their nodes.
    pub fn find_any(&self, item_id: &str) -> Vec<(&DeadLetteredItem, &str)> {
        self.items
            .iter()
            .filter(|(item, _)| item.item_id == item_id)
            .map(|(item, node)| (&**item, node.as_str()))
            .collect()
    }

    /// The items `query` (and `node`, if given) selects, in listing order, with their nodes.
    pub fn select<'a>(
        &'a self,
        query: &'a ListQuery,
        node: Option<&'a str>,
    ) -> impl Iterator<Item = Result<(&'a DeadLetteredItem, &'a str), QueryError>> + 'a {
        self.items
            .iter()
            .filter(move |(item, owner)| {
                node.is_none_or(|n| n == owner) && query.request.filter.matches(item)
            })
            .filter_map(move |(item, owner)| {
                let expr = query.expr.as_ref();
                match expr.map(|e| e.matches_item(item)) {
                    None | Some(Ok(true)) => Some(Ok((&**item, owner.as_str()))),
                    Some(Ok(false)) => None,
                    Some(Err(err)) => Some(Err(QueryError::Invalid(format!(
                        "item '{}' of job '{}': {err}; nothing was listed",
                        item.item_id, item.job_id
                    )))),
                }
            })
    }

    /// One page of the listing, as `GET /v1/items` answers it in JSON, each item with its
    /// `node`.
    pub fn list(
        &self,
        query: &ListQuery,
        node: Option<&str>,
    ) -> Result<serde_json::Value, QueryError> {
        let items = self
            .select(query, node)
            .map(|found| found.map(|(item, _)| item.clone()));
        let page: Page = page_in_order(items, &query.request)?;
        let rows: Vec<serde_json::Value> = page
            .items
            .into_iter()
            .map(|item| {
                let owner = self
                    .find(&item.job_id, &item.item_id)
                    .map(|(_, n)| n.to_owned())
                    .unwrap_or_default();
                let mut row = serde_json::to_value(ItemSummary::of(item)).unwrap_or_default();
                row["node"] = serde_json::Value::String(owner);
                row
            })
            .collect();
        Ok(serde_json::json!({
            "matched": page.matched,
            "next_cursor": page.next_cursor.as_ref().map(Cursor::encode),
            "items": rows,
        }))
    }

    /// The statistics of every node's items (of `job_id` only, when given).
    pub fn stats(&self, job_id: Option<&str>) -> Result<Stats, QueryError> {
        let mut acc = StatsAccumulator::default();
        let mut any = false;
        for (item, _) in &self.items {
            if job_id.is_none_or(|job| job == item.job_id) {
                acc.add(item);
                any = true;
            }
        }
        match job_id {
            Some(job) if !any => Err(QueryError::JobNotFound(job.to_owned())),
            _ => Ok(acc.finish(job_id.map(str::to_owned))),
        }
    }
}

/// The node of `event_id` (`<node>:<epoch>:<seq>`, `<node>:<seq>` or a volatile
/// `<node>:v...`): the longest known node id it starts with, else the part before its first
/// `:`.
pub fn node_of(event_id: &str, known: &[&str]) -> String {
    known
        .iter()
        .filter(|node| {
            event_id
                .strip_prefix(**node)
                .is_some_and(|rest| rest.starts_with(':'))
        })
        .max_by_key(|node| node.len())
        .map_or_else(
            || event_id.split(':').next().unwrap_or_default().to_owned(),
            |node| (*node).to_owned(),
        )
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    #[test]
    fn an_event_names_its_node_even_with_colons_in_the_node_id() {
        let known = ["a", "a:b", "n1"];
        assert_eq!(node_of("n1:e7:12", &known), "n1");
        assert_eq!(node_of("a:b:e1:3", &known), "a:b");
        assert_eq!(node_of("a:e1:3", &known), "a");
        assert_eq!(node_of("n1:v123-1", &known), "n1");
        assert_eq!(node_of("other:e:1", &known), "other");
    }
}
