//! The job runner end to end through the `dlq` binary, with a real nats-server and real agent
//! processes: failed items reach the DLQ and the stream with their full history, hostile item
//! data runs nothing, a job killed with SIGKILL resumes with every item recorded once, and
//! dead-lettered items re-run on resume leave the DLQ.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use dlq_testkit::cli::dlq_command;
use dlq_testkit::flow::{self, counts, Flow};
use dlq_testkit::{poll_until, spawn_tied, NatsServer, DEAD_BUS_URL};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use serde_json::{json, Value};

/// The `dlq` binary under test.
const DLQ: &str = env!("CARGO_BIN_EXE_dlq");

/// 200 items, those with `n % 10 == 3` always fail (20 items).
fn two_hundred_items() -> Vec<Value> {
    (0..200)
        .map(|n| json!({"id": format!("item-{n:03}"), "n": n, "fail": n % 10 == 3}))
        .collect()
}

const TEN_PERCENT: &str = r#"
name: ten-percent
mode: mapreduce
map:
  input: items.json
  json_path: "$.items[*]"
  max_parallel: 8
  agent_template:
    - shell: "test ${item.fail} = false || { echo 'widget ${item.id} exploded' >&2; exit 42; }"
reduce:
  - shell: "echo ${map.failed} > \"$DLQ_WORKFLOW_DIR/failed.txt\"; echo ${map.total} > \"$DLQ_WORKFLOW_DIR/total.txt\""
error_policy:
  retry_config:
    max_attempts: 3
    backoff:
      fixed:
        delay: 10ms
"#;

