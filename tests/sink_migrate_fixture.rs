//! A real data directory of sink format 2 (the event log in sled, with a journal), written by
//! the `dlq` binary of commit 64228bf (the last before the segment log), opened by this
//! version: migrated, then compared item by item with what the old binary exported, and its
//! unpublished events published once each under their old ids.
//!
//! The fixture (`tests/fixtures/format2/`, made by its `make.sh`): node `fixture-node`, job `j1`
//! (6 items, published), job `j3` (3 items, then cleared), job `j2` (4 items, the bus down: 8
//! events unpublished); `items.jsonl` is the old binary's `dlq export` of it.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use dlq_testkit::cli::Env;
use dlq_testkit::NatsServer;
use serde_json::Value;

const DLQ: &str = env!("CARGO_BIN_EXE_dlq");
const FIXTURE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/format2");

/// The fixture's data directory unpacked as `env`'s data directory, with its node id.
fn unpack(env: &Env) {
    let status = Command::new("tar")
        .arg("xzf")
        .arg(Path::new(FIXTURE).join("format2.tgz"))
        .arg("-C")
        .arg(env.work.path())
        .status()
        .unwrap();
    assert!(status.success(), "tar could not unpack the fixture");
    std::fs::rename(env.work.path().join("format2"), &env.data).unwrap();
    let config = std::fs::read_to_string(env.data.with_extension("yml")).unwrap();
    std::fs::write(
        env.data.with_extension("yml"),
        format!("node_id: fixture-node\n{config}"),
    )
    .unwrap();
}

/// Items of a JSON-lines export, by `(job_id, item_id)`.
fn items_by_key(jsonl: &str) -> BTreeMap<(String, String), Value> {
    jsonl
        .lines()
        .filter(|line| !line.trim().is_empty())
        .map(|line| {
            let item: Value = serde_json::from_str(line).unwrap();
            let key = (
                item["job_id"].as_str().unwrap().to_owned(),
                item["item_id"].as_str().unwrap().to_owned(),
            );
            (key, item)
        })
        .collect()
}

#[tokio::test]
async fn a_format_2_directory_written_by_the_old_binary_opens_with_every_item_and_backlog() {
    let env = Env::new(DLQ, dlq_testkit::DEAD_BUS_URL);
    unpack(&env);
    assert!(env.data.join("journal").is_dir(), "the fixture is format 2");

    let status = env.json(&["status"]);
    assert_eq!(status["items"], 10, "{status}");
    assert_eq!(status["unpublished"], 8, "{status}");
    assert!(
        env.data.join("log").is_dir(),
        "opening migrated the event log into segments"
    );

    let exported = env.path("items.jsonl");
    let out = env.run(&["export", "--format", "jsonl", exported.to_str().unwrap()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let now = items_by_key(&std::fs::read_to_string(&exported).unwrap());
    let then =
        items_by_key(&std::fs::read_to_string(Path::new(FIXTURE).join("items.jsonl")).unwrap());
    assert_eq!(
        now.keys().collect::<Vec<_>>(),
        then.keys().collect::<Vec<_>>(),
        "the same items"
    );
    for (key, item) in &then {
        assert_eq!(
            &now[key], item,
            "item {key:?} as the old binary exported it"
        );
    }

    // Opened again (the migration is done once), then the backlog reaches a bus exactly once,
    // under the ids the old binary gave it (copied byte for byte into the segment log).
    assert_eq!(env.json(&["status"])["items"], 10);
    let logged: Vec<String> = env.events().await.into_iter().map(|e| e.event_id).collect();
    assert_eq!(logged.len(), 20, "{logged:?}");
    let server = NatsServer::start();
    let mut env = env;
    env.url = server.url();
    let out = env.run(&["reconcile", "--timeout", "30s"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(env.json(&["status"])["unpublished"], 0);
    let mut ids = dlq_testkit::stream::stream_ids(&server.url(), "DLQ").await;
    ids.sort();
    let mut expected = logged[12..].to_vec();
    expected.sort();
    assert_eq!(
        ids, expected,
        "the 8 unpublished events, each once, under their old ids"
    );
    assert!(
        ids.iter().all(|id| id.starts_with("fixture-node:")),
        "{ids:?}"
    );
}
