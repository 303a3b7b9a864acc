//! How a scheduler embeds dlq: build one emitter at start, clone it into workers, call
//! `dead_letter` on the failure path, shut down at exit.
//!
//! Run: `cargo run --example scheduler -- [nats-url]` (works without a NATS server too: the
//! failures stay in ./dlq-example-data and are published once a server is reachable).

use std::time::Duration;

use chrono::Utc;
use dlq::bus::{BusConfig, NatsBus};
use dlq::domain::failure::dead_lettered_item;
use dlq::domain::model::FailureDetail;
use dlq::domain::signature::classify;
use dlq::emitter::{EmitError, EmitterBuilder, TopicPolicies, TopicPolicy};
use dlq::sink::{SinkConfig, SledSink};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "nats://127.0.0.1:4222".into());
    let sink = SledSink::open(SinkConfig::new("dlq-example-data"))?;
    let bus = NatsBus::connect(BusConfig {
        url,
        ..BusConfig::default()
    })
    .await?;
    let policies = TopicPolicies {
        default: TopicPolicy {
            retry_attempts: 2,
            retry_delay: Duration::from_millis(200),
            ..TopicPolicy::default()
        },
        ..TopicPolicies::default()
    };
    let emitter = EmitterBuilder::new(sink, bus).policies(policies).build();

    // A worker's failure path: describe the failed attempt, hand it over, move on.
    let message = "cargo test failed with exit code 101";
    let failure = FailureDetail {
        attempt_number: 1,
        timestamp: Utc::now(),
        error_type: classify(message, Some(101), false),
        error_message: message.into(),
        stack_trace: None,
        agent_id: "worker-1".into(),
        step_failed: "shell: cargo test".into(),
        duration_ms: 4200,
        json_log_location: None,
    };
    let data = serde_json::json!({ "file": "src/main.rs" });
    let item = dead_lettered_item("job-42", "item-7", data, vec![failure], None)
        .ok_or("an item needs at least one failure")?;
    match emitter.dead_letter("mapreduce", item).await {
        Ok(receipt) => println!(
            "durable as {:?}; published now: {}",
            receipt.event_ids, receipt.published
        ),
        Err(err @ EmitError::NotStored { .. }) => eprintln!("not durable, log it yourself: {err}"),
        // The sink has it and stores it late; the reconciler publishes it. Do not emit again.
        Err(err @ EmitError::Unconfirmed { .. }) => eprintln!("stored late: {err}"),
        Err(err) => eprintln!("refused: {err}"),
    }
    emitter.shutdown().await?;
    Ok(())
}
