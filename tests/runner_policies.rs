//! The workflow error policies through the `dlq` binary with real agent processes: skip, stop
//! (and resume), custom handlers, max_failures, failure_threshold, timeouts that kill the
//! whole process group, and the circuit breaker's transitions.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeSet;

use dlq_testkit::flow::{self, counts, Flow};
use dlq_testkit::DEAD_BUS_URL;
use serde_json::{json, Value};

/// The `dlq` binary under test.
const DLQ: &str = env!("CARGO_BIN_EXE_dlq");

/// `count` items `p00..`; those whose index is in `failing` exit 5.
fn flow_with(count: usize, failing: &[usize]) -> Flow {
    let flow = Flow::new(DLQ, DEAD_BUS_URL);
    let items: Vec<Value> = (0..count)
        .map(|n| json!({"id": format!("p{n:02}"), "fail": failing.contains(&n)}))
        .collect();
    flow.items(&items);
    flow
}

fn workflow(policy: &str, extra_map: &str) -> String {
    format!(
        r#"
name: policies
mode: mapreduce
handlers:
  quarantine:
    - shell: "echo ${{item.id}} $DLQ_ERROR_TYPE $DLQ_FAILURE_COUNT >> \"$DLQ_WORKFLOW_DIR/quarantined\""
  broken:
    - shell: "exit 1"
map:
  input: items.json
  json_path: "$.items[*]"
  max_parallel: 1
{extra_map}
  agent_template:
    - shell: "test ${{item.fail}} = false || {{ echo 'boom' >&2; exit 5; }}"
error_policy:
{policy}
"#
    )
}

async fn dlq_ids(flow: &Flow) -> BTreeSet<String> {
    flow.env
        .items()
        .await
        .into_iter()
        .map(|i| i.item_id)
        .collect()
}

