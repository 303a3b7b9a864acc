//! The job runner as a library (`dlq_ops::runner::start`) in-process, with a real sled sink
//! and a real nats-server: the job's Prometheus metrics and the report agree with what ran.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::Duration;

use dlq::bus::{BusConfig, NatsBus};
use dlq::domain::event::EventKind;
use dlq::emitter::reconciler::ReconcilerConfig;
use dlq::emitter::EmitterBuilder;
use dlq::sink::{LocalSink, Sink, SinkConfig};
use dlq_ops::runner::{self, ProgressMode, RunOptions};
use dlq_testkit::stream::{metric_value, metrics, stream_messages};
use dlq_testkit::{wait_for, NatsServer};
use serde_json::json;
use tokio_util::sync::CancellationToken;

/// Writes `items.json` (`n` items `{prefix}{i}`, the first `bad` with `"bad": true`) and a
/// one-step workflow named `name` running `shell` into `dir`; returns the workflow's path.
fn write_job(
    dir: &std::path::Path,
    name: &str,
    items: (usize, &str, usize),
    shell: &str,
) -> std::path::PathBuf {
    let (n, prefix, bad) = items;
    let items: Vec<_> = (0..n)
        .map(|i| json!({"id": format!("{prefix}{i}"), "bad": i < bad}))
        .collect();
    std::fs::write(dir.join("items.json"), json!(items).to_string()).unwrap();
    let workflow = dir.join("flow.yml");
    let yaml = format!(
        "name: {name}\nmode: mapreduce\nmap:\n  input: items.json\n  agent_template:\n    - shell: {}\n",
        serde_json::to_string(shell).unwrap()
    );
    std::fs::write(&workflow, yaml).unwrap();
    workflow
}

#[tokio::test]
async fn a_job_exports_its_counts_and_failures_as_metrics() {
    metrics();
    let nats = NatsServer::start();
    let work = tempfile::tempdir().unwrap();
    let workflow = write_job(
        work.path(),
        "metrics",
        (12, "m", 4),
        "if ${item.bad}; then echo 'Permission denied' >&2; exit 1; fi",
    );
    let data = work.path().join("data");
    let sink = LocalSink::open(SinkConfig::new(&data)).unwrap();
    let bus = NatsBus::connect(BusConfig {
        url: nats.url(),
        ..BusConfig::default()
    })
    .await
    .unwrap();
    let emitter = EmitterBuilder::new(sink, bus).build();
    let report = runner::start(
        emitter.clone(),
        &workflow,
        Some("metrics-job".into()),
        RunOptions::new(&data),
        CancellationToken::new(),
        ProgressMode::Quiet,
    )
    .await
    .unwrap();
    emitter.shutdown().await.unwrap();

    assert!(report.complete());
    assert_eq!((report.summary.successful, report.summary.failed), (8, 4));
    assert_eq!(report.summary.error_types["PermissionError"], 4);
    let pattern = &report.summary.failure_patterns[0];
    assert!(
        pattern.remediation.contains("permission"),
        "{}",
        pattern.remediation
    );
    let job = ("job_id", "metrics-job");
    assert_eq!(
        metric_value("dlq_job_items", &[job, ("outcome", "succeeded")]),
        8.0
    );
    assert_eq!(
        metric_value("dlq_job_items", &[job, ("outcome", "dead_lettered")]),
        4.0
    );
    assert_eq!(
        metric_value("dlq_job_items", &[job, ("outcome", "pending")]),
        0.0
    );
    assert_eq!(
        metric_value(
            "dlq_job_failures_total",
            &[job, ("error_type", "PermissionError")]
        ),
        4.0
    );
    let rate = metric_value("dlq_job_failure_rate", &[job]);
    assert!((rate - 4.0 / 12.0).abs() < 1e-9, "{rate}");
}

