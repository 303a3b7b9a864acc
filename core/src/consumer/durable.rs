//! A durable consumer: folds the stream into its own [`ConsumerStore`], checkpointed by stream
//! sequence, so a restart continues where the last run stopped.
//!
//! The store's checkpoint is the only source of truth for the position: each run (re)creates the
//! named JetStream consumer to deliver from `checkpoint + 1`, and saves state and checkpoint
//! together after every batch (written while the next batch is fetched, one save at a time). Nothing depends on server-side acknowledgements, so a consumer
//! killed between fetching and saving simply fetches the same messages again; the fold drops what
//! it already applied.

use std::time::Duration;

use async_nats::jetstream::{self, consumer};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use super::fetch::{self, Fetched, FETCH_MAX};
use super::fold::{AcceptedGap, Fold, MAX_WAITING_PER_NODE};
use super::store::{ConsumerStore, StoreError};
use super::stream::{denied, explain, holes, offer_by_sequence, offer_fetched, ReadError};
use crate::bus::Denials;

/// Consumer-side metric: stream last sequence minus the consumer's checkpoint.
pub const LAG: &str = "dlq_consumer_lag";
/// Consumer-side metric: events applied to the projection.
pub const APPLIED: &str = "dlq_consumer_events_applied_total";
/// Consumer-side metric: duplicate events dropped.
pub const DUPLICATES: &str = "dlq_consumer_duplicates_total";
/// Consumer-side metric: events waiting for a predecessor that has not arrived (a gap in a
/// node's sequence blocks every later event of that node).
pub const WAITING: &str = "dlq_consumer_waiting_events";
/// Consumer-side metric: age in seconds of the oldest event waiting behind a gap (0: none).
pub const OLDEST_WAITING_AGE: &str = "dlq_consumer_oldest_waiting_age_seconds";
/// Consumer-side metric: messages the consumer skipped, read by sequence instead.
pub const READ_BY_SEQUENCE: &str = "dlq_consumer_read_by_sequence_total";
/// Consumer-side metric: sequences the stream no longer holds (deleted or removed by limits).
pub const ABSENT: &str = "dlq_consumer_absent_sequences_total";

/// How long a caught-up consumer that follows the stream waits for a message before it looks
/// at the stream again.
const FOLLOW_WAIT: Duration = Duration::from_secs(1);

/// How a durable consumer runs.
#[derive(Debug, Clone)]
pub struct DurableConfig {
    /// The servers, credentials and TLS (its `stream` is not used: see `stream`).
    pub bus: crate::bus::BusConfig,
    /// Stream name.
    pub stream: String,
    /// Consumer name (visible in the server's monitoring).
    pub name: String,
    /// Forget the store and rebuild from the first message.
    pub from_start: bool,
    /// Keep consuming until cancelled; otherwise stop once caught up.
    pub follow: bool,
    /// Nodes whose current gap the operator accepts before reading (`--accept-gap`).
    pub accept_gaps: Vec<String>,
}

/// What a run did.
#[derive(Debug)]
pub struct DurableRun {
    /// The state after the run.
    pub fold: Fold,
    /// Events applied during this run.
    pub applied_this_run: u64,
    /// Messages read during this run.
    pub messages: u64,
    /// The stream sequence reached.
    pub checkpoint: u64,
    /// The gaps accepted at the start of this run.
    pub accepted: Vec<AcceptedGap>,
}

/// Where a durable consumer stands after a batch, as [`run_durable_observed`] reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Progress {
    /// The stream sequence applied and saved up to.
    pub checkpoint: u64,
    /// The stream's last sequence when the batch was read.
    pub last_sequence: u64,
}

impl Progress {
    /// Stream messages not yet applied.
    pub fn lag(&self) -> u64 {
        self.last_sequence.saturating_sub(self.checkpoint)
    }
}

/// Runs a durable consumer until caught up (or until `shutdown`, with `follow`).
pub async fn run_durable(
    config: &DurableConfig,
    store: &ConsumerStore,
    shutdown: CancellationToken,
) -> Result<DurableRun, ConsumeError> {
    run_durable_observed(config, store, shutdown, &mut |_, _| {}).await
}

