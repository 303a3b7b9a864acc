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
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use dlq::consumer::{run_durable_observed, ConsumerStore, DurableConfig, Fold, Progress};
use serde::Serialize;
use tokio_util::sync::CancellationToken;

use super::{Listener, ServeError, Tokens};

/// How long the console waits before it starts its consumer again after it stopped on an
/// error (the bus down, the stream missing).
const RESTART_DELAY: Duration = Duration::from_secs(2);

/// While the consumer is behind the stream, the view (rebuilt whole from the fold) is rebuilt at
/// most this often; once caught up, after every batch that moved the checkpoint. Rebuilding it
/// after every batch of a catch-up made the console's first catch-up quadratic in the items:
/// 17,606 events/s at 100,000 events against 43,042 for the durable consumer alone
/// (`cargo bench --bench consumer_rebuild`, docs/benchmarks.md).
const VIEW_EVERY_WHILE_BEHIND: Duration = Duration::from_secs(1);

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
        let mut shown = ShownView::default();
        let mut observe = |fold: &Fold, progress: Progress| {
            let rebuild = shown.rebuild(progress, Instant::now());
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

/// Which checkpoint the console's view shows, and when it was built: decides when to rebuild
/// it (pure, for tests). The consumer reports after every batch, and once a second while it
/// waits for messages, so a view skipped while behind is rebuilt at the latest a second after
/// the consumer caught up.
#[derive(Debug, Default)]
struct ShownView {
    /// The checkpoint the view was built at, and when.
    built: Option<(u64, Instant)>,
}

impl ShownView {
    /// Whether to rebuild the view after a batch that left the consumer at `progress`, `now`.
    fn rebuild(&mut self, progress: Progress, now: Instant) -> bool {
        let rebuild = match self.built {
            None => true,
            Some((checkpoint, _)) if checkpoint == progress.checkpoint => false,
            Some((_, at)) => {
                progress.lag() == 0 || now.duration_since(at) >= VIEW_EVERY_WHILE_BEHIND
            }
        };
        if rebuild {
            self.built = Some((progress.checkpoint, now));
        }
        rebuild
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

#[cfg(test)]
mod tests {
    use super::*;

    fn at(checkpoint: u64, last_sequence: u64) -> Progress {
        Progress {
            checkpoint,
            last_sequence,
        }
    }

    #[test]
    fn the_view_is_rebuilt_when_caught_up_and_at_most_once_a_second_while_behind() {
        let (mut shown, start) = (ShownView::default(), Instant::now());
        let after = |ms| start + Duration::from_millis(ms);
        assert!(
            shown.rebuild(at(0, 0), start),
            "the first report builds the view"
        );
        assert!(!shown.rebuild(at(0, 0), after(5)), "nothing moved");
        assert!(
            !shown.rebuild(at(100, 90_000), after(10)),
            "behind, 10 ms later"
        );
        assert!(
            !shown.rebuild(at(200, 90_000), after(900)),
            "behind, 0.9 s later"
        );
        assert!(
            shown.rebuild(at(300, 90_000), after(1_000)),
            "behind, a second later"
        );
        assert!(!shown.rebuild(at(400, 90_000), after(1_100)));
        assert!(shown.rebuild(at(90_000, 90_000), after(1_200)), "caught up");
        assert!(
            !shown.rebuild(at(90_000, 90_000), after(2_200)),
            "idle: nothing moved"
        );
        assert!(
            shown.rebuild(at(90_001, 90_001), after(2_210)),
            "a new event, caught up"
        );
    }

    #[test]
    fn a_view_skipped_behind_is_built_by_the_next_report_once_caught_up() {
        let (mut shown, start) = (ShownView::default(), Instant::now());
        assert!(shown.rebuild(at(0, 500), start));
        // The last batch left the consumer behind (the stream grew meanwhile) ...
        assert!(!shown.rebuild(at(400, 500), start + Duration::from_millis(20)));
        // ... and the next report builds it: caught up ...
        assert!(shown.rebuild(at(500, 500), start + Duration::from_millis(30)));
        // ... or, when the stream's last messages never come (lag stays), the idle report a
        // second later at the same checkpoint.
        assert!(!shown.rebuild(at(600, 700), start + Duration::from_millis(40)));
        assert!(shown.rebuild(at(600, 700), start + Duration::from_millis(1_040)));
    }
}
