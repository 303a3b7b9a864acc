//! What the sections share: the items, concurrent calls, medians, the sink and the bus.

use std::path::Path;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use dlq::bus::{Bus, BusConfig, NatsBus};
use dlq::domain::model::{DeadLetteredItem, FailureDetail};
use dlq::sink::{LocalSink, SinkConfig};

use crate::{JOB, PUBLISH_TIMEOUT};

// ---------------------------------------------------------------- items

/// The payload of every store bench: ~1 KiB of `item_data`, one `CommandFailed` failure (as
/// in `durable_emit`). Item `i` gets id `item-{i}` and failure time `base + i ms`, so the
/// newest-first order is the insertion order reversed and both stores hold identical items.
pub struct Items {
    pub template: DeadLetteredItem,
    pub base: DateTime<Utc>,
}

impl Items {
    pub fn new() -> Items {
        let letter = |i: u32| char::from(b'a' + (i * 7 % 26) as u8);
        let blob: String = (0..1024u32).map(letter).collect();
        let data = serde_json::json!({ "file": "src/lib.rs", "priority": 5, "blob": blob });
        let base = Utc::now() - chrono::Duration::days(1);
        let failure: FailureDetail = serde_json::from_value(serde_json::json!({
            "attempt_number": 1, "timestamp": base, "error_type": {"CommandFailed": {"exit_code": 101}},
            "error_message": "cargo test failed with exit code 101", "agent_id": "agent-1",
            "step_failed": "shell: cargo test", "duration_ms": 45_000 }))
        .expect("failure detail");
        let template =
            DeadLetteredItem::new(JOB, "item-0", data, vec![failure]).expect("one failure");
        Items { template, base }
    }

    pub fn nth(&self, i: usize) -> DeadLetteredItem {
        let mut item = self.template.clone();
        item.item_id = format!("item-{i}");
        let at = self.base + chrono::Duration::milliseconds(i as i64);
        (item.first_attempt, item.last_attempt) = (at, at);
        for failure in &mut item.failure_history {
            failure.timestamp = at;
        }
        item
    }
}

// ---------------------------------------------------------------- helpers

pub use dlq_testkit::bench::load::{histogram, run_concurrent, Run};

/// Median wall time in ms of `reps` calls of `f`.
pub fn median_ms<T>(reps: usize, mut f: impl FnMut() -> T) -> (f64, T) {
    let mut times = Vec::new();
    let mut last = None;
    for _ in 0..reps.max(1) {
        let t = Instant::now();
        last = Some(f());
        times.push(t.elapsed().as_secs_f64() * 1e3);
    }
    times.sort_by(f64::total_cmp);
    (times[times.len() / 2], last.expect("at least one rep"))
}

pub fn open_sink(dir: &Path) -> LocalSink {
    let mut config = SinkConfig::new(dir);
    config.capacity_per_job = 10_000_000; // no FIFO eviction: the queue grows to every size
    LocalSink::open(config).expect("open sink")
}

pub fn bus_config(url: &str, name: &str) -> BusConfig {
    let mut config = BusConfig::default();
    (config.url, config.publish_timeout) = (url.into(), PUBLISH_TIMEOUT);
    // A stream per scenario, so none publishes into a stream another one filled.
    (config.stream, config.subject) = (name.to_uppercase(), format!("bench.{name}"));
    config
}

/// Messages stored in the bus's stream (JetStream's own count: proof the PubAcks were real).
pub async fn stream_messages(bus: &NatsBus) -> u64 {
    let js = async_nats::jetstream::new(bus.client().clone());
    let mut stream = js.get_stream(&bus.config().stream).await.expect("stream");
    stream.info().await.expect("stream info").state.messages
}

pub async fn wait_healthy<B: Bus>(bus: &B) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !bus.is_healthy() {
        assert!(Instant::now() < deadline, "bus not connected within 20 s");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

pub fn load_average() -> String {
    let text = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    text.split_whitespace()
        .take(3)
        .collect::<Vec<_>>()
        .join(" ")
}
