//! Redrive from the fleet console, end to end: a real nats-server, two schedulers embedding the
//! emitter (two data directories, node ids `sched-a` and `sched-b`), each with a redrive
//! handler and serving its API with `serve_emitter` (which answers its control subject), and a
//! real `dlq console` process. A redrive asked of the console runs on the node that owns the
//! item, through that node's handler; the console's view changes only when the node's events
//! come back through the stream; a second redrive of a generation already redriven does
//! nothing, wherever it is asked.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Child, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use dlq::bus::{BusConfig, NatsBus};
use dlq::domain::model::DeadLetteredItem;
use dlq::emitter::NodeEmitter;
use dlq::sink::{LocalSink, SinkConfig};
use dlq::EmitterBuilder;
use dlq_ops::serve::{serve_emitter, ServeHandle, ServeOptions};
use dlq_testkit::cli::Env;
use dlq_testkit::items::failed_once;
use dlq_testkit::stream::stream_messages;
use dlq_testkit::{free_port, http_get, poll_until, spawn_tied, wait_for, NatsServer};
use serde_json::{json, Value};

const DLQ: &str = env!("CARGO_BIN_EXE_dlq");
const PATIENCE: Duration = Duration::from_secs(60);

/// A scheduler embedding the emitter: its handler resolves an item unless its data says
/// `"fail": true`, and records the ids it was handed.
struct Scheduler {
    emitter: NodeEmitter,
    api: Option<ServeHandle>,
    seen: Arc<Mutex<Vec<String>>>,
}

impl Scheduler {
    async fn start(env: &Env, node: &str) -> Scheduler {
        let mut config = SinkConfig::new(&env.data);
        config.node_id = Some(node.to_owned());
        let sink = LocalSink::open(config).unwrap();
        let bus = NatsBus::connect(BusConfig {
            url: env.url.clone(),
            ..BusConfig::default()
        })
        .await
        .unwrap();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let record = seen.clone();
        let emitter = EmitterBuilder::new(sink, bus)
            .redrive_handler(move |item: DeadLetteredItem| {
                record.lock().unwrap().push(item.item_id.clone());
                async move {
                    match item.item_data.get("fail") {
                        Some(Value::Bool(true)) => Err(format!("{} still fails", item.item_id)),
                        _ => Ok(()),
                    }
                }
            })
            .build();
        let options = ServeOptions {
            listen: "127.0.0.1:0".parse().unwrap(),
            ..ServeOptions::default()
        };
        let api = serve_emitter(&emitter, &env.data, options).await.unwrap();
        Scheduler {
            emitter,
            api: Some(api),
            seen,
        }
    }

    async fn fail(&self, job: &str, item: &str, data: Value) {
        let item = failed_once((job, item), "shell: work", 1, "db refused".into(), data);
        self.emitter.dead_letter("work", item).await.unwrap();
    }

    fn handed_back(&self) -> Vec<String> {
        self.seen.lock().unwrap().clone()
    }

    async fn stop(mut self) {
        self.api.take().unwrap().shutdown().await.unwrap();
        self.emitter.shutdown().await.unwrap();
    }
}

/// The `dlq console` process; killed on drop.
struct Console {
    child: Child,
    port: u16,
}

impl Console {
    async fn start(env: &Env) -> Console {
        let port = free_port(0);
        let store = env.path("console-store");
        let listen = format!("127.0.0.1:{port}");
        let mut cmd = env.command(&[
            "console",
            "--store",
            store.to_str().unwrap(),
            "--listen",
            &listen,
        ]);
        cmd.stdout(Stdio::null())
            .stderr(std::fs::File::create(env.path("console.log")).unwrap());
        let child = spawn_tied(cmd).unwrap();
        let up = tokio::task::spawn_blocking(move || {
            poll_until(PATIENCE, || {
                http_get(port, "/healthz").filter(|(status, _)| *status == 200)
            })
        });
        assert!(up.await.unwrap().is_some(), "the console never answered");
        Console { child, port }
    }

    /// `GET path` as JSON.
    async fn get(&self, path: &str) -> Value {
        let (port, path) = (self.port, path.to_owned());
        let (status, body) = tokio::task::spawn_blocking(move || http_get(port, &path).unwrap())
            .await
            .unwrap();
        assert_eq!(status, 200, "{body}");
        serde_json::from_str(&body).unwrap()
    }

    /// `POST path` with `body`: (status, JSON answer).
    async fn post(&self, path: &str, body: Value) -> (u16, Value) {
        let (port, path) = (self.port, path.to_owned());
        tokio::task::spawn_blocking(move || {
            let mut stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
            stream.set_read_timeout(Some(PATIENCE)).unwrap();
            let text = body.to_string();
            let request = dlq_testkit::http::request("POST", &path, None, Some(&text));
            stream.write_all(request.as_bytes()).unwrap();
            let mut raw = String::new();
            stream.read_to_string(&mut raw).unwrap();
            let (head, body) = raw.split_once("\r\n\r\n").unwrap();
            let status = head.split_whitespace().nth(1).unwrap().parse().unwrap();
            (status, serde_json::from_str(body).unwrap())
        })
        .await
        .unwrap()
    }

