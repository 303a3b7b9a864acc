//! The console's routes: the read API of `dlq serve` answered from the console's view (JSON),
//! `GET /v1/console`, and `POST /v1/delete` and `POST /v1/redrive` sent on to the owning nodes.

use std::sync::Arc;

use axum::extract::rejection::{JsonRejection, PathRejection};
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::json;

use super::actions;
use super::control_client::HEALTH_TIMEOUT;
use super::Console;
use crate::query::QueryError;
use crate::render::Format;
use crate::request::params::{list_args, Params};
use crate::request::DeleteRequest;
use crate::serve::control::{By, ControlRequest};
use crate::serve::roles::{self, Caller, Role, Tokens};
use crate::serve::routes::{ApiError, Pairs};
use crate::serve::{auth, limits, page};

pub(super) type Shared = State<Arc<Console>>;
pub(super) type Called = axum::Extension<Arc<Caller>>;
pub(super) type Answer = Result<Response, ApiError>;

/// The console's router.
pub fn router(console: Arc<Console>, tokens: Tokens) -> Router {
    let needs = |role: Role| axum::middleware::from_fn_with_state(role, roles::require_role);
    Router::new()
        .route("/v1/items", get(list_items))
        .route("/v1/items/{job_id}/{item_id}", get(inspect))
        .route("/v1/stats", get(stats))
        .route("/v1/whoami", get(whoami))
        .route("/v1/console", get(overview))
        .route("/v1/delete", post(delete).layer(needs(Role::Operator)))
        .route(
            "/v1/redrive",
            post(super::redrive::redrive).layer(needs(Role::Operator)),
        )
        .route_layer(axum::middleware::from_fn_with_state(
            Arc::new(auth::Guard {
                tokens,
                failures: auth::Failures::default(),
            }),
            auth::require_token,
        ))
        .route("/healthz", get(healthz))
        .merge(page::router())
        .fallback(no_route)
        .layer(axum::middleware::from_fn(limits::check))
        .layer(axum::extract::DefaultBodyLimit::max(limits::MAX_BODY))
        .with_state(console)
}

pub(super) fn json_only(format: Format) -> Result<(), ApiError> {
    match format {
        Format::Json => Ok(()),
        _ => Err(ApiError::bad_request(
            "the console answers in JSON only: leave out format (or format=json)",
        )),
    }
}

/// `GET /v1/items`: `dlq list` over every node, each item with its `node`; `node=N` keeps
/// one node's items.
async fn list_items(State(console): Shared, pairs: Pairs) -> Answer {
    let mut pairs = pairs?.0;
    let node = take(&mut pairs, "node");
    let (args, format) = list_args(Params::new(pairs))?;
    json_only(format)?;
    let query = args.query()?;
    let view = console.view();
    let page = view.list(&query, node.as_deref())?;
    Ok(Json(page).into_response())
}

fn take(pairs: &mut Vec<(String, String)>, key: &str) -> Option<String> {
    let at = pairs.iter().position(|(k, _)| k == key)?;
    Some(pairs.remove(at).1).filter(|v| !v.is_empty())
}

/// `GET /v1/items/{job_id}/{item_id}`: the whole item, with its `node`.
async fn inspect(
    State(console): Shared,
    path: Result<Path<(String, String)>, PathRejection>,
) -> Answer {
    let Path((job, item)) = path?;
    let view = console.view();
    let (found, node) = view.find(&job, &item).ok_or(QueryError::ItemNotFound {
        item_id: item.clone(),
        job_id: Some(job.clone()),
    })?;
    let mut body = serde_json::to_value(found)
        .map_err(|err| ApiError::internal(format!("cannot encode the item: {err}")))?;
    body["node"] = json!(node);
    Ok(Json(body).into_response())
}

/// `GET /v1/stats?job_id=`: `dlq stats` over every node.
async fn stats(State(console): Shared, pairs: Pairs) -> Answer {
    let mut params = Params::new(pairs?.0);
    let job = params.take("job_id")?;
    let format = params.format()?;
    params.finish("/v1/stats")?;
    json_only(format)?;
    let stats = console.view().stats(job.as_deref())?;
    Ok(Json(stats).into_response())
}

