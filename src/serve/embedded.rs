//! The admin API and page served by a program that embeds the emitter (a scheduler), instead of
//! by `dlq serve`.
//!
//! A scheduler that embeds the emitter holds its data directory, so `dlq list` cannot open it.
//! [`serve_emitter`] serves the router of `dlq serve` on the emitter the scheduler already
//! holds and announces it in `serve.json` with the scheduler's pid
//! ([`discovery`](super::client::discovery)): the CLI then forwards to it as it does to
//! `dlq serve`. [`ServeHandle::shutdown`], or dropping the handle, removes the announcement.
//!
//! ```no_run
//! # async fn scheduler(emitter: dlq::emitter::NodeEmitter) -> Result<(), Box<dyn std::error::Error>> {
//! use dlq_ops::serve::{serve_emitter, ServeOptions};
//!
//! // Loopback, no token, port 9465: like `dlq serve` with no flags.
//! let api = serve_emitter(&emitter, "/var/lib/dlq", ServeOptions::default()).await?;
//! println!("dead letters at {}/", api.url());
//! // ... the scheduler runs; `dlq --data-dir /var/lib/dlq list` asks this API ...
//! api.shutdown().await?; // first, so that no request still holds the emitter
//! emitter.shutdown().await?;
//! # Ok(()) }
//! ```
//!
//! The token, if any, is the embedder's to choose and keep ([`ServeOptions::token`]), as
//! `--token-file` is for `dlq serve`: dlq neither makes one up nor writes one to disk, and
//! never prints it. The same listening rules hold ([`check_listen`]): loopback only unless
//! `allow_remote`, which needs a token and TLS (or `insecure`).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use dlq::emitter::NodeEmitter;
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::client::discovery::ServeFile;
use super::{
    announce, check_listen, install_metrics, serve_announced, AppState, Exposure, Listener,
    NamedToken, ServeError, TlsConfig, Token, Tokens,
};
use crate::runner::RunOptions;

/// How an embedded API listens and whom it lets in. The default is what `dlq serve` does
/// without flags: `127.0.0.1:9465`, no token, no TLS.
#[derive(Debug, Clone)]
pub struct ServeOptions {
    /// The address to listen on; port 0 picks a free one ([`ServeHandle::url`] tells which).
    pub listen: SocketAddr,
    /// The bearer token every route but `/healthz` and the page needs; `None` lets every
    /// request in (loopback only), unless `tokens` names some. Operators pass the same token to
    /// the CLI with `--token-file` or `DLQ_API_TOKEN`. It is the `admin` named `default`.
    pub token: Option<Token>,
    /// Named tokens with roles (read-only, operator, admin), as `dlq serve --tokens-file`
    /// reads them: the API lets each do what its role allows, and the events an operator
    /// causes name the token.
    pub tokens: Vec<NamedToken>,
    /// Serve over TLS (https).
    pub tls: Option<TlsConfig>,
    /// Allow a non-loopback `listen` address; needs a token, and TLS unless `insecure`.
    pub allow_remote: bool,
    /// With `allow_remote`, serve plain HTTP: the token and the items cross the network in
    /// clear text.
    pub insecure: bool,
    /// The Prometheus recorder `/metrics` renders. `None` installs dlq's own as the process's
    /// global recorder; a program that installed its own recorder passes its handle here.
    pub metrics: Option<PrometheusHandle>,
    /// The prefix of the NATS subject this node answers a fleet console on
    /// (`<prefix>.<node_id>`, [`super::control`]); `None` answers none. Default
    /// [`DEFAULT_PREFIX`](super::control::DEFAULT_PREFIX).
    pub control_prefix: Option<String>,
}

impl Default for ServeOptions {
    fn default() -> Self {
        ServeOptions {
            listen: SocketAddr::from(([127, 0, 0, 1], 9465)),
            token: None,
            tokens: Vec::new(),
            tls: None,
            allow_remote: false,
            insecure: false,
            metrics: None,
            control_prefix: Some(super::control::DEFAULT_PREFIX.to_owned()),
        }
    }
}