    /// `JOB/ITEM` → `(node, generation)` of every item the console lists.
    async fn listed(&self) -> Vec<(String, String, u64)> {
        let page = self.get("/v1/items?limit=1000").await;
        let mut items: Vec<(String, String, u64)> = page["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| {
                let job = i["job_id"].as_str().unwrap();
                let id = format!("{job}/{}", i["item_id"].as_str().unwrap());
                let generation = i["redrive"]["generation"].as_u64().unwrap_or(0);
                (id, i["node"].as_str().unwrap().into(), generation)
            })
            .collect();
        items.sort();
        items
    }

    async fn wait_listed(&self, what: &str, want: impl Fn(&[(String, String, u64)]) -> bool) {
        wait_for(what, PATIENCE, || async { want(&self.listed().await) }).await;
    }
}

impl Drop for Console {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The kinds of `item`'s events in the stream, in order, and the last `redriven` event.
async fn streamed(nats: &NatsServer, item: &str) -> (Vec<String>, Option<Value>) {
    let events: Vec<Value> = stream_messages(&nats.url(), "DLQ")
        .await
        .into_iter()
        .map(|(_, event)| event)
        .filter(|e| e["item_id"] == item || e["item"]["item_id"] == item)
        .collect();
    let kinds = events
        .iter()
        .map(|e| e["kind"].as_str().unwrap().to_owned())
        .collect();
    let redriven = events.into_iter().rfind(|e| e["kind"] == "redriven");
    (kinds, redriven)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_redrives_on_the_owning_node_and_a_generation_only_once() {
    let nats = NatsServer::start();
    let env_a = Env::new(DLQ, &nats.url());
    let env_b = Env::new(DLQ, &nats.url());
    let a = Scheduler::start(&env_a, "sched-a").await;
    let b = Scheduler::start(&env_b, "sched-b").await;
    a.fail("ja", "ok-1", json!({"n": 1})).await;
    a.fail("ja", "bad-1", json!({"fail": true})).await;
    b.fail("jb", "ok-2", json!({"n": 2})).await;
    let console = Console::start(&Env::new(DLQ, &nats.url())).await;
    console
        .wait_listed("3 items of two nodes", |items| items.len() == 3)
        .await;

    // A dry run names each item with the generation the console saw, and changes nothing.
    let (status, dry) = console
        .post(
            "/v1/redrive",
            json!({"ids": ["ja/ok-1", "jb/ok-2"], "dry_run": true}),
        )
        .await;
    assert_eq!(status, 200, "{dry}");
    assert_eq!(dry["would_redrive"], 2, "{dry}");
    assert_eq!(dry["nodes"].as_object().unwrap().len(), 2, "{dry}");
    assert!(a.handed_back().is_empty() && b.handed_back().is_empty());

    // The confirmation, with those generations: each item goes to its own node's handler,
    // and leaves the console only through the stream.
    let (status, done) = console
        .post(
            "/v1/redrive",
            json!({"ids": ["ja/ok-1", "jb/ok-2"], "generations": {"ja/ok-1": 0, "jb/ok-2": 0},
                   "reason": "db is back"}),
        )
        .await;
    assert_eq!(status, 200, "{done}");
    assert_eq!(
        (done["redriven"].as_u64(), done["resolved"].as_u64()),
        (Some(2), Some(2))
    );
    assert_eq!(a.handed_back(), ["ok-1"]);
    assert_eq!(b.handed_back(), ["ok-2"]);
    console
        .wait_listed("the resolved items gone", |items| {
            items.len() == 1 && items[0].0 == "ja/bad-1"
        })
        .await;
    let (kinds, redriven) = streamed(&nats, "ok-2").await;
    assert_eq!(kinds, ["dead_lettered", "redriven", "item_removed"]);
    let redriven = redriven.unwrap();
    assert_eq!(redriven["node_id"], "sched-b");
    assert_eq!(
        redriven["by"],
        json!({"name": "console:anonymous", "reason": "db is back"})
    );

    // An item that fails again stays, at generation 1, on the console too.
    let (status, failed) = console
        .post(
            "/v1/redrive",
            json!({"ids": ["ja/bad-1"], "generations": {"ja/bad-1": 0}}),
        )
        .await;
    assert_eq!(status, 200, "{failed}");
    assert_eq!(failed["failed_again"], 1, "{failed}");
    console
        .wait_listed("bad-1 at generation 1", |items| {
            items == [("ja/bad-1".into(), "sched-a".into(), 1)]
        })
        .await;
    // A second click on the same generation (the console's old view): nothing is redriven.
    let (status, again) = console
        .post(
            "/v1/redrive",
            json!({"ids": ["ja/bad-1"], "generations": {"ja/bad-1": 0}}),
        )
        .await;
    assert_eq!(status, 200, "{again}");
    assert_eq!(
        (
            again["redriven"].as_u64(),
            again["already_redriven"].as_u64()
        ),
        (Some(0), Some(1))
    );
    assert_eq!(a.handed_back(), ["ok-1", "bad-1"], "handed back once");
    let (kinds, _) = streamed(&nats, "bad-1").await;
    assert_eq!(kinds, ["dead_lettered", "redriven", "redrive_failed"]);
    let overview = console.get("/v1/console").await;
    assert!(overview["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .all(|n| n["up"] == true));

    drop(console);
    a.stop().await;
    b.stop().await;
}