/// [`run_durable`], calling `observe` with the fold and the progress after every batch (and
/// once after loading the store, before the first): how a fleet console serves the projection
/// while the consumer follows the stream.
pub async fn run_durable_observed(
    config: &DurableConfig,
    store: &ConsumerStore,
    shutdown: CancellationToken,
    observe: &mut (dyn FnMut(&Fold, Progress) + Send),
) -> Result<DurableRun, ConsumeError> {
    let (client, denials) = crate::bus::connect_watched(&config.bus, Duration::from_secs(5))
        .await
        .map_err(ReadError::from)?;
    run(config, store, shutdown, client, &denials, observe)
        .await
        .map_err(|err| match err {
            ConsumeError::Read(read) => ConsumeError::Read(explain(read, &denials)),
            other => other,
        })
}

async fn run(
    config: &DurableConfig,
    store: &ConsumerStore,
    shutdown: CancellationToken,
    client: async_nats::Client,
    denials: &Denials,
    observe: &mut (dyn FnMut(&Fold, Progress) + Send),
) -> Result<DurableRun, ConsumeError> {
    let stream_error = |reason: String| ReadError::Stream {
        stream: config.stream.clone(),
        reason,
        source: None,
    };
    let js = jetstream::new(client);
    let mut stream = js
        .get_stream(&config.stream)
        .await
        .map_err(|e| stream_error(e.to_string()).caused_by(e))?;
    if config.from_start {
        store.clear()?;
    }
    let mut checkpoint = store.checkpoint()?;
    let mut fold = store.load()?;
    let applied_before = fold.stats.applied;
    let mut accepted = Vec::new();
    for node in &config.accept_gaps {
        let gap = fold
            .accept_gap(node)
            .ok_or_else(|| ConsumeError::NoGap(node.clone()))?;
        warn!(node = %gap.node, epoch = gap.epoch.as_deref().unwrap_or("none"), from = gap.from, to = gap.to, released = gap.released,
              "gap accepted by the operator: these events of the node will never be applied");
        store.record_accepted_gap(&gap)?;
        accepted.push(gap);
    }
    if !accepted.is_empty() {
        store.save(&mut fold, checkpoint)?;
    }
    // Whatever the server remembers of this consumer, delivery resumes after our checkpoint.
    let _ = stream.delete_consumer(&config.name).await;
    let reader = stream
        .create_consumer(consumer::pull::Config {
            durable_name: Some(config.name.clone()),
            deliver_policy: consumer::DeliverPolicy::ByStartSequence {
                start_sequence: checkpoint + 1,
            },
            ack_policy: consumer::AckPolicy::None,
            ..Default::default()
        })
        .await
        .map_err(|e| stream_error(e.to_string()).caused_by(e))?;
    info!(name = %config.name, checkpoint, "consumer resuming");
    observe(
        &fold,
        Progress {
            checkpoint,
            last_sequence: checkpoint,
        },
    );
    let mut messages = 0u64;
    let mut caught_up = false;
    let mut writing: Option<JoinHandle<Result<(), StoreError>>> = None;
    // The next batch, fetched while the last one is folded and saved (catching up only).
    let mut ahead: Option<JoinHandle<Result<Vec<Fetched>, ReadError>>> = None;
    let outcome: Result<(), ConsumeError> = async {
        loop {
            if shutdown.is_cancelled() {
                return Ok(());
            }
            let (applied, duplicates) = (fold.stats.applied, fold.stats.duplicates);
            let fetched = if let Some(task) = ahead.as_mut() {
                let joined = tokio::select! {
                    joined = task => joined,
                    () = shutdown.cancelled() => return Ok(()),
                };
                ahead = None;
                joined.map_err(|err| {
                    stream_error(format!("the task fetching a batch failed: {err}")).caused_by(err)
                })??
            } else if caught_up {
                // Caught up and following: wait for the next message instead of polling.
                tokio::select! {
                    fetched = fetch::take_next(&reader, FOLLOW_WAIT, &config.stream) => fetched?,
                    () = shutdown.cancelled() => return Ok(()),
                }
            } else {
                fetch::take_batch(reader.clone(), config.stream.clone()).await?
            };
            // A full batch says more may wait: fetch it while this one is folded and saved.
            if !caught_up && fetched.len() == FETCH_MAX {
                let next = fetch::take_batch(reader.clone(), config.stream.clone());
                ahead = Some(tokio::spawn(next));
            }
            let batch = offer_fetched(fetched, &mut fold);
            denied(denials)?;
            messages += batch.messages;
            if batch.malformed > 0 {
                warn!(
                    skipped = batch.malformed,
                    "skipped messages that are not dlq events"
                );
            }
            let reached = batch.reached.max(checkpoint);
            // What the consumer did not deliver below the highest sequence it delivered is read
            // by sequence: the checkpoint passes it, so it would never be read again.
            for seq in holes(checkpoint, reached, &batch.delivered) {
                if offer_by_sequence(&stream, seq, &mut fold, &stream_error).await? {
                    metrics::counter!(READ_BY_SEQUENCE).increment(1);
                } else {
                    metrics::counter!(ABSENT).increment(1);
                    warn!(
                        seq,
                        "stream sequence no longer held (deleted or removed by limits)"
                    );
                }
            }
            report_gaps(&fold);
            if let Some((node, waiting)) = fold.overflowing() {
                // Stop before the checkpoint passes these messages: nothing is lost by stopping.
                return Err(ConsumeError::GapTooLong {
                    node: node.to_owned(),
                    waiting,
                });
            }
            if reached > checkpoint {
                // Encode here; write on a blocking thread while the next batch is fetched. One
                // write at a time, in order.
                let pending = store.prepare(&mut fold, reached)?;
                finish(writing.take()).await?;
                writing = Some(tokio::task::spawn_blocking(move || pending.commit()));
                checkpoint = reached;
                metrics::counter!(APPLIED).increment(fold.stats.applied - applied);
                metrics::counter!(DUPLICATES).increment(fold.stats.duplicates - duplicates);
            }
            let last = stream
                .info()
                .await
                .map_err(|e| stream_error(e.to_string()).caused_by(e))?
                .state
                .last_sequence;
            metrics::gauge!(LAG).set(last.saturating_sub(checkpoint) as f64);
            observe(
                &fold,
                Progress {
                    checkpoint,
                    last_sequence: last,
                },
            );
            caught_up = checkpoint >= last;
            if !config.follow && caught_up {
                return Ok(());
            }
        }
    }
    .await;
    // A batch fetched ahead and not folded is not saved: the next run's consumer starts after
    // the checkpoint and delivers it again.
    if let Some(task) = ahead {
        task.abort();
    }
    // The last save is written before the run reports, whatever stopped it.
    let written = finish(writing.take()).await;
    outcome?;
    written?;
    Ok(DurableRun {
        applied_this_run: fold.stats.applied - applied_before,
        fold,
        messages,
        checkpoint,
        accepted,
    })
}

