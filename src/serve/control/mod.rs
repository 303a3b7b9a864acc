//! The per-node control subject: how a fleet console acts on the node that owns an item.
//!
//! Every process that serves a data directory (`dlq serve`, `dlq run`, a scheduler through
//! [`serve_emitter`](super::serve_emitter)) subscribes, with its bus's own NATS client, to
//! `<prefix>.<node_id>` ([`DEFAULT_PREFIX`] unless configured). A request there is a JSON
//! envelope ([`ControlRequest`]) checked against a whitelist (`GET /healthz`,
//! `GET /v1/items/...`, `POST /v1/delete`, `POST /v1/redrive`) and run **in-process through the
//! node's own router**, as the caller `console:<name>` with the `operator` role: the node's
//! sink stays the source of truth, the same code answers as over HTTP, and the events it writes
//! name who. The reply is a [`ControlReply`] (the HTTP status and the JSON body). Garbage on
//! the subject gets a 400 reply and changes nothing.
//!
//! Who may send requests is decided by NATS permissions, not by the API's tokens: only users
//! allowed to publish on the subject reach it (`deploy/nats-permissions.conf`: the console
//! publishes on `dlq.control.>`, a node subscribes only to its own subject).
//!
//! Up to 8 requests run at a time; a stop lets those in flight finish and answer.

mod envelope;

pub use envelope::{parse, By, ControlReply, ControlRequest, EnvelopeError, MAX_NAME};

use std::sync::Arc;

use axum::body::Body;
use axum::http::{header, Request};
use axum::Router;
use futures::StreamExt;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tower::ServiceExt;

use super::roles::{Caller, Role};

/// The control subjects' prefix unless configured: node `n1` answers on `dlq.control.n1`.
pub const DEFAULT_PREFIX: &str = "dlq.control";

/// Requests run at the same time at most.
const MAX_IN_FLIGHT: usize = 8;

/// The largest reply body sent back, in bytes (NATS's default `max_payload` is 1 MiB).
const MAX_REPLY: usize = 512 * 1024;

/// The subject node `node` answers on.
pub fn subject(prefix: &str, node: &str) -> String {
    format!("{prefix}.{node}")
}

/// The caller a control request runs as: set as a request extension by the responder only,
/// never from the network, and taken by the token middleware instead of a token.
#[derive(Debug, Clone)]
pub(super) struct Trusted(Arc<Caller>);

impl Trusted {
    /// The caller.
    pub(super) fn caller(&self) -> Arc<Caller> {
        self.0.clone()
    }
}

/// Answers requests on `subject` through `app` until `stop`.
pub(super) fn spawn(
    client: async_nats::Client,
    subject: String,
    app: Router,
    stop: CancellationToken,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        let mut requests = match client.subscribe(subject.clone()).await {
            Ok(subscriber) => subscriber,
            Err(err) => {
                tracing::warn!(%subject, error = %err, "cannot subscribe to the control subject: a console cannot act on this node");
                return;
            }
        };
        tracing::info!(%subject, "answering console requests");
        let mut running = tokio::task::JoinSet::new();
        loop {
            let message = tokio::select! {
                () = stop.cancelled() => break,
                message = requests.next() => message,
            };
            let Some(message) = message else { break };
            let Some(reply) = message.reply else { continue };
            // A slow request (a delete waits for its events to be published) does not hold up
            // the next (the console's health probe), up to MAX_IN_FLIGHT at a time.
            while running.len() >= MAX_IN_FLIGHT {
                running.join_next().await;
            }
            let (app, client, subject) = (app.clone(), client.clone(), subject.clone());
            running.spawn(async move {
                let answer = answer(&app, &message.payload).await;
                let bytes = serde_json::to_vec(&answer).unwrap_or_default();
                if let Err(err) = client.publish(reply, bytes.into()).await {
                    tracing::warn!(%subject, error = %err, "cannot send a control reply");
                }
            });
        }
        let _ = requests.unsubscribe().await;
        // The requests in flight finish (they hold the router, and so the server's state).
        while running.join_next().await.is_some() {}
    })
}

/// Runs one request off the subject through `app`.
pub(super) async fn answer(app: &Router, payload: &[u8]) -> ControlReply {
    let request = match parse(payload) {
        Ok(request) => request,
        Err(err) => {
            tracing::warn!(error = %err, "refused a control request");
            return ControlReply::error(400, "bad_request", err.to_string());
        }
    };
    let body = request
        .body_with_reason()
        .map(|body| body.to_string())
        .unwrap_or_default();
    let http = Request::builder()
        .method(request.method.as_str())
        .uri(request.path.as_str())
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from(body));
    let mut http = match http {
        Ok(http) => http,
        Err(err) => return ControlReply::error(400, "bad_request", err.to_string()),
    };
    let caller = Caller {
        name: request.caller_name(),
        role: Role::Operator,
    };
    tracing::info!(caller = %caller.name, method = %request.method, path = %request.path, "control request");
    http.extensions_mut().insert(Trusted(Arc::new(caller)));
    let response = match app.clone().oneshot(http).await {
        Ok(response) => response,
        Err(never) => match never {},
    };
    let status = response.status().as_u16();
    let bytes = match axum::body::to_bytes(response.into_body(), MAX_REPLY).await {
        Ok(bytes) => bytes,
        Err(err) => {
            return ControlReply::error(
                500,
                "internal",
                format!(
                    "the answer is larger than a control reply carries ({MAX_REPLY} bytes): {err}"
                ),
            )
        }
    };
    let body = serde_json::from_slice(&bytes)
        .unwrap_or_else(|_| serde_json::Value::String(String::from_utf8_lossy(&bytes).into()));
    ControlReply { status, body }
}
