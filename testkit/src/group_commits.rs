//! Counts every sink's writer's group commits and checkpoints: its `debug!("sink group made
//! durable")`, one per group's fdatasync, and `debug!("sink checkpoint")`, one per sled flush,
//! caught by a tracing layer. Appends / group commits = the average group.

use std::sync::atomic::{AtomicU64, Ordering};

use tracing::field::{Field, Visit};
use tracing_subscriber::filter::Targets;
use tracing_subscriber::layer::{Context, Layer, SubscriberExt};
use tracing_subscriber::util::SubscriberInitExt;

const GROUP: &str = "sink group made durable";
const CHECKPOINT: &str = "sink checkpoint";
static GROUPS: AtomicU64 = AtomicU64::new(0);
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
        match seen.0.as_str() {
            GROUP => GROUPS.fetch_add(1, Ordering::Relaxed),
            CHECKPOINT => CHECKPOINTS.fetch_add(1, Ordering::Relaxed),
            _ => 0,
        };
    }
}

/// Installs the counter as the process's tracing subscriber (only the writer's and the
/// checkpoint's debug events reach it; every other callsite stays disabled).
pub fn install() {
    let only_writer = Targets::new()
        .with_target("dlq::sink::writer", tracing::Level::DEBUG)
        .with_target("dlq::sink::checkpoint", tracing::Level::DEBUG);
    tracing_subscriber::registry()
        .with(Counter.with_filter(only_writer))
        .init();
}

/// Group commits (each one fdatasync) of every sink in this process so far.
pub fn count() -> u64 {
    GROUPS.load(Ordering::Relaxed)
}

/// Checkpoints (sled flush + fdatasync) of every sink in this process so far.
pub fn checkpoints() -> u64 {
    CHECKPOINTS.load(Ordering::Relaxed)
}
