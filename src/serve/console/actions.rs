//! Actions from the console: the items a request names or selects, grouped by the node that
//! owns them, each group sent to its node on the control subject, the answers merged.
//!
//! The console never changes its own projection: a node that deleted its items writes
//! `item_removed` events, and they come back through the stream.

use std::collections::BTreeMap;

use serde_json::{json, Value};

use std::time::Duration;

use super::control_client::{ControlClient, NodeError, ACTION_TIMEOUT};
use super::view::ConsoleView;
use crate::query::delete::DeleteTarget;
use crate::query::QueryError;
use crate::request::list::ListQuery;
use crate::request::{DeleteRequest, RequestError};
use crate::serve::control::{By, ControlReply, ControlRequest};

/// The items of a delete, by owning node, and the ids that name no item.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Grouped {
    /// `JOB/ITEM` ids per node.
    pub by_node: BTreeMap<String, Vec<String>>,
    /// Ids given that name no item in the console's view.
    pub unknown: Vec<String>,
}

/// Groups what `target` names or selects in `view` (of `node` only, when given) by node;
/// pure.
pub fn group(
    view: &ConsoleView,
    target: &DeleteTarget,
    node: Option<&str>,
) -> Result<Grouped, RequestError> {
    let mut grouped = Grouped::default();
    let mut add = |node: &str, job: &str, item: &str| {
        let id = format!("{job}/{item}");
        let ids = grouped.by_node.entry(node.to_owned()).or_default();
        if !ids.contains(&id) {
            ids.push(id);
        }
    };
    match target {
        DeleteTarget::Ids(ids) => {
            for id in ids {
                let found = match &id.job_id {
                    Some(job) => view.find(job, &id.item_id).into_iter().collect(),
                    None => view.find_any(&id.item_id),
                };
                match found.as_slice() {
                    [] => grouped.unknown.push(id.text.clone()),
                    [(item, owner)] if node.is_none_or(|n| n == *owner) => {
                        add(owner, &item.job_id, &item.item_id)
                    }
                    [_] => grouped.unknown.push(id.text.clone()),
                    _ => {
                        return Err(RequestError::Usage(format!(
                        "item '{}' is in several jobs: name it as JOB/ITEM; nothing was changed",
                        id.item_id
                    )))
                    }
                }
            }
        }
        DeleteTarget::Filter { criteria, expr } => {
            let query = ListQuery {
                request: crate::query::list::ListRequest {
                    filter: criteria.clone(),
                    limit: 1,
                    offset: 0,
                    after: None,
                    count: false,
                },
                expr: expr.clone(),
            };
            for found in view.select(&query, node) {
                let (item, owner) = found.map_err(RequestError::from)?;
                add(owner, &item.job_id, &item.item_id);
            }
        }
    }
    if grouped.by_node.is_empty() && !grouped.unknown.is_empty() {
        return Err(QueryError::ItemNotFound {
            item_id: grouped.unknown.join("', '"),
            job_id: None,
        }
        .into());
    }
    Ok(grouped)
}

/// Sends each node of `grouped` the body `part` makes of its ids, as a `POST` on `path` in
/// the name of `by`, all at once; each node's answer, or why it is missing.
pub async fn fan_out(
    control: &ControlClient,
    grouped: &Grouped,
    path: &str,
    by: &By,
    part: impl Fn(&[String]) -> Option<Value>,
    timeout: Duration,
) -> Vec<(String, Result<ControlReply, NodeError>)> {
    let sends = grouped.by_node.iter().map(|(node, ids)| {
        let envelope = ControlRequest {
            method: "POST".into(),
            path: path.to_owned(),
            body: part(ids),
            by: by.clone(),
        };
        async move { (node.clone(), control.send(node, &envelope, timeout).await) }
    });
    futures::future::join_all(sends).await
}

/// A node's error answer as one line.
fn error_of(reply: &ControlReply) -> String {
    reply.body["error"]
        .as_str()
        .map_or_else(|| reply.body.to_string(), str::to_owned)
}

/// Files `node`'s answer under `nodes`: its body when it answered 200 (returned, for the
/// caller's counts), else its error, also added to `failed`.
pub fn accept(
    node: String,
    answer: Result<ControlReply, NodeError>,
    nodes: &mut serde_json::Map<String, Value>,
    failed: &mut Vec<String>,
) -> Option<Value> {
    match answer {
        Ok(reply) if reply.status == 200 => {
            nodes.insert(node, reply.body.clone());
            Some(reply.body)
        }
        Ok(reply) => {
            let message = error_of(&reply);
            failed.push(format!("node {node}: {message}"));
            nodes.insert(node, json!({ "status": reply.status, "error": message }));
            None
        }
        Err(err) => {
            failed.push(err.to_string());
            nodes.insert(node, json!({ "error": err.to_string() }));
            None
        }
    }
}

