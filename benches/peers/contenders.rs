//! The plain-file ceiling and dlq itself.

use std::io::Write as _;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use dlq::bus::{Bus, BusConfig, NatsBus};
use dlq::domain::model::{DeadLetteredItem, FailureDetail};
use dlq::emitter::{EmitterBuilder, TopicPolicies};
use dlq::sink::{LocalSink, SinkConfig};
use dlq_testkit::bench::load::{histogram, run_concurrent, Run};
use dlq_testkit::items::dead_lettered_event;
use dlq_testkit::NatsServer;

const TOPIC: &str = "bench";
const PUBLISH_TIMEOUT: Duration = Duration::from_secs(5);

/// The `n`-th failed item: 1 KiB of data, one failure.
pub fn item(n: usize) -> DeadLetteredItem {
    let blob: String = (0..1024u32)
        .map(|i| char::from(b'a' + (i * 7 % 26) as u8))
        .collect();
    let data = serde_json::json!({ "file": "src/lib.rs", "priority": 5, "blob": blob });
    let failure: FailureDetail = serde_json::from_value(serde_json::json!({
        "attempt_number": 1, "timestamp": chrono::Utc::now(),
        "error_type": {"CommandFailed": {"exit_code": 101}},
        "error_message": "cargo test failed with exit code 101", "agent_id": "agent-1",
        "step_failed": "shell: cargo test", "duration_ms": 45_000 }))
    .expect("failure detail");
    DeadLetteredItem::new("job-0", &format!("item-{n}"), data, vec![failure]).expect("one failure")
}

/// The event JSON every contender stores (and publishes): what dlq puts on the bus.
pub fn sample_event_json() -> Vec<u8> {
    dead_lettered_event("peers", 1, TOPIC, item(0))
        .to_json()
        .expect("event json")
}

/// Appends `event` `total` times to one file, `fdatasync` after each.
pub fn plain_file(dir: &Path, event: &[u8], total: usize) -> Run {
    let path = dir.join("plain.log");
    let mut file = std::fs::File::create(&path).expect("create plain.log");
    let mut hist = histogram();
    let started = Instant::now();
    for _ in 0..total {
        let t = Instant::now();
        file.write_all(event).expect("append");
        file.sync_data().expect("fdatasync");
        hist.saturating_record(t.elapsed().as_micros().max(1) as u64);
    }
    Run {
        hist,
        secs: started.elapsed().as_secs_f64(),
        ok: total as u64,
        errors: Vec::new(),
    }
}

/// A bus to `server` with its stream made ready, as every publishing contender uses it.
pub async fn ready_bus(server: &NatsServer) -> Result<NatsBus, String> {
    let config = BusConfig {
        publish_timeout: PUBLISH_TIMEOUT,
        ..BusConfig::at(server.url())
    };
    let bus = NatsBus::connect(config).await.map_err(|e| e.to_string())?;
    bus.prepare().await.map_err(|e| e.to_string())?;
    Ok(bus)
}

/// `dead_letter` one at a time with the bus up; every call must be durable and published.
pub async fn dlq(dir: &Path, total: usize) -> Run {
    let server = NatsServer::start();
    let sink = LocalSink::open(SinkConfig::new(dir.join("dlq-sink"))).expect("open sink");
    let bus = ready_bus(&server).await.expect("bus");
    let emitter = EmitterBuilder::new(sink, bus)
        .policies(TopicPolicies::default())
        .publish_timeout(PUBLISH_TIMEOUT)
        .build();
    let next = Arc::new(AtomicUsize::new(0));
    let em = emitter.clone();
    let run = run_concurrent(1, total, move |_, _| {
        let (emitter, item) = (em.clone(), item(next.fetch_add(1, Ordering::Relaxed)));
        async move {
            let receipt = emitter
                .dead_letter(TOPIC, item)
                .await
                .map_err(|e| e.to_string())?;
            if receipt.published {
                Ok(true)
            } else {
                Err("stored but not published".into())
            }
        }
    })
    .await;
    emitter.shutdown().await.expect("shutdown");
    assert!(run.errors.is_empty(), "dlq: {:?}", run.errors.first());
    run
}

/// One JetStream publish with PubAck at a time, nothing stored: the bus's share of every
/// contender that publishes after storing (dlq, Redis + NATS).
pub async fn bus_alone(total: usize) -> Run {
    let server = NatsServer::start();
    let bus = Arc::new(ready_bus(&server).await.expect("bus"));
    let next = Arc::new(AtomicUsize::new(0));
    let run = run_concurrent(1, total, move |_, _| {
        let n = next.fetch_add(1, Ordering::Relaxed);
        let event = dead_lettered_event("peers-bus", n as u64 + 1, TOPIC, item(n));
        let bus = bus.clone();
        async move {
            bus.publish(&event).await.map_err(|e| e.to_string())?;
            Ok(true)
        }
    })
    .await;
    assert!(run.errors.is_empty(), "bus alone: {:?}", run.errors.first());
    run
}
