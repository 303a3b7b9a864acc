//! `dlq serve`: the admin HTTP API of a data directory, and the CLI's way to reach it.
//!
//! sled lets one process open a database. `dlq serve` is that process for operators: it holds
//! the data directory with an emitter (so its reconciler keeps publishing), serves `/metrics`,
//! `/healthz` and a JSON API mirroring the read, removal and retry commands, and announces
//! itself in `<data_dir>/serve.json` (`discovery`). CLI commands that find the directory held
//! by it send their request there ([`client`]) and print the answer, rendered by the server
//! with the CLI's own output code. A program that embeds the emitter (a scheduler) serves the
//! same API and page on its own emitter with [`serve_emitter`], announced the same way.
//!
//! Routes (listed in `router`, handled in `routes` and `retry_route`; all but `/healthz`
//! and the page need a bearer token when one is set, `auth`; retry, delete and redrive need the
//! `operator` role, clear and purge `admin`, `roles`):
//!
//! | route | command |
//! | --- | --- |
//! | `GET /`, `GET /ui/{file}` | the operators' web page (`page`; no token: it holds no data) |
//! | `GET /healthz` | status, node id, bus connection, backlog |
//! | `GET /metrics` | Prometheus text |
//! | `GET /v1/whoami` | the caller's token name and role |
//! | `GET /v1/audit?limit=&offset=` | the operators' removals, newest first (`audit_route`) |
//! | `GET /v1/items?job_id=&eligible=&error_type=&signature=&since=&until=&limit=&offset=&after=&filter=` | `dlq list` |
//! | `GET /v1/items/{job_id}/{item_id}`, `GET /v1/items/{item_id}` | `dlq inspect` |
//! | `GET /v1/items/{job_id}/{item_id}/events` | the item's lines of `dlq events JOB` |
//! | `GET /v1/stats?job_id=`, `GET /v1/analyze?job_id=` | `dlq stats`, `dlq analyze` |
//! | `POST /v1/jobs/{job_id}/clear?drain_timeout=` | `dlq clear --yes` |
//! | `POST /v1/jobs/{job_id}/retry` `{"parallel", "max_retries", "filter", "force", "rate", "dry_run", "workflow", "reason"}` (all optional: `{}`; [`RetryRequest`]) | `dlq retry JOB` (`retry_route`; answers when the retry finished) |
//! | `POST /v1/purge` `{"older_than_days", "job_id", "drain_timeout", "dry_run"}` ([`PurgeRequest`]) | `dlq purge --yes` |
//! | `POST /v1/redrive` `{"ids", "generations", filter fields, "all", "rate", "canary", "canary_percent", "halt_above", "patch", "dry_run", "reason"}` ([`RedriveRequest`]) | `dlq redrive --yes` (`redrive_route`; operator role; 409 without a redrive handler) |
//!
//! Every route takes `format=table|json|jsonl|csv` (default json), as
//! [`crate::request::params`] describes; the bodies and query strings are defined once in
//! [`crate::request`], for the server and the forwarding CLI alike.
//! The server listens on one address, loopback unless `--allow-remote`, which needs a token and
//! TLS (`tls`; or `--insecure`, plain HTTP). Request bodies and query strings are bounded
//! (`limits`); failed authentications are rate-limited per client address (`auth`).
//!
//! [`RetryRequest`]: crate::request::RetryRequest
//! [`PurgeRequest`]: crate::request::PurgeRequest
//! [`RedriveRequest`]: crate::request::RedriveRequest

mod audit_route;
mod auth;
pub mod client;
pub mod console;
pub mod control;
mod embedded;
mod events_route;
mod limits;
mod page;
mod redrive_route;
mod retry_route;
mod roles;
mod routes;
mod tls;

pub use auth::Token;
pub use embedded::{serve_emitter, ServeHandle, ServeOptions};
pub use roles::{Caller, NamedToken, Role, Tokens};
pub use routes::AppState;
pub use tls::{TlsConfig, TlsFiles};

use std::future::Future;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use axum::routing::{get, post};
use axum::Router;
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use thiserror::Error;
use tokio::net::TcpListener;

use client::discovery::{Holder, ServeFile};
use dlq::sink::SinkError;
use dlq::ErrorClass;
use routes::Held;

/// How often the Prometheus recorder drains its histograms.
const UPKEEP_INTERVAL: Duration = Duration::from_secs(5);

