//! A durable consumer keeps its projection in its own store, checkpointed by stream sequence:
//! later runs apply only what is new, and a consumer killed mid-stream and restarted ends with
//! the same projection as the emitter's sink, every event applied exactly once.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use dlq::sink::{LocalSink, SinkConfig};
use dlq_testkit::stream::stream_len;
use dlq_testkit::{spawn_tied, wait_for, NatsServer};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use serde_json::Value;

/// The `dlq` binary under test.
const DLQ: &str = env!("CARGO_BIN_EXE_dlq");

fn dlq(data_dir: &Path, url: &str, args: &[&str]) -> Command {
    dlq_testkit::cli::dlq_command(DLQ, data_dir, url, args)
}

fn run(cmd: &mut Command) -> (Output, Value) {
    json_of(cmd.output().unwrap())
}

/// The command's output and its stdout as JSON.
fn json_of(output: Output) -> (Output, Value) {
    let value = serde_json::from_slice(&output.stdout).unwrap_or_else(|_| {
        panic!(
            "not JSON ({}): {}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        )
    });
    (output, value)
}

/// [`run`], failing if the command has not ended within `limit` (it is killed): a consumer
/// that lost track of messages would fetch for ever.
fn run_within(cmd: &mut Command, limit: Duration) -> (Output, Value) {
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + limit;
    while child.try_wait().unwrap().is_none() {
        if std::time::Instant::now() > deadline {
            child.kill().unwrap();
            panic!("{cmd:?} still running after {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    json_of(child.wait_with_output().unwrap())
}

fn setup(work: &Path) -> std::path::PathBuf {
    let data = work.join("data");
    std::fs::write(
        data.with_extension("yml"),
        "topics:\n  default:\n    retry_attempts: 0\nbus:\n  publish_timeout: 500ms\n",
    )
    .unwrap();
    data
}

fn event_count(data: &Path) -> u64 {
    let sink = LocalSink::open(SinkConfig::new(data)).unwrap();
    sink.events_from(1).count() as u64
}

/// A private server, and under one temp dir a data directory and a durable consumer's store.
fn world() -> (NatsServer, tempfile::TempDir, PathBuf, PathBuf) {
    let server = NatsServer::start();
    let work = tempfile::tempdir().unwrap();
    let data = setup(work.path());
    let store = work.path().join("consumer");
    (server, work, data, store)
}

#[test]
fn later_runs_apply_only_new_events() {
    let (server, _work, data, store) = world();
    let url = server.url();
    let store_arg = store.to_str().unwrap();
    let consume = ["consume", "--durable", "c1", "--store", store_arg];

    assert!(
        dlq(&data, &url, &["demo", "--count", "10", "--job-id", "a"])
            .status()
            .unwrap()
            .success()
    );
    let (out, first) = run(&mut dlq(&data, &url, &consume));
    assert!(out.status.success());
    let events = event_count(&data);
    assert_eq!(first["events_applied_this_run"], events, "{first}");
    assert_eq!(first["items"], 10);

    assert!(dlq(&data, &url, &["demo", "--count", "5", "--job-id", "b"])
        .status()
        .unwrap()
        .success());
    let (_, second) = run(&mut dlq(&data, &url, &consume));
    let all = event_count(&data);
    assert!(all >= events + 5);
    assert_eq!(second["events_applied_this_run"], all - events, "{second}");
    assert_eq!(second["events_applied"], all);
    assert_eq!(second["items"], 15);

    let (_, idle) = run(&mut dlq(&data, &url, &consume));
    assert_eq!(idle["events_applied_this_run"], 0, "{idle}");

    let (out, verify) = run(&mut dlq(
        &data,
        &url,
        &["verify", "--consumer-store", store_arg],
    ));
    assert_eq!(out.status.code(), Some(0), "{verify}");

    let rebuild = [
        "consume",
        "--durable",
        "c1",
        "--store",
        store_arg,
        "--from-start",
    ];
    let (_, rebuilt) = run(&mut dlq(&data, &url, &rebuild));
    assert_eq!(rebuilt["events_applied_this_run"], all, "{rebuilt}");
    assert_eq!(rebuilt["events_applied"], all, "a rebuild starts from zero");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_consumer_killed_mid_stream_ends_equal_to_the_sink() {
    let server = NatsServer::start();
    let url = server.url();
    let work = tempfile::tempdir().unwrap();
    let data = setup(work.path());
    let store = work.path().join("consumer");
    let store_arg = store.to_str().unwrap().to_owned();
    let quiet = |mut cmd: Command| {
        cmd.stdout(Stdio::null()).stderr(Stdio::null());
        spawn_tied(cmd).unwrap()
    };
    let follow = |store: &str| {
        dlq(
            &data,
            &url,
            &["consume", "--durable", "c2", "--store", store, "--follow"],
        )
    };
    let mut emitter = quiet(dlq(&data, &url, &["demo", "--loop", "--job-id", "live"]));
    let grown = |n: u64| {
        let url = url.clone();
        async move { stream_len(&url, "DLQ").await >= n }
    };
    wait_for("first events", Duration::from_secs(30), || grown(100)).await;
    let mut consumer = quiet(follow(&store_arg));
    wait_for("more events", Duration::from_secs(30), || grown(300)).await;
    kill(Pid::from_raw(consumer.id() as i32), Signal::SIGKILL).unwrap();
    consumer.wait().unwrap();
    wait_for(
        "events while the consumer is down",
        Duration::from_secs(30),
        || grown(500),
    )
    .await;
    let mut consumer = quiet(follow(&store_arg));
    wait_for("events after the restart", Duration::from_secs(30), || {
        grown(700)
    })
    .await;
    kill(Pid::from_raw(emitter.id() as i32), Signal::SIGKILL).unwrap();
    emitter.wait().unwrap();
    kill(Pid::from_raw(consumer.id() as i32), Signal::SIGKILL).unwrap();
    consumer.wait().unwrap();

    let reconcile = dlq(&data, &url, &["reconcile", "--timeout", "60s"])
        .output()
        .unwrap();
    assert!(reconcile.status.success());
    let (out, caught_up) = run(&mut dlq(
        &data,
        &url,
        &["consume", "--durable", "c2", "--store", &store_arg],
    ));
    assert!(out.status.success(), "{caught_up}");
    let (out, verify) = run(&mut dlq(
        &data,
        &url,
        &["verify", "--consumer-store", &store_arg],
    ));
    assert_eq!(out.status.code(), Some(0), "{verify}");
    assert_eq!(verify["waiting_for_predecessor"], 0);
    assert_eq!(
        verify["events_applied"].as_u64().unwrap(),
        event_count(&data),
        "every event applied exactly once: {verify}"
    );
}

/// One durable consumer fed by two emitter nodes: each node's `verify --consumer-store`
/// compares what that node wrote, and the other node's items are not "extra".
#[test]
fn verify_against_a_shared_consumer_store_compares_each_node_alone() {
    let server = NatsServer::start();
    let url = server.url();
    let work = tempfile::tempdir().unwrap();
    let store = work.path().join("consumer");
    let store_arg = store.to_str().unwrap();
    let nodes: Vec<_> = ["node-a", "node-b"]
        .iter()
        .map(|node| {
            let dir = work.path().join(node);
            std::fs::create_dir(&dir).unwrap();
            let data = setup(&dir);
            let emitted = dlq(&data, &url, &["demo", "--count", "4", "--job-id", node])
                .args(["--node-id", node])
                .status()
                .unwrap();
            assert!(emitted.success());
            data
        })
        .collect();
    let (out, consumed) = run(&mut dlq(
        &nodes[0],
        &url,
        &["consume", "--durable", "shared", "--store", store_arg],
    ));
    assert!(out.status.success(), "{consumed}");
    assert_eq!(consumed["items"], 8, "{consumed}");
    for data in &nodes {
        let (out, verify) = run(&mut dlq(
            data,
            &url,
            &["verify", "--consumer-store", store_arg],
        ));
        assert_eq!(verify["extra"], 0, "{verify}");
        assert_eq!(verify["missing"], 0, "{verify}");
        assert_eq!(out.status.code(), Some(0), "{verify}");
    }
}

/// A durable consumer catching up fetches its next batch while it folds the last one (after a
/// full batch of 5,000): a batch fetched ahead is applied, and one still being fetched when the
/// consumer stops is fetched again by the next run, never skipped by the checkpoint.
#[test]
fn batches_fetched_ahead_are_applied_once() {
    let (server, _work, data, store) = world();
    let url = server.url();
    let store_arg = store.to_str().unwrap();
    let consume = ["consume", "--durable", "c1", "--store", store_arg];
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let stream_len = || runtime.block_on(stream_len(&url, "DLQ"));
    // Stored with the bus down (one event per emit), then published by the reconciler.
    let fail = |count: &str, job: &str| {
        let down = "nats://127.0.0.1:1";
        let args = ["demo", "--count", count, "--job-id", job];
        let out = dlq(&data, down, &args).output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let out = dlq(&data, &url, &["reconcile"]).output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    };

    // 10,000 events: two full batches, so the run ends with a fetch ahead still open.
    fail("10000", "a");
    let events = event_count(&data);
    assert_eq!(events, 10_000);
    assert_eq!(stream_len(), events);
    let minute = Duration::from_secs(60);
    let (out, first) = run_within(&mut dlq(&data, &url, &consume), minute);
    assert!(out.status.success(), "{first}");
    assert_eq!(first["events_applied_this_run"], events, "{first}");

    // More than two full batches: the third is fetched ahead and holds the rest.
    fail("12500", "b");
    let all = event_count(&data);
    assert_eq!(stream_len(), all);
    let (_, second) = run_within(&mut dlq(&data, &url, &consume), minute);
    assert_eq!(second["events_applied_this_run"], all - events, "{second}");
    assert_eq!(second["events_applied"], all, "{second}");

    let (out, verify) = run(&mut dlq(
        &data,
        &url,
        &["verify", "--consumer-store", store_arg],
    ));
    assert_eq!(out.status.code(), Some(0), "{verify}");
}
