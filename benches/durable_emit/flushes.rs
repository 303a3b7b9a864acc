//! Counts the sink writer's group commits: its `debug!("sink group flushed and synced")`, one
//! per flush + fdatasync, caught by a tracing layer. Appends / flushes = the average group.

use std::sync::atomic::{AtomicU64, Ordering};

use tracing::field::{Field, Visit};
use tracing_subscriber::filter::Targets;
use tracing_subscriber::layer::{Context, Layer, SubscriberExt};
use tracing_subscriber::util::SubscriberInitExt;

const MESSAGE: &str = "sink group flushed and synced";
static FLUSHES: AtomicU64 = AtomicU64::new(0);

struct Counter;

#[derive(Default)]
struct IsFlush(bool);

impl Visit for IsFlush {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            self.0 |= format!("{value:?}") == MESSAGE;
        }
    }
}

impl<S: tracing::Subscriber> Layer<S> for Counter {
    fn on_event(&self, event: &tracing::Event<'_>, _: Context<'_, S>) {
        let mut seen = IsFlush::default();
        event.record(&mut seen);
        if seen.0 {
            FLUSHES.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// Installs the counter as the process's tracing subscriber (only the writer's debug events
/// reach it; every other callsite stays disabled).
pub fn install() {
    let only_writer = Targets::new().with_target("dlq::sink::writer", tracing::Level::DEBUG);
    tracing_subscriber::registry()
        .with(Counter.with_filter(only_writer))
        .init();
}

/// Group commits (flush + fdatasync) of every sink in this process so far.
pub fn count() -> u64 {
    FLUSHES.load(Ordering::Relaxed)
}
