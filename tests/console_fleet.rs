//! `dlq console` end to end: a real nats-server, two `dlq serve` nodes (distinct node ids, two
//! data directories) and the console, each a real `dlq` process. The console lists both nodes'
//! items with their node and filters by node; a delete from the console runs on the owning
//! node (named `console:<name>` in its `item_removed` event) and comes back to the console
//! through the stream; a node stopped with SIGTERM shows as down and its delete fails
//! clearly; the control subject refuses garbage and routes off its whitelist.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Child, Stdio};
use std::time::Duration;

use dlq::domain::event::{Event, EventKind, RemovedBy};
use dlq_testkit::cli::Env;
use dlq_testkit::stream::stream_messages;
use dlq_testkit::{free_port, http_get, poll_until, spawn_tied, wait_for, NatsServer};
use serde_json::{json, Value};

/// The `dlq` binary under test.
const DLQ: &str = env!("CARGO_BIN_EXE_dlq");
/// How long anything may take to show up.
const PATIENCE: Duration = Duration::from_secs(60);

/// A `dlq` process serving on a loopback port; SIGKILLed on drop if still running.
struct Proc {
    child: Child,
    port: u16,
    log: std::path::PathBuf,
}

impl Proc {
    fn start(env: &Env, args: &[&str], log: &str) -> Proc {
        let port = free_port(0);
        let listen = format!("127.0.0.1:{port}");
        let log = env.path(log);
        let mut all: Vec<&str> = args.to_vec();
        all.extend(["--listen", &listen]);
        let mut cmd = env.command(&all);
        cmd.env("RUST_LOG", "info")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap());
        let proc = Proc {
            child: spawn_tied(cmd).unwrap(),
            port,
            log,
        };
        let up = poll_until(PATIENCE, || {
            http_get(port, "/healthz").filter(|(status, _)| *status == 200)
        });
        assert!(
            up.is_some(),
            "{args:?} never answered /healthz: {}",
            proc.log()
        );
        proc
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// SIGTERM, then waits for the process to end.
    fn terminate(&mut self) {
        let pid = i32::try_from(self.child.id()).unwrap();
        // SAFETY: kill(2) on our own child's pid.
        unsafe { libc::kill(pid, libc::SIGTERM) };
        let _ = self.child.wait();
    }

    fn get(&self, path: &str) -> Value {
        let (status, body) = http_get(self.port, path).unwrap();
        assert_eq!(status, 200, "GET {path}: {body}");
        serde_json::from_str(&body).unwrap()
    }