#[tokio::test]
async fn failing_items_reach_the_dlq_and_the_stream_with_their_history() {
    let nats = NatsServer::start();
    let flow = Flow::new(DLQ, &nats.url());
    flow.items(&two_hundred_items());
    let out = flow.run(TEN_PERCENT, "tenpct");
    let (code, report) = flow::report(&out);
    assert_eq!(code, 0, "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(counts(&report), (180, 20, 0, 0));
    assert_eq!(report["summary"]["error_types"]["CommandFailed"], 20);
    assert_eq!(report["reduce"], json!({"Ok": null}));
    let failed = std::fs::read_to_string(flow.dir.join("failed.txt")).unwrap();
    assert_eq!(
        failed.trim(),
        "20",
        "${{map.failed}} agrees with the summary"
    );
    assert_eq!(
        std::fs::read_to_string(flow.dir.join("total.txt"))
            .unwrap()
            .trim(),
        "200"
    );

    let expected: BTreeSet<String> = (0..200)
        .filter(|n| n % 10 == 3)
        .map(|n| format!("item-{n:03}"))
        .collect();
    let items = flow.env.items().await;
    let in_dlq: BTreeSet<String> = items.iter().map(|i| i.item_id.clone()).collect();
    assert_eq!(in_dlq, expected);
    for item in &items {
        assert_eq!(item.job_id, "tenpct");
        assert_eq!(item.failure_count, 3, "{}", item.item_id);
        let attempts: Vec<u32> = item
            .failure_history
            .iter()
            .map(|f| f.attempt_number)
            .collect();
        assert_eq!(attempts, [1, 2, 3]);
        let last = &item.failure_history[2];
        assert_eq!(
            last.error_type,
            dlq::domain::model::ErrorType::CommandFailed { exit_code: 42 }
        );
        assert!(
            last.stack_trace.as_deref().unwrap().contains("exploded"),
            "{last:?}"
        );
        assert!(
            last.step_failed.starts_with("shell: test ${item.fail}"),
            "{}",
            last.step_failed
        );
        assert_eq!(item.item_data["n"].as_u64().unwrap() % 10, 3);
    }
    // The pattern is reported: 20 items share one signature.
    let patterns = report["summary"]["failure_patterns"].as_array().unwrap();
    assert_eq!(patterns.len(), 1, "{patterns:?}");
    assert_eq!(patterns[0]["count"], 20);

    // Every dead-lettered item is in the stream exactly once (the run waited for the drain).
    let messages = dlq_testkit::stream::stream_messages(&nats.url(), "DLQ").await;
    let mut streamed: BTreeMap<String, usize> = BTreeMap::new();
    for (_, event) in &messages {
        if event["kind"] == "dead_lettered" {
            *streamed
                .entry(event["item"]["item_id"].as_str().unwrap().to_owned())
                .or_default() += 1;
        }
    }
    assert_eq!(streamed.keys().cloned().collect::<BTreeSet<_>>(), expected);
    assert!(streamed.values().all(|n| *n == 1), "{streamed:?}");

    // Every item has exactly one recorded outcome.
    let outcomes = flow.outcomes("tenpct");
    assert_eq!(outcomes.len(), 200);
    let events = flow.events("tenpct");
    let names: Vec<&str> = events
        .iter()
        .map(|e| e["event"].as_str().unwrap())
        .collect();
    assert_eq!(names.first(), Some(&"SetupCompleted"));
    assert_eq!(names.last(), Some(&"JobFinished"));
    assert_eq!(names.iter().filter(|n| **n == "AgentRetrying").count(), 40);
    assert_eq!(
        names.iter().filter(|n| **n == "ItemDeadLettered").count(),
        20
    );
}

#[tokio::test]
async fn hostile_item_data_is_passed_as_data_and_runs_nothing() {
    let flow = Flow::new(DLQ, DEAD_BUS_URL);
    let canary = flow.dir.join("pwned");
    let canary = canary.to_str().unwrap();
    let hostile = [
        format!("$(touch {canary}-1)"),
        format!("`touch {canary}-2`"),
        format!("; touch {canary}-3"),
        format!("' ; touch {canary}-4 ; '"),
        format!("\" ; touch {canary}-5 ; \""),
        format!("a\ntouch {canary}-6"),
        "${IFS}$HOME\\".to_owned(),
    ];
    let items: Vec<Value> = hostile
        .iter()
        .enumerate()
        .map(|(i, name)| json!({"id": format!("h{i}"), "name": name}))
        .collect();
    flow.items(&items);
    let workflow = r#"
name: hostile
mode: mapreduce
map:
  input: items.json
  json_path: "$.items[*]"
  max_parallel: 1
  agent_template:
    - shell: "printf '%s\n' ${item.name} | od -c > /dev/null; printf '%s' ${item.name} > \"$DLQ_WORKFLOW_DIR/out-${item.id}\""
    - shell: "echo '${item.name}' > /dev/null"
"#;
    let (code, report) = flow::report(&flow.run(workflow, "hostile"));
    assert_eq!(code, 0);
    assert_eq!(counts(&report), (hostile.len() as u64, 0, 0, 0));
    for i in 1..=6 {
        assert!(
            !flow.dir.join(format!("pwned-{i}")).exists(),
            "payload {i} ran"
        );
    }
    for (i, name) in hostile.iter().enumerate() {
        let written = std::fs::read_to_string(flow.dir.join(format!("out-h{i}"))).unwrap();
        assert_eq!(&written, name, "item h{i} reached the command unchanged");
    }
}

const SLOW_ITEMS: &str = r#"
name: slow
mode: mapreduce
map:
  input: items.json
  json_path: "$.items[*]"
  max_parallel: 4
  agent_template:
    - shell: "sleep 0.1; test ${item.fail} = false || exit 9"
"#;

/// 60 slow items (every sixth fails) run by `dlq run --job-id JOB` without a bus, returned
/// once at least 12 have an outcome.
fn slow_job_under_way(job: &str) -> (Flow, std::process::Child) {
    let flow = Flow::new(DLQ, DEAD_BUS_URL);
    let items: Vec<Value> = (0..60)
        .map(|n| json!({"id": format!("{job}-{n:02}"), "fail": n % 6 == 0}))
        .collect();
    flow.items(&items);
    let path = flow.write("flow.yml", SLOW_ITEMS);
    let path = path.to_str().unwrap();
    let mut cmd = dlq_command(
        DLQ,
        &flow.env.data,
        DEAD_BUS_URL,
        &["run", path, "--job-id", job, "--progress", "quiet"],
    );
    cmd.stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    let child = spawn_tied(cmd).unwrap();
    let recorded = poll_until(Duration::from_secs(60), || {
        let n = flow.outcomes(job).len();
        (n >= 12).then_some(n)
    });
    assert!(recorded.is_some(), "the job made progress");
    (flow, child)
}

#[tokio::test]
async fn a_job_killed_with_sigkill_resumes_and_records_every_item_once() {
    let (flow, mut child) = slow_job_under_way("killed");
    kill(Pid::from_raw(child.id() as i32), Signal::SIGKILL).unwrap();
    child.wait().unwrap();
    let before = flow.outcomes("killed").len();
    assert!(before < 60, "killed before the end ({before} outcomes)");

    let (code, report) = flow::report(&flow.resume("killed", &[]));
    assert_eq!(code, 0);
    assert_eq!(counts(&report), (50, 10, 0, 0));
    let outcomes = flow.outcomes("killed");
    let mut per_item: BTreeMap<String, usize> = BTreeMap::new();
    for o in &outcomes {
        *per_item
            .entry(o["item_id"].as_str().unwrap().to_owned())
            .or_default() += 1;
    }
    assert_eq!(per_item.len(), 60, "every item has an outcome");
    assert!(
        per_item.values().all(|n| *n == 1),
        "no item recorded twice: {per_item:?}"
    );
    let dlq: Vec<_> = flow.env.items().await;
    assert_eq!(dlq.len(), 10);
    assert!(
        dlq.iter().all(|i| i.failure_count == 1),
        "no failure recorded twice"
    );
}

/// SIGTERM stops a job gracefully: in-flight items finish, the rest stay pending, the run exits
/// 4 (incomplete), and a resume records every item exactly once.
#[tokio::test]
async fn a_job_stopped_with_sigterm_exits_4_and_leaves_the_rest_pending() {
    let (flow, mut child) = slow_job_under_way("stopped");
    kill(Pid::from_raw(child.id() as i32), Signal::SIGTERM).unwrap();
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(4), "a stopped job exits 4 (incomplete)");
    let before = flow.outcomes("stopped").len();
    assert!(before < 60, "stopped before the end ({before} outcomes)");

    let (code, report) = flow::report(&flow.resume("stopped", &[]));
    assert_eq!(code, 0);
    assert_eq!(counts(&report), (50, 10, 0, 0));
    let outcomes = flow.outcomes("stopped");
    let ids: BTreeSet<_> = outcomes.iter().map(|o| o["item_id"].to_string()).collect();
    assert_eq!(outcomes.len(), 60, "every item recorded once");
    assert_eq!(ids.len(), 60);
}