/// A running embedded API. [`ServeHandle::shutdown`] stops it; dropping the handle stops it
/// too, without waiting.
#[derive(Debug)]
pub struct ServeHandle {
    url: String,
    data_dir: PathBuf,
    stop: CancellationToken,
    task: Option<JoinHandle<Result<(), ServeError>>>,
}

/// Serves the admin API and the page of `dlq serve` on `emitter`, whose sink is the data
/// directory `data_dir`, and announces it in `data_dir/serve.json` with this process's id.
/// Returns once the listener is bound and the announcement written.
///
/// Fails with the error `dlq serve` gives for the same options (an address refused by
/// [`check_listen`], a port already taken, `serve.json` not writable).
pub async fn serve_emitter(
    emitter: &NodeEmitter,
    data_dir: impl AsRef<Path>,
    options: ServeOptions,
) -> Result<ServeHandle, ServeError> {
    let data_dir = data_dir.as_ref().to_owned();
    let mut tokens = Tokens::from(options.token);
    for named in options.tokens {
        tokens.add(named, "ServeOptions::tokens")?;
    }
    check_listen(
        options.listen,
        Exposure {
            allow_remote: options.allow_remote,
            token: !tokens.is_empty(),
            tls: options.tls.is_some(),
            insecure: options.insecure,
        },
    )?;
    let metrics = match options.metrics {
        Some(handle) => handle,
        None => recorder(),
    };
    let listener = Listener::bind(options.listen, options.tls).await?;
    let url = listener.url().to_owned();
    let state = AppState {
        emitter: emitter.clone(),
        metrics,
        run: RunOptions::new(&data_dir),
        control_prefix: options.control_prefix,
    };
    announce(&listener, !tokens.is_empty(), &data_dir)?;
    let stop = CancellationToken::new();
    let shutdown = stop.clone().cancelled_owned();
    let dir = data_dir.clone();
    let task =
        tokio::spawn(async move { serve_announced(listener, state, tokens, &dir, shutdown).await });
    Ok(ServeHandle {
        url,
        data_dir,
        stop,
        task: Some(task),
    })
}

impl ServeHandle {
    /// The URL of the API and the page, e.g. `http://127.0.0.1:9465`.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Stops accepting requests, lets those in flight finish, removes `serve.json`, and returns
    /// once no request holds the emitter any more: the caller may then shut the emitter down.
    pub async fn shutdown(mut self) -> Result<(), ServeError> {
        self.stop.cancel();
        match self.task.take() {
            Some(task) => task.await.map_err(ServeError::Task)?,
            None => Ok(()),
        }
    }
}

impl Drop for ServeHandle {
    /// Asks the server to stop, and removes `serve.json` at once if it still announces this
    /// server: the server task removes it too, but only once its requests finished, which a
    /// process exiting after the drop would not wait for.
    fn drop(&mut self) {
        self.stop.cancel();
        if self.task.is_none() {
            return;
        }
        let ours = ServeFile::read(&self.data_dir)
            .is_some_and(|file| file.pid == std::process::id() && file.url == self.url);
        if ours {
            if let Err(err) = ServeFile::remove(&self.data_dir) {
                tracing::warn!(data_dir = %self.data_dir.display(), error = %err, "cannot remove the API's announcement");
            }
        }
    }
}

/// The handle of the recorder dlq installed as the global one, once it did.
static INSTALLED: Mutex<Option<PrometheusHandle>> = Mutex::new(None);

/// dlq's global Prometheus recorder, installed by the first embedded API of the process. When
/// another recorder is installed already, `/metrics` renders an empty recorder of its own.
fn recorder() -> PrometheusHandle {
    let mut installed = INSTALLED.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(handle) = installed.as_ref() {
        return handle.clone();
    }
    match install_metrics(None) {
        Ok(handle) => installed.insert(handle).clone(),
        Err(err) => {
            tracing::warn!(error = %err, "another metrics recorder is installed: the embedded API's /metrics stays empty (pass its handle in ServeOptions::metrics)");
            PrometheusBuilder::new().build_recorder().handle()
        }
    }
}