/// The merged answer of a delete: the HTTP status and the JSON body.
pub struct Merged {
    /// 200 when every node deleted its items, 502 when some node did not.
    pub status: u16,
    /// `{"removed", "nodes": {node: answer}, "unknown", "error"?}`.
    pub body: Value,
}

/// Sends each node its part of `request` (as `operator`, with `reason`), or only counts with
/// `dry_run`; merges the answers.
pub async fn delete(
    control: &ControlClient,
    grouped: Grouped,
    request: &DeleteRequest,
    operator: &str,
) -> Merged {
    let mut nodes = serde_json::Map::new();
    let mut removed = 0u64;
    let mut failed = Vec::new();
    if request.dry_run {
        for (node, ids) in &grouped.by_node {
            removed += ids.len() as u64;
            nodes.insert(
                node.clone(),
                json!({ "would_remove": ids.len(), "items": ids }),
            );
        }
        return Merged {
            status: 200,
            body: json!({ "would_remove": removed, "nodes": nodes, "unknown": grouped.unknown }),
        };
    }
    let by = By {
        name: operator.to_owned(),
        reason: request.reason.clone(),
    };
    let part = |ids: &[String]| {
        serde_json::to_value(DeleteRequest {
            ids: ids.to_vec(),
            drain_timeout: request.drain_timeout,
            reason: request.reason.clone(),
            ..DeleteRequest::default()
        })
        .ok()
    };
    let answers = fan_out(control, &grouped, "/v1/delete", &by, part, ACTION_TIMEOUT).await;
    for (node, answer) in answers {
        if let Some(body) = accept(node, answer, &mut nodes, &mut failed) {
            removed += body["removed"].as_u64().unwrap_or(0);
        }
    }
    let mut body = json!({ "removed": removed, "nodes": nodes, "unknown": grouped.unknown });
    if failed.is_empty() {
        return Merged { status: 200, body };
    }
    body["error"] = json!(failed.join("; "));
    body["code"] = json!("node_unavailable");
    Merged { status: 502, body }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;
    use dlq::consumer::Fold;
    use dlq_testkit::items::{dead_lettered_event, failed_once};

    /// Node n1 holds j1/a and j1/b, node n2 holds j2/a.
    fn view() -> ConsoleView {
        let mut fold = Fold::untracked();
        let item = |job: &str, id: &str| failed_once((job, id), "s", 1, "boom".into(), json!({}));
        fold.offer(dead_lettered_event("n1", 1, "t", item("j1", "a")));
        fold.offer(dead_lettered_event("n1", 2, "t", item("j1", "b")));
        fold.offer(dead_lettered_event("n2", 1, "t", item("j2", "a")));
        ConsoleView::from_fold(&fold)
    }

    fn ids(ids: &[&str]) -> DeleteTarget {
        let request = DeleteRequest {
            ids: ids.iter().map(|s| (*s).to_owned()).collect(),
            ..DeleteRequest::default()
        };
        request.target().unwrap()
    }

    #[test]
    fn ids_go_to_their_nodes_and_unknown_ones_are_named() {
        let view = view();
        let grouped = group(&view, &ids(&["j1/a", "j2/a", "j1/b", "j1/a", "j1/x"]), None).unwrap();
        assert_eq!(grouped.by_node["n1"], ["j1/a", "j1/b"]);
        assert_eq!(grouped.by_node["n2"], ["j2/a"]);
        assert_eq!(grouped.unknown, ["j1/x"]);
        // An id of another node than the one asked for is not found there.
        let grouped = group(&view, &ids(&["j1/a", "j2/a"]), Some("n2")).unwrap();
        assert_eq!(grouped.by_node.keys().collect::<Vec<_>>(), ["n2"]);
        assert_eq!(grouped.unknown, ["j1/a"]);
        // A bare id in two jobs is ambiguous; none found is a 404.
        let err = group(&view, &ids(&["a"]), None).unwrap_err();
        assert!(err.to_string().contains("several jobs"), "{err}");
        let err = group(&view, &ids(&["j9/z"]), None).unwrap_err();
        assert_eq!(err.class(), dlq::ErrorClass::NotFound);
    }

    #[test]
    fn a_filter_selects_on_every_node_or_on_one() {
        let view = view();
        let all = DeleteRequest {
            all: true,
            ..DeleteRequest::default()
        }
        .target()
        .unwrap();
        let grouped = group(&view, &all, None).unwrap();
        assert_eq!(grouped.by_node.values().map(Vec::len).sum::<usize>(), 3);
        let grouped = group(&view, &all, Some("n1")).unwrap();
        assert_eq!(grouped.by_node.keys().collect::<Vec<_>>(), ["n1"]);
        let job = DeleteRequest {
            job_id: Some("j2".into()),
            ..DeleteRequest::default()
        }
        .target()
        .unwrap();
        assert_eq!(group(&view, &job, None).unwrap().by_node["n2"], ["j2/a"]);
    }
}
