//! Where the sink, the emitter and the consumers meet (issue 33, scenarios 3 to 5), through the
//! real `dlq` binary and a real nats-server: consumers never wait for what will never come, and
//! `verify` agrees with the sink.
//!
//! - A group the log refused burns its sequences: the next event names the last durable one,
//!   so `consume` and `consume --durable` apply everything.
//! - An event the sink failed to store goes out as a volatile event: consumers apply it and
//!   `verify` lists it apart (published, not stored on this node), never as an extra.
//! - A caller told `Unconfirmed` whose late write fails: it is stored again, or its volatile
//!   copy published (with the bus down, stored again once the disk takes writes); and the
//!   failure counted.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::process::Output;
use std::time::Duration;

use dlq::emitter::{EmitError, TopicPolicy};
use dlq::sink::{Sink, SinkConfig, SinkError};
use dlq_testkit::cli::Env;
use dlq_testkit::fail_sync::fail_segment_fdatasync;
use dlq_testkit::items::failed_once;
use dlq_testkit::node::{self, connected};
use dlq_testkit::stream::{metric_value, stream_messages};
use dlq_testkit::{wait_for, NatsServer, DEAD_BUS_URL};
use serde_json::{json, Value};

const BIN: &str = env!("CARGO_BIN_EXE_dlq");

