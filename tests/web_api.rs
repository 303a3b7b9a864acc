//! The routes the web page of `dlq serve` adds, over plain HTTP: its files need no token and
//! carry the security headers; an item's job events; the bus connection in `/healthz`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use dlq_testkit::flow::{self, Flow};
use dlq_testkit::serve::{Serve, FAIL_UNTIL_FIXED};
use dlq_testkit::NatsServer;
use serde_json::{json, Value};

/// The `dlq` binary under test.
const DLQ: &str = env!("CARGO_BIN_EXE_dlq");

const TOKEN: &str = "web-api-test-token-0123456789";

/// One HTTP/1.1 request to the server: status, head (lower-cased) and body.
fn http(port: u16, path: &str, token: Option<&str>) -> (u16, String, String) {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let request = dlq_testkit::http::request("GET", path, token, None);
    stream.write_all(request.as_bytes()).unwrap();
    let mut raw = String::new();
    stream.read_to_string(&mut raw).unwrap();
    let (head, body) = raw.split_once("\r\n\r\n").unwrap();
    let status = head.split_whitespace().nth(1).unwrap().parse().unwrap();
    (status, head.to_ascii_lowercase(), body.to_owned())
}

/// The page's files need no token and carry the security headers (scripts from the server
/// only, no inline ones); the routes the page added: an item's job events (token needed) and
/// the bus connection in `/healthz`.
#[test]
fn page_headers_and_the_routes_it_uses() {
    let nats = NatsServer::start();
    let flow = Flow::new(DLQ, &nats.url());
    flow.items(&[
        json!({"id": "a", "msg": "boom"}),
        json!({"id": "b", "msg": "bang"}),
    ]);
    let (code, report) = flow::report(&flow.run(FAIL_UNTIL_FIXED, "web"));
    assert_eq!(code, 0, "{report}");
    let server = Serve::start(&flow.env, TOKEN);
    let port = server.port;

    for path in ["/", "/ui/app.js", "/ui/items.js", "/ui/app.css"] {
        let (status, head, body) = http(port, path, None);
        assert_eq!(status, 200, "{path}: {head}");
        assert!(!body.is_empty(), "{path}");
        let csp = head
            .lines()
            .find_map(|l| l.strip_prefix("content-security-policy: "))
            .unwrap_or_else(|| panic!("{path} has no CSP: {head}"));
        assert!(csp.contains("script-src 'self'"), "{csp}");
        assert!(csp.contains("default-src 'none'"), "{csp}");
        assert!(csp.contains("frame-ancestors 'none'"), "{csp}");
        assert!(!csp.contains("unsafe"), "{csp}");
        assert!(head.contains("x-content-type-options: nosniff"), "{head}");
        assert!(head.contains("referrer-policy: no-referrer"), "{head}");
    }
    let (_, head, index) = http(port, "/", None);
    assert!(head.contains("content-type: text/html"), "{head}");
    assert!(
        !index.contains("<script>") && !index.contains("style="),
        "no inline script or style: {index}"
    );
    let (_, head, _) = http(port, "/ui/app.js", None);
    assert!(head.contains("content-type: text/javascript"), "{head}");
    assert_eq!(http(port, "/ui/nothing.js", None).0, 404);

    let (status, _, _) = http(port, "/v1/items/web/a/events", None);
    assert_eq!(status, 401, "the item's events need the token");
    let (status, _, body) = http(port, "/v1/items/web/a/events", Some(TOKEN));
    assert_eq!(status, 200, "{body}");
    let events: Value = serde_json::from_str(&body).unwrap();
    let events = events["events"].as_array().unwrap();
    assert!(!events.is_empty(), "{body}");
    assert!(
        events.iter().all(|e| e["item_id"] == "a"),
        "only item a: {body}"
    );
    assert!(
        events.iter().any(|e| e["event"] == "ItemDeadLettered"),
        "{body}"
    );
    let (status, _, body) = http(port, "/v1/items/web/zzz/events", Some(TOKEN));
    assert_eq!((status, body.as_str()), (200, "{\"events\":[]}"));
    // A job id that names no job directory (library users name jobs freely; "../x" reads
    // nothing outside the jobs directory): no job events.
    for job in ["no%20such", "..", "%2E%2E%2Fweb"] {
        let (status, _, body) = http(port, &format!("/v1/items/{job}/a/events"), Some(TOKEN));
        assert_eq!((status, body.as_str()), (200, "{\"events\":[]}"), "{job}");
    }

    let (_, _, body) = http(port, "/healthz", None);
    let health: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(health["bus"], "connected", "{body}");
    assert_eq!(health["status"], "ok", "{body}");
    assert_eq!(health["reason"], Value::Null, "{body}");
}
