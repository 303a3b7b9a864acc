//! Waiting on a node's emitter (the sled sink and NATS) in integration tests.

use std::time::Duration;

use dlq::bus::{Bus, BusConfig, NatsBus};
use dlq::emitter::reconciler::ReconcilerConfig;
use dlq::emitter::{Emitter, EmitterBuilder, TopicPolicies, TopicPolicy};
use dlq::sink::{LocalSink, Sink, SinkConfig};

use crate::wait::wait_for;
use crate::NatsServer;

/// The emitter of a dlq node, as tests build it.
pub type NodeEmitter = Emitter<LocalSink, NatsBus>;

/// Waits until the emitter's bus is connected.
pub async fn connected(emitter: &NodeEmitter) {
    wait_for("bus connected", Duration::from_secs(20), || async {
        emitter.bus().is_healthy()
    })
    .await;
}

/// Kills the server and waits until the client has noticed.
pub async fn kill_bus(server: &mut NatsServer, emitter: &NodeEmitter) {
    server.kill();
    wait_for(
        "client notices the dead server",
        Duration::from_secs(20),
        || async { !emitter.bus().is_healthy() },
    )
    .await;
}

/// Waits until the sink has nothing left to publish.
pub async fn drained(emitter: &NodeEmitter) {
    wait_for(
        "unpublished backlog drained",
        Duration::from_secs(60),
        || async { emitter.sink().backlog().unwrap_or_default().count == 0 },
    )
    .await;
}

/// Every event id in the sink's log, in sequence order.
pub fn logged_ids(sink: &LocalSink) -> Vec<String> {
    sink.events_from(1)
        .map(|event| event.map(|e| e.event_id))
        .collect::<Result<_, _>>()
        .unwrap_or_else(|err| panic!("the sink's log cannot be read: {err}"))
}

/// Each event in the sink's log is in the server's `DLQ` stream exactly once, and the stream
/// holds nothing else.
pub async fn assert_stream_matches_log(sink: &LocalSink, server: &NatsServer) {
    let streamed = crate::stream::stream_ids(&server.url(), "DLQ").await;
    let unique: std::collections::HashSet<&String> = streamed.iter().collect();
    assert_eq!(
        unique.len(),
        streamed.len(),
        "duplicates in the stream: {streamed:?}"
    );
    let logged = logged_ids(sink);
    assert_eq!(unique, logged.iter().collect(), "stream and log differ");
}

/// An emitter as the integration tests build one: a sled sink opened with `config`, a NATS
/// bus at `url` whose publishes time out after `publish_timeout` (reconnecting within
/// 200 ms), `policy` for every topic, and a reconciler polling every 200 ms.
pub async fn emitter(
    config: SinkConfig,
    url: &str,
    policy: TopicPolicy,
    publish_timeout: Duration,
) -> NodeEmitter {
    crate::stream::metrics();
    let sink = LocalSink::open(config).unwrap_or_else(|err| panic!("open the sink: {err}"));
    let bus = NatsBus::connect(BusConfig {
        url: url.to_owned(),
        publish_timeout,
        reconnect_max_delay: Duration::from_millis(200),
        ..BusConfig::default()
    })
    .await
    .unwrap_or_else(|err| panic!("connect to {url}: {err}"));
    EmitterBuilder::new(sink, bus)
        .policies(TopicPolicies {
            default: policy,
            ..TopicPolicies::default()
        })
        .publish_timeout(publish_timeout)
        .reconciler(Some(ReconcilerConfig {
            interval: Duration::from_millis(200),
            ..ReconcilerConfig::default()
        }))
        .build()
}
