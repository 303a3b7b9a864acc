//! The handlers of the admin API. Each one checks its parameters, runs the same code as the CLI
//! command it mirrors (queries on a blocking thread, removals on the server's emitter) and
//! renders the answer with the CLI's own `write_*` function, so `GET /v1/stats` is byte for byte
//! what `dlq --format json stats` prints.
//!
//! Errors are JSON `{"error": "...", "code": "..."}`: `bad_request` (400; the CLI exits 2),
//! `not_found` (404; exit 3), `unauthorized` (401), `forbidden` (403: the token lacks the
//! role the route needs), `internal` (500; exit 1).

use std::ops::Deref;
use std::sync::Arc;

use axum::extract::rejection::{JsonRejection, PathRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use metrics_exporter_prometheus::PrometheusHandle;
use serde_json::json;
use tokio::sync::oneshot;

use crate::query::delete::select;
use crate::query::list::find_item;
use crate::query::QueryError;
use crate::render::items::{check_inspect_format, check_list_format, write_item, write_list};
use crate::render::removal::write_removal;
use crate::render::report::{check_report_format, write_analysis, write_stats};
use crate::render::Format;
use crate::request::params::{list_args, Params};
use crate::request::reason::removed_by;
use crate::request::{DeleteRequest, PurgeRequest, RequestError};
use dlq::emitter::NodeEmitter;
use dlq::removal::{self, DEFAULT_DRAIN};
use dlq::sink::{LocalSink, Sink};
use dlq::ErrorClass;

/// What every handler shares.
pub struct AppState {
    /// The server's emitter (its sink is the data directory).
    pub emitter: NodeEmitter,
    /// The Prometheus recorder's handle, rendered by `/metrics`.
    pub metrics: PrometheusHandle,
    /// How `POST /v1/jobs/{job_id}/retry` runs agents (data directory, agent command, topic).
    pub run: crate::runner::RunOptions,
    /// The control subjects' prefix this node answers consoles on (`<prefix>.<node_id>`,
    /// [`super::control`]); `None` answers none.
    pub control_prefix: Option<String>,
}

/// [`AppState`] as the router shares it with every connection and query. Its channel closes
/// once the last of them has dropped it, emitter clone first (fields drop in order): what
/// `serve` waits for, so that no task it started still holds the data directory when it
/// returns.
pub struct Held {
    state: AppState,
    _released: oneshot::Sender<()>,
}

impl Held {
    /// `state` to share, and a receiver that resolves (with an error: nothing is ever sent)
    /// once every holder has dropped it.
    pub(super) fn new(state: AppState) -> (Arc<Held>, oneshot::Receiver<()>) {
        let (released, on_release) = oneshot::channel();
        let held = Held {
            state,
            _released: released,
        };
        (Arc::new(held), on_release)
    }
}

impl Deref for Held {
    type Target = AppState;

    fn deref(&self) -> &AppState {
        &self.state
    }
}

/// The shared state as handlers receive it.
pub type Shared = State<Arc<Held>>;

/// The caller the token middleware let in ([`super::roles`]).
pub type Called = axum::Extension<Arc<super::roles::Caller>>;

/// An error answer.
#[derive(Debug)]
pub struct ApiError {
    status: StatusCode,
    code: &'static str,
    message: String,
}

impl ApiError {
    /// An answer with any `status`, `code` and `message`.
    pub(crate) fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        ApiError {
            status,
            code,
            message: message.into(),
        }
    }

    /// 400 with `message`.
    pub fn bad_request(message: impl Into<String>) -> Self {
        ApiError {
            status: StatusCode::BAD_REQUEST,
            code: "bad_request",
            message: message.into(),
        }
    }

    /// 404 with `message`.
    pub fn not_found(message: impl Into<String>) -> Self {
        ApiError {
            status: StatusCode::NOT_FOUND,
            code: "not_found",
            message: message.into(),
        }
    }

    /// 401: the bearer token is missing or wrong.
    pub fn unauthorized() -> Self {
        ApiError {
            status: StatusCode::UNAUTHORIZED,
            code: "unauthorized",
            message: "missing or wrong API token: send `Authorization: Bearer <token>` (the CLI \
                      sends the token of --token-file or DLQ_API_TOKEN)"
                .into(),
        }
    }

    /// 403: the caller's token lacks the role `needed`.
    pub fn forbidden(needed: super::roles::Role, caller: Option<&super::roles::Caller>) -> Self {
        let who = caller.map_or_else(
            || "this request has no role".to_owned(),
            |c| format!("token {:?} has the role {}", c.name, c.role),
        );
        ApiError {
            status: StatusCode::FORBIDDEN,
            code: "forbidden",
            message: format!("this needs the {needed} role; {who}"),
        }
    }

    /// 413: the request body is larger than [`super::limits::MAX_BODY`].
    pub fn payload_too_large(limit: usize) -> Self {
        ApiError {
            status: StatusCode::PAYLOAD_TOO_LARGE,
            code: "payload_too_large",
            message: format!(
                "the request body is larger than the API accepts ({limit} bytes): send a \
                 smaller body"
            ),
        }
    }

    /// 414: the query string is longer than [`super::limits::MAX_QUERY`].
    pub fn uri_too_long(limit: usize) -> Self {
        ApiError {
            status: StatusCode::URI_TOO_LONG,
            code: "uri_too_long",
            message: format!(
                "the query string is longer than the API accepts ({limit} bytes): shorten the \
                 filter or the parameters"
            ),
        }
    }

    /// 429: too many failed authentications from this address; `retry_after` seconds to wait.
    pub fn too_many_failures(retry_after: u64) -> Self {
        ApiError {
            status: StatusCode::TOO_MANY_REQUESTS,
            code: "too_many_requests",
            message: format!(
                "too many requests with a missing or wrong API token from this address: retry \
                 in {retry_after} s with the right token (--token-file or DLQ_API_TOKEN)"
            ),
        }
    }

    pub(crate) fn internal(message: impl Into<String>) -> Self {
        ApiError {
            status: StatusCode::INTERNAL_SERVER_ERROR,
            code: "internal",
            message: message.into(),
        }
    }
}

