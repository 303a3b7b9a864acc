//! Counts every sink's writer's group commits and checkpoints: group commits from the counter
//! `dlq_sink_group_commits_total` (one per group's fdatasync) of the process's Prometheus
//! recorder ([`crate::stream::metrics`], shared with the tests' other metrics), checkpoints
//! from the writer's `debug!("sink checkpoint")`, one per sled flush, caught by a tracing
//! layer. Appends / group commits = the average group.

use std::sync::atomic::{AtomicU64, Ordering};

use tracing::field::{Field, Visit};
use tracing_subscriber::filter::Targets;
use tracing_subscriber::layer::{Context, Layer, SubscriberExt};
use tracing_subscriber::util::SubscriberInitExt;

const CHECKPOINT: &str = "sink checkpoint";
static CHECKPOINTS: AtomicU64 = AtomicU64::new(0);

struct Counter;

#[derive(Default)]
struct Message(String);

impl Visit for Message {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            self.0 = format!("{value:?}");
        }
    }
}

impl<S: tracing::Subscriber> Layer<S> for Counter {
    fn on_event(&self, event: &tracing::Event<'_>, _: Context<'_, S>) {
        let mut seen = Message::default();
        event.record(&mut seen);
        if seen.0 == CHECKPOINT {
            CHECKPOINTS.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// Installs the process's Prometheus recorder (once; the group commits are counted there from
/// now on) and the checkpoint counter as the process's tracing subscriber (only the
/// checkpoint's debug events reach it; every other callsite stays disabled).
pub fn install() {
    crate::stream::metrics();
    let only_checkpoints =
        Targets::new().with_target("dlq::sink::writer::checkpoint", tracing::Level::DEBUG);
    tracing_subscriber::registry()
        .with(Counter.with_filter(only_checkpoints))
        .init();
}

/// Group commits (each one fdatasync) of every sink in this process since [`install`].
pub fn count() -> u64 {
    crate::stream::metric_value(dlq::metrics::SINK_GROUP_COMMITS, &[]) as u64
}

/// Checkpoints (sled flush + fdatasync) of every sink in this process so far.
pub fn checkpoints() -> u64 {
    CHECKPOINTS.load(Ordering::Relaxed)
}
