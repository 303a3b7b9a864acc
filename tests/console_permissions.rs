//! The console's and a node's least-privilege users of `deploy/nats-permissions.conf` (read
//! here, so the documented and the tested permissions cannot drift), on a nats-server started
//! from that file: `dlq serve` as `dlq-node-a` for node `node-a` answers the console's request
//! on `dlq.control.node-a`; the same user serving node `node-b` is refused the subscription to
//! `dlq.control.node-b` (a node cannot answer for another node), so a console's request there
//! finds no responders, while that node's bus stays connected and its log names the fix (a
//! denied control subject is not a refusal of the bus); a node's user cannot send requests on
//! a control subject.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::process::{Child, Stdio};
use std::time::Duration;

use dlq_testkit::cli::Env;
use dlq_testkit::{free_port, http_get, poll_until, spawn_tied, workspace_root, NatsServer};
use serde_json::{json, Value};

const DLQ: &str = env!("CARGO_BIN_EXE_dlq");
const NODE_A: (&str, &str) = ("dlq-node-a", "node-a-pw-5521");
const CONSOLE: (&str, &str) = ("dlq-console", "console-pw-5522");
const PATIENCE: Duration = Duration::from_secs(60);

fn server() -> NatsServer {
    let snippet =
        std::fs::read_to_string(workspace_root().join("deploy/nats-permissions.conf")).unwrap();
    NatsServer::start_with_config(&format!(
        "DLQ_EMITTER_PASSWORD: \"e\"\nDLQ_CONSUMER_PASSWORD: \"c\"\nDLQ_OPERATOR_PASSWORD: \"o\"\nDLQ_CONSOLE_PASSWORD: \"{}\"\nDLQ_NODE_A_PASSWORD: \"{}\"\n{snippet}",
        CONSOLE.1, NODE_A.1
    ))
}

/// `dlq serve` for `node` as the user `dlq-node-a`; killed on drop.
struct Node {
    child: Child,
    port: u16,
    log: std::path::PathBuf,
}

impl Node {
    fn start(env: &Env, node: &str) -> Node {
        let port = free_port(0);
        let listen = format!("127.0.0.1:{port}");
        let log = env.path("serve.log");
        let mut cmd = env.command(&[
            "--user",
            NODE_A.0,
            "--password",
            NODE_A.1,
            "--node-id",
            node,
            "serve",
            "--listen",
            &listen,
        ]);
        cmd.env("RUST_LOG", "info")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap());
        let child = spawn_tied(cmd).unwrap();
        let up = poll_until(PATIENCE, || {
            http_get(port, "/healthz").filter(|(status, _)| *status == 200)
        });
        assert!(up.is_some(), "{}", std::fs::read_to_string(&log).unwrap());
        Node { child, port, log }
    }

    fn health(&self) -> Value {
        serde_json::from_str(&http_get(self.port, "/healthz").unwrap().1).unwrap()
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

async fn connect(url: &str, user: (&str, &str)) -> async_nats::Client {
    async_nats::ConnectOptions::with_user_and_password(user.0.into(), user.1.into())
        .connect(url)
        .await
        .unwrap()
}

fn healthz() -> bytes::Bytes {
    serde_json::to_vec(&json!({"method": "GET", "path": "/healthz", "by": {"name": "ops"}}))
        .unwrap()
        .into()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_reaches_a_node_and_a_node_answers_only_for_itself() {
    let nats = server();
    let env_a = Env::new(DLQ, &nats.url());
    let env_b = Env::new(DLQ, &nats.url());
    let node_a = Node::start(&env_a, "node-a");
    let node_b = Node::start(&env_b, "node-b");
    let console = connect(&nats.url(), CONSOLE).await;

    // The console's request reaches node-a, which answers through its own router.
    let reply = console
        .request("dlq.control.node-a", healthz())
        .await
        .unwrap();
    let reply: Value = serde_json::from_slice(&reply.payload).unwrap();
    assert_eq!(reply["status"], 200, "{reply}");
    assert_eq!(reply["body"]["node_id"], "node-a", "{reply}");

    // node-b runs as dlq-node-a: it may not subscribe to dlq.control.node-b, so nobody answers
    // there. Its bus is not refused for that: it stays connected, and the log says why.
    let err = console
        .request("dlq.control.node-b", healthz())
        .await
        .unwrap_err();
    assert_eq!(
        err.kind(),
        async_nats::RequestErrorKind::NoResponders,
        "{err}"
    );
    let log = std::fs::read_to_string(&node_b.log).unwrap();
    assert!(
        log.contains("a fleet console cannot act on this node"),
        "{log}"
    );
    assert_eq!(node_b.health()["status"], "ok", "{}", node_b.health());

    // A node's user cannot send requests on another node's subject (only the console can).
    let as_node = connect(&nats.url(), NODE_A).await;
    let denied = as_node.request("dlq.control.node-a", healthz()).await;
    assert!(denied.is_err(), "a node sent a control request: {denied:?}");
    drop(node_a);
}
