//! `dlq retry` end to end: items that now succeed leave the DLQ (a `resolved` event in the
//! stream), those that still fail get longer histories; eligibility, --force, --filter,
//! --dry-run; an interrupted retry resumed never re-runs a resolved item; concurrent retries
//! never run one item twice; bad input changes nothing.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::{BTreeMap, BTreeSet};
use std::process::Stdio;
use std::time::Duration;

use dlq_testkit::cli::dlq_command;
use dlq_testkit::flow::{self, counts, Flow};
use dlq_testkit::{poll_until, spawn_tied, NatsServer, DEAD_BUS_URL};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use serde_json::{json, Value};

/// The `dlq` binary under test.
const DLQ: &str = env!("CARGO_BIN_EXE_dlq");

/// Items `f0..f{n}`; each fails until `fixed-<id>` exists in the flow directory, logging every
/// run in `runs.log`. Items with `perm: true` fail with a permission error (not eligible).
const FIXABLE: &str = r#"
name: fixable
mode: mapreduce
map:
  input: items.json
  json_path: "$.items[*]"
  max_parallel: 4
  agent_template:
    - shell: "echo ${item.id} >> \"$DLQ_WORKFLOW_DIR/runs.log\"; sleep ${item.sleep}; test -f \"$DLQ_WORKFLOW_DIR/fixed-${item.id}\" && exit 0; if ${item.perm}; then echo 'open /srv/x: Permission denied' >&2; else echo 'upstream said no' >&2; fi; exit 1"
error_policy:
  retry_config:
    max_attempts: 1
    backoff:
      fixed:
        delay: 10ms
"#;

fn fixable(url: &str, n: usize, sleep: f64, perm: &[usize]) -> Flow {
    let flow = Flow::new(DLQ, url);
    let items: Vec<Value> = (0..n)
        .map(|i| json!({"id": format!("f{i}"), "n": i, "sleep": sleep, "perm": perm.contains(&i)}))
        .collect();
    flow.items(&items);
    let out = flow.run(FIXABLE, "job");
    let (code, report) = flow::report(&out);
    assert_eq!(code, 0, "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(counts(&report).1, n as u64, "every item starts in the DLQ");
    std::fs::remove_file(flow.dir.join("runs.log")).unwrap();
    flow
}

fn retry(flow: &Flow, extra: &[&str]) -> (i32, Value) {
    let mut args = vec![
        "retry",
        "job",
        "--progress",
        "lines",
        "--drain-timeout",
        "5s",
    ];
    args.extend_from_slice(extra);
    let out = flow.env.run(&args);
    let code = out.status.code().unwrap_or(-1);
    let value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|_| json!({"stderr": String::from_utf8_lossy(&out.stderr).into_owned()}));
    (code, value)
}

fn runs(flow: &Flow) -> BTreeMap<String, usize> {
    let text = std::fs::read_to_string(flow.dir.join("runs.log")).unwrap_or_default();
    let mut runs = BTreeMap::new();
    for id in text.lines() {
        *runs.entry(id.to_owned()).or_default() += 1;
    }
    runs
}

async fn failure_counts(flow: &Flow) -> BTreeMap<String, u32> {
    flow.env
        .items()
        .await
        .into_iter()
        .map(|i| (i.item_id, i.failure_count))
        .collect()
}