/// The sink's writer took the dead-letter but confirmed it only after the store timeout
/// (`EmitError::Unconfirmed`): the job counts the item as dead-lettered, not pending, so
/// `resume` does not dead-letter it a second time; the writer stores it late, once, and the
/// reconciler publishes that one copy.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unconfirmed_dead_letter_counts_as_dead_lettered_once() {
    let nats = NatsServer::start();
    let work = tempfile::tempdir().unwrap();
    let items = json!([{"id": "slow", "bad": true}]);
    std::fs::write(work.path().join("items.json"), items.to_string()).unwrap();
    let workflow = work.path().join("flow.yml");
    std::fs::write(
        &workflow,
        "name: slowdisk\nmode: mapreduce\nmap:\n  input: items.json\n  agent_template:\n    - shell: \"echo boom >&2; exit 1\"\n",
    )
    .unwrap();
    let data = work.path().join("data");
    let sink = LocalSink::open(SinkConfig {
        store_timeout: Duration::from_millis(300),
        ..SinkConfig::new(&data)
    })
    .unwrap();
    sink.faults().set_stall(Duration::from_millis(1500));
    let bus = NatsBus::connect(BusConfig {
        url: nats.url(),
        ..BusConfig::default()
    })
    .await
    .unwrap();
    let emitter = EmitterBuilder::new(sink, bus)
        .reconciler(Some(ReconcilerConfig {
            interval: Duration::from_millis(200),
            ..ReconcilerConfig::default()
        }))
        .build();
    let report = runner::start(
        emitter.clone(),
        &workflow,
        Some("slowdisk-job".into()),
        RunOptions::new(&data),
        CancellationToken::new(),
        ProgressMode::Quiet,
    )
    .await
    .unwrap();
    assert_eq!(
        (report.summary.failed, report.summary.pending),
        (1, 0),
        "{:?}",
        report.summary
    );
    assert!(report.complete());

    emitter.sink().faults().set_stall(Duration::ZERO);
    wait_for(
        "the late dead-letter is stored and published",
        Duration::from_secs(20),
        || async {
            emitter
                .sink()
                .item("slowdisk-job", "slow")
                .unwrap()
                .is_some()
                && emitter.sink().backlog().unwrap().count == 0
        },
    )
    .await;
    let dead_letters = emitter
        .sink()
        .events_from(1)
        .filter(|e| matches!(&e.as_ref().unwrap().kind, EventKind::DeadLettered { item } if item.item_id == "slow"))
        .count();
    assert_eq!(dead_letters, 1, "the item was dead-lettered once");
    let copies: Vec<String> = stream_messages(&nats.url(), "DLQ")
        .await
        .into_iter()
        .filter(|(_, body)| body["item"]["item_id"] == "slow")
        .map(|(id, _)| id)
        .collect();
    assert_eq!(copies.len(), 1, "{copies:?}");
    emitter.shutdown().await.unwrap();
}

/// When the DLQ cannot store a failed item, the runner never drops it: the item stays pending
/// (to be run again on resume), the job does not fail, and nothing reaches the sink.
#[tokio::test]
async fn an_item_whose_dlq_write_fails_stays_pending() {
    let work = tempfile::tempdir().unwrap();
    let workflow = write_job(
        work.path(),
        "failing-dlq",
        (6, "w", 2),
        "if ${item.bad}; then exit 3; fi",
    );
    let data = work.path().join("data");
    let sink = LocalSink::open(SinkConfig::new(&data)).unwrap();
    sink.faults().set_fail_writes(true);
    let bus = NatsBus::connect(BusConfig {
        url: dlq_testkit::DEAD_BUS_URL.into(),
        ..BusConfig::default()
    })
    .await
    .unwrap();
    let emitter = EmitterBuilder::new(sink.clone(), bus).build();
    let report = runner::start(
        emitter.clone(),
        &workflow,
        Some("dlq-down".into()),
        RunOptions::new(&data),
        CancellationToken::new(),
        ProgressMode::Quiet,
    )
    .await
    .unwrap();
    emitter.shutdown().await.unwrap();

    assert!(!report.complete());
    assert_eq!(
        (
            report.summary.successful,
            report.summary.failed,
            report.summary.pending
        ),
        (4, 0, 2),
        "{:?}",
        report.summary
    );
    sink.faults().set_fail_writes(false);
    assert_eq!(sink.items().count(), 0);
}