impl From<RequestError> for ApiError {
    /// The one mapping of an error's class to an HTTP status.
    fn from(err: RequestError) -> Self {
        let message = err.to_string();
        match err.class() {
            ErrorClass::Usage => ApiError::bad_request(message),
            ErrorClass::NotFound => ApiError {
                status: StatusCode::NOT_FOUND,
                code: "not_found",
                message,
            },
            ErrorClass::Failure => ApiError::internal(message),
        }
    }
}

impl From<QueryError> for ApiError {
    fn from(err: QueryError) -> Self {
        RequestError::from(err).into()
    }
}

impl From<dlq::sink::SinkError> for ApiError {
    fn from(err: dlq::sink::SinkError) -> Self {
        RequestError::from(err).into()
    }
}

impl From<QueryRejection> for ApiError {
    fn from(err: QueryRejection) -> Self {
        ApiError::bad_request(format!("malformed query string: {}", err.body_text()))
    }
}

impl From<PathRejection> for ApiError {
    fn from(err: PathRejection) -> Self {
        ApiError::bad_request(format!("malformed path: {}", err.body_text()))
    }
}

impl From<JsonRejection> for ApiError {
    fn from(err: JsonRejection) -> Self {
        if err.status() == StatusCode::PAYLOAD_TOO_LARGE {
            return ApiError::payload_too_large(super::limits::MAX_BODY);
        }
        ApiError::bad_request(format!(
            "{} (send a JSON body with Content-Type: application/json)",
            err.body_text()
        ))
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = Json(json!({ "error": self.message, "code": self.code }));
        let mut response = (self.status, body).into_response();
        if self.status == StatusCode::UNAUTHORIZED {
            response
                .headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        response
    }
}

impl From<ApiError> for Response {
    fn from(err: ApiError) -> Self {
        err.into_response()
    }
}

pub(crate) type Answer = Result<Response, ApiError>;
pub(crate) type Pairs = Result<Query<Vec<(String, String)>>, QueryRejection>;

/// Runs `f` on the sink on a blocking thread (queries scan the whole queue). The thread holds
/// the shared state, not only the emitter: a query whose client went away runs on to its end,
/// and `serve` waits for it.
pub(super) async fn blocking<T: Send + 'static>(
    state: &Arc<Held>,
    f: impl FnOnce(&LocalSink) -> Result<T, RequestError> + Send + 'static,
) -> Result<T, ApiError> {
    let state = state.clone();
    tokio::task::spawn_blocking(move || f(state.emitter.sink()))
        .await
        .map_err(|err| ApiError::internal(format!("the query task failed: {err}")))?
        .map_err(ApiError::from)
}

/// A 200 answer holding what `write` renders in `format`.
pub(crate) fn rendered(
    format: Format,
    write: impl FnOnce(&mut Vec<u8>) -> Result<(), RequestError>,
) -> Answer {
    let mut body = Vec::new();
    write(&mut body)?;
    Ok(answer(format, body))
}

/// A 200 answer with `body` in `format`.
fn answer(format: Format, body: Vec<u8>) -> Response {
    let kind = match format {
        Format::Json => "application/json",
        Format::Jsonl => "application/x-ndjson",
        Format::Csv => "text/csv; charset=utf-8",
        Format::Table | Format::Dir => "text/plain; charset=utf-8",
    };
    ([(header::CONTENT_TYPE, kind)], body).into_response()
}

