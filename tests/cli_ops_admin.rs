//! The changing operator commands end to end through the `dlq` binary: clear and purge refuse
//! without `--yes` when there is no terminal (nothing changed), remove with it (each removal an
//! event, published to the stream when the bus is up), and corrupt records are clear errors.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use dlq::domain::event::{EventKind, RemovalReason};
use dlq_testkit::cli::{failure, Env};
use dlq_testkit::reference::{reference_item, write_reference_job};
use dlq_testkit::stream::stream_ids;
use dlq_testkit::{NatsServer, DEAD_BUS_URL};

/// The `dlq` binary under test.
const DLQ: &str = env!("CARGO_BIN_EXE_dlq");

fn no_bus() -> String {
    DEAD_BUS_URL.to_owned()
}

fn removals(events: &[dlq::domain::event::Event], reason: RemovalReason) -> Vec<String> {
    events
        .iter()
        .filter(|e| matches!(&e.kind, EventKind::ItemRemoved { reason: r, .. } if *r == reason))
        .map(|e| e.event_id.clone())
        .collect()
}

#[tokio::test]
async fn clear_and_purge_refuse_without_yes_and_change_nothing() {
    let env = Env::new(DLQ, &no_bus());
    env.demo("j1", 4);
    let before = env.with_sink(|s| s.projection_snapshot().unwrap()).await;
    let events_before = env.events().await.len();
    for args in [vec!["clear", "j1"], vec!["purge", "--older-than-days", "0"]] {
        let (code, stderr) = failure(&env.run(&args));
        assert_eq!(code, Some(2), "{args:?}: {stderr}");
        assert!(
            stderr.contains("--yes") && stderr.contains("nothing was changed"),
            "{stderr}"
        );
    }
    assert_eq!(
        env.with_sink(|s| s.projection_snapshot().unwrap()).await,
        before
    );
    assert_eq!(env.events().await.len(), events_before);
    let (code, stderr) = failure(&env.run(&["clear", "no-such-job", "--yes"]));
    assert_eq!(code, Some(3), "{stderr}");
    // Nothing old enough: no question asked, nothing removed.
    let purge = env.json(&["purge", "--older-than-days", "30"]);
    assert_eq!(purge["removed"], 0);
    assert_eq!(env.events().await.len(), events_before);
}

#[tokio::test]
async fn clear_and_purge_without_bus_store_removal_events_for_later() {
    let env = Env::new(DLQ, &no_bus());
    env.demo("j1", 3);
    env.demo("j2", 2);
    let cleared = env.json(&["clear", "j1", "--yes", "--drain-timeout", "0s"]);
    assert_eq!(cleared["removed"], 3);
    assert_eq!(cleared["drained"], false);
    assert_eq!(
        cleared["unpublished"],
        5 + 3,
        "demo's five dead-letters (stored without a publish attempt: no bus) plus three removals, all kept"
    );
    let items = env.items().await;
    assert!(items.iter().all(|i| i.job_id == "j2"));
    assert_eq!(
        removals(&env.events().await, RemovalReason::Cleared).len(),
        3
    );

    // Purge: old items (first failed 40 days ago) go, recent ones stay.
    let old = env.path("old");
    write_reference_job(
        &old.join("j3"),
        "j3",
        &[
            reference_item("o1", 1, 40),
            reference_item("o2", 1, 40),
            reference_item("n1", 1, 0),
        ],
    );
    env.json(&["import", old.to_str().unwrap(), "--drain-timeout", "0s"]);
    let purged = env.json(&[
        "purge",
        "--older-than-days",
        "30",
        "--job-id",
        "j3",
        "--yes",
        "--drain-timeout",
        "0s",
    ]);
    assert_eq!(purged["removed"], 2);
    let left: Vec<String> = env
        .items()
        .await
        .into_iter()
        .map(|i| format!("{}/{}", i.job_id, i.item_id))
        .collect();
    assert_eq!(left, ["j2/item-0", "j2/item-1", "j3/n1"]);
    assert_eq!(
        removals(&env.events().await, RemovalReason::Purged).len(),
        2
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_bus_removals_reach_the_stream() {
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
    let old = env.path("old");
    write_reference_job(
        &old.join("j2"),
        "j2",
        &[reference_item("o1", 1, 40), reference_item("n1", 1, 0)],
    );
    let imported = env.json(&["import", old.to_str().unwrap(), "--drain-timeout", "30s"]);
    assert_eq!(
        (imported["imported"].as_u64(), imported["drained"].as_bool()),
        (Some(2), Some(true))
    );

    let cleared = env.json(&["clear", "j1", "--yes", "--drain-timeout", "30s"]);
    assert_eq!(
        (cleared["removed"].as_u64(), cleared["unpublished"].as_u64()),
        (Some(4), Some(0))
    );
    let purged = env.json(&[
        "purge",
        "--older-than-days",
        "30",
        "--yes",
        "--drain-timeout",
        "30s",
    ]);
    assert_eq!(
        (purged["removed"].as_u64(), purged["drained"].as_bool()),
        (Some(1), Some(true))
    );

    let events = env.events().await;
    let on_stream = stream_ids(&server.url(), "DLQ").await;
    let cleared_ids = removals(&events, RemovalReason::Cleared);
    let purged_ids = removals(&events, RemovalReason::Purged);
    assert_eq!((cleared_ids.len(), purged_ids.len()), (4, 1));
    for id in cleared_ids.iter().chain(&purged_ids) {
        assert!(on_stream.contains(id), "{id} not on the stream");
    }
    let imports = events.iter().filter(|e| e.topic == "import").count();
    assert_eq!(imports, 2);
    assert_eq!(
        on_stream.len(),
        events.len(),
        "every event published exactly once"
    );
    let left: Vec<String> = env.items().await.into_iter().map(|i| i.item_id).collect();
    assert_eq!(left, ["n1"]);
}

#[tokio::test]
async fn a_corrupt_record_is_a_clear_error_naming_its_key() {
    let env = Env::new(DLQ, &no_bus());
    env.demo("j1", 3);
    {
        let db = sled::Config::new()
            .path(&env.data)
            .segment_size(8 << 20)
            .flush_every_ms(None)
            .open()
            .unwrap();
        db.insert(
            dlq::sink::test_support::item_key("j1", "item-1"),
            &b"\xffnot json"[..],
        )
        .unwrap();
        db.flush().unwrap();
    }
    for args in [
        vec!["list"],
        vec!["inspect", "item-1", "--job-id", "j1"],
        vec!["inspect", "item-1"],
        vec!["analyze"],
    ] {
        let (code, stderr) = failure(&env.run(&args));
        assert_eq!(code, Some(1), "{args:?}: {stderr}");
        assert!(
            stderr.contains("corrupt record at key ij1\\x00item-1"),
            "{args:?}: {stderr}"
        );
        assert!(stderr.contains("dlq rebuild"), "{stderr}");
        assert!(!stderr.contains("panicked"), "{stderr}");
    }
    // Other items stay readable by key, and stats (counters and indexes) still answer.
    assert_eq!(
        env.json(&["inspect", "item-2", "--job-id", "j1"])["item_id"],
        "item-2"
    );
    assert_eq!(env.json(&["inspect", "item-2"])["item_id"], "item-2");
    assert_eq!(env.json(&["stats"])["total_items"], 3);
}