#[tokio::test]
async fn fixed_items_resolve_and_the_rest_get_longer_histories() {
    let nats = NatsServer::start();
    let flow = fixable(&nats.url(), 6, 0.0, &[]);
    for id in ["f0", "f2", "f4"] {
        flow.write(&format!("fixed-{id}"), "");
    }
    let (code, report) = retry(&flow, &["--max-retries", "2", "--rate", "50"]);
    assert_eq!(code, 0, "{report}");
    assert_eq!(
        (report["selected"].as_u64(), report["resolved"].as_u64()),
        (Some(6), Some(3))
    );
    assert_eq!(report["failed_again"], 3);
    assert_eq!(
        failure_counts(&flow).await,
        BTreeMap::from([("f1".into(), 3), ("f3".into(), 3), ("f5".into(), 3)]),
        "1 original failure + 2 retried attempts each"
    );
    let item = flow.env.items().await.into_iter().next().unwrap();
    let numbers: Vec<u32> = item
        .failure_history
        .iter()
        .map(|f| f.attempt_number)
        .collect();
    assert_eq!(numbers, [1, 2, 3]);
    let messages = dlq_testkit::stream::stream_messages(&nats.url(), "DLQ").await;
    let resolved: BTreeSet<String> = messages
        .iter()
        .filter(|(_, e)| e["kind"] == "item_removed" && e["reason"] == "resolved")
        .map(|(_, e)| e["item_id"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(
        resolved,
        BTreeSet::from(["f0".into(), "f2".into(), "f4".into()])
    );
    let appended = messages
        .iter()
        .filter(|(_, e)| e["kind"] == "failure_appended")
        .count();
    assert_eq!(appended, 3);
}

#[tokio::test]
async fn eligibility_force_filter_and_dry_run_select_items() {
    let flow = fixable(DEAD_BUS_URL, 6, 0.0, &[5]);
    let before = failure_counts(&flow).await;

    let (code, dry) = retry(&flow, &["--dry-run"]);
    assert_eq!(code, 0);
    assert_eq!(dry["selected"], 5);
    assert_eq!(
        dry["skipped_ineligible"], 1,
        "the permission error needs --force"
    );
    assert!(!dry["items"].as_array().unwrap().contains(&json!("f5")));
    assert_eq!(
        failure_counts(&flow).await,
        before,
        "a dry run changes nothing"
    );
    assert!(runs(&flow).is_empty());

    let (code, filtered) = retry(
        &flow,
        &[
            "--filter",
            "item.n >= 3 && error_type == \"CommandFailed\"",
            "--max-retries",
            "1",
        ],
    );
    assert_eq!(code, 0, "{filtered}");
    assert_eq!(filtered["selected"], 2);
    assert_eq!(filtered["skipped_filtered"], 3);
    assert_eq!(
        runs(&flow).keys().cloned().collect::<Vec<_>>(),
        ["f3", "f4"]
    );

    let (code, forced) = retry(
        &flow,
        &[
            "--force",
            "--filter",
            "item_id == \"f5\"",
            "--max-retries",
            "1",
        ],
    );
    assert_eq!(code, 0);
    assert_eq!(forced["selected"], 1);
    assert_eq!(failure_counts(&flow).await["f5"], 2);
}

#[tokio::test]
async fn bad_input_is_a_clear_error_and_changes_nothing() {
    let flow = fixable(DEAD_BUS_URL, 3, 0.0, &[]);
    let before = failure_counts(&flow).await;
    for (args, code, needle) in [
        (vec!["--filter", "item.n >="], 2, "filter"),
        (vec!["--filter", "item.missing > 1"], 2, "missing"),
        (vec!["--max-retries", "0"], 2, "max-retries"),
        (vec!["--rate=0"], 2, "rate"),
    ] {
        let (got, out) = retry(&flow, &args);
        assert_eq!(got, code, "{args:?}: {out}");
        assert!(
            out["stderr"].as_str().unwrap().contains(needle),
            "{args:?}: {out}"
        );
    }
    let out = flow.env.run(&["retry", "no-such-job"]);
    assert_eq!(
        out.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(failure_counts(&flow).await, before);
    assert!(runs(&flow).is_empty(), "nothing ran");
}

#[tokio::test]
async fn an_interrupted_retry_finishes_in_flight_items_and_a_rerun_skips_resolved_ones() {
    let flow = fixable(DEAD_BUS_URL, 8, 0.3, &[]);
    for i in 0..8 {
        flow.write(&format!("fixed-f{i}"), "");
    }
    let mut cmd = dlq_command(
        DLQ,
        &flow.env.data,
        DEAD_BUS_URL,
        &[
            "retry",
            "job",
            "--parallel",
            "1",
            "--progress",
            "quiet",
            "--drain-timeout",
            "0s",
        ],
    );
    cmd.stdout(Stdio::piped()).stderr(Stdio::null());
    let child = spawn_tied(cmd).unwrap();
    let started = poll_until(Duration::from_secs(30), || {
        (runs(&flow).len() >= 3).then_some(())
    });
    assert!(started.is_some());
    kill(Pid::from_raw(child.id() as i32), Signal::SIGINT).unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(4),
        "interrupted runs are incomplete"
    );
    let first: Value = serde_json::from_slice(&out.stdout).unwrap();
    let resolved = first["resolved"].as_u64().unwrap();
    assert!(first["not_started"].as_u64().unwrap() > 0, "{first}");
    assert_eq!(
        resolved as usize,
        runs(&flow).len(),
        "every started item finished and was recorded"
    );
    assert_eq!(flow.env.items().await.len(), 8 - resolved as usize);

    let (code, second) = retry(&flow, &["--parallel", "4"]);
    assert_eq!(code, 0);
    assert_eq!(second["resolved"].as_u64().unwrap(), 8 - resolved);
    assert!(flow.env.items().await.is_empty());
    let runs = runs(&flow);
    assert_eq!(runs.len(), 8);
    assert!(
        runs.values().all(|n| *n == 1),
        "no item ran twice: {runs:?}"
    );
}

#[tokio::test]
async fn concurrent_retries_of_one_job_never_run_an_item_twice() {
    let flow = fixable(DEAD_BUS_URL, 6, 0.2, &[]);
    for i in 0..6 {
        flow.write(&format!("fixed-f{i}"), "");
    }
    let spawn = || {
        let mut cmd = dlq_command(
            DLQ,
            &flow.env.data,
            DEAD_BUS_URL,
            &[
                "retry",
                "job",
                "--parallel",
                "2",
                "--progress",
                "quiet",
                "--drain-timeout",
                "0s",
            ],
        );
        cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
        spawn_tied(cmd).unwrap()
    };
    let (a, b) = (spawn(), spawn());
    let (a, b) = (a.wait_with_output().unwrap(), b.wait_with_output().unwrap());
    let ok = [&a, &b].iter().filter(|o| o.status.success()).count();
    assert!(ok >= 1, "at least one retry ran");
    for out in [&a, &b] {
        if !out.status.success() {
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert!(
                stderr.contains("holds this data directory") || stderr.contains("another process"),
                "{stderr}"
            );
        }
    }
    let runs = runs(&flow);
    assert_eq!(runs.len(), 6);
    assert!(
        runs.values().all(|n| *n == 1),
        "no item ran twice: {runs:?}"
    );
    assert!(flow.env.items().await.is_empty());
}

/// While `dlq serve` holds the data directory, `dlq retry` goes through its API; two retries of
/// one job at the same time still run every item once.
#[tokio::test]
async fn concurrent_retries_through_dlq_serve_run_each_item_once() {
    let flow = fixable(DEAD_BUS_URL, 8, 0.2, &[]);
    for i in 0..8 {
        flow.write(&format!("fixed-f{i}"), "");
    }
    let port = dlq_testkit::free_port(0);
    let listen = format!("127.0.0.1:{port}");
    let mut serve = dlq_command(
        DLQ,
        &flow.env.data,
        DEAD_BUS_URL,
        &["serve", "--listen", &listen],
    );
    serve.stdout(Stdio::null()).stderr(Stdio::null());
    let server = spawn_tied(serve).unwrap();
    let up = poll_until(Duration::from_secs(30), || {
        dlq_testkit::http_get(port, "/healthz").filter(|(status, _)| *status == 200)
    });
    assert!(up.is_some(), "dlq serve answered /healthz");

    let spawn = || {
        let mut cmd = dlq_command(
            DLQ,
            &flow.env.data,
            DEAD_BUS_URL,
            &["retry", "job", "--parallel", "3"],
        );
        cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
        spawn_tied(cmd).unwrap()
    };
    let (a, b) = (spawn(), spawn());
    let mut resolved = 0;
    for out in [a.wait_with_output().unwrap(), b.wait_with_output().unwrap()] {
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let report: Value = serde_json::from_slice(&out.stdout).unwrap();
        resolved += report["resolved"].as_u64().unwrap();
    }
    assert_eq!(
        resolved, 8,
        "each item resolved by exactly one of the two retries"
    );
    let runs = runs(&flow);
    assert_eq!(runs.len(), 8);
    assert!(
        runs.values().all(|n| *n == 1),
        "no item ran twice: {runs:?}"
    );

    kill(Pid::from_raw(server.id() as i32), Signal::SIGTERM).unwrap();
    let status = server.wait_with_output().unwrap().status;
    assert!(status.success(), "dlq serve stopped cleanly: {status:?}");
    assert!(flow.env.items().await.is_empty());
}

/// `--rate N` starts at most N items a second: 5 items at 2 a second cannot all have started
/// before 2 s have passed (a lower bound, which load can only make longer).
#[tokio::test]
async fn rate_limits_how_fast_items_start() {
    let nats = NatsServer::start();
    let flow = fixable(&nats.url(), 5, 0.0, &[]);
    for n in 0..5 {
        flow.write(&format!("fixed-f{n}"), "");
    }
    let started = std::time::Instant::now();
    let (code, report) = retry(
        &flow,
        &["--max-retries", "1", "--parallel", "5", "--rate", "2"],
    );
    let elapsed = started.elapsed();
    assert_eq!(code, 0, "{report}");
    assert_eq!(report["resolved"], 5, "{report}");
    assert!(
        elapsed >= Duration::from_secs(2),
        "5 items at 2/s started within {elapsed:?}"
    );
}