/// `GET /v1/whoami`: the caller's token name and role, `{"name", "role"}`.
pub async fn whoami(
    axum::Extension(caller): axum::Extension<Arc<super::roles::Caller>>,
) -> Json<super::roles::Caller> {
    Json(caller.as_ref().clone())
}

/// `GET /healthz`: liveness, node id, backlog and parked events (never needs a token).
/// Always 200 while the process serves; `status` is `degraded`, with the `reason`, while the
/// bus is not connected (events are stored and wait for it).
pub async fn healthz(State(state): Shared) -> Answer {
    let sink = state.emitter.sink();
    let backlog = sink.backlog().map_err(RequestError::from)?;
    let parked = sink.parked().map_err(RequestError::from)?.len();
    let bus = state.emitter.bus().connection();
    let (status, reason) =
        match bus {
            "connected" => ("ok", None),
            _ => (
                "degraded",
                Some(state.emitter.bus().refusal().unwrap_or_else(|| {
                    format!("the bus is {bus}: events are stored and wait for it")
                })),
            ),
        };
    Ok(Json(json!({
        "status": status,
        "reason": reason,
        "node_id": sink.node_id(),
        "bus": bus,
        "unpublished": backlog.count,
        "oldest_unpublished": backlog.oldest,
        "parked": parked,
    }))
    .into_response())
}

/// `GET /metrics`: Prometheus text, with `dlq_items` (the items in the DLQ) counted at scrape
/// time from the per-job counters the sink keeps (O(jobs), no item read).
pub async fn metrics(State(state): Shared) -> Response {
    let items = blocking(&state, |sink| {
        let jobs = sink.jobs()?;
        Ok(jobs.iter().map(|(_, counters)| counters.items).sum::<u64>())
    })
    .await;
    if let Ok(items) = items {
        metrics::gauge!(dlq::metrics::ITEMS).set(items as f64);
    }
    let text = state.metrics.render();
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        text,
    )
        .into_response()
}

/// `GET /v1/items`: `dlq list`.
pub async fn list_items(State(state): Shared, pairs: Pairs) -> Answer {
    let (args, format) = list_args(Params::new(pairs?.0))?;
    check_list_format(format)?;
    let body = blocking(&state, move |sink| {
        let query = args.query()?;
        let mut body = Vec::new();
        write_list(&mut body, sink, &query, format)?;
        Ok(body)
    })
    .await?;
    Ok(answer(format, body))
}

/// `GET /v1/items/{job_id}/{item_id}`: `dlq inspect ITEM --job-id JOB`.
pub async fn inspect_in_job(
    state: Shared,
    path: Result<Path<(String, String)>, PathRejection>,
    pairs: Pairs,
) -> Answer {
    let Path((job, item)) = path?;
    inspect(state, item, Some(job), pairs).await
}

/// `GET /v1/items/{item_id}`: `dlq inspect ITEM`, searching every job.
pub async fn inspect_any(
    state: Shared,
    path: Result<Path<String>, PathRejection>,
    pairs: Pairs,
) -> Answer {
    let Path(item) = path?;
    inspect(state, item, None, pairs).await
}

async fn inspect(State(state): Shared, item: String, job: Option<String>, pairs: Pairs) -> Answer {
    let mut params = Params::new(pairs?.0);
    let format = params.format()?;
    params.finish("/v1/items/...")?;
    check_inspect_format(format)?;
    let found = blocking(&state, move |sink| {
        Ok(find_item(sink, &item, job.as_deref())?)
    })
    .await?;
    rendered(format, |out| write_item(out, format, &found))
}

/// Reads `job_id` and `format` of a report route.
fn report_params(pairs: Pairs, route: &str) -> Result<(Option<String>, Format), ApiError> {
    let mut params = Params::new(pairs?.0);
    let job = params.take("job_id")?;
    let format = params.format()?;
    params.finish(route)?;
    Ok((job, format))
}

/// `GET /v1/stats`: `dlq stats`.
pub async fn stats(State(state): Shared, pairs: Pairs) -> Answer {
    let (job, format) = report_params(pairs, "/v1/stats")?;
    check_report_format(format, "stats")?;
    let stats = blocking(&state, move |sink| {
        Ok(crate::query::stats::stats(sink, job.as_deref())?)
    })
    .await?;
    rendered(format, |out| write_stats(out, format, &stats))
}

