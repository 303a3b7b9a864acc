//! A retry names the operator (issue 35 item 5), against a real nats-server, a real sink on
//! disk and the real `dlq` binary: a retry through `dlq serve`'s API with a named operator
//! token resolves an item whose `item_removed` event in the stream names the token and the
//! reason, and `/v1/audit` lists it as `retried`; a CLI retry on the data directory itself
//! names `local`; a reason of two lines is refused and changes nothing.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use dlq_testkit::flow::{self, counts, Flow};
use dlq_testkit::serve::{Serve, FAIL_UNTIL_FIXED};
use dlq_testkit::stream::stream_messages;
use dlq_testkit::NatsServer;
use serde_json::{json, Value};

/// The `dlq` binary under test.
const DLQ: &str = env!("CARGO_BIN_EXE_dlq");

/// One HTTP/1.1 request to 127.0.0.1:`port`; its status and body as JSON.
fn http(port: u16, method: &str, path: &str, token: &str, body: Option<&str>) -> (u16, Value) {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(60)))
        .unwrap();
    let request = dlq_testkit::http::request(method, path, Some(token), body);
    stream.write_all(request.as_bytes()).unwrap();
    let mut text = String::new();
    stream.read_to_string(&mut text).unwrap();
    let (head, body) = text.split_once("\r\n\r\n").unwrap();
    let status = head.split_whitespace().nth(1).unwrap().parse().unwrap();
    let body = serde_json::from_str(body).unwrap_or_else(|err| panic!("{err}: {body}"));
    (status, body)
}

/// The `removed_by` of the `item_removed` event of `item` in the stream, once it is there
/// (the removal is published in the background); `None` after 30 s.
async fn removed_by(nats: &NatsServer, item: &str) -> Option<Value> {
    for _ in 0..300 {
        let found = stream_messages(&nats.url(), "DLQ")
            .await
            .into_iter()
            .map(|(_, event)| event)
            .find(|e| e["kind"] == "item_removed" && e["item_id"] == item);
        if let Some(event) = found {
            assert_eq!(event["reason"], "resolved", "{event}");
            return Some(event["removed_by"].clone());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    None
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_names_the_token_and_reason_on_each_resolved_item() {
    let nats = NatsServer::start();
    let flow = Flow::new(DLQ, &nats.url());
    flow.items(&[
        json!({"id": "a", "msg": "down"}),
        json!({"id": "b", "msg": "down"}),
    ]);
    let (code, report) = flow::report(&flow.run(FAIL_UNTIL_FIXED, "job"));
    assert_eq!(code, 0, "{report}");
    assert_eq!(counts(&report).1, 2, "both items start in the DLQ");

    // Through the API, with a named operator token: `a` is fixed and resolves.
    flow.write("fixed-a", "");
    let tokens = flow.env.path("tokens");
    std::fs::write(&tokens, "ops operator o-secret\n").unwrap();
    let server = Serve::start_with(
        &flow.env,
        "d-secret",
        &["--tokens-file", tokens.to_str().unwrap()],
    );
    let body = r#"{"max_retries": 1, "reason": "upstream fixed"}"#;
    let retry = "/v1/jobs/job/retry?format=json";
    let (status, report) = http(server.port, "POST", retry, "o-secret", Some(body));
    assert_eq!(status, 200, "{report}");
    assert_eq!(
        (report["resolved"].as_u64(), report["failed_again"].as_u64()),
        (Some(1), Some(1))
    );
    assert_eq!(
        removed_by(&nats, "a").await,
        Some(json!({"name": "ops", "reason": "upstream fixed"}))
    );
    let (status, audit) = http(server.port, "GET", "/v1/audit", "o-secret", None);
    assert_eq!(status, 200, "{audit}");
    let rows: Vec<Value> = audit["actions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| json!([a["who"], a["what"], a["job_id"], a["reason"], a["items"]]))
        .collect();
    assert_eq!(
        rows,
        [json!(["ops", "retried", "job", "upstream fixed", 1])]
    );
    drop(server);

    // On the data directory itself: a two-line reason is refused and changes nothing ...
    flow.write("fixed-b", "");
    let out = flow.env.run(&["retry", "job", "--reason", "a\nb"]);
    assert_eq!(
        out.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(flow.env.items().await.len(), 1, "b is still in the DLQ");
    // ... and a good one is named with `local`.
    let out = flow.env.run(&[
        "retry",
        "job",
        "--reason",
        "b fixed",
        "--drain-timeout",
        "5s",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        removed_by(&nats, "b").await,
        Some(json!({"name": "local", "reason": "b fixed"}))
    );
}
