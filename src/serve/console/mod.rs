//! `dlq console`: the fleet console. A durable consumer of the DLQ stream keeps every node's
//! items in its own store; the console serves the page and the read API of `dlq serve` from
//! that projection, for every node (each item with its `node`), and an overview
//! (`GET /v1/console`: the nodes with their items and whether they answer, the consumer's lag
//! and waiting events). Actions go to the node that owns the item, on its control subject
//! ([`super::control`]); the console's view changes only when the node's events come back
//! through the stream.

mod actions;
mod control_client;
mod redrive;
mod routes;
mod view;

pub use control_client::{ControlClient, NodeError};
pub use view::{node_of, ConsoleView, NodeView};

use std::future::Future;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use chrono::{DateTime, Utc};
use dlq::consumer::{run_durable_observed, ConsumerStore, DurableConfig, Fold, Progress};
use serde::Serialize;
use tokio_util::sync::CancellationToken;

use super::{Listener, ServeError, Tokens};

/// How long the console waits before it starts its consumer again after it stopped on an
/// error (the bus down, the stream missing).
const RESTART_DELAY: Duration = Duration::from_secs(2);

/// Where the console's consumer stands.
#[derive(Debug, Clone, Default, Serialize)]
pub struct ConsumerStatus {
    /// The stream sequence applied up to.
    pub checkpoint: u64,
    /// The stream's last sequence when last read.
    pub last_sequence: u64,
    /// Stream messages not yet applied.
    pub lag: u64,
    /// Events waiting behind a gap.
    pub waiting: usize,
    /// When the oldest waiting event was written.
    pub oldest_waiting: Option<DateTime<Utc>>,
    /// Why the consumer is not running, if it stopped on an error (it starts again).
    pub error: Option<String>,
}

/// What the console's routes share: the view, the consumer's status, the control client.
pub struct Console {
    view: RwLock<Arc<ConsoleView>>,
    status: Mutex<ConsumerStatus>,
    control: ControlClient,
}

impl Console {
    /// An empty console acting through `control`.
    pub fn new(control: ControlClient) -> Arc<Self> {
        Arc::new(Console {
            view: RwLock::new(Arc::default()),
            status: Mutex::new(ConsumerStatus::default()),
            control,
        })
    }

    /// The current view.
    pub fn view(&self) -> Arc<ConsoleView> {
        self.view.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// The consumer's status.
    pub fn status(&self) -> ConsumerStatus {
        self.status
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    fn observe(&self, fold: &Fold, progress: Progress, rebuild: bool) {
        if rebuild {
            let view = Arc::new(ConsoleView::from_fold(fold));
            *self.view.write().unwrap_or_else(|e| e.into_inner()) = view;
        }
        let mut status = self.status.lock().unwrap_or_else(|e| e.into_inner());
        *status = ConsumerStatus {
            checkpoint: progress.checkpoint,
            last_sequence: progress.last_sequence,
            lag: progress.lag(),
            waiting: fold.waiting(),
            oldest_waiting: fold.oldest_waiting(),
            error: None,
        };
    }

    fn failed(&self, error: String) {
        self.status.lock().unwrap_or_else(|e| e.into_inner()).error = Some(error);
    }
}

/// Runs the durable consumer `config` (following the stream) into `console` until `stop`,
/// starting it again after an error.
pub async fn follow(
    mut config: DurableConfig,
    store: ConsumerStore,
    console: Arc<Console>,
    stop: CancellationToken,
) {
    config.follow = true;
    while !stop.is_cancelled() {
        let mut seen: Option<u64> = None;
        let mut observe = |fold: &Fold, progress: Progress| {
            let rebuild = seen != Some(progress.checkpoint);
            seen = Some(progress.checkpoint);
            console.observe(fold, progress, rebuild);
        };
        match run_durable_observed(&config, &store, stop.clone(), &mut observe).await {
            Ok(_) => {}
            Err(err) => {
                tracing::warn!(error = %err, "the console's consumer stopped; starting it again in {}s", RESTART_DELAY.as_secs());
                console.failed(err.to_string());
                tokio::select! {
                    () = tokio::time::sleep(RESTART_DELAY) => {}
                    () = stop.cancelled() => {}
                }
            }
        }
    }
}

/// Serves the console's page and API on `listener` until `shutdown`.
pub async fn serve_console(
    listener: Listener,
    console: Arc<Console>,
    tokens: Tokens,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), ServeError> {
    let app =
        routes::router(console, tokens).into_make_service_with_connect_info::<super::tls::Peer>();
    let served = match &listener.tls {
        None => {
            axum::serve(listener.listener, app)
                .with_graceful_shutdown(shutdown)
                .await
        }
        Some(tls) => {
            let tls =
                super::tls::TlsListener::new(listener.listener, tls).map_err(ServeError::Server)?;
            axum::serve(tls, app).with_graceful_shutdown(shutdown).await
        }
    };
    served.map_err(ServeError::Server)
}
