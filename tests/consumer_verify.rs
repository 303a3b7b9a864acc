//! The state rebuilt from the stream alone equals the emitter's sink, with real processes and a
//! real nats-server: a mixed workload with an outage in the middle, `dlq verify` catching what
//! never reached the bus, and three emitter processes into one stream.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use chrono::{TimeDelta, Utc};
use dlq::bus::{Bus, BusConfig, NatsBus};
use dlq::consumer::{compare, read_from_start};
use dlq::domain::command::Command as SinkCommand;
use dlq::domain::event::RemovalReason;
use dlq::domain::model::{DeadLetteredItem, ErrorType, FailureDetail};
use dlq::emitter::reconciler::ReconcilerConfig;
use dlq::emitter::{EmitterBuilder, TopicPolicies, TopicPolicy};
use dlq::sink::{LocalSink, Sink, SinkConfig};
use dlq_testkit::{wait_for, NatsServer};
use serde_json::Value;

/// The `dlq` binary under test.
const DLQ: &str = env!("CARGO_BIN_EXE_dlq");

fn item(job: &str, id: &str, days_ago: i64) -> DeadLetteredItem {
    let failure = FailureDetail {
        attempt_number: 1,
        timestamp: Utc::now() - TimeDelta::days(days_ago),
        error_type: ErrorType::CommandFailed { exit_code: 2 },
        error_message: format!("step failed for {id}"),
        stack_trace: None,
        agent_id: "agent".into(),
        step_failed: "shell: make".into(),
        duration_ms: 10,
        json_log_location: None,
    };
    DeadLetteredItem::new(job, id, serde_json::json!({ "id": id }), vec![failure]).unwrap()
}

fn dlq(data_dir: &Path, url: &str, args: &[&str]) -> Output {
    dlq_testkit::cli::dlq_output(DLQ, data_dir, url, args)
}

