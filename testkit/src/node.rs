//! Waiting on a node's emitter (the sled sink and NATS) in integration tests.

use std::time::Duration;

use dlq::bus::{Bus, NatsBus};
use dlq::emitter::Emitter;
use dlq::sink::{Sink, SledSink};

use crate::wait::wait_for;
use crate::NatsServer;

/// The emitter of a dlq node, as tests build it.
pub type NodeEmitter = Emitter<SledSink, NatsBus>;

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
