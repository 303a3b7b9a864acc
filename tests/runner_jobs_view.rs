//! `dlq jobs` shows what each job's run did and what the DLQ holds of it now: a clear empties
//! the job's part of the DLQ without rewriting its history.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use dlq_testkit::flow::{self, counts, Flow};
use dlq_testkit::serve::Serve;
use dlq_testkit::DEAD_BUS_URL;
use serde_json::{json, Value};

const DLQ: &str = env!("CARGO_BIN_EXE_dlq");

const FAILING: &str = r#"
name: failing
mode: mapreduce
map:
  input: items.json
  json_path: "$.items[*]"
  agent_template:
    - shell: "test ${item.n} -ge 3"
error_policy:
  retry_config:
    max_attempts: 1
"#;

fn job_row(flow: &Flow, flags: &[&str], job: &str) -> Value {
    let out = flow.env.run(&[flags, &["jobs"]].concat());
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|line| serde_json::from_str::<Value>(line).unwrap())
        .find(|row| row["job_id"] == job)
        .unwrap_or_else(|| panic!("no row for {job}"))
}

#[test]
fn jobs_shows_what_the_dlq_holds_now() {
    let flow = Flow::new(DLQ, DEAD_BUS_URL);
    flow.items(
        &(0..5)
            .map(|n| json!({"id": format!("i{n}"), "n": n}))
            .collect::<Vec<_>>(),
    );
    let (code, report) = flow::report(&flow.run(FAILING, "nightly"));
    assert_eq!(code, 0, "{report}");
    assert_eq!(counts(&report), (2, 3, 0, 0));

    let row = job_row(&flow, &[], "nightly");
    assert_eq!(row["summary"]["failed"], 3, "{row}");
    assert_eq!(row["in_dlq"], 3, "{row}");
    // While `dlq serve` holds the directory, the counts come from its API (not `?`).
    {
        let _serve = Serve::start(&flow.env, "jobs-view-token");
        let token = flow.env.path("token");
        let row = job_row(&flow, &["--token-file", token.to_str().unwrap()], "nightly");
        assert_eq!(row["in_dlq"], 3, "through the API: {row}");
    }

    let out = flow
        .env
        .run(&["clear", "nightly", "--yes", "--drain-timeout", "0s"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let row = job_row(&flow, &[], "nightly");
    assert_eq!(
        row["summary"]["failed"], 3,
        "the run's history stays: {row}"
    );
    assert_eq!(row["in_dlq"], 0, "the DLQ holds none of them now: {row}");
}