/// What went wrong serving the API or talking to it.
#[derive(Debug, Error)]
pub enum ServeError {
    /// `--listen` is not a loopback address and `--allow-remote` was not given.
    #[error("refusing to listen on {addr}: it is not a loopback address, and the API can clear and purge items. Pass --allow-remote (with --token-file) to serve other hosts, or listen on 127.0.0.1")]
    NotLoopback {
        /// The address asked for.
        addr: SocketAddr,
    },
    /// `--allow-remote` without a token.
    #[error("--allow-remote needs an API token, since anyone who reaches the API could clear and purge items: set --token-file FILE (or DLQ_API_TOKEN)")]
    RemoteWithoutToken,
    /// `--allow-remote` without TLS and without `--insecure`.
    #[error("--allow-remote needs TLS, or the token and the items cross the network in clear text: give --tls-cert FILE and --tls-key FILE (PEM), or pass --insecure to serve plain HTTP anyway")]
    RemoteWithoutTls,
    /// The TLS certificate or key cannot be used.
    #[error("cannot use {} for TLS: {reason}", path.display())]
    Tls {
        /// The certificate or key file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// The listening socket could not be bound.
    #[error("cannot listen on {addr}: {source} (choose another --listen address)")]
    Bind {
        /// The address asked for.
        addr: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
    /// The Prometheus recorder could not be installed.
    #[error("cannot start the metrics recorder: {0}")]
    Metrics(String),
    /// The token could not be read.
    #[error("cannot use the API token of {origin}: {reason}")]
    Token {
        /// The file, or the environment variable.
        origin: String,
        /// What is wrong.
        reason: String,
    },
    /// `serve.json` could not be written or removed.
    #[error("cannot write {}: {source}", path.display())]
    StateFile {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// Serving stopped on an error.
    #[error("the API server failed: {0}")]
    Server(std::io::Error),
    /// The task serving an embedded API ended without returning (it panicked or was aborted).
    #[error("the API server's task ended abnormally: {0}")]
    Task(#[source] tokio::task::JoinError),
    /// Another process holds the data directory.
    #[error("{}", held_message(data_dir, holder.as_ref(), api.as_deref()))]
    Held {
        /// The data directory.
        data_dir: PathBuf,
        /// The holding process, if it could be found.
        holder: Option<Holder>,
        /// The URL of its API, if it is a live `dlq serve`.
        api: Option<String>,
    },
    /// `--api` (or `serve.json`) is not a usable URL.
    #[error("cannot use API URL '{url}': {reason}")]
    BadUrl {
        /// The URL.
        url: String,
        /// What is wrong.
        reason: String,
    },
    /// The API could not be reached.
    #[error(
        "cannot reach the dlq serve API at {url}: {reason} (is `dlq serve` running? check --api)"
    )]
    Unreachable {
        /// The URL.
        url: String,
        /// Why.
        reason: String,
    },
    /// The API answered something that is not HTTP as expected.
    #[error("unexpected answer from the dlq serve API at {url}: {reason}")]
    Protocol {
        /// The URL.
        url: String,
        /// What was wrong.
        reason: String,
    },
    /// A request body could not be written as JSON (a workflow path that is not UTF-8).
    #[error("cannot send the request to the dlq serve API at {url}: {source}")]
    Body {
        /// The URL.
        url: String,
        /// Why.
        #[source]
        source: serde_json::Error,
    },
    /// The API refused the request.
    #[error("{message}")]
    Api {
        /// The HTTP status.
        status: u16,
        /// The error code of the JSON answer (`not_found`, `bad_request`, ...).
        code: String,
        /// The server's message.
        message: String,
    },
}

impl ServeError {
    /// The error for a data directory another process holds, naming it if it can be found.
    pub fn held(data_dir: &Path) -> Self {
        ServeError::Held {
            data_dir: data_dir.to_owned(),
            holder: client::discovery::lock_holder(data_dir),
            api: ServeFile::read_live(data_dir).map(|file| file.url),
        }
    }

    /// Which kind of failure this is: bad usage (also a 400 answer), not found (a 404
    /// answer), else a failure.
    pub fn class(&self) -> ErrorClass {
        match self {
            ServeError::NotLoopback { .. }
            | ServeError::RemoteWithoutToken
            | ServeError::RemoteWithoutTls
            | ServeError::Tls { .. }
            | ServeError::Token { .. }
            | ServeError::BadUrl { .. }
            | ServeError::Body { .. }
            | ServeError::Api { status: 400, .. } => ErrorClass::Usage,
            ServeError::Api { status: 404, .. } => ErrorClass::NotFound,
            _ => ErrorClass::Failure,
        }
    }
}

fn held_message(data_dir: &Path, holder: Option<&Holder>, api: Option<&str>) -> String {
    let dir = data_dir.display();
    let who = holder.map_or_else(
        || "its process id could not be found".to_owned(),
        ToString::to_string,
    );
    match api {
        Some(url) => format!(
            "Another process holds this data directory ({dir}): {who}, serving its admin API \
             at {url} (`dlq serve`, `dlq run`/`resume` or a scheduler embedding dlq). list, \
             inspect, stats, analyze, clear, purge, delete, redrive and retry go through that API \
             (pass --api {url} if it did not answer); for this command stop that process first, \
             or use another --data-dir"
        ),
        None => format!(
            "Another process holds this data directory ({dir}): {who}, and it serves no admin \
             API. Wait for it to finish or stop it, then retry; or start `dlq serve` on the \
             directory instead, and list, inspect, stats, analyze, clear, purge, delete, redrive \
             and retry will go through its API"
        ),
    }
}

/// Whether opening the sink failed because another process holds its lock.
pub fn is_locked(err: &SinkError) -> bool {
    matches!(err, SinkError::Open { reason, .. } if reason.contains("could not acquire lock"))
}

/// How `dlq serve` was asked to listen, as far as who may reach it goes.
#[derive(Debug, Clone, Copy, Default)]
pub struct Exposure {
    /// `--allow-remote`.
    pub allow_remote: bool,
    /// A token is set.
    pub token: bool,
    /// `--tls-cert` and `--tls-key` are given.
    pub tls: bool,
    /// `--insecure`: plain HTTP with `--allow-remote`.
    pub insecure: bool,
}

/// Refuses a non-loopback `addr` unless `allow_remote`, and `allow_remote` without a token, or
/// without TLS unless `insecure`. Loopback listening needs neither.
pub fn check_listen(addr: SocketAddr, exposure: Exposure) -> Result<(), ServeError> {
    if !exposure.allow_remote {
        return if addr.ip().is_loopback() {
            Ok(())
        } else {
            Err(ServeError::NotLoopback { addr })
        };
    }
    if !exposure.token {
        return Err(ServeError::RemoteWithoutToken);
    }
    if !exposure.tls && !exposure.insecure {
        return Err(ServeError::RemoteWithoutTls);
    }
    Ok(())
}

/// Installs the global Prometheus recorder and returns its handle. With `also_on`, the
/// exporter's own listener serves `/metrics` there as well (the `--metrics-addr` of the other
/// commands).
pub fn install_metrics(also_on: Option<SocketAddr>) -> Result<PrometheusHandle, ServeError> {
    let failed = |err: &dyn std::fmt::Display| ServeError::Metrics(err.to_string());
    let handle = match also_on {
        None => {
            let handle = PrometheusBuilder::new()
                .install_recorder()
                .map_err(|e| failed(&e))?;
            let upkeep = handle.clone();
            tokio::spawn(async move {
                loop {
                    tokio::time::sleep(UPKEEP_INTERVAL).await;
                    upkeep.run_upkeep();
                }
            });
            handle
        }
        Some(addr) => {
            let (recorder, exporter) = PrometheusBuilder::new()
                .with_http_listener(addr)
                .build()
                .map_err(|e| failed(&e))?;
            let handle = recorder.handle();
            metrics::set_global_recorder(recorder).map_err(|e| failed(&e))?;
            tokio::spawn(async move {
                if let Err(err) = exporter.await {
                    tracing::warn!(%addr, "the metrics listener stopped: {err:?}");
                }
            });
            handle
        }
    };
    dlq::metrics::describe();
    Ok(handle)
}

/// A bound listening socket, its TLS if any, and the URL clients use to reach it.
pub struct Listener {
    listener: TcpListener,
    tls: Option<TlsConfig>,
    url: String,
}

impl Listener {
    /// Binds `addr` (port 0 picks a free port); with `tls`, connections are served over TLS.
    pub async fn bind(addr: SocketAddr, tls: Option<TlsConfig>) -> Result<Self, ServeError> {
        let listener = TcpListener::bind(addr)
            .await
            .map_err(|source| ServeError::Bind { addr, source })?;
        let local = listener
            .local_addr()
            .map_err(|source| ServeError::Bind { addr, source })?;
        let scheme = if tls.is_some() { "https" } else { "http" };
        Ok(Listener {
            listener,
            url: format!("{scheme}://{}", url_for(local)),
            tls,
        })
    }

    /// The URL of the bound address (loopback for an unspecified one).
    pub fn url(&self) -> &str {
        &self.url
    }
}

/// The `host:port` a local client uses for a server bound to `addr`.
fn url_for(addr: SocketAddr) -> String {
    let ip = match addr.ip() {
        std::net::IpAddr::V4(ip) if ip.is_unspecified() => std::net::Ipv4Addr::LOCALHOST.into(),
        std::net::IpAddr::V6(ip) if ip.is_unspecified() => std::net::Ipv6Addr::LOCALHOST.into(),
        ip => ip,
    };
    SocketAddr::new(ip, addr.port()).to_string()
}

/// The router of the API, sharing `state` (see [`serve`]).
fn router(state: Arc<Held>, tokens: Tokens) -> Router {
    let needs = |role: Role| axum::middleware::from_fn_with_state(role, roles::require_role);
    Router::new()
        .route("/metrics", get(routes::metrics))
        .route("/v1/items", get(routes::list_items))
        .route("/v1/items/{item_id}", get(routes::inspect_any))
        .route("/v1/items/{job_id}/{item_id}", get(routes::inspect_in_job))
        .route(
            "/v1/items/{job_id}/{item_id}/events",
            get(events_route::item_events),
        )
        .route("/v1/stats", get(routes::stats))
        .route("/v1/analyze", get(routes::analyze))
        .route("/v1/whoami", get(routes::whoami))
        .route("/v1/audit", get(audit_route::audit))
        .route(
            "/v1/jobs/{job_id}/clear",
            post(routes::clear).layer(needs(Role::Admin)),
        )
        .route(
            "/v1/jobs/{job_id}/retry",
            post(retry_route::retry).layer(needs(Role::Operator)),
        )
        .route("/v1/purge", post(routes::purge).layer(needs(Role::Admin)))
        .route(
            "/v1/delete",
            post(routes::delete).layer(needs(Role::Operator)),
        )
        .route(
            "/v1/redrive",
            post(redrive_route::redrive).layer(needs(Role::Operator)),
        )
        .route_layer(axum::middleware::from_fn_with_state(
            Arc::new(auth::Guard {
                tokens,
                failures: auth::Failures::default(),
            }),
            auth::require_token,
        ))
        .route("/healthz", get(routes::healthz))
        .merge(page::router())
        .fallback(routes::no_route)
        .method_not_allowed_fallback(routes::wrong_method)
        .layer(axum::middleware::from_fn(limits::check))
        .layer(axum::extract::DefaultBodyLimit::max(limits::MAX_BODY))
        .with_state(state)
}

/// Announces the server in `data_dir/serve.json`, serves until `shutdown` resolves (then lets
/// requests in flight finish), and removes the announcement. Returns once no connection or
/// query holds `state` any more, so that the caller's emitter is then its last handle: the
/// caller shuts it down, drops it, and may open the data directory again.
pub async fn serve(
    listener: Listener,
    state: AppState,
    tokens: Tokens,
    data_dir: &Path,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), ServeError> {
    announce(&listener, !tokens.is_empty(), data_dir)?;
    serve_announced(listener, state, tokens, data_dir, shutdown).await
}

/// Writes `data_dir/serve.json` for `listener`, naming this process.
fn announce(listener: &Listener, token_required: bool, data_dir: &Path) -> Result<(), ServeError> {
    let file = ServeFile {
        url: listener.url.clone(),
        pid: std::process::id(),
        token_required,
    };
    file.write(data_dir)
        .map_err(|source| state_file_error(data_dir, source))
}

fn state_file_error(data_dir: &Path, source: std::io::Error) -> ServeError {
    ServeError::StateFile {
        path: ServeFile::path(data_dir),
        source,
    }
}

/// [`serve`] once [`announce`] wrote `serve.json`: serves until `shutdown`, removes the
/// announcement, and waits until nothing holds `state`.
async fn serve_announced(
    listener: Listener,
    state: AppState,
    tokens: Tokens,
    data_dir: &Path,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), ServeError> {
    let control = state.control_prefix.as_deref().map(|prefix| {
        let node = dlq::sink::Sink::node_id(state.emitter.sink());
        (
            state.emitter.bus().client().clone(),
            control::subject(prefix, node),
        )
    });
    let (state, released) = Held::new(state);
    let app = router(state, tokens);
    let stop_control = tokio_util::sync::CancellationToken::new();
    let control = control.map(|(client, subject)| {
        control::spawn(client, subject, app.clone(), stop_control.clone())
    });
    let app = app.into_make_service_with_connect_info::<tls::Peer>();
    let served = match &listener.tls {
        None => {
            axum::serve(listener.listener, app)
                .with_graceful_shutdown(shutdown)
                .await
        }
        Some(tls) => {
            let tls = tls::TlsListener::new(listener.listener, tls).map_err(ServeError::Server)?;
            axum::serve(tls, app).with_graceful_shutdown(shutdown).await
        }
    };
    let removed = ServeFile::remove(data_dir);
    stop_control.cancel();
    if let Some(task) = control {
        let _ = task.await;
    }
    // axum returns once every connection task let go of its close signal, a moment before the
    // task drops its copy of the router; and a query whose client went away runs on to its end
    // on its blocking thread. Wait for both to drop the state.
    let _ = released.await;
    served.map_err(ServeError::Server)?;
    removed.map_err(|source| state_file_error(data_dir, source))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    #[test]
    fn only_loopback_unless_allowed() {
        let at = |s: &str| s.parse::<SocketAddr>().unwrap();
        let local = Exposure::default();
        assert!(check_listen(at("127.0.0.1:9465"), local).is_ok());
        assert!(check_listen(at("[::1]:9465"), local).is_ok());
        let err = check_listen(at("0.0.0.0:9465"), local).unwrap_err();
        assert!(err.to_string().contains("--allow-remote"), "{err}");
        assert_eq!(err.class(), ErrorClass::Usage);
        let remote = Exposure {
            allow_remote: true,
            token: true,
            tls: true,
            insecure: false,
        };
        assert!(check_listen(at("0.0.0.0:9465"), remote).is_ok());
        let insecure = Exposure {
            tls: false,
            insecure: true,
            ..remote
        };
        assert!(check_listen(at("0.0.0.0:9465"), insecure).is_ok());
        let no_token = Exposure {
            token: false,
            ..remote
        };
        let err = check_listen(at("0.0.0.0:9465"), no_token).unwrap_err();
        assert!(err.to_string().contains("--token-file"), "{err}");
        let no_tls = Exposure {
            tls: false,
            ..remote
        };
        let err = check_listen(at("0.0.0.0:9465"), no_tls).unwrap_err();
        assert!(
            err.to_string().contains("--tls-cert") && err.to_string().contains("--insecure"),
            "{err}"
        );
        assert_eq!(err.class(), ErrorClass::Usage);
    }

    #[test]
    fn urls_point_at_loopback_for_unspecified_addresses() {
        let at = |s: &str| s.parse::<SocketAddr>().unwrap();
        assert_eq!(url_for(at("0.0.0.0:80")), "127.0.0.1:80");
        assert_eq!(url_for(at("[::]:80")), "[::1]:80");
        assert_eq!(url_for(at("10.1.2.3:9")), "10.1.2.3:9");
    }

    #[test]
    fn held_errors_say_who_and_what_to_do() {
        let dir = Path::new("/data");
        let holder = Holder {
            pid: 42,
            command: Some("dlq run wf.yml".into()),
        };
        let text = held_message(dir, Some(&holder), None);
        assert!(text.contains("pid 42 (`dlq run wf.yml`)"), "{text}");
        assert!(text.contains("`dlq serve`"), "{text}");
        let text = held_message(dir, None, Some("http://127.0.0.1:1"));
        assert!(text.contains("could not be found"), "{text}");
        assert!(text.contains("--api http://127.0.0.1:1"), "{text}");
    }

    #[test]
    fn api_answers_map_to_exit_codes() {
        let api = |status| ServeError::Api {
            status,
            code: String::new(),
            message: String::new(),
        };
        assert_eq!(api(400).class(), ErrorClass::Usage);
        assert_eq!(api(404).class(), ErrorClass::NotFound);
        assert_eq!(api(401).class(), ErrorClass::Failure);
        assert_eq!(api(500).class(), ErrorClass::Failure);
    }
}