fn json(output: &Output) -> Value {
    serde_json::from_slice(&output.stdout)
        .unwrap_or_else(|_| panic!("not JSON: {}", String::from_utf8_lossy(&output.stderr)))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rebuild_from_the_stream_equals_the_sink_after_a_mixed_workload_and_an_outage() {
    let mut server = NatsServer::start();
    let dir = tempfile::tempdir().unwrap();
    let sink = LocalSink::open(SinkConfig {
        capacity_per_job: 5,
        ..SinkConfig::new(dir.path().join("data"))
    })
    .unwrap();
    let bus = NatsBus::connect(BusConfig {
        url: server.url(),
        publish_timeout: Duration::from_millis(300),
        reconnect_max_delay: Duration::from_millis(200),
        ..BusConfig::default()
    })
    .await
    .unwrap();
    let policy = TopicPolicy {
        retry_attempts: 0,
        ..TopicPolicy::default()
    };
    let emitter = EmitterBuilder::new(sink, bus)
        .policies(TopicPolicies {
            default: policy,
            ..TopicPolicies::default()
        })
        .reconciler(Some(ReconcilerConfig {
            interval: Duration::from_millis(100),
            ..ReconcilerConfig::default()
        }))
        .build();
    wait_for("bus up", Duration::from_secs(20), || async {
        emitter.bus().is_healthy()
    })
    .await;

    let mut step = 0;
    for round in 0..3 {
        if round == 1 {
            server.kill(); // the middle round goes through the reconciler, out of order
        }
        for n in 0..12 {
            step += 1;
            let job = format!("job-{}", n % 2);
            // Ids repeat: repeated failures merge; 8 distinct ids per job evict at capacity 5.
            let id = format!("i{}", (n + round * 5) % 8);
            emitter
                .dead_letter("mixed", item(&job, &id, (step % 50) as i64))
                .await
                .unwrap();
        }
        let resolve = SinkCommand::Remove {
            job_id: "job-0".into(),
            item_id: emitter
                .sink()
                .items()
                .next()
                .unwrap()
                .unwrap()
                .item
                .item_id
                .clone(),
            reason: RemovalReason::Resolved,
            by: None,
        };
        emitter.submit("mixed", resolve).await.unwrap();
        if round == 1 {
            server.restart();
        }
    }
    dlq::sink::purge(emitter.sink(), Utc::now() - TimeDelta::days(30), None, None)
        .await
        .unwrap();
    let clear = SinkCommand::Clear {
        job_id: "job-1".into(),
        limit: 2,
        by: None,
    };
    emitter.submit("mixed", clear).await.unwrap();
    emitter.wake_reconciler();
    wait_for("backlog drained", Duration::from_secs(60), || async {
        emitter.sink().backlog().unwrap().count == 0
    })
    .await;

    let read = read_from_start(&BusConfig::at(server.url()), "DLQ", None)
        .await
        .unwrap();
    assert_eq!(read.fold.waiting(), 0);
    let differences = compare(emitter.sink().items(), &read.fold.projection).unwrap();
    assert_eq!(differences, vec![], "stream rebuild differs from the sink");
    assert!(!read.fold.projection.items.is_empty());
    let events = emitter.sink().events_from(1).count() as u64;
    assert_eq!(
        read.fold.stats.applied, events,
        "every event applied exactly once"
    );
    emitter.shutdown().await.unwrap();
}

#[test]
fn verify_reports_what_never_reached_the_bus_and_passes_once_reconciled() {
    let mut server = NatsServer::start();
    let url = server.url();
    let work = tempfile::tempdir().unwrap();
    let data = work.path().join("data");
    std::fs::write(
        data.with_extension("yml"),
        "topics:\n  default:\n    retry_attempts: 0\nbus:\n  publish_timeout: 300ms\n",
    )
    .unwrap();
    let warm = dlq(&data, &url, &["demo", "--count", "2", "--job-id", "v"]);
    assert!(warm.status.success());
    server.kill();
    let down = dlq(
        &data,
        &url,
        &[
            "demo",
            "--count",
            "3",
            "--job-id",
            "w",
            "--drain-timeout",
            "0s",
        ],
    );
    assert!(down.status.success());
    server.restart();

    let verify = dlq(&data, &url, &["verify"]);
    assert_eq!(verify.status.code(), Some(5));
    let report = json(&verify);
    assert_eq!(report["missing"], 3, "{report}");
    assert_eq!(report["extra"], 0);

    assert!(dlq(&data, &url, &["reconcile", "--timeout", "60s"])
        .status
        .success());
    let verify = dlq(&data, &url, &["verify"]);
    let report = json(&verify);
    assert_eq!(verify.status.code(), Some(0), "{report}");
    assert_eq!(report["missing"], 0);
    assert_eq!(report["diverging"], 0);
}

/// Three emitter processes at once into one stream.
#[test]
fn three_emitter_processes_merge_into_one_projection() {
    let server = NatsServer::start();
    let url = server.url();
    let work = tempfile::tempdir().unwrap();
    let dirs: Vec<_> = (0..3)
        .map(|n| work.path().join(format!("node{n}")))
        .collect();
    for dir in &dirs {
        std::fs::write(dir.with_extension("yml"), "{}\n").unwrap();
    }
    let children: Vec<_> = dirs
        .iter()
        .enumerate()
        .map(|(n, dir)| {
            Command::new(env!("CARGO_BIN_EXE_dlq"))
                .arg("--data-dir")
                .arg(dir)
                .args(["--nats-url", &url, "--node-id", &format!("emitter-{n}")])
                .args([
                    "--format",
                    "json",
                    "demo",
                    "--count",
                    "20",
                    "--job-id",
                    &format!("job-{n}"),
                ])
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    // All three run at once: their events interleave in the stream.
    for child in children {
        let output = child.wait_with_output().unwrap();
        assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
    let consume = dlq(&dirs[0], &url, &["consume"]);
    assert!(consume.status.success());
    let report = json(&consume);
    assert_eq!(report["items"], 60, "{report}");
    assert_eq!(report["duplicates_dropped"], 0);
    for n in 0..3 {
        assert_eq!(report["last_seq_per_node"][format!("emitter-{n}")], 20);
        assert_eq!(report["items_per_job"][format!("job-{n}")], 20);
        let verify = dlq(&dirs[n], &url, &["verify"]);
        assert_eq!(verify.status.code(), Some(0), "{}", json(&verify));
    }
}