fn json_of(out: &Output) -> Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|err| {
        panic!(
            "not JSON ({err}): {}\nstderr: {}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

/// `dlq demo --count N --job-id JOB` with the `nth` fdatasync of a log segment failing.
fn demo_failing_sync(env: &Env, job: &str, count: u32, nth: u32) -> Output {
    let mut cmd = env.demo_command(job, count);
    fail_segment_fdatasync(&mut cmd, &[nth]);
    cmd.output().unwrap()
}

/// The stored events of the data directory, as `(seq, prev_seq)`.
async fn stored_positions(env: &Env) -> Vec<(u64, Option<u64>)> {
    env.events()
        .await
        .iter()
        .map(|e| (e.seq, e.prev_seq))
        .collect()
}

/// `consume`, `consume --durable`, `republish --dry-run` and `verify` agree with the sink:
/// nothing waits, nothing is missing, nothing extra. Returns `verify`'s report.
fn consumers_agree_with_the_sink(env: &Env, stored: usize) -> Value {
    let consumed = env.json(&["consume"]);
    assert_eq!(consumed["waiting_for_predecessor"], 0, "{consumed}");
    assert_eq!(consumed["events_applied"], json!(stored), "{consumed}");

    let store = env.path("consumer");
    let store = store.to_str().unwrap();
    let durable = env.json(&["consume", "--durable", "c1", "--store", store]);
    assert_eq!(durable["waiting_for_predecessor"], 0, "{durable}");

    let republish = env.run(&["republish", "--dry-run"]);
    let republish_report = json_of(&republish);
    assert_eq!(republish_report["missing"], 0, "{republish_report}");
    assert!(republish.status.success(), "{republish_report}");

    let verify = env.run(&["verify"]);
    let report = json_of(&verify);
    assert_eq!(
        (&report["missing"], &report["extra"], &report["diverging"]),
        (&json!(0), &json!(0), &json!(0)),
        "{report}"
    );
    assert_eq!(report["waiting_for_predecessor"], 0, "{report}");
    assert!(verify.status.success(), "{report}");
    let from_store = env.run(&["verify", "--consumer-store", store]);
    let store_report = json_of(&from_store);
    assert_eq!(
        (&store_report["missing"], &store_report["extra"]),
        (&json!(0), &json!(0)),
        "{store_report}"
    );
    assert!(from_store.status.success(), "{store_report}");
    report
}

/// Scenario 3: bus down, a write fails (its sequences are burned), bus up, `reconcile`:
/// before the fix `consume` waited for the burned sequence for good (`events_applied: 2`).
#[test]
fn a_burned_sequence_stalls_no_consumer() {
    let mut env = Env::new(BIN, DEAD_BUS_URL);
    let out = demo_failing_sync(&env, "j1", 6, 3);
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("not made durable")
            || String::from_utf8_lossy(&out.stdout).contains("not made durable"),
        "the third fdatasync failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let positions = runtime.block_on(stored_positions(&env));
    let jumps: Vec<&(u64, Option<u64>)> = positions
        .windows(2)
        .filter(|w| w[1].0 != w[0].0 + 1)
        .map(|w| &w[1])
        .collect();
    assert_eq!(jumps.len(), 1, "one burned run: {positions:?}");

    let server = NatsServer::start();
    env.url = server.url();
    let reconciled = env.json(&["reconcile"]);
    assert_eq!(reconciled["unpublished_after"], 0, "{reconciled}");
    consumers_agree_with_the_sink(&env, positions.len());
}

/// Scenario 5: bus up, a write fails: the emitter publishes the dead-letter without a durable
/// copy. Before the fix it went out under the id of its burned sequence and `verify` reported
/// it as an extra (`1 extra: j2/item-1`); now it is volatile, listed apart.
#[test]
fn an_unstored_event_is_published_volatile_and_verify_lists_it_apart() {
    let server = NatsServer::start();
    let env = Env::new(BIN, &server.url());
    let out = demo_failing_sync(&env, "j2", 4, 2);
    assert!(out.status.code().is_some(), "{out:?}");
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let stored = runtime.block_on(env.events()).len();
    let items = runtime.block_on(env.items()).len();
    assert_eq!(items, 3, "one of the four dead-letters was not stored");
    let reconciled = env.json(&["reconcile"]);
    assert_eq!(reconciled["unpublished_after"], 0, "{reconciled}");

    let report = consumers_agree_with_the_sink(&env, stored + 1);
    assert_eq!(report["unstored"], 1, "{report}");
    let differences = report["differences"].as_array().unwrap();
    assert_eq!(differences.len(), 1, "{report}");
    assert_eq!(differences[0]["kind"], "unstored", "{report}");
    let event_id = differences[0]["event_id"].as_str().unwrap();
    assert!(
        dlq::domain::event::Event::is_volatile_id(event_id),
        "{event_id}"
    );
}

/// `Unconfirmed` means "stored, or reported": the writer took the dead-letter, the disk
/// stalled past the store timeout (the caller is told `Unconfirmed`), then the late write
/// failed. Before the fix that failure was only a warning in the log and the item reached
/// nobody; now its volatile copy is published and the failure counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_write_that_fails_publishes_the_volatile_copy() {
    let server = NatsServer::start();
    let dir = tempfile::tempdir().unwrap();
    let emitter = slow_failing_disk(&server, dir.path()).await;
    let item = late_item("late-1");
    let err = emitter.dead_letter("late", item).await.unwrap_err();
    assert!(
        matches!(
            &err,
            EmitError::Unconfirmed {
                source: SinkError::Unconfirmed(_)
            }
        ),
        "{err:?}"
    );
    wait_for(
        "the volatile copy of the failed late write is in the stream",
        Duration::from_secs(20),
        || in_stream(&server, "late-1", true),
    )
    .await;
    emitter.sink().faults().set_stall(Duration::ZERO);
    emitter.sink().faults().set_fail_flush(false);
    assert!(emitter.sink().item("job-late", "late-1").unwrap().is_none());
    assert_eq!(
        metric_value("dlq_late_store_failures_total", &[("topic", "late")]),
        1.0
    );
    emitter.shutdown().await.unwrap();
}

/// The same with the bus down: the volatile copy cannot be published, so the emitter keeps the
/// dead-letter and stores it again once the disk takes writes (a new append, under a stored
/// id), and the reconciler publishes it when the bus is back. Before: only counted, neither
/// stored nor published (the simulation's seed 9, `scripts/sim.sh --seed 9 --switches all`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_write_that_fails_with_the_bus_down_is_stored_again() {
    let mut server = NatsServer::start();
    let dir = tempfile::tempdir().unwrap();
    let emitter = slow_failing_disk(&server, dir.path()).await;
    server.kill();
    let item = late_item("late-2");
    let err = emitter
        .dead_letter("late-bus-down", item)
        .await
        .unwrap_err();
    assert!(err.is_unconfirmed(), "{err:?}");
    wait_for(
        "the late write failed and is waiting",
        Duration::from_secs(20),
        || async { emitter.unstored_waiting() == 1 },
    )
    .await;
    emitter.sink().faults().set_stall(Duration::ZERO);
    emitter.sink().faults().set_fail_flush(false);
    wait_for(
        "the dead-letter is stored again",
        Duration::from_secs(20),
        || async { emitter.sink().item("job-late", "late-2").unwrap().is_some() },
    )
    .await;
    server.restart();
    wait_for(
        "the stored copy is published under a stored id",
        Duration::from_secs(30),
        || in_stream(&server, "late-2", false),
    )
    .await;
    assert_eq!(emitter.unstored_waiting(), 0);
    emitter.shutdown().await.unwrap();
}

/// An emitter whose disk stalls past the store timeout (callers are told `Unconfirmed`) and
/// then fails every flush, so the late write fails.
async fn slow_failing_disk(server: &NatsServer, dir: &std::path::Path) -> node::NodeEmitter {
    let config = SinkConfig {
        store_timeout: Duration::from_millis(200),
        ..SinkConfig::new(dir)
    };
    let policy = TopicPolicy::default();
    let emitter = node::emitter(config, &server.url(), policy, Duration::from_millis(500)).await;
    connected(&emitter).await;
    emitter.sink().faults().set_stall(Duration::from_secs(1));
    emitter.sink().faults().set_fail_flush(true);
    emitter
}