/// `GET /v1/analyze`: `dlq analyze`.
pub async fn analyze(State(state): Shared, pairs: Pairs) -> Answer {
    let (job, format) = report_params(pairs, "/v1/analyze")?;
    check_report_format(format, "analyze")?;
    let analysis = blocking(&state, move |sink| {
        Ok(crate::query::analyze::analyze(sink, job.as_deref())?)
    })
    .await?;
    rendered(format, |out| write_analysis(out, format, &analysis))
}

/// `POST /v1/jobs/{job_id}/clear[?drain_timeout=5s]`: `dlq clear JOB --yes`.
pub async fn clear(
    State(state): Shared,
    caller: Called,
    path: Result<Path<String>, PathRejection>,
    pairs: Pairs,
) -> Answer {
    let Path(job) = path?;
    let mut params = Params::new(pairs?.0);
    let drain = params.duration("drain_timeout")?.unwrap_or(DEFAULT_DRAIN);
    let by = removed_by(&caller.name, params.take("reason")?.as_deref())?;
    let format = params.format()?;
    params.finish("/v1/jobs/{job_id}/clear")?;
    let counted = job.clone();
    let n = blocking(&state, move |sink| Ok(sink.job_len(&counted)?)).await?;
    if n == 0 {
        return Err(QueryError::JobNotFound(job).into());
    }
    let removal = removal::clear_job(&state.emitter, &job, drain, Some(&by)).await?;
    rendered(format, |out| Ok(write_removal(out, format, &removal)?))
}

/// `POST /v1/purge`: `dlq purge --older-than-days N [--job-id J] --yes`.
pub async fn purge(
    State(state): Shared,
    caller: Called,
    pairs: Pairs,
    body: Result<Json<PurgeRequest>, JsonRejection>,
) -> Answer {
    let mut params = Params::new(pairs?.0);
    let format = params.format()?;
    params.finish("/v1/purge")?;
    let Json(body) = body?;
    let by = removed_by(&caller.name, body.reason.as_deref())?;
    let cutoff = removal::purge_cutoff(body.older_than_days);
    let job = body.job_id.clone();
    let n = blocking(&state, move |sink| {
        Ok(removal::count_purgeable(sink, cutoff, job.as_deref())?)
    })
    .await?;
    let job = body.job_id.as_deref();
    let removal = if body.dry_run {
        removal::would_purge(job, cutoff, n)
    } else if n == 0 {
        removal::nothing_to_purge(job, cutoff)
    } else {
        let drain = body.drain_timeout.unwrap_or(DEFAULT_DRAIN);
        removal::purge_items(&state.emitter, cutoff, job, drain, Some(&by)).await?
    };
    rendered(format, |out| Ok(write_removal(out, format, &removal)?))
}

/// `POST /v1/delete`: `dlq delete (JOB/ITEM... | FILTER | --all) [--dry-run] --yes`.
pub async fn delete(
    State(state): Shared,
    caller: Called,
    pairs: Pairs,
    body: Result<Json<DeleteRequest>, JsonRejection>,
) -> Answer {
    let mut params = Params::new(pairs?.0);
    let format = params.format()?;
    params.finish("/v1/delete")?;
    let Json(body) = body?;
    let target = body.target()?;
    let by = removed_by(&caller.name, body.reason.as_deref())?;
    let chosen = blocking(&state, move |sink| {
        let chosen = select(sink, &target)?;
        chosen.check_found()?;
        Ok(chosen)
    })
    .await?;
    let removal = if body.dry_run {
        chosen.dry_run()
    } else if chosen.items.is_empty() {
        chosen.answer(removal::nothing_to_delete())
    } else {
        let drain = body.drain_timeout.unwrap_or(DEFAULT_DRAIN);
        let removed = removal::delete_items(&state.emitter, &chosen.items, drain, Some(&by));
        chosen.answer(removed.await?)
    };
    rendered(format, |out| Ok(write_removal(out, format, &removal)?))
}

/// Any other path.
pub async fn no_route() -> ApiError {
    ApiError {
        status: StatusCode::NOT_FOUND,
        code: "not_found",
        message: "no such route: see GET /v1/items, /v1/items/{item_id}, \
                  /v1/items/{job_id}/{item_id}, /v1/items/{job_id}/{item_id}/events, /v1/stats, /v1/analyze, \
                  POST /v1/jobs/{job_id}/clear, /v1/jobs/{job_id}/retry, /v1/purge, /v1/delete, /v1/redrive, \
                  GET /v1/whoami, /v1/audit, /healthz, /metrics"
            .into(),
    }
}

/// A known path with the wrong method.
pub async fn wrong_method() -> ApiError {
    ApiError {
        status: StatusCode::METHOD_NOT_ALLOWED,
        code: "method_not_allowed",
        message: "this route does not take that method: reads are GET, clear, purge, delete, redrive and retry POST".into(),
    }
}
