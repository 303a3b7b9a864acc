//! A stream that exists before dlq starts is the operator's, against a real nats-server:
//! connecting and a `dlq demo` run keep its limits; a stream that does not take dlq's subject
//! (or keeps messages in memory) makes the connect fail with a one-line error and stays as it
//! was; `dlq stream update` changes it on purpose, and `dlq stream show|create` show and
//! create it. The three-replica case runs on the cluster (`cluster.rs`).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::Duration;

use async_nats::jetstream::stream::{Config, StorageType};
use dlq::bus::{BusConfig, BusError, NatsBus};
use dlq_testkit::cli::Env;
use dlq_testkit::stream::stream_len;
use dlq_testkit::NatsServer;

const WEEK: Duration = Duration::from_secs(7 * 86_400);

/// A stream as an operator would make it: dlq's subject, a week's age, a million messages.
fn operator_stream(subjects: &[&str]) -> Config {
    Config {
        name: "DLQ".into(),
        subjects: subjects.iter().map(|s| s.to_string()).collect(),
        storage: StorageType::File,
        max_age: WEEK,
        max_messages: 1_000_000,
        duplicate_window: Duration::from_secs(120),
        ..Default::default()
    }
}

async fn jetstream(url: &str) -> async_nats::jetstream::Context {
    async_nats::jetstream::new(async_nats::connect(url).await.unwrap())
}

async fn make_stream(url: &str, config: Config) -> Config {
    let mut stream = jetstream(url).await.create_stream(config).await.unwrap();
    stream.info().await.unwrap().config.clone()
}

async fn stream_config(url: &str) -> Config {
    let mut stream = jetstream(url).await.get_stream("DLQ").await.unwrap();
    stream.info().await.unwrap().config.clone()
}

fn bus(url: &str) -> BusConfig {
    BusConfig {
        url: url.to_owned(),
        ..BusConfig::default()
    }
}

