//! The plain-file ceiling and dlq itself.

use std::future::Future;
use std::io::Write as _;
use std::path::Path;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use dlq::bus::{Bus, BusConfig, NatsBus};
use dlq::domain::model::{DeadLetteredItem, FailureDetail};
use dlq::emitter::{EmitterBuilder, TopicPolicies};
use dlq::sink::{LocalSink, SinkConfig};
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

/// A contender, set up and ready for calls made one at a time by [`crate::alternate`].
pub struct Contender {
    /// The `n`-th call: returns once the item is durable (and acknowledged, where there is a
    /// bus). Building the item happens when called, before the call's clock starts; the work
    /// is in the future.
    pub call: Box<dyn FnMut(usize) -> CallFuture + Send>,
    /// What the calls need alive: servers, processes, connections.
    pub keep: Vec<Box<dyn std::any::Any + Send>>,
    /// Tears down after the last call what the run made outside this process (a queue) or
    /// what must stop in order (an emitter).
    pub close: Option<CallFuture>,
}

/// One call's future.
pub type CallFuture = Pin<Box<dyn Future<Output = Result<(), String>> + Send>>;

/// Appends `event` to one file, `fdatasync` after each: the disk's ceiling.
pub fn plain_file(dir: &Path, event: &[u8]) -> Contender {
    let path = dir.join("plain.log");
    let file = std::fs::File::create(&path).expect("create plain.log");
    let (file, event) = (Arc::new(Mutex::new(file)), Arc::new(event.to_vec()));
    Contender {
        call: Box::new(move |_| {
            let (file, event) = (file.clone(), event.clone());
            Box::pin(async move {
                let mut file = file.lock().map_err(|_| "plain file lock poisoned")?;
                let written = file.write_all(&event).and_then(|()| file.sync_data());
                written.map_err(|e| e.to_string())
            })
        }),
        keep: Vec::new(),
        close: None,
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

/// `dead_letter` with the bus up; every call must be durable and published.
pub async fn dlq(dir: &Path) -> Contender {
    let server = NatsServer::start();
    let sink = LocalSink::open(SinkConfig::new(dir.join("dlq-sink"))).expect("open sink");
    let bus = ready_bus(&server).await.expect("bus");
    let emitter = EmitterBuilder::new(sink, bus)
        .policies(TopicPolicies::default())
        .publish_timeout(PUBLISH_TIMEOUT)
        .build();
    let closing = emitter.clone();
    Contender {
        call: Box::new(move |n| {
            let (emitter, item) = (emitter.clone(), item(n));
            Box::pin(async move {
                let receipt = emitter
                    .dead_letter(TOPIC, item)
                    .await
                    .map_err(|e| e.to_string())?;
                if receipt.published {
                    Ok(())
                } else {
                    Err("stored but not published".into())
                }
            })
        }),
        keep: vec![Box::new(server)],
        close: Some(Box::pin(async move {
            closing.shutdown().await.map_err(|e| e.to_string())
        })),
    }
}

/// One JetStream publish with PubAck, nothing stored: the bus's share of every contender
/// that publishes after storing (dlq, Redis + NATS).
pub async fn bus_alone() -> Contender {
    let server = NatsServer::start();
    let bus = Arc::new(ready_bus(&server).await.expect("bus"));
    Contender {
        call: Box::new(move |n| {
            let event = dead_lettered_event("peers-bus", n as u64 + 1, TOPIC, item(n));
            let bus = bus.clone();
            Box::pin(async move {
                bus.publish(&event).await.map_err(|e| e.to_string())?;
                Ok(())
            })
        }),
        keep: vec![Box::new(server)],
        close: None,
    }
}
