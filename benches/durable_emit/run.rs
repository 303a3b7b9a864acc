//! What every section shares: the results row, histograms, the sink, the bus, concurrent calls.

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use dlq::bus::{Bus, BusConfig, NatsBus};
use dlq::domain::model::DeadLetteredItem;
use dlq::emitter::reconciler::ReconcilerConfig;
use dlq::emitter::{Emitter, EmitterBuilder, TopicPolicies};
use dlq::sink::{LocalSink, SinkConfig};
use hdrhistogram::Histogram;

pub use dlq_testkit::bench::load::{histogram, run_concurrent};

pub const TOPIC: &str = "bench";
pub const JOBS: usize = 64;
pub const PUBLISH_TIMEOUT: Duration = Duration::from_secs(5);

/// One line of the bench's own table.
#[derive(Default)]
pub struct Row {
    pub section: &'static str,
    pub name: String,
    pub count: u64,
    pub calls_per_sec: Option<f64>,
    pub events_per_sec: Option<f64>,
    pub p50_us: Option<u64>,
    pub p99_us: Option<u64>,
    pub p999_us: Option<u64>,
    /// Events/s of the ceiling this row is read against (the plain-file limit, the bus alone
    /// or the serial ceiling), and what it is.
    pub limit: Option<(f64, String)>,
    /// The share of `limit` the row must reach, and the target's text (`None`: read only).
    pub limit_target: Option<(f64, &'static str)>,
    /// This process's CPU (user + system) per event over the calls, in µs.
    pub cpu_us: Option<f64>,
    /// The most CPU per event the row may cost (issue 37), in µs.
    pub cpu_target_us: Option<f64>,
    pub target: Option<String>,
    pub target_met: Option<bool>,
    pub note: String,
}

impl Row {
    pub fn new(section: &'static str, name: impl Into<String>, count: usize) -> Row {
        let mut row = Row::default();
        (row.section, row.name, row.count) = (section, name.into(), count as u64);
        row
    }
    pub fn latency(mut self, h: &Histogram<u64>) -> Row {
        self.p50_us = Some(h.value_at_quantile(0.50));
        self.p99_us = Some(h.value_at_quantile(0.99));
        self.p999_us = Some(h.value_at_quantile(0.999));
        self
    }
    pub fn rates(mut self, calls: Option<f64>, events: Option<f64>) -> Row {
        (self.calls_per_sec, self.events_per_sec) = (calls, events);
        self
    }
    pub fn target(mut self, text: &str, met: bool) -> Row {
        (self.target, self.target_met) = (Some(text.into()), Some(met));
        self
    }
    pub fn note(mut self, note: impl Into<String>) -> Row {
        self.note = note.into();
        self
    }
}

/// Bytes this process sent towards storage (`write_bytes` of /proc/self/io: pages dirtied).
pub fn disk_bytes_written() -> u64 {
    let io = std::fs::read_to_string("/proc/self/io").unwrap_or_default();
    io.lines()
        .find_map(|l| l.strip_prefix("write_bytes: ")?.trim().parse().ok())
        .unwrap_or(0)
}

/// CPU seconds (user + system) this process has used.
pub fn cpu_seconds() -> f64 {
    dlq_testkit::bench::cpu::seconds(None)
}

/// The template with a new item id (never used before in this process) in one of `JOBS` jobs.
pub fn next_item(template: &DeadLetteredItem, job: usize) -> DeadLetteredItem {
    static NEXT_ID: AtomicU64 = AtomicU64::new(0);
    let mut item = template.clone();
    item.job_id = format!("job-{}", job % JOBS);
    item.item_id = format!("item-{}", NEXT_ID.fetch_add(1, Ordering::Relaxed));
    item
}

pub fn open_sink(dir: &Path) -> LocalSink {
    let mut config = SinkConfig::new(dir);
    config.capacity_per_job = 10_000_000; // distinct ids and no FIFO eviction
    LocalSink::open(config).expect("open sink")
}

/// A bus for `url`. `up`: the server is expected, so its first connection may take up to the
/// publish timeout; a bus that must stay down is given 100 ms instead (the connect waits that
/// long for a first connection, and publishes fail at once while disconnected either way).
pub async fn connect_bus(url: String, up: bool) -> NatsBus {
    let mut config = BusConfig::default();
    let wait = if up {
        PUBLISH_TIMEOUT
    } else {
        Duration::from_millis(100)
    };
    (config.url, config.publish_timeout) = (url, wait);
    NatsBus::connect(config).await.expect("connect bus")
}

pub async fn wait_healthy<B: Bus>(bus: &B) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !bus.is_healthy() {
        assert!(Instant::now() < deadline, "bus not connected within 20 s");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// A fresh sink in `dir` and an emitter on it with a reconciler, connected to `url`; with the
/// bus `up`, once the connection is healthy.
pub async fn bench_emitter(
    dir: &Path,
    url: &str,
    up: bool,
    policies: TopicPolicies,
) -> Emitter<LocalSink, NatsBus> {
    let emitter = EmitterBuilder::new(open_sink(dir), connect_bus(url.into(), up).await)
        .policies(policies)
        .publish_timeout(PUBLISH_TIMEOUT)
        .reconciler(Some(ReconcilerConfig::default()))
        .build();
    if up {
        wait_healthy(emitter.bus()).await;
    }
    emitter
}
