//! Realistic items for benchmarks and load tests.

use chrono::Utc;
use dlq::domain::event::{Event, EventKind};
use dlq::domain::model::{DeadLetteredItem, ErrorType, FailureDetail};

/// An item with ~1 KiB of `item_data` and one `CommandFailed` failure, built once and cloned
/// per call (job `job-0`, item `item-0`: callers set their own ids).
pub fn template_item() -> DeadLetteredItem {
    template_item_sized(1024)
}

/// [`template_item`] with a `blob` of `blob_bytes` letters in its `item_data` (1024 there;
/// 65,536 for the 64 KiB payload of `durable_emit`).
pub fn template_item_sized(blob_bytes: usize) -> DeadLetteredItem {
    let letter = |i: usize| char::from(b'a' + (i * 7 % 26) as u8);
    let blob: String = (0..blob_bytes).map(letter).collect();
    let data = serde_json::json!({ "file": "src/lib.rs", "priority": 5, "blob": blob });
    let failure: FailureDetail = serde_json::from_value(serde_json::json!({
        "attempt_number": 1, "timestamp": Utc::now(), "error_type": {"CommandFailed": {"exit_code": 101}},
        "error_message": "cargo test failed with exit code 101", "agent_id": "agent-1",
        "step_failed": "shell: cargo test", "duration_ms": 45_000 }))
    .expect("failure detail");
    DeadLetteredItem::new("job-0", "item-0", data, vec![failure]).expect("one failure")
}

/// An item of `job` whose `step` failed once, exiting with `exit_code` and saying `message`,
/// with `data` as its item data.
pub fn failed_once(
    (job, id): (&str, &str),
    step: &str,
    exit_code: i32,
    message: String,
    data: serde_json::Value,
) -> DeadLetteredItem {
    let failure = FailureDetail {
        attempt_number: 1,
        timestamp: Utc::now(),
        error_type: ErrorType::CommandFailed { exit_code },
        error_message: message,
        stack_trace: None,
        agent_id: "agent-1".into(),
        step_failed: step.into(),
        duration_ms: 10,
        json_log_location: None,
    };
    DeadLetteredItem::new(job, id, data, vec![failure]).expect("one failure")
}

/// The event a sink of node `node` would store for `item` at `seq`, published without a sink
/// (the publish-only baselines; JetStream drops repeated ids, so each `seq` is new).
pub fn dead_lettered_event(node: &str, seq: u64, topic: &str, item: DeadLetteredItem) -> Event {
    Event {
        event_id: Event::legacy_id(node, seq),
        node_id: node.into(),
        seq,
        epoch: None,
        prev_epoch: None,
        prev_seq: None,
        timestamp: Utc::now(),
        job_id: item.job_id.clone(),
        topic: topic.into(),
        kind: EventKind::DeadLettered { item: item.into() },
    }
}