fn late_item(item_id: &str) -> dlq::domain::model::DeadLetteredItem {
    let data = json!({ "item": item_id });
    failed_once(
        ("job-late", item_id),
        "shell: make",
        2,
        "make failed".into(),
        data,
    )
}

/// Whether the stream holds a dead-letter of `item_id` under a volatile id (`volatile`) or a
/// stored one.
async fn in_stream(server: &NatsServer, item_id: &str, volatile: bool) -> bool {
    stream_messages(&server.url(), "DLQ")
        .await
        .iter()
        .any(|(id, body)| {
            body["item"]["item_id"] == item_id
                && dlq::domain::event::Event::is_volatile_id(id) == volatile
        })
}

/// The `held` list of a `consume` report.
fn held(report: &Value) -> Vec<Value> {
    report["held"].as_array().cloned().unwrap_or_default()
}

/// Scenario 4: a server with `max_payload: 900` refuses the larger events for good; the
/// reconciler parks them. Before the fix `consume` applied nothing (`events_applied: 0`,
/// `waiting_for_predecessor: 6`): the accepted events waited behind the parked ones. Now a stub
/// stands in for each: nothing waits, the items show as held on the node, `verify` explains
/// them; once the limit is raised, `reconcile --retry-parked` publishes the full events and
/// every consumer ends equal to the sink.
#[test]
fn parked_events_stall_no_consumer_and_follow_once_the_bus_takes_them() {
    let mut server = NatsServer::start_with_config("max_payload: 900\n");
    let env = Env::new(BIN, &server.url());
    let mut demo = env.command(&[
        "demo",
        "--count",
        "6",
        "--job-id",
        "j4",
        "--drain-timeout",
        "0s",
    ]);
    let demo = demo.env("RUST_LOG", "warn").output().unwrap();
    let stderr = String::from_utf8_lossy(&demo.stderr);
    assert!(
        stderr.contains("max_payload (900 bytes)") && stderr.contains("stubs"),
        "the limit is named at start: {stderr}"
    );
    let reconciled = env.json(&["reconcile"]);
    let parked = reconciled["parked"].as_u64().unwrap();
    assert!(parked > 0, "{reconciled}");
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let stored = runtime.block_on(env.events()).len();
    let items = runtime.block_on(env.items()).len();

    let consumed = env.json(&["consume"]);
    assert_eq!(consumed["waiting_for_predecessor"], 0, "{consumed}");
    assert_eq!(consumed["events_applied"], json!(stored), "{consumed}");
    let shown = held(&consumed);
    assert!(!shown.is_empty(), "{consumed}");
    let node = runtime.block_on(env.with_sink(|sink| sink.node_id().to_owned()));
    assert_eq!(
        shown[0]["status"],
        json!(format!("held on node {node}, too large for the bus")),
        "{consumed}"
    );
    let store = env.path("consumer");
    let store = store.to_str().unwrap();
    let durable = env.json(&["consume", "--durable", "c1", "--store", store]);
    assert_eq!(durable["waiting_for_predecessor"], 0, "{durable}");
    assert_eq!(held(&durable).len(), shown.len(), "{durable}");

    let republish = json_of(&env.run(&["republish", "--dry-run"]));
    assert_eq!(republish["missing"], 0, "{republish}");
    let verify = env.run(&["verify"]);
    let report = json_of(&verify);
    assert_eq!(
        (&report["missing"], &report["extra"], &report["diverging"]),
        (&json!(0), &json!(0), &json!(0)),
        "{report}"
    );
    assert_eq!(report["held"], json!(shown.len()), "{report}");
    assert!(verify.status.success(), "{report}");

    server.set_config("max_payload: 1048576\n");
    server.restart();
    let retried = env.run(&["reconcile", "--retry-parked"]);
    let retried_report = json_of(&retried);
    assert!(retried.status.success(), "{retried_report}");
    assert_eq!(retried_report["parked"], 0, "{retried_report}");

    let consumed = env.json(&["consume"]);
    assert_eq!(consumed["waiting_for_predecessor"], 0, "{consumed}");
    assert!(held(&consumed).is_empty(), "{consumed}");
    assert_eq!(consumed["items"], json!(items), "{consumed}");
    // The durable consumer saved what it held: the full events released it.
    let durable = env.json(&["consume", "--durable", "c1", "--store", store]);
    assert!(held(&durable).is_empty(), "{durable}");
    assert_eq!(durable["items"], json!(items), "{durable}");
    let report = consumers_agree_with_the_sink(&env, stored + shown.len());
    assert_eq!(report["held"], 0, "{report}");
}