#[tokio::test]
async fn skip_records_failures_as_skipped_and_keeps_them_out_of_the_dlq() {
    let flow = flow_with(10, &[2, 5]);
    let (code, report) = flow::report(&flow.run(&workflow("  on_item_failure: skip", ""), "skip"));
    assert_eq!(code, 0);
    assert_eq!(counts(&report), (8, 0, 2, 0));
    assert!(dlq_ids(&flow).await.is_empty());
    let skipped: Vec<String> = flow
        .outcomes("skip")
        .iter()
        .filter(|o| o["outcome"] == "skipped")
        .map(|o| o["item_id"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(skipped, ["p02", "p05"]);
}

#[tokio::test]
async fn stop_halts_after_the_failed_item_and_resume_finishes_the_rest() {
    let flow = flow_with(10, &[3]);
    let out = flow.run(&workflow("  on_item_failure: stop", ""), "stop");
    let (code, report) = flow::report(&out);
    assert_eq!(
        code,
        4,
        "incomplete: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (ok, failed, skipped, pending) = counts(&report);
    assert_eq!(
        (ok, failed, skipped),
        (3, 1, 0),
        "items before the failure ran, the failed one is kept"
    );
    assert_eq!(pending, 6);
    assert!(report["stopped"].as_str().unwrap().contains("p03"));
    assert_eq!(dlq_ids(&flow).await, BTreeSet::from(["p03".to_owned()]));

    let (code, report) = flow::report(&flow.resume("stop", &[]));
    assert_eq!(code, 0);
    assert_eq!(counts(&report), (9, 1, 0, 0));
}

#[tokio::test]
async fn custom_handlers_take_items_or_fall_back_to_the_dlq() {
    let flow = flow_with(6, &[1, 4]);
    let (code, report) = flow::report(&flow.run(
        &workflow("  on_item_failure: custom:quarantine", ""),
        "custom",
    ));
    assert_eq!(code, 0);
    assert_eq!(counts(&report), (4, 0, 2, 0));
    let quarantined = std::fs::read_to_string(flow.dir.join("quarantined")).unwrap();
    assert_eq!(quarantined, "p01 CommandFailed 1\np04 CommandFailed 1\n");
    assert!(dlq_ids(&flow).await.is_empty());

    let flow = flow_with(6, &[1, 4]);
    let (code, report) =
        flow::report(&flow.run(&workflow("  on_item_failure: custom:broken", ""), "custom2"));
    assert_eq!(code, 0);
    assert_eq!(
        counts(&report),
        (4, 2, 0, 0),
        "a failing handler dead-letters the item"
    );
    assert_eq!(
        dlq_ids(&flow).await,
        BTreeSet::from(["p01".to_owned(), "p04".to_owned()])
    );
}

#[tokio::test]
async fn max_failures_stops_the_job_and_leaves_the_rest_pending() {
    let flow = flow_with(20, &[1, 2, 3, 4, 5]);
    let (code, report) = flow::report(&flow.run(&workflow("  max_failures: 2", ""), "maxf"));
    assert_eq!(code, 4);
    let (ok, failed, skipped, pending) = counts(&report);
    assert_eq!((ok, failed, skipped), (1, 2, 0));
    assert_eq!(pending, 17);
    assert!(report["stopped"].as_str().unwrap().contains("max_failures"));
}

#[tokio::test]
async fn failure_threshold_stops_once_enough_items_completed() {
    // 4 of the first 10 fail: 40% > 30% once 10 items completed.
    let flow = flow_with(30, &[0, 1, 2, 3]);
    let (code, report) =
        flow::report(&flow.run(&workflow("  failure_threshold: 0.3", ""), "thresh"));
    assert_eq!(code, 4);
    let (ok, failed, _, pending) = counts(&report);
    assert_eq!((ok, failed, pending), (6, 4, 20));
    assert!(report["stopped"]
        .as_str()
        .unwrap()
        .contains("failure_threshold"));
}

#[tokio::test]
async fn a_timeout_kills_the_whole_process_group_and_is_classified() {
    let flow = Flow::new(DLQ, DEAD_BUS_URL);
    flow.items(&[json!({"id": "slow"})]);
    let pidfile = flow.dir.join("grandchild.pid");
    let wf = format!(
        r#"
name: timeout
mode: mapreduce
map:
  input: items.json
  json_path: "$.items[*]"
  agent_timeout_secs: 1
  agent_template:
    - shell: "sh -c 'echo $$ > {}; exec sleep 300' & wait"
"#,
        pidfile.display()
    );
    let (code, report) = flow::report(&flow.run(&wf, "timeout"));
    assert_eq!(code, 0);
    assert_eq!(counts(&report), (0, 1, 0, 0));
    assert_eq!(report["summary"]["error_types"]["Timeout"], 1);
    let item = &flow.env.items().await[0];
    assert_eq!(
        item.failure_history[0].error_type,
        dlq::domain::model::ErrorType::Timeout
    );
    assert!(item.reprocess_eligible);
    let pid: i32 = std::fs::read_to_string(&pidfile)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let gone = dlq_testkit::poll_until(std::time::Duration::from_secs(10), || {
        is_dead(pid).then_some(())
    });
    assert!(gone.is_some(), "grandchild {pid} survived the timeout");
}

#[tokio::test]
async fn the_circuit_breaker_opens_pauses_and_closes_without_dead_lettering_good_items() {
    // p00-p02 fail (3 consecutive failures open the breaker), the rest succeed.
    let flow = flow_with(8, &[0, 1, 2]);
    let policy = "  circuit_breaker:\n    failure_threshold: 3\n    success_threshold: 2\n    timeout: 200ms\n    half_open_requests: 1";
    let (code, report) = flow::report(&flow.run(&workflow(policy, ""), "breaker"));
    assert_eq!(code, 0);
    assert_eq!(
        counts(&report),
        (5, 3, 0, 0),
        "only the failing items are dead-lettered"
    );
    assert_eq!(
        dlq_ids(&flow).await,
        BTreeSet::from(["p00".to_owned(), "p01".to_owned(), "p02".to_owned()])
    );
    let names: Vec<String> = flow
        .events("breaker")
        .iter()
        .map(|e| e["event"].as_str().unwrap().to_owned())
        .filter(|n| n.starts_with("Circuit"))
        .collect();
    assert_eq!(names, ["CircuitOpen", "CircuitHalfOpen", "CircuitClosed"]);
}

/// Gone, or a zombie waiting for PID 1 to reap it (some container inits never reap orphans;
/// a zombie runs nothing).
fn is_dead(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit_once(") ")
            .is_some_and(|(_, rest)| rest.starts_with('Z')),
    }
}

#[tokio::test]
async fn worktree_isolation_keeps_failed_worktrees_in_the_dlq_item() {
    let flow = flow_with(2, &[1]);
    let git = |args: &[&str]| {
        let out = std::process::Command::new("git")
            .arg("-C")
            .arg(&flow.dir)
            .args(["-c", "user.name=t", "-c", "user.email=t@t"])
            .args(args)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "git {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    git(&["init", "-q"]);
    git(&["add", "items.json"]);
    git(&["commit", "-qm", "init"]);
    let wf = r#"
name: isolated
mode: mapreduce
map:
  input: items.json
  json_path: "$.items[*]"
  isolation: worktree
  agent_template:
    - shell: "echo ${item.id} > work.txt; test ${item.fail} = false || { echo 'merge conflict in work.txt' >&2; exit 1; }"
"#;
    let (code, report) = flow::report(&flow.run(wf, "iso"));
    assert_eq!(code, 0);
    assert_eq!(counts(&report), (1, 1, 0, 0));
    let item = flow.env.items().await.remove(0);
    let artifacts = item.worktree_artifacts.expect("worktree artifacts");
    assert_eq!(artifacts.branch_name, "dlq/iso/p01");
    assert!(std::path::Path::new(&artifacts.worktree_path)
        .join("work.txt")
        .is_file());
    assert!(artifacts.uncommitted_changes.unwrap().contains("work.txt"));
    assert!(artifacts.error_logs.unwrap().contains("merge conflict"));
    assert_eq!(
        item.failure_history[0].error_type,
        dlq::domain::model::ErrorType::MergeConflict
    );
}

#[tokio::test]
async fn error_collection_reports_immediately_in_batches_or_at_the_end() {
    for (policy, job, expected) in [
        ("  error_collection: immediate", "imm", vec![1, 1, 1, 1]),
        (
            "  error_collection:\n    batched:\n      size: 3",
            "bat",
            vec![3, 1],
        ),
        ("  error_collection: aggregate", "agg", vec![4]),
    ] {
        let flow = flow_with(8, &[0, 2, 4, 6]);
        let (code, report) = flow::report(&flow.run(&workflow(policy, ""), job));
        assert_eq!(code, 0);
        assert_eq!(counts(&report), (4, 4, 0, 0));
        let sizes: Vec<usize> = flow
            .events(job)
            .iter()
            .filter(|e| e["event"] == "ErrorReport")
            .map(|e| e["errors"].as_array().unwrap().len())
            .collect();
        assert_eq!(sizes, expected, "{job}");
    }
}