#[tokio::test]
async fn resume_with_dlq_items_resolves_those_that_now_succeed() {
    let nats = NatsServer::start();
    let flow = Flow::new(DLQ, &nats.url());
    let items: Vec<Value> = (0..10)
        .map(|n| json!({"id": format!("r{n}"), "n": n}))
        .collect();
    flow.items(&items);
    // Items r0-r3 need a fix; r0 and r1 get it before the resume.
    let workflow = r#"
name: fixable
mode: mapreduce
map:
  input: items.json
  json_path: "$.items[*]"
  agent_template:
    - shell: "test ${item.n} -ge 4 || test -f \"$DLQ_WORKFLOW_DIR/fixed-${item.id}\" || { echo 'validation failed: needs fix' >&2; exit 1; }"
"#;
    let (code, first) = flow::report(&flow.run(workflow, "fixable"));
    assert_eq!(code, 0);
    assert_eq!(counts(&first), (6, 4, 0, 0));
    flow.write("fixed-r0", "");
    flow.write("fixed-r1", "");

    let (code, second) = flow::report(&flow.resume("fixable", &["--include-dlq-items"]));
    assert_eq!(code, 0);
    assert_eq!(counts(&second), (8, 2, 0, 0));
    let left: BTreeSet<String> = flow
        .env
        .items()
        .await
        .into_iter()
        .map(|i| i.item_id)
        .collect();
    assert_eq!(left, BTreeSet::from(["r2".to_owned(), "r3".to_owned()]));
    let still = flow.env.items().await;
    assert!(
        still.iter().all(|i| i.failure_count == 2),
        "history appended on the second failure"
    );

    let messages = dlq_testkit::stream::stream_messages(&nats.url(), "DLQ").await;
    let resolved: BTreeSet<String> = messages
        .iter()
        .filter(|(_, e)| e["kind"] == "item_removed" && e["reason"] == "resolved")
        .map(|(_, e)| e["item_id"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(resolved, BTreeSet::from(["r0".to_owned(), "r1".to_owned()]));
}

#[test]
fn malformed_workflows_are_usage_errors_naming_the_problem_and_create_no_job() {
    let flow = Flow::new(DLQ, DEAD_BUS_URL);
    flow.items(&[json!({"id": "a"})]);
    let cases = [
        ("name: x\nmode: mapreduce\nmap:\n  input: items.json\n  max_paralel: 2\n  agent_template:\n    - shell: \"true\"\n", "max_paralel"),
        ("name: x\nmode: mapreduce\nmap:\n  input: items.json\n  agent_template:\n    - shell: \"true\"\nerror_policy:\n  on_item_failure: dlx\n", "dlx"),
        ("name: x\nmode: batch\nmap:\n  input: items.json\n  agent_template:\n    - shell: \"true\"\n", "batch"),
    ];
    for (i, (workflow, needle)) in cases.iter().enumerate() {
        let job = format!("bad{i}");
        let out = flow.run(workflow, &job);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{stderr}");
        assert!(stderr.contains(needle), "{needle} in: {stderr}");
        assert!(!flow.job_dir(&job).join("job.json").exists());
    }
    let out = flow.resume("no-such-job", &[]);
    assert_eq!(
        out.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A template naming a field the items lack (`${item.nope}`) fails `dlq run` at validation,
/// before any item runs: exit 2, one line naming the step, the variable and what to do, and no
/// data directory. An input command is run once, by the job, which checks the items it selects
/// before the first one runs: no job saved, no item run.
#[test]
fn a_template_naming_a_missing_field_fails_validation_before_any_item_runs() {
    let flow = Flow::new(DLQ, DEAD_BUS_URL);
    flow.items(&[json!({"id": "a", "x": 1}), json!({"id": "b"})]);
    let workflow = |input: &str, agent: &str| {
        format!(
            "name: t\nmode: mapreduce\nmap:\n  input: {input}\n  json_path: \"$.items[*]\"\n  \
             agent_template:\n    - shell: \"touch \\\"$DLQ_WORKFLOW_DIR/ran-${{item.id}}\\\"; echo {agent}\"\n"
        )
    };
    let one_line = |out: &std::process::Output, needles: &[&str]| {
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{stderr}");
        assert_eq!(stderr.lines().count(), 1, "{stderr}");
        for needle in needles {
            assert!(stderr.contains(needle), "{needle} in: {stderr}");
        }
    };
    let step = "`map.agent_template[0]`";
    let out = flow.run(&workflow("items.json", "${item.nope}"), "nope");
    one_line(
        &out,
        &[
            step,
            "2 of the 2 items",
            "`item.nope`",
            "check the field name",
        ],
    );
    assert!(
        !flow.env.data.exists(),
        "validation created the data directory"
    );
    // A field only some items have: the first that lacks it is named.
    let out = flow.run(&workflow("items.json", "${item.x}"), "some");
    one_line(&out, &[step, "1 of the 2 items", "id b", "`item.x`"]);
    assert!(
        !flow.env.data.exists(),
        "validation created the data directory"
    );
    // What the text alone says wrong needs no items.
    let out = flow.run(&workflow("items.json", "${itm.x}"), "root");
    one_line(&out, &[step, "`${itm.x}`", "fix the spelling"]);
    assert!(
        !flow.env.data.exists(),
        "validation created the data directory"
    );

    let command = "{ command: \"cat items.json\" }";
    let out = flow.run(&workflow(command, "${item.nope}"), "cmd");
    one_line(&out, &[step, "2 of the 2 items", "`item.nope`"]);
    assert!(
        !flow.job_dir("cmd").join("job.json").exists(),
        "the job was saved"
    );
    for id in ["a", "b"] {
        assert!(
            !flow.dir.join(format!("ran-{id}")).exists(),
            "item {id} ran"
        );
    }
    // The same workflow with a field every item has runs them.
    let out = flow.run(&workflow(command, "${item.id}"), "cmd-ok");
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(flow.dir.join("ran-b").exists());
}

/// The example workflows in `examples/workflows/` run as the README says.
#[tokio::test]
async fn the_example_workflows_run() {
    let flow = Flow::new(DLQ, DEAD_BUS_URL);
    let examples = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/workflows");
    for name in ["process-items.yml", "flaky-api.yml", "items.json"] {
        std::fs::copy(examples.join(name), flow.dir.join(name)).unwrap();
    }
    let run = |file: &str, job: &str| {
        let path = flow.dir.join(file);
        let path = path.to_str().unwrap().to_owned();
        flow.env.run(&[
            "run",
            &path,
            "--job-id",
            job,
            "--progress",
            "quiet",
            "--drain-timeout",
            "0s",
        ])
    };
    let (code, report) = flow::report(&run("process-items.yml", "ex1"));
    assert_eq!(code, 0);
    assert_eq!(counts(&report), (9, 3, 0, 0));
    assert!(report["reduce_output"]
        .as_str()
        .unwrap()
        .contains("9/12 succeeded, 3 dead-lettered"));
    flow.write("fixed", "");
    let out = flow.env.run(&[
        "retry",
        "ex1",
        "--progress",
        "quiet",
        "--drain-timeout",
        "0s",
    ]);
    let retried: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(retried["resolved"], 3, "{retried}");
    assert!(flow.env.items().await.is_empty());

    let (code, report) = flow::report(&run("flaky-api.yml", "ex2"));
    assert_eq!(code, 0, "{report}");
    assert_eq!(counts(&report), (25, 5, 0, 0));
    let names: Vec<String> = flow
        .events("ex2")
        .iter()
        .map(|e| e["event"].as_str().unwrap().to_owned())
        .collect();
    assert!(
        names.contains(&"CircuitOpen".to_owned()) && names.contains(&"CircuitClosed".to_owned()),
        "{names:?}"
    );
    let out = flow.env.run(&["jobs"]);
    let jobs: Vec<Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let ids: Vec<&str> = jobs.iter().map(|j| j["job_id"].as_str().unwrap()).collect();
    assert_eq!(ids, ["ex1", "ex2"]);
}

/// While `dlq run` holds the data directory, operator commands go through the API it serves.
#[tokio::test]
async fn operator_commands_reach_a_running_job_through_its_api() {
    let flow = Flow::new(DLQ, DEAD_BUS_URL);
    let items: Vec<Value> = (0..6)
        .map(|n| json!({"id": format!("w{n}"), "n": n}))
        .collect();
    flow.items(&items);
    let wf = r#"
name: waiting
mode: mapreduce
map:
  input: items.json
  json_path: "$.items[*]"
  max_parallel: 6
  agent_template:
    - shell: "test ${item.n} -lt 3 && exit 1; while [ ! -f \"$DLQ_WORKFLOW_DIR/go\" ]; do sleep 0.05; done"
"#;
    let child = flow.spawn_run(wf, "held");
    // The three failing items reach the DLQ while the others wait for `go`.
    let listed = poll_until(Duration::from_secs(60), || {
        let out = flow.env.run(&["list", "--job-id", "held"]);
        let list: Value = serde_json::from_slice(&out.stdout).ok()?;
        (out.status.success() && list["matched"] == 3).then_some(list)
    });
    let listed = listed.expect("dlq list answered through the running job's API");
    let ids: BTreeSet<&str> = listed["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["item_id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, BTreeSet::from(["w0", "w1", "w2"]));
    assert!(flow.env.data.join("serve.json").exists());
    flow.write("go", "");
    let out = child.wait_with_output().unwrap();
    let (code, report) = flow::report(&out);
    assert_eq!(code, 0);
    assert_eq!(counts(&report), (3, 3, 0, 0));
    assert!(
        !flow.env.data.join("serve.json").exists(),
        "the announcement is removed at the end"
    );
}
