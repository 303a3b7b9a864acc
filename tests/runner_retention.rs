//! Retention runs inside `dlq run` as it does inside `dlq serve`: while a job holds the data
//! directory, items first failed longer ago than `retention_days` are purged (one
//! `item_removed` event with reason `purged` each) and recent ones stay.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::Duration;

use dlq::domain::event::{EventKind, RemovalReason};
use dlq_testkit::cli::listed_ids;
use dlq_testkit::flow::{self, counts, Flow};
use dlq_testkit::reference::{reference_item, write_reference_job};
use dlq_testkit::{poll_until, DEAD_BUS_URL};
use serde_json::{json, Value};

const DLQ: &str = env!("CARGO_BIN_EXE_dlq");

#[tokio::test]
async fn a_running_job_purges_expired_items_and_keeps_recent_ones() {
    let flow = Flow::new(DLQ, DEAD_BUS_URL);
    let old = flow.env.path("old");
    write_reference_job(
        &old.join("aged"),
        "aged",
        &[
            reference_item("o1", 1, 40),
            reference_item("o2", 1, 40),
            reference_item("n1", 1, 0),
        ],
    );
    flow.env
        .json(&["import", old.to_str().unwrap(), "--drain-timeout", "0s"]);
    let config = flow.env.data.with_extension("yml");
    let mut yaml = std::fs::read_to_string(&config).unwrap();
    yaml.push_str("retention:\n  retention_days: 30\n  check_interval: 200ms\n");
    std::fs::write(&config, yaml).unwrap();

    // One item that waits for `go`, so that the job holds the directory until the test saw
    // retention act.
    flow.items(&[json!({"id": "w0"})]);
    let child = flow.spawn_run(
        r#"
name: waiting
mode: mapreduce
map:
  input: items.json
  json_path: "$.items[*]"
  agent_template:
    - shell: "while [ ! -f \"$DLQ_WORKFLOW_DIR/go\" ]; do sleep 0.05; done"
"#,
        "held",
    );

    // `dlq list` goes through the running job's API.
    let left = poll_until(Duration::from_secs(60), || {
        let out = flow.env.run(&["list", "--job-id", "aged"]);
        let list: Value = serde_json::from_slice(&out.stdout).ok()?;
        let ids = listed_ids(&list);
        (out.status.success() && ids.len() == 1).then_some(ids)
    });
    flow.write("go", "");
    let out = child.wait_with_output().unwrap();
    assert_eq!(
        left,
        Some(vec!["aged/n1".to_owned()]),
        "retention did not purge the expired items while the job ran"
    );
    let (code, report) = flow::report(&out);
    assert_eq!(code, 0, "{report}");
    assert_eq!(counts(&report), (1, 0, 0, 0), "one item, succeeded");

    let purged: Vec<String> = flow
        .env
        .events()
        .await
        .into_iter()
        .filter_map(|e| match e.kind {
            EventKind::ItemRemoved {
                item_id,
                reason: RemovalReason::Purged,
                ..
            } => Some(item_id),
            _ => None,
        })
        .collect();
    assert_eq!(purged.len(), 2, "{purged:?}");
    assert!(
        purged.iter().all(|id| id == "o1" || id == "o2"),
        "{purged:?}"
    );
}