    fn post(&self, path: &str, body: &Value) -> (u16, Value) {
        let body = body.to_string();
        let request = dlq_testkit::http::request("POST", path, None, Some(&body));
        let mut stream = TcpStream::connect(("127.0.0.1", self.port)).unwrap();
        stream.set_read_timeout(Some(PATIENCE)).unwrap();
        stream.write_all(request.as_bytes()).unwrap();
        let mut response = String::new();
        stream.read_to_string(&mut response).unwrap();
        let (head, body) = response.split_once("\r\n\r\n").unwrap();
        let status = head.split_whitespace().nth(1).unwrap().parse().unwrap();
        (status, serde_json::from_str(body).unwrap())
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A node: `dlq demo` of `count` items in job `job`, then `dlq serve`, both as `node`.
fn node(nats: &NatsServer, node: &str, job: &str, count: u32) -> (Env, Proc) {
    let env = Env::new(DLQ, &nats.url());
    let count = count.to_string();
    let demo = env.json(&[
        "--node-id",
        node,
        "demo",
        "--count",
        &count,
        "--job-id",
        job,
        "--drain-timeout",
        "5s",
    ]);
    assert!(demo.is_object(), "{demo}");
    let serve = Proc::start(&env, &["--node-id", node, "serve"], "serve.log");
    (env, serve)
}

/// `(job/item, node)` of every item the console lists.
fn listed(console: &Proc, query: &str) -> Vec<(String, String)> {
    let page = console.get(&format!("/v1/items?limit=1000{query}"));
    page["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| {
            (
                format!(
                    "{}/{}",
                    i["job_id"].as_str().unwrap(),
                    i["item_id"].as_str().unwrap()
                ),
                i["node"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

/// The items `dlq list` shows on a node (through its `dlq serve`).
fn node_items(env: &Env) -> Vec<String> {
    let list = env.json(&["list", "--limit", "1000"]);
    list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| {
            format!(
                "{}/{}",
                i["job_id"].as_str().unwrap(),
                i["item_id"].as_str().unwrap()
            )
        })
        .collect()
}

async fn wait_listed(console: &Proc, what: &str, want: impl Fn(&[(String, String)]) -> bool) {
    wait_for(what, PATIENCE, || {
        let ok = want(&listed(console, ""));
        async move { ok }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_lists_every_node_and_deletes_on_the_owning_node() {
    let nats = NatsServer::start();
    let (env_a, _serve_a) = node(&nats, "node-a", "ja", 3);
    let (env_b, mut serve_b) = node(&nats, "node-b", "jb", 2);
    let home = Env::new(DLQ, &nats.url());
    let store = home.path("console-store");
    let console = Proc::start(
        &home,
        &["console", "--store", store.to_str().unwrap()],
        "console.log",
    );

    // Both nodes' items, each with its node; the node filter keeps one node's.
    wait_listed(&console, "both nodes' 5 items", |items| items.len() == 5).await;
    let all = listed(&console, "");
    for (id, node) in &all {
        let want = if id.starts_with("ja/") {
            "node-a"
        } else {
            "node-b"
        };
        assert_eq!(node, want, "{all:?}");
    }
    let only_b = listed(&console, "&node=node-b");
    assert_eq!(only_b.len(), 2, "{only_b:?}");
    assert!(only_b.iter().all(|(_, node)| node == "node-b"));
    // A delete of what a filter selects, kept to one node (the page's node filter): counted on
    // that node only.
    let (status, dry) = console.post(
        "/v1/delete",
        &json!({ "all": true, "node": "node-b", "dry_run": true }),
    );
    assert_eq!(status, 200, "{dry}");
    assert_eq!(dry["would_remove"], 2, "{dry}");
    assert_eq!(dry["nodes"].as_object().unwrap().len(), 1, "{dry}");
    assert_eq!(dry["nodes"]["node-b"]["would_remove"], 2, "{dry}");
    let one = console.get("/v1/items/ja/item-1");
    assert_eq!(one["node"], "node-a");
    assert_eq!(console.get("/v1/stats")["total_items"], 5);
    assert_eq!(console.get("/v1/whoami")["console"], true);

    // The overview: both nodes up, with their items.
    let overview = console.get("/v1/console");
    let nodes = overview["nodes"].as_array().unwrap();
    assert_eq!(nodes.len(), 2, "{overview}");
    assert!(nodes.iter().all(|n| n["up"] == true), "{overview}");
    assert_eq!(overview["lag"], 0, "{overview}");

    // A delete from the console runs on node-a, as console:anonymous, with the reason.
    let (status, answer) = console.post(
        "/v1/delete",
        &json!({ "ids": ["ja/item-0"], "reason": "poison input" }),
    );
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["removed"], 1, "{answer}");
    let on_a = node_items(&env_a);
    assert!(!on_a.contains(&"ja/item-0".to_owned()), "{on_a:?}");
    assert_eq!(on_a.len(), 2, "{on_a:?}");
    assert_eq!(node_items(&env_b).len(), 2, "node-b is unchanged");
    // ... and comes back to the console through the stream.
    wait_listed(&console, "ja/item-0 gone from the console", |items| {
        items.len() == 4 && !items.iter().any(|(id, _)| id == "ja/item-0")
    })
    .await;
    let removed: Vec<(String, Option<RemovedBy>)> = stream_messages(&nats.url(), "DLQ")
        .await
        .into_iter()
        .filter_map(
            |(_, event)| match serde_json::from_value::<Event>(event).ok()?.kind {
                EventKind::ItemRemoved {
                    item_id,
                    removed_by,
                    ..
                } => Some((item_id, removed_by)),
                _ => None,
            },
        )
        .collect();
    let by = Some(RemovedBy {
        name: "console:anonymous".into(),
        reason: Some("poison input".into()),
    });
    assert_eq!(removed, [("item-0".to_owned(), by)]);

    // Garbage and routes off the whitelist are refused on the control subject, changing nothing.
    let client = async_nats::connect(nats.url()).await.unwrap();
    for payload in [
        b"garbage".to_vec(),
        serde_json::to_vec(&json!({
            "method": "POST", "path": "/v1/purge", "body": {"older_than_days": 0},
            "by": {"name": "mallory"}
        }))
        .unwrap(),
    ] {
        let reply = client
            .request("dlq.control.node-a", payload.into())
            .await
            .unwrap();
        let reply: Value = serde_json::from_slice(&reply.payload).unwrap();
        assert_eq!(reply["status"], 400, "{reply}");
    }
    assert_eq!(node_items(&env_a).len(), 2, "nothing changed on node-a");

    // node-b stopped: down on the overview; a delete of its item fails clearly, node-a's
    // delete in the same request still goes through.
    serve_b.terminate();
    let overview = console.get("/v1/console");
    let down: Vec<&Value> = overview["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|n| n["up"] == false)
        .collect();
    assert_eq!(down.len(), 1, "{overview}");
    assert_eq!(down[0]["node"], "node-b");
    let (status, answer) =
        console.post("/v1/delete", &json!({ "ids": ["jb/item-0", "ja/item-1"] }));
    assert_eq!(status, 502, "{answer}");
    let error = answer["error"].as_str().unwrap();
    assert!(
        error.contains("node node-b is not answering on dlq.control.node-b: is it running?"),
        "{error}"
    );
    assert_eq!(answer["removed"], 1, "{answer}");
    assert_eq!(node_items(&env_a).len(), 1);
    drop(console);
    drop(env_b);
}

/// The console's page in a real headless Chromium: the overview's nodes up, then one down; the
/// list's node column and filter; a delete of a selected row from the page, on the owning node.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_page_shows_the_nodes_and_deletes_on_the_owning_node() {
    use dlq_testkit::browser::{screenshot_dir, Browser};

    let nats = NatsServer::start();
    let (env_a, _serve_a) = node(&nats, "node-a", "ja", 2);
    let (_env_b, mut serve_b) = node(&nats, "node-b", "jb", 1);
    let home = Env::new(DLQ, &nats.url());
    let store = home.path("console-store");
    let console = Proc::start(
        &home,
        &["console", "--store", store.to_str().unwrap()],
        "console.log",
    );
    wait_listed(&console, "both nodes' 3 items", |items| items.len() == 3).await;
    let page = format!("http://127.0.0.1:{}/", console.port);
    let shots = screenshot_dir();
    let browser = Browser::start().await;

    // The overview: both nodes, up.
    browser.client.goto(&page).await.unwrap();
    for node in ["node-a", "node-b"] {
        let css = format!(".node-state[data-node=\"{node}\"]");
        browser.text_until(&css, |t| t == "up").await;
    }
    browser.screenshot(&shots, "console-1-overview").await;

    // The list: a node column; the node filter keeps node-b's item.
    browser
        .client
        .goto(&format!("{page}#/items?node=node-b"))
        .await
        .unwrap();
    let rows = browser
        .text_until("#items-table tbody", |t| t.contains("jb"))
        .await;
    assert!(!rows.contains("ja"), "{rows}");
    assert!(rows.contains("node-b"), "{rows}");
    browser.find("select#node").await;
    browser.screenshot(&shots, "console-2-items-node-b").await;

    // An item's page on the console names its node, says where its job events are, and has
    // no retry (a node's own).
    browser
        .client
        .goto(&format!("{page}#/item/jb/item-0"))
        .await
        .unwrap();
    browser
        .text_until("#item-facts", |t| t.contains("node-b"))
        .await;
    browser
        .text_until("main", |t| {
            t.contains("Job events are on the page of node node-b")
        })
        .await;
    let retry = browser
        .client
        .find_all(fantoccini::Locator::Css("#retry-one"))
        .await
        .unwrap();
    assert!(retry.is_empty(), "a console retries nothing");

    // Delete a selected row of node-a from the page.
    browser
        .client
        .goto(&format!("{page}#/items"))
        .await
        .unwrap();
    browser
        .find("input.row-check[data-job=\"ja\"][data-item=\"item-0\"]")
        .await
        .click()
        .await
        .unwrap();
    browser
        .find("#delete-selected")
        .await
        .click()
        .await
        .unwrap();
    browser.find("#confirm-delete").await.click().await.unwrap();
    browser
        .text_until("#delete-outcome", |t| t.contains("1 items deleted"))
        .await;
    let on_a = node_items(&env_a);
    assert_eq!(on_a, ["ja/item-1"], "{on_a:?}");
    wait_listed(&console, "ja/item-0 gone from the console", |items| {
        items.len() == 2
    })
    .await;

    // node-b stopped: down on the overview.
    serve_b.terminate();
    browser
        .client
        .goto(&format!("{page}#/items"))
        .await
        .unwrap();
    browser.client.goto(&page).await.unwrap();
    browser
        .text_until(".node-state[data-node=\"node-b\"]", |t| t == "down")
        .await;
    browser.screenshot(&shots, "console-3-node-down").await;
    browser.close().await;
}
