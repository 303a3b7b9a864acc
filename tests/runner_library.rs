//! The job runner as a library (`dlq::runner::start`) in-process, with a real sled sink
//! and a real nats-server: the job's Prometheus metrics and the report agree with what ran,
//! and an item the DLQ cannot store stays pending instead of being dropped.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use dlq::bus::{BusConfig, NatsBus};
use dlq::emitter::EmitterBuilder;
use dlq::runner::{self, ProgressMode, RunOptions};
use dlq::sink::{SinkConfig, SledSink};
use dlq_testkit::stream::{metric_value, metrics};
use dlq_testkit::NatsServer;
use serde_json::json;
use tokio_util::sync::CancellationToken;

#[tokio::test]
async fn a_job_exports_its_counts_and_failures_as_metrics() {
    metrics();
    let nats = NatsServer::start();
    let work = tempfile::tempdir().unwrap();
    let items: Vec<_> = (0..12)
        .map(|n| json!({"id": format!("m{n}"), "bad": n < 4}))
        .collect();
    std::fs::write(work.path().join("items.json"), json!(items).to_string()).unwrap();
    let workflow = work.path().join("flow.yml");
    std::fs::write(
        &workflow,
        "name: metrics\nmode: mapreduce\nmap:\n  input: items.json\n  agent_template:\n    - shell: \"if ${item.bad}; then echo 'Permission denied' >&2; exit 1; fi\"\n",
    )
    .unwrap();
    let data = work.path().join("data");
    let sink = SledSink::open(SinkConfig::new(&data)).unwrap();
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

/// When the DLQ cannot store a failed item, the runner never drops it: the item stays pending
/// (to be run again on resume), the job does not fail, and nothing reaches the sink.
#[tokio::test]
async fn an_item_whose_dlq_write_fails_stays_pending() {
    let work = tempfile::tempdir().unwrap();
    let items: Vec<_> = (0..6)
        .map(|n| json!({"id": format!("w{n}"), "bad": n < 2}))
        .collect();
    std::fs::write(work.path().join("items.json"), json!(items).to_string()).unwrap();
    let workflow = work.path().join("flow.yml");
    std::fs::write(
        &workflow,
        "name: failing-dlq\nmode: mapreduce\nmap:\n  input: items.json\n  agent_template:\n    - shell: \"if ${item.bad}; then exit 3; fi\"\n",
    )
    .unwrap();
    let data = work.path().join("data");
    let sink = SledSink::open(SinkConfig::new(&data)).unwrap();
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
