//! `dlq serve` stopped by SIGTERM while a request is in flight: it stops accepting new
//! connections, lets the request finish and answer, then flushes and closes the sink and
//! releases the data directory (exit 0).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::process::Stdio;
use std::time::Duration;

use dlq::domain::event::{EventKind, RemovalReason};
use dlq_testkit::cli::dlq_command;
use dlq_testkit::flow::{self, counts, Flow};
use dlq_testkit::{http_get, poll_until, spawn_tied, DEAD_BUS_URL};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use serde_json::{json, Value};

const DLQ: &str = env!("CARGO_BIN_EXE_dlq");

/// Every run waits for `go` in the flow directory, then succeeds only if `fixed` exists.
const GATED: &str = r#"
name: gated
mode: mapreduce
map:
  input: items.json
  json_path: "$.items[*]"
  max_parallel: 3
  agent_template:
    - shell: "echo ${item.id} >> \"$DLQ_WORKFLOW_DIR/runs.log\"; while [ ! -f \"$DLQ_WORKFLOW_DIR/go\" ]; do sleep 0.05; done; test -f \"$DLQ_WORKFLOW_DIR/fixed\""
error_policy:
  retry_config:
    max_attempts: 1
"#;

fn lines(flow: &Flow, name: &str) -> usize {
    std::fs::read_to_string(flow.dir.join(name))
        .unwrap_or_default()
        .lines()
        .count()
}

#[tokio::test]
async fn sigterm_lets_the_request_in_flight_finish_then_closes_the_sink() {
    // Three items in the DLQ.
    let flow = Flow::new(DLQ, DEAD_BUS_URL);
    flow.items(&[json!({"id": "a"}), json!({"id": "b"}), json!({"id": "c"})]);
    flow.write("go", "");
    let (code, report) = flow::report(&flow.run(GATED, "job"));
    assert_eq!(code, 0, "{report}");
    assert_eq!(counts(&report).1, 3, "every item starts in the DLQ");
    std::fs::remove_file(flow.dir.join("go")).unwrap();
    std::fs::remove_file(flow.dir.join("runs.log")).unwrap();
    flow.write("fixed", "");

    let port = dlq_testkit::free_port(0);
    let listen = format!("127.0.0.1:{port}");
    let mut serve = dlq_command(
        DLQ,
        &flow.env.data,
        DEAD_BUS_URL,
        &["serve", "--listen", &listen],
    );
    serve.stdout(Stdio::null()).stderr(Stdio::piped());
    let server = spawn_tied(serve).unwrap();
    let up = poll_until(Duration::from_secs(30), || {
        http_get(port, "/healthz").filter(|(status, _)| *status == 200)
    });
    assert!(up.is_some(), "dlq serve answered /healthz");

    // `dlq retry` goes through the server's API; its three runs block on `go`.
    let mut retry = dlq_command(
        DLQ,
        &flow.env.data,
        DEAD_BUS_URL,
        &["retry", "job", "--parallel", "3"],
    );
    retry.stdout(Stdio::piped()).stderr(Stdio::piped());
    let retry = spawn_tied(retry).unwrap();
    let in_flight = poll_until(Duration::from_secs(60), || {
        (lines(&flow, "runs.log") == 3).then_some(())
    });
    assert!(in_flight.is_some(), "the retry's three runs started");

    // SIGTERM: the listener closes at once (no new connection is accepted) ...
    kill(Pid::from_raw(server.id() as i32), Signal::SIGTERM).unwrap();
    let closed = poll_until(Duration::from_secs(30), || {
        std::net::TcpStream::connect(("127.0.0.1", port))
            .is_err()
            .then_some(())
    });
    assert!(
        closed.is_some(),
        "dlq serve stopped listening after SIGTERM"
    );
    // ... and only then may the runs finish: the request in flight still gets its answer.
    flow.write("go", "");
    let out = retry.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "the retry in flight was cut off: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["resolved"], 3, "{report}");

    let served = server.wait_with_output().unwrap();
    assert!(
        served.status.success(),
        "dlq serve exited with {:?}: {}",
        served.status,
        String::from_utf8_lossy(&served.stderr)
    );
    assert!(
        !flow.env.data.join("serve.json").exists(),
        "the announcement is removed"
    );
    // The sink was closed with every resolution in it: the directory opens, the items are gone.
    assert!(flow.env.items().await.is_empty());
    let resolved = flow
        .env
        .events()
        .await
        .into_iter()
        .filter(|e| {
            matches!(
                e.kind,
                EventKind::ItemRemoved {
                    reason: RemovalReason::Resolved,
                    ..
                }
            )
        })
        .count();
    assert_eq!(resolved, 3);
}
