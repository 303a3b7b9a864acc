//! `dlq delete` end to end through the `dlq` binary on a real sink: one item, a selection and
//! a filtered set, each removal an `item_removed` event with reason `deleted` (published to a
//! real nats-server when the bus is up); `--dry-run` and bad input change nothing.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use dlq::domain::event::{Event, EventKind, RemovalReason, RemovedBy};
use dlq_testkit::cli::{failure, Env};
use dlq_testkit::stream::stream_ids;
use dlq_testkit::{NatsServer, DEAD_BUS_URL};

/// The `dlq` binary under test.
const DLQ: &str = env!("CARGO_BIN_EXE_dlq");

/// `job/item` of every `item_removed` event with reason `deleted`, and their event ids.
fn deleted(events: &[Event]) -> Vec<(String, String)> {
    events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::ItemRemoved {
                item_id,
                reason: RemovalReason::Deleted,
                ..
            } => Some((format!("{}/{item_id}", e.job_id), e.event_id.clone())),
            _ => None,
        })
        .collect()
}

async fn left(env: &Env) -> Vec<String> {
    env.items()
        .await
        .into_iter()
        .map(|i| format!("{}/{}", i.job_id, i.item_id))
        .collect()
}

#[tokio::test]
async fn deletes_one_item_a_selection_and_a_filtered_set() {
    let env = Env::new(DLQ, DEAD_BUS_URL);
    env.demo("j1", 5);
    env.demo("j2", 3);
    let events_before = env.events().await.len();

    // A dry run counts and names, and changes nothing.
    let dry = env.json(&["delete", "j1/item-0", "j2/item-1", "--dry-run"]);
    assert_eq!(dry["would_remove"], 2);
    assert_eq!(dry["items"][1]["job_id"], "j2");
    assert_eq!(dry["items"][1]["item_id"], "item-1");
    let all = env.json(&["delete", "--all", "--dry-run"]);
    assert_eq!(all["would_remove"], 8);
    assert_eq!(env.events().await.len(), events_before);
    assert_eq!(left(&env).await.len(), 8);

    let one = env.json(&[
        "delete",
        "j1/item-0",
        "--yes",
        "--drain-timeout",
        "0s",
        "--reason",
        "poison input",
    ]);
    assert_eq!(one["removed"], 1);
    // A selection: a bare id held by one job, a repeated id and an unknown one (reported).
    let some = env.json(&[
        "delete",
        "j1/item-1",
        "j1/item-2",
        "j1/item-2",
        "j1/nope",
        "--yes",
        "--drain-timeout",
        "0s",
    ]);
    assert_eq!(some["removed"], 2);
    assert_eq!(some["unknown"], serde_json::json!(["j1/nope"]));
    // The filtered set: the same flags as `dlq list`.
    let filtered = env.json(&[
        "delete",
        "--job-id",
        "j2",
        "--filter",
        "item_id != \"item-0\"",
        "--yes",
        "--drain-timeout",
        "0s",
    ]);
    assert_eq!(filtered["removed"], 2);

    assert_eq!(left(&env).await, ["j1/item-3", "j1/item-4", "j2/item-0"]);
    // Who and why: a command on the data directory itself is `local`; the reason when given.
    let by: Vec<_> = env
        .events()
        .await
        .into_iter()
        .filter_map(|e| match e.kind {
            EventKind::ItemRemoved { removed_by, .. } => Some(removed_by),
            _ => None,
        })
        .collect();
    let local = |reason: Option<&str>| {
        Some(RemovedBy {
            name: "local".into(),
            reason: reason.map(str::to_owned),
        })
    };
    assert_eq!(by.len(), 5);
    assert_eq!(by[0], local(Some("poison input")));
    assert!(by[1..].iter().all(|b| *b == local(None)), "{by:?}");
    let removed: Vec<String> = deleted(&env.events().await)
        .into_iter()
        .map(|(item, _)| item)
        .collect();
    assert_eq!(
        removed,
        [
            "j1/item-0",
            "j1/item-1",
            "j1/item-2",
            "j2/item-2",
            "j2/item-1"
        ]
    );
}

#[tokio::test]
async fn bad_input_changes_nothing_and_exits_with_the_documented_code() {
    let env = Env::new(DLQ, DEAD_BUS_URL);
    env.demo("j1", 3);
    let before = env.with_sink(|s| s.projection_snapshot().unwrap()).await;
    let events_before = env.events().await.len();
    let cases: [(&[&str], i32, &str); 6] = [
        (
            &["delete", "j1/nope", "--yes"],
            3,
            "item 'nope' not found in job 'j1'",
        ),
        (&["delete", "nope", "--dry-run"], 3, "not found"),
        (&["delete", "--yes"], 2, "--all"),
        (
            &["delete", "--filter", "item_id ==", "--yes"],
            2,
            "item_id ==",
        ),
        (
            &["delete", "j1/item-0", "--job-id", "j1", "--yes"],
            2,
            "not both",
        ),
        (&["delete", "j1/item-0"], 2, "--yes"),
    ];
    for (args, code, says) in cases {
        let (got, stderr) = failure(&env.run(args));
        assert_eq!(got, Some(code), "{args:?}: {stderr}");
        assert!(stderr.contains(says), "{args:?}: {stderr}");
    }
    assert_eq!(
        env.with_sink(|s| s.projection_snapshot().unwrap()).await,
        before
    );
    assert_eq!(env.events().await.len(), events_before);
    // A filter that selects nothing deletes nothing and is no error.
    let none = env.json(&["delete", "--job-id", "j9", "--yes"]);
    assert_eq!(none["removed"], 0);
    assert_eq!(env.events().await.len(), events_before);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_bus_deletions_reach_the_stream_with_reason_deleted() {
    let server = NatsServer::start();
    let env = Env::new(DLQ, &server.url());
    env.json(&[
        "demo",
        "--count",
        "4",
        "--job-id",
        "j1",
        "--drain-timeout",
        "30s",
    ]);
    let out = env.json(&[
        "delete",
        "--filter",
        "item_id in [\"item-1\", \"item-3\"]",
        "--yes",
        "--drain-timeout",
        "30s",
    ]);
    assert_eq!(
        (out["removed"].as_u64(), out["drained"].as_bool()),
        (Some(2), Some(true))
    );
    let events = env.events().await;
    let on_stream = stream_ids(&server.url(), "DLQ").await;
    let removed = deleted(&events);
    assert_eq!(removed.len(), 2);
    for (item, id) in &removed {
        assert!(on_stream.contains(id), "{item}: {id} not on the stream");
    }
    assert_eq!(on_stream.len(), events.len(), "every event published once");
    assert_eq!(left(&env).await, ["j1/item-0", "j1/item-2"]);
}