fn stderr(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_existing_stream_keeps_its_limits_after_connect_and_a_demo_run() {
    let server = NatsServer::start();
    let url = server.url();
    let before = make_stream(&url, operator_stream(&["sys.job.dlq"])).await;

    let bus = NatsBus::connect(bus(&url)).await.unwrap();
    bus.ensure_stream().await.unwrap();
    assert_eq!(
        stream_config(&url).await,
        before,
        "connect changed the stream"
    );
    drop(bus);

    let env = Env::new(env!("CARGO_BIN_EXE_dlq"), &url);
    env.demo("kept", 5);
    let after = stream_config(&url).await;
    assert_eq!(after.max_age, WEEK);
    assert_eq!(after.max_messages, 1_000_000);
    assert_eq!(after, before, "dlq demo changed the stream");
    assert!(stream_len(&url, "DLQ").await >= 5, "the demo published");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_without_our_subject_is_refused_unchanged_until_dlq_stream_update() {
    let server = NatsServer::start();
    let url = server.url();
    let before = make_stream(&url, operator_stream(&["other.>"])).await;

    let err = NatsBus::connect(bus(&url))
        .await
        .err()
        .expect("connect refused");
    let BusError::StreamUnfit(message) = &err else {
        panic!("expected StreamUnfit, got {err:?}");
    };
    assert!(
        message.contains("does not take subject sys.job.dlq"),
        "{message}"
    );
    assert!(message.contains("dlq stream update"), "{message}");
    assert!(!message.contains('\n'), "one line: {message}");
    assert_eq!(stream_config(&url).await, before);

    // The binary fails the same way, with the error as its last line, and changes nothing.
    let env = Env::new(env!("CARGO_BIN_EXE_dlq"), &url);
    let out = env.run(&["demo", "--count", "2", "--drain-timeout", "0s"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let last = stderr(&out).lines().last().unwrap_or_default().to_owned();
    assert!(
        last.starts_with("dlq: stream DLQ does not take subject"),
        "{last}"
    );
    assert_eq!(stream_config(&url).await, before);

    // Without a terminal and without --yes, update refuses and changes nothing.
    let out = env.run(&["stream", "update"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("without --yes"), "{}", stderr(&out));
    assert_eq!(stream_config(&url).await, before);

    // On purpose: dlq's subjects are added, the operator's subject and limits kept.
    let update = env.json(&["stream", "update", "--yes"]);
    assert_eq!(update["applied"], true, "{update}");
    assert_eq!(update["changes"][0]["setting"], "subjects", "{update}");
    let after = stream_config(&url).await;
    assert_eq!(after.subjects, ["other.>", "sys.job.dlq", "sys.job.dlq.>"]);
    assert_eq!((after.max_age, after.max_messages), (WEEK, 1_000_000));
    NatsBus::connect(bus(&url)).await.unwrap();
    assert_eq!(stream_config(&url).await, after);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_memory_stream_is_refused_and_kept() {
    let server = NatsServer::start();
    let url = server.url();
    let memory = Config {
        storage: StorageType::Memory,
        ..operator_stream(&["sys.job.dlq"])
    };
    let before = make_stream(&url, memory).await;
    let err = NatsBus::connect(bus(&url))
        .await
        .err()
        .expect("connect refused");
    assert!(
        matches!(&err, BusError::StreamUnfit(m) if m.contains("memory")),
        "{err:?}"
    );
    // An update cannot change the storage: it says so and changes nothing.
    let env = Env::new(env!("CARGO_BIN_EXE_dlq"), &url);
    let out = env.run(&["stream", "update", "--yes"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("an update cannot change that"),
        "{}",
        stderr(&out)
    );
    assert_eq!(stream_config(&url).await, before);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dlq_stream_shows_creates_and_updates_on_purpose() {
    let server = NatsServer::start();
    let url = server.url();
    let env = Env::new(env!("CARGO_BIN_EXE_dlq"), &url);

    let out = env.run(&["stream", "show"]);
    assert_eq!(out.status.code(), Some(3), "missing: {}", stderr(&out));
    assert!(
        stderr(&out).contains("dlq stream create"),
        "{}",
        stderr(&out)
    );

    let created = env.json(&["stream", "create"]);
    assert_eq!(created["config"]["name"], "DLQ", "{created}");
    assert_eq!(
        created["warnings"].as_array().unwrap().len(),
        0,
        "{created}"
    );
    let out = env.run(&["stream", "create"]);
    assert_eq!(out.status.code(), Some(2), "exists: {}", stderr(&out));
    assert!(stderr(&out).contains("already exists"), "{}", stderr(&out));

    env.demo("shown", 3);
    let shown = env.json(&["stream", "show"]);
    assert!(shown["state"]["messages"].as_u64().unwrap() >= 3, "{shown}");
    assert_eq!(shown["config"]["subjects"][1], "sys.job.dlq.>", "{shown}");
    let table = env.run(&["stream", "show", "--format", "table"]);
    let table = String::from_utf8_lossy(&table.stdout);
    assert!(table.contains("max age           unlimited"), "{table}");
    assert!(
        table.contains("dlq can publish to it as configured"),
        "{table}"
    );

    let unchanged = env.json(&["stream", "update", "--yes"]);
    assert_eq!(unchanged["applied"], false, "{unchanged}");
    assert_eq!(unchanged["changes"].as_array().unwrap().len(), 0);

    // A shorter window than configured is shown as a warning, and update raises it.
    let js = jetstream(&url).await;
    let short = Config {
        duplicate_window: Duration::from_secs(30),
        ..stream_config(&url).await
    };
    js.update_stream(&short).await.unwrap();
    env.demo("short", 1);
    assert_eq!(
        stream_config(&url).await.duplicate_window,
        Duration::from_secs(30),
        "only `dlq stream update` changes the window"
    );
    let shown = env.json(&["stream", "show"]);
    assert!(
        shown["warnings"][0]
            .as_str()
            .unwrap()
            .contains("30s, less than the 2m"),
        "{shown}"
    );
    let update = env.json(&["stream", "update", "--yes"]);
    assert_eq!(
        update["changes"][0]["setting"], "duplicate window",
        "{update}"
    );
    assert_eq!(
        stream_config(&url).await.duplicate_window,
        Duration::from_secs(120)
    );
}