/// Exports how many events wait behind a gap and how old the oldest is.
fn report_gaps(fold: &Fold) {
    metrics::gauge!(WAITING).set(fold.waiting() as f64);
    let age = fold.oldest_waiting().map_or(0.0, |oldest| {
        (chrono::Utc::now() - oldest).num_milliseconds().max(0) as f64 / 1000.0
    });
    metrics::gauge!(OLDEST_WAITING_AGE).set(age);
}

/// Waits for a save being written, if any.
async fn finish(writing: Option<JoinHandle<Result<(), StoreError>>>) -> Result<(), StoreError> {
    match writing {
        None => Ok(()),
        Some(handle) => handle.await.map_err(|err| StoreError::Io {
            path: std::path::PathBuf::new(),
            reason: format!("the task writing a save failed: {err}"),
            source: Some(err.into()),
        })?,
    }
}

/// Why a durable consumer stopped.
#[derive(Debug, thiserror::Error)]
pub enum ConsumeError {
    /// Reading the stream failed.
    #[error(transparent)]
    Read(#[from] ReadError),
    /// The consumer's store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// `--accept-gap` named a node with nothing waiting behind a gap.
    #[error("node '{0}' has no events waiting behind a gap: nothing to accept (see `waiting_for_predecessor` in the consumer's report)")]
    NoGap(String),
    /// Too many events of one node wait behind a gap.
    #[error("{waiting} events of node '{node}' wait behind a gap (more than {MAX_WAITING_PER_NODE}): run `dlq republish` on that node to repair the stream, or accept the gap with `dlq consume --durable ... --accept-gap {node}` (those events are then never applied); the consumer stopped before its checkpoint passed them")]
    GapTooLong {
        /// The node.
        node: String,
        /// Events waiting.
        waiting: usize,
    },
}
