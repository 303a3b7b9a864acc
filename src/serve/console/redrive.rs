//! `POST /v1/redrive` on the console: the body of a node's `POST /v1/redrive` (plus `node`),
//! its items grouped by the node that owns them, each node's part sent on its control subject,
//! where the node's own emitter hands them to its redrive handler; the answers merged.
//!
//! Each node runs its part as it would a redrive asked of it directly: in failure order, at the
//! rate, behind its own canary (a canary of N redrives the first N of each node's part, and
//! halts that node's part only). The generations a dry run saw go to the node that owns each
//! item, so a confirmation redrives only what the dry run showed. The console's view changes
//! when the nodes' `redriven`, `item_removed` and `redrive_failed` events come back through
//! the stream.

use std::collections::BTreeMap;
use std::time::Duration;

use axum::extract::rejection::JsonRejection;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::Json;
use serde_json::{json, Map, Value};

use super::actions::{self, accept, Grouped};
use super::control_client::NodeError;
use super::routes::{json_only, take_node, Answer, Called, Shared};
use crate::request::params::Params;
use crate::request::RedriveRequest;
use crate::serve::control::{By, ControlReply};
use crate::serve::routes::{ApiError, Pairs};

/// How long a node has to answer a redrive: its handler runs every item (at the rate, after
/// the canary) before it answers. A redrive that takes longer goes on on the node; its events
/// still come back through the stream.
pub const REDRIVE_TIMEOUT: Duration = Duration::from_secs(600);

/// The counts of a node's redrive answer that add up across nodes.
const COUNTS: [&str; 6] = [
    "redriven",
    "resolved",
    "failed_again",
    "already_redriven",
    "not_found",
    "not_released",
];

/// `POST /v1/redrive`: `dlq redrive`'s body, plus `node` to keep one node's items.
pub async fn redrive(
    State(console): Shared,
    axum::Extension(caller): Called,
    pairs: Pairs,
    body: Result<Json<Value>, JsonRejection>,
) -> Answer {
    let mut params = Params::new(pairs?.0);
    let format = params.format()?;
    params.finish("/v1/redrive")?;
    json_only(format)?;
    let Json(mut body) = body?;
    let node = take_node(&mut body)?;
    let request: RedriveRequest = serde_json::from_value(body).map_err(|err| {
        ApiError::bad_request(format!(
            "{err}: send the body of POST /v1/redrive, plus node; nothing was changed"
        ))
    })?;
    let job = request.job()?;
    crate::request::reason::removed_by(&caller.name, request.reason.as_deref())?;
    let grouped = actions::group(&console.view(), &job.target, node.as_deref())?;
    let by = By {
        name: caller.name.clone(),
        reason: request.reason.clone(),
    };
    let part = |ids: &[String]| serde_json::to_value(part_of(&request, ids)).ok();
    let answers = actions::fan_out(
        &console.control,
        &grouped,
        "/v1/redrive",
        &by,
        part,
        REDRIVE_TIMEOUT,
    )
    .await;
    let (status, body) = merge(&grouped, answers, request.dry_run);
    let status = StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_GATEWAY);
    Ok((status, Json(body)).into_response())
}

/// The part of `request` for the node that owns `ids` (each `JOB/ITEM`): those ids, with the
/// generations the caller saw for them; pure.
pub fn part_of(request: &RedriveRequest, ids: &[String]) -> RedriveRequest {
    let generations = ids
        .iter()
        .filter_map(|id| {
            let bare = id.split_once('/').map_or(id.as_str(), |(_, item)| item);
            let seen = request
                .generations
                .get(id)
                .or(request.generations.get(bare));
            seen.map(|generation| (id.clone(), *generation))
        })
        .collect::<BTreeMap<_, _>>();
    RedriveRequest {
        ids: ids.to_vec(),
        generations,
        rate: request.rate,
        canary: request.canary,
        canary_percent: request.canary_percent,
        halt_above: request.halt_above,
        patch: request.patch.clone(),
        dry_run: request.dry_run,
        drain_timeout: request.drain_timeout,
        reason: request.reason.clone(),
        ..RedriveRequest::default()
    }
}

