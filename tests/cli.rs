//! The `dlq` binary end to end: demo without a bus, reconcile once it is up, status, rebuild,
//! config errors, a data directory held by another process, and `/metrics`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use dlq_testkit::stream::stream_ids;
use dlq_testkit::{free_port, http_get, poll_until, spawn_tied, NatsServer, DEAD_BUS_URL};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use serde_json::Value;

/// The `dlq` binary under test.
const DLQ: &str = env!("CARGO_BIN_EXE_dlq");

fn dlq(data_dir: &Path, url: &str, args: &[&str]) -> Output {
    dlq_testkit::cli::dlq_output(DLQ, data_dir, url, args)
}

fn json(output: &Output) -> Value {
    assert!(
        output.status.success(),
        "dlq failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).unwrap()
}

/// A config that keeps runs short: no retries on the emit path, short publish timeout.
fn write_config(data_dir: &Path) {
    std::fs::write(
        data_dir.with_extension("yml"),
        "topics:\n  default:\n    retry_attempts: 0\nbus:\n  publish_timeout: 300ms\n  reconnect_max_delay: 200ms\n",
    )
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn demo_without_bus_then_reconcile_publishes_everything() {
    let work = tempfile::tempdir().unwrap();
    let data = work.path().join("data");
    write_config(&data);
    let mut server = NatsServer::start();
    let url = server.url();
    server.kill();

    let demo = json(&dlq(
        &data,
        &url,
        &["demo", "--count", "4", "--drain-timeout", "0s"],
    ));
    assert_eq!(demo["emitted"], 4);
    assert_eq!(demo["published_on_emit"], 0);
    // Each item, stored without a publish attempt while the bus is down (no emit-failed audit
    // events: nothing was attempted).
    assert_eq!(demo["unpublished"], 4);
    let status = json(&dlq(&data, &url, &["status"]));
    assert_eq!(status["items"], 4);
    assert_eq!(status["unpublished"], 4);
    assert_eq!(status["node_id"], demo["node_id"]);

    server.restart();
    let reconcile = json(&dlq(&data, &url, &["reconcile", "--timeout", "60s"]));
    assert_eq!(reconcile["unpublished_before"], 4);
    assert_eq!(reconcile["unpublished_after"], 0);
    assert_eq!(stream_ids(&url, "DLQ").await.len(), 4);
    assert_eq!(json(&dlq(&data, &url, &["status"]))["unpublished"], 0);

    let rebuilt = json(&dlq(&data, &url, &["rebuild"]));
    assert_eq!(rebuilt["events_replayed"], 4);
    assert_eq!(json(&dlq(&data, &url, &["status"]))["items"], 4);
}

#[test]
fn reconcile_gives_up_with_exit_4_while_the_bus_is_down() {
    let work = tempfile::tempdir().unwrap();
    let data = work.path().join("data");
    write_config(&data);
    let url = DEAD_BUS_URL.to_owned();
    json(&dlq(
        &data,
        &url,
        &["demo", "--count", "1", "--drain-timeout", "0s"],
    ));
    let out = dlq(&data, &url, &["reconcile", "--timeout", "1s"]);
    assert_eq!(out.status.code(), Some(4));
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["unpublished_after"], 1);
}

#[test]
fn invalid_config_is_a_usage_error_that_names_the_key_and_changes_nothing() {
    let work = tempfile::tempdir().unwrap();
    let data = work.path().join("data");
    std::fs::write(data.with_extension("yml"), "sink:\n  store_timout: 2s\n").unwrap();
    let out = dlq(&data, "nats://127.0.0.1:1", &["status"]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("store_timout"), "{stderr}");
    assert!(stderr.contains("line 2"), "{stderr}");
    assert!(!data.exists(), "nothing may be created on bad input");
}

#[test]
fn a_held_data_directory_is_a_clear_error_and_metrics_are_served() {
    let work = tempfile::tempdir().unwrap();
    let data = work.path().join("data");
    write_config(&data);
    let url = DEAD_BUS_URL.to_owned();
    let port = free_port(0);
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_dlq"));
    cmd.arg("--data-dir")
        .arg(&data)
        .args([
            "--nats-url",
            &url,
            "--metrics-addr",
            &format!("127.0.0.1:{port}"),
        ])
        .args(["demo", "--loop"])
        .env("DLQ_CONFIG", data.with_extension("yml"))
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let mut child = spawn_tied(cmd).unwrap();

    let body = poll_until(Duration::from_secs(30), || {
        let (status, body) = http_get(port, "/metrics")?;
        // With the bus down demo stores and leaves the events to the reconciler: deferred,
        // not failed.
        let both = body.contains("dlq_events_stored_total") && deferred_bus_down(&body);
        (status == 200 && both).then_some(body)
    })
    .expect("metrics served");
    assert!(deferred_bus_down(&body), "{body}");
    assert!(body.contains("dlq_unpublished_events"), "{body}");

    let out = dlq(&data, &url, &["status"]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("Another process holds this data directory"),
        "{stderr}"
    );

    kill(Pid::from_raw(child.id() as i32), Signal::SIGKILL).unwrap();
    child.wait().unwrap();
}

/// Without --nats-url, the config file's `bus.url` is used, and it may list several servers
/// separated by commas (here a dead one first).
#[test]
fn the_config_file_chooses_the_bus_and_accepts_a_server_list() {
    let server = NatsServer::start();
    let work = tempfile::tempdir().unwrap();
    let data = work.path().join("data");
    let config = work.path().join("cluster.yml");
    let dead = DEAD_BUS_URL;
    std::fs::write(
        &config,
        format!(
            "bus:\n  url: {dead}, {}\n  publish_timeout: 2s\n",
            server.url()
        ),
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_dlq"))
        .arg("--data-dir")
        .arg(&data)
        .arg("--config")
        .arg(&config)
        .args(["--format", "json", "demo", "--count", "3", "--job-id", "c"])
        .env_remove("DLQ_NATS_URL")
        .output()
        .unwrap();
    let report = json(&out);
    assert_eq!(report["unpublished"], 0, "{report}");
    let ids = tokio::runtime::Runtime::new()
        .unwrap()
        .block_on(stream_ids(&server.url(), "DLQ"));
    assert!(ids.len() >= 3, "{ids:?}");
}

/// `dlq --help` describes today's sink: a durable segment log first, sled only as the
/// projection commands query (it once said "sled sink first" and "holding the sled sink"), and
/// `serve` lists the retry route.
#[test]
fn help_describes_the_segment_log_first_and_sled_as_the_projection() {
    let output = Command::new(DLQ).arg("--help").output().unwrap();
    assert!(output.status.success());
    // clap wraps long lines: compare the words, not the layout.
    let help = String::from_utf8_lossy(&output.stdout)
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    assert!(help.contains("a local segment log first"), "{help}");
    assert!(help.contains("the sled projection"), "{help}");
    assert!(help.contains("clear, purge, retry as JSON"), "{help}");
    assert!(
        !help.contains("sled sink") && !help.contains("sled log"),
        "{help}"
    );
}

/// Whether the metrics count demo's emits deferred because the bus is down.
fn deferred_bus_down(metrics: &str) -> bool {
    metrics.lines().any(|line| {
        line.starts_with("dlq_emit_deferred_total{")
            && line.contains("topic=\"demo\"")
            && line.contains("reason=\"bus_down\"")
    })
}