/// `GET /v1/whoami`: the caller, and `"console": true` (how the page knows where it is).
async fn whoami(axum::Extension(caller): Called) -> Json<serde_json::Value> {
    Json(json!({ "name": caller.name, "role": caller.role, "console": true }))
}

/// `GET /healthz`: the console runs; its consumer's status.
async fn healthz(State(console): Shared) -> Json<serde_json::Value> {
    let consumer = console.status();
    let status = if consumer.error.is_some() {
        "degraded"
    } else {
        "ok"
    };
    Json(json!({ "status": status, "console": true, "consumer": consumer }))
}

/// `GET /v1/console`: every node with its items, waiting events and whether it answers on its
/// control subject; the consumer's lag and waiting events.
async fn overview(State(console): Shared) -> Json<serde_json::Value> {
    let view = console.view();
    let probes = view.nodes().iter().map(|node| {
        let console = console.clone();
        async move {
            let request = ControlRequest {
                method: "GET".into(),
                path: "/healthz".into(),
                body: None,
                by: By {
                    name: "overview".into(),
                    reason: None,
                },
            };
            let answer = console
                .control
                .send(&node.node, &request, HEALTH_TIMEOUT)
                .await;
            let (up, detail) = match answer {
                Ok(reply) if reply.status == 200 => (true, reply.body),
                Ok(reply) => (false, reply.body),
                Err(err) => (false, json!({ "error": err.to_string() })),
            };
            json!({
                "node": node.node,
                "items": node.items,
                "waiting": node.waiting,
                "up": up,
                "subject": console.control.subject(&node.node),
                "health": detail,
            })
        }
    });
    let nodes = futures::future::join_all(probes).await;
    let consumer = console.status();
    Json(json!({
        "nodes": nodes,
        "items": view.nodes().iter().map(|n| n.items).sum::<u64>(),
        "lag": consumer.lag,
        "waiting": consumer.waiting,
        "consumer": consumer,
    }))
}

/// `POST /v1/delete`: the body of a node's `POST /v1/delete`, plus `node` to keep one node's
/// items; the items grouped by node, each node asked on its control subject.
async fn delete(
    State(console): Shared,
    axum::Extension(caller): Called,
    pairs: Pairs,
    body: Result<Json<serde_json::Value>, JsonRejection>,
) -> Answer {
    let mut params = Params::new(pairs?.0);
    let format = params.format()?;
    params.finish("/v1/delete")?;
    json_only(format)?;
    let Json(mut body) = body?;
    let node = take_node(&mut body)?;
    let request: DeleteRequest = serde_json::from_value(body).map_err(|err| {
        ApiError::bad_request(format!(
            "{err}: send the body of POST /v1/delete, plus node; nothing was changed"
        ))
    })?;
    crate::request::reason::removed_by(&caller.name, request.reason.as_deref())?;
    let grouped = actions::group(&console.view(), &request.target()?, node.as_deref())?;
    let merged = actions::delete(&console.control, grouped, &request, &caller.name).await;
    let status = StatusCode::from_u16(merged.status).unwrap_or(StatusCode::BAD_GATEWAY);
    Ok((status, Json(merged.body)).into_response())
}

/// Takes the console's own `node` field (keep one node's items) out of an action's body.
pub(super) fn take_node(body: &mut serde_json::Value) -> Result<Option<String>, ApiError> {
    match body.as_object_mut().and_then(|map| map.remove("node")) {
        None | Some(serde_json::Value::Null) => Ok(None),
        Some(serde_json::Value::String(node)) => Ok(Some(node)),
        Some(other) => Err(ApiError::bad_request(format!(
            "node must be a node id (a string), not {other}; nothing was changed"
        ))),
    }
}

async fn no_route() -> ApiError {
    ApiError::not_found("no such route on the console: see GET /v1/items, /v1/items/{job_id}/{item_id}, /v1/stats, /v1/console, /v1/whoami, /healthz, POST /v1/delete, POST /v1/redrive")
}