/// The nodes' answers as one: the counts added up (`would_redrive` and the dry run's `items`
/// for a dry run), `halted` if any node's canary halted, each node's answer under `nodes`;
/// 200 when every node answered 200, else 502 with the failed nodes in `error`. Pure.
pub fn merge(
    grouped: &Grouped,
    answers: Vec<(String, Result<ControlReply, NodeError>)>,
    dry_run: bool,
) -> (u16, Value) {
    let mut nodes = Map::new();
    let mut failed = Vec::new();
    let mut merged = Map::new();
    let counts: &[&str] = if dry_run { &["would_redrive"] } else { &COUNTS };
    for key in counts {
        merged.insert((*key).to_owned(), json!(0));
    }
    let mut lists: BTreeMap<&str, Vec<Value>> = BTreeMap::new();
    let mut halted = false;
    for (node, answer) in answers {
        let Some(body) = accept(node, answer, &mut nodes, &mut failed) else {
            continue;
        };
        for key in counts {
            let sum = merged[*key].as_u64().unwrap_or(0) + body[*key].as_u64().unwrap_or(0);
            merged.insert((*key).to_owned(), json!(sum));
        }
        halted |= body["halted"].as_bool().unwrap_or(false);
        for key in ["items", "halted_by", "failures"] {
            let list = body[key].as_array().cloned().unwrap_or_default();
            lists.entry(key).or_default().extend(list);
        }
    }
    if dry_run {
        merged.insert(
            "items".into(),
            json!(lists.remove("items").unwrap_or_default()),
        );
    } else {
        merged.insert("halted".into(), json!(halted));
        for key in ["halted_by", "failures"] {
            merged.insert(key.into(), json!(lists.remove(key).unwrap_or_default()));
        }
    }
    merged.insert("nodes".into(), Value::Object(nodes));
    merged.insert("unknown".into(), json!(grouped.unknown));
    if failed.is_empty() {
        return (200, Value::Object(merged));
    }
    merged.insert("error".into(), json!(failed.join("; ")));
    merged.insert("code".into(), json!("node_unavailable"));
    (502, Value::Object(merged))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    fn grouped() -> Grouped {
        let mut grouped = Grouped::default();
        grouped.by_node.insert("n1".into(), vec!["j/a".into()]);
        grouped.by_node.insert("n2".into(), vec!["j/b".into()]);
        grouped
    }

    fn reply(body: Value) -> Result<ControlReply, NodeError> {
        Ok(ControlReply { status: 200, body })
    }

    #[test]
    fn a_part_carries_the_generations_of_its_own_items_only() {
        let request = RedriveRequest {
            ids: vec!["j/a".into(), "b".into()],
            generations: [
                ("j/a".to_owned(), 2),
                ("b".to_owned(), 5),
                ("j/c".to_owned(), 1),
            ]
            .into(),
            canary: Some(3),
            reason: Some("fixed".into()),
            ..RedriveRequest::default()
        };
        let part = part_of(&request, &["j/a".into(), "j/b".into()]);
        assert_eq!(part.ids, ["j/a", "j/b"]);
        assert_eq!(
            part.generations,
            [("j/a".to_owned(), 2), ("j/b".to_owned(), 5)].into()
        );
        assert_eq!(
            (part.canary, part.reason.as_deref()),
            (Some(3), Some("fixed"))
        );
    }

    #[test]
    fn counts_add_up_and_one_halted_canary_halts_the_answer() {
        let answers = vec![
            (
                "n1".to_owned(),
                reply(json!({"redriven": 2, "resolved": 2, "failed_again": 0, "halted": false})),
            ),
            (
                "n2".to_owned(),
                reply(
                    json!({"redriven": 1, "resolved": 0, "failed_again": 1, "not_released": 4,
                    "halted": true, "halted_by": ["sig"], "failures": [{"item_id": "b"}]}),
                ),
            ),
        ];
        let (status, body) = merge(&grouped(), answers, false);
        assert_eq!(status, 200);
        assert_eq!(body["redriven"], 3);
        assert_eq!(body["resolved"], 2);
        assert_eq!(body["not_released"], 4);
        assert_eq!(body["halted"], true);
        assert_eq!(body["halted_by"], json!(["sig"]));
        assert_eq!(body["nodes"]["n2"]["failed_again"], 1);
    }

    #[test]
    fn a_dry_run_lists_every_nodes_items_and_a_silent_node_is_a_502() {
        let answers = vec![
            (
                "n1".to_owned(),
                reply(json!({"would_redrive": 1, "items": [{"item_id": "a", "generation": 0}]})),
            ),
            (
                "n2".to_owned(),
                Err(NodeError::NotAnswering {
                    node: "n2".into(),
                    subject: "dlq.control.n2".into(),
                    why: "no responders".into(),
                }),
            ),
        ];
        let (status, body) = merge(&grouped(), answers, true);
        assert_eq!(status, 502);
        assert_eq!(body["would_redrive"], 1);
        assert_eq!(body["items"][0]["item_id"], "a");
        assert!(body["error"]
            .as_str()
            .unwrap()
            .contains("n2 is not answering"));
        assert_eq!(body["code"], "node_unavailable");
    }
}
