//! Redrive (issue 35 item 3) against a real nats-server, a real sink on disk and the real `dlq`
//! binary: a scheduler embeds the emitter with a redrive handler and serves its API
//! (`serve_emitter`); `dlq redrive` forwards to it. Its items are handed back to the handler
//! and resolved (the events read back from the stream), a canary halts on a failing error
//! signature, one generation is redriven once however often it is asked, an edit reaches the
//! handler and is recorded with who and why; and on a directory nobody serves the command
//! changes nothing and says who must run.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::Output;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use dlq::bus::{BusConfig, NatsBus};
use dlq::emitter::{EmitterBuilder, NodeEmitter};
use dlq::sink::{LocalSink, SinkConfig};
use dlq::DeadLetteredItem;
use dlq_ops::serve::{serve_emitter, NamedToken, Role, ServeHandle, ServeOptions, Token};
use dlq_testkit::cli::{failure, Env};
use dlq_testkit::items::failed_once;
use dlq_testkit::stream::stream_messages;
use dlq_testkit::NatsServer;
use serde_json::{json, Value};

const DLQ: &str = env!("CARGO_BIN_EXE_dlq");
const TOKEN: &str = "scheduler-token-4711";
/// The messages of the two error signatures the tests use.
const FLAKY: &str = "connection refused by db-primary";
const BROKEN: &str = "assertion failed in the parser";

/// What the handler was given: each item's id and data, in the order handed back.
type Seen = Arc<Mutex<Vec<(String, Value)>>>;

/// A scheduler: its emitter with a redrive handler that fails items whose data says
/// `"fail": true`, serving its API with [`TOKEN`].
struct Scheduler {
    emitter: NodeEmitter,
    api: Option<ServeHandle>,
    seen: Seen,
}

impl Scheduler {
    async fn start(env: &Env) -> Scheduler {
        Scheduler::start_with(env, Vec::new()).await
    }

    /// As [`Scheduler::start`], with the named tokens `tokens` beside [`TOKEN`].
    async fn start_with(env: &Env, tokens: Vec<NamedToken>) -> Scheduler {
        let sink = LocalSink::open(SinkConfig::new(&env.data)).unwrap();
        let bus = NatsBus::connect(BusConfig {
            url: env.url.clone(),
            ..BusConfig::default()
        })
        .await
        .unwrap();
        let seen = Seen::default();
        let record = seen.clone();
        let emitter = EmitterBuilder::new(sink, bus)
            .redrive_handler(move |item: DeadLetteredItem| {
                record
                    .lock()
                    .unwrap()
                    .push((item.item_id.clone(), item.item_data.clone()));
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
            token: Some(Token::new(TOKEN)),
            tokens,
            ..ServeOptions::default()
        };
        let api = serve_emitter(&emitter, &env.data, options).await.unwrap();
        Scheduler {
            emitter,
            api: Some(api),
            seen,
        }
    }

    /// Dead-letters `job-42/item-N` failed with `message`, with `data`.
    async fn fail(&self, n: usize, message: &str, data: Value) {
        let id = format!("item-{n}");
        let item = failed_once(("job-42", &id), "shell: work", 1, message.to_owned(), data);
        self.emitter.dead_letter("work", item).await.unwrap();
    }

    fn port(&self) -> u16 {
        let url = self.api.as_ref().unwrap().url();
        url.rsplit(':').next().unwrap().parse().unwrap()
    }

    fn handed_back(&self) -> Vec<String> {
        self.seen
            .lock()
            .unwrap()
            .iter()
            .map(|(id, _)| id.clone())
            .collect()
    }

    async fn stop(mut self) {
        self.api.take().unwrap().shutdown().await.unwrap();
        self.emitter.shutdown().await.unwrap();
    }
}

/// `dlq ARGS` with the scheduler's token, off the test's runtime (the API answers on it).
async fn dlq(env: &Env, args: &[&str]) -> Output {
    let mut cmd = env.command(args);
    cmd.env("DLQ_API_TOKEN", TOKEN);
    tokio::task::spawn_blocking(move || cmd.output().unwrap())
        .await
        .unwrap()
}

fn json_of(out: &Output) -> Value {
    assert!(out.status.success(), "{:?}", failure(out));
    serde_json::from_slice(&out.stdout).unwrap()
}

/// `POST path` with the token and `body`: (status, JSON answer).
async fn post(port: u16, path: &str, body: Value) -> (u16, Value) {
    post_as(TOKEN, port, path, body).await
}

/// `POST path` with `token` and `body`: (status, JSON answer).
async fn post_as(token: &'static str, port: u16, path: &str, body: Value) -> (u16, Value) {
    let path = path.to_owned();
    tokio::task::spawn_blocking(move || {
        let mut stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(60)))
            .unwrap();
        let text = body.to_string();
        let request = dlq_testkit::http::request("POST", &path, Some(token), Some(&text));
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

/// The events of `item` in the stream, in order, as JSON.
async fn streamed(server: &NatsServer, item: &str) -> Vec<Value> {
    stream_messages(&server.url(), "DLQ")
        .await
        .into_iter()
        .map(|(_, event)| event)
        .filter(|event| event["item_id"] == item || event["item"]["item_id"] == item)
        .collect()
}

fn kinds(events: &[Value]) -> Vec<&str> {
    events.iter().map(|e| e["kind"].as_str().unwrap()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_embedders_item_is_redriven_to_its_handler_and_resolved() {
    let server = NatsServer::start();
    let env = Env::new(DLQ, &server.url());
    let scheduler = Scheduler::start(&env).await;
    scheduler.fail(0, FLAKY, json!({"n": 0})).await;

    let out = dlq(
        &env,
        &[
            "--format",
            "json",
            "redrive",
            "job-42/item-0",
            "--yes",
            "--reason",
            "db is back",
        ],
    )
    .await;
    let report = json_of(&out);
    assert_eq!(report["redriven"], 1, "{report}");
    assert_eq!(report["resolved"], 1, "{report}");
    assert_eq!(report["drained"], true, "{report}");
    assert_eq!(scheduler.handed_back(), vec!["item-0"]);

    let events = streamed(&server, "item-0").await;
    assert_eq!(
        kinds(&events),
        vec!["dead_lettered", "redriven", "item_removed"]
    );
    assert_eq!(events[1]["generation"], 1);
    assert_eq!(events[1]["target"], "handler");
    assert_eq!(
        events[1]["by"],
        json!({"name": "default", "reason": "db is back"})
    );
    assert_eq!(events[2]["reason"], "resolved");
    assert_eq!(events[2]["generation"], 1);
    let list = json_of(&dlq(&env, &["--format", "json", "list"]).await);
    assert_eq!(list["matched"], 0, "resolved items leave: {list}");
    scheduler.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_canary_halts_on_a_failing_signature_and_a_passing_run_releases_all() {
    let server = NatsServer::start();
    let env = Env::new(DLQ, &server.url());
    let scheduler = Scheduler::start(&env).await;
    // In failure order: flaky (fails again), broken (resolves), flaky, broken, ...
    for n in 0..6 {
        match n % 2 {
            0 => {
                scheduler
                    .fail(n, FLAKY, json!({"n": n, "fail": true}))
                    .await
            }
            _ => scheduler.fail(n, BROKEN, json!({"n": n})).await,
        }
    }
    let out = dlq(
        &env,
        &[
            "--format",
            "json",
            "redrive",
            "--job-id",
            "job-42",
            "--canary",
            "2",
            "--halt-above",
            "0.5",
            "--yes",
        ],
    )
    .await;
    let report = json_of(&out);
    assert_eq!(report["halted"], true, "{report}");
    assert_eq!(report["not_released"], 4, "{report}");
    assert_eq!(
        scheduler.handed_back(),
        vec!["item-0", "item-1"],
        "only the canary went"
    );
    let listed = json_of(&dlq(&env, &["--format", "json", "list"]).await);
    let signature_of = |id: &str| {
        let items = listed["items"].as_array().unwrap();
        let item = items.iter().find(|i| i["item_id"] == id).unwrap();
        item["error_signature"].as_str().unwrap().to_owned()
    };
    let halting = signature_of("item-0");
    assert_eq!(report["halted_by"], json!([halting]), "{report}");
    let rates = report["canary"].as_array().unwrap();
    let rate = rates
        .iter()
        .find(|r| r["signature"] == halting.as_str())
        .unwrap();
    assert_eq!(
        (rate["redriven"].as_u64(), rate["failed"].as_u64()),
        (Some(1), Some(1))
    );
    let table = dlq(
        &env,
        &[
            "--format",
            "table",
            "redrive",
            "--job-id",
            "job-42",
            "--canary",
            "2",
            "--dry-run",
        ],
    )
    .await;
    assert!(
        String::from_utf8_lossy(&table.stdout).contains("would redrive 5 items"),
        "{:?} {}",
        failure(&table),
        String::from_utf8_lossy(&table.stdout)
    );

    // The passing signature alone: its canary passes and the rest is released.
    let passing = signature_of("item-3");
    let out = dlq(
        &env,
        &[
            "--format",
            "json",
            "redrive",
            "--signature",
            &passing,
            "--canary",
            "1",
            "--yes",
        ],
    )
    .await;
    let report = json_of(&out);
    assert_eq!(report["halted"], false, "{report}");
    assert_eq!(
        (report["redriven"].as_u64(), report["resolved"].as_u64()),
        (Some(2), Some(2)),
        "{report}"
    );
    assert_eq!(report["not_released"], 0);
    assert_eq!(
        scheduler.handed_back(),
        vec!["item-0", "item-1", "item-3", "item-5"]
    );
    scheduler.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_generation_is_redriven_once_however_often_it_is_asked() {
    let server = NatsServer::start();
    let env = Env::new(DLQ, &server.url());
    let scheduler = Scheduler::start(&env).await;
    scheduler.fail(0, FLAKY, json!({"fail": true})).await;
    let port = scheduler.port();
    // Two operators clicked on the item they both saw at generation 0.
    let body = json!({"ids": ["job-42/item-0"], "generations": {"job-42/item-0": 0}});
    let (status, first) = post(port, "/v1/redrive", body.clone()).await;
    assert_eq!(status, 200, "{first}");
    assert_eq!(first["redriven"], 1, "{first}");
    assert_eq!(first["failed_again"], 1, "{first}");
    let (status, second) = post(port, "/v1/redrive", body).await;
    assert_eq!(status, 200, "{second}");
    assert_eq!(second["redriven"], 0, "{second}");
    assert_eq!(
        second["already_redriven_items"],
        json!(["job-42/item-0"]),
        "{second}"
    );
    assert_eq!(scheduler.handed_back().len(), 1, "the handler ran once");
    let events = streamed(&server, "item-0").await;
    assert_eq!(
        kinds(&events),
        vec!["dead_lettered", "redriven", "redrive_failed"]
    );
    assert_eq!(events[2]["error"], "item-0 still fails");
    let inspected = json_of(&dlq(&env, &["--format", "json", "inspect", "item-0"]).await);
    assert_eq!(
        (
            &inspected["redrive"]["generation"],
            &inspected["redrive"]["state"]
        ),
        (&json!(1), &json!("failed")),
        "{inspected}"
    );
    scheduler.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_edit_reaches_the_handler_and_is_recorded_with_who_and_why() {
    let server = NatsServer::start();
    let env = Env::new(DLQ, &server.url());
    let scheduler = Scheduler::start(&env).await;
    scheduler
        .fail(1, FLAKY, json!({"url": "http://db-old", "fail": true}))
        .await;
    let patch = r#"{"url": "http://db-new", "fail": null}"#;
    let out = dlq(
        &env,
        &[
            "--format",
            "json",
            "redrive",
            "job-42/item-1",
            "--patch",
            patch,
            "--reason",
            "moved db",
            "--yes",
        ],
    )
    .await;
    let report = json_of(&out);
    assert_eq!(report["resolved"], 1, "{report}");
    let seen = scheduler.seen.lock().unwrap().clone();
    assert_eq!(
        seen,
        vec![("item-1".to_owned(), json!({"url": "http://db-new"}))]
    );
    let events = streamed(&server, "item-1").await;
    assert_eq!(
        kinds(&events),
        vec!["dead_lettered", "item_edited", "redriven", "item_removed"]
    );
    let edit = &events[1];
    assert_eq!(edit["patch"], json!({"url": "http://db-new", "fail": null}));
    assert_eq!(
        edit["previous"],
        json!({"url": "http://db-old", "fail": true})
    );
    assert_eq!(edit["by"], json!({"name": "default", "reason": "moved db"}));
    // A patch names one item: anything else is refused and changes nothing.
    let out = dlq(&env, &["redrive", "--all", "--patch", "{}", "--yes"]).await;
    assert_eq!(failure(&out).0, Some(2), "{:?}", failure(&out));
    scheduler.stop().await;
}

#[test]
fn on_a_directory_nobody_serves_redrive_changes_nothing_and_says_who_must_run() {
    let env = Env::new(DLQ, dlq_testkit::DEAD_BUS_URL);
    env.demo("j1", 2);
    let before = env.run(&["--format", "json", "list"]).stdout;
    let out = env.run(&["redrive", "j1/item-0", "--yes"]);
    let (code, stderr) = failure(&out);
    assert_eq!(code, Some(2), "{stderr}");
    assert_eq!(stderr.trim().lines().count(), 1, "one line: {stderr}");
    assert!(stderr.contains("must run and serve its API"), "{stderr}");
    assert!(stderr.contains("dlq retry"), "{stderr}");
    assert_eq!(
        env.run(&["--format", "json", "list"]).stdout,
        before,
        "nothing changed"
    );
}

/// Clears `css` and types `text` into it.
async fn type_into(browser: &dlq_testkit::browser::Browser, css: &str, text: &str) {
    let field = browser.find(css).await;
    field.clear().await.unwrap();
    field.send_keys(text).await.unwrap();
}

async fn click(browser: &dlq_testkit::browser::Browser, css: &str) {
    browser.find(css).await.click().await.unwrap();
}

/// The page in a real Chromium: "Redrive…" on an item with a JSON patch (dry-run count, then
/// confirmed) reaches the handler with the patched data; "Redrive all matching" with a canary
/// of one halts on the failing signature and says so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_redrives_an_edited_item_and_shows_a_halted_canary() {
    let server = NatsServer::start();
    let env = Env::new(DLQ, &server.url());
    let scheduler = Scheduler::start(&env).await;
    scheduler
        .fail(0, FLAKY, json!({"url": "http://db-old", "fail": true}))
        .await;
    for n in 1..4 {
        scheduler
            .fail(n, BROKEN, json!({"n": n, "fail": true}))
            .await;
    }
    let page = format!("{}/", scheduler.api.as_ref().unwrap().url());
    let browser = dlq_testkit::browser::Browser::start().await;
    browser.client.goto(&page).await.unwrap();
    type_into(&browser, "#token-input", TOKEN).await;
    click(&browser, "#token-submit").await;
    browser.text_until("#items-total", |t| t == "4").await;

    browser
        .client
        .goto(&format!("{page}#/item/job-42/item-0"))
        .await
        .unwrap();
    browser
        .text_until("#item-title", |t| t.contains("item-0"))
        .await;
    type_into(
        &browser,
        "#redrive-one-patch",
        r#"{"url": "http://db-new", "fail": null}"#,
    )
    .await;
    click(&browser, "#redrive-one").await;
    let confirm = browser
        .text_until("#redrive-confirm-text", |t| t.contains("Redrive"))
        .await;
    assert!(
        confirm.starts_with("Redrive 1 items") && confirm.contains("patch"),
        "{confirm}"
    );
    click(&browser, "#confirm-redrive").await;
    browser
        .text_until("#redrive-outcome", |t| {
            t.starts_with("1 redriven, 1 resolved")
        })
        .await;
    let seen = scheduler.seen.lock().unwrap().clone();
    assert_eq!(
        seen,
        vec![("item-0".to_owned(), json!({"url": "http://db-new"}))]
    );

    browser
        .client
        .goto(&format!("{page}#/items?job_id=job-42"))
        .await
        .unwrap();
    browser
        .text_until("#matched", |t| t.starts_with("3 matching"))
        .await;
    type_into(&browser, "#redrive-matching-canary", "1").await;
    click(&browser, "#redrive-matching").await;
    browser
        .text_until("#redrive-confirm-text", |t| t.contains("Redrive 3 items"))
        .await;
    click(&browser, "#confirm-redrive").await;
    let halted = browser
        .text_until("#redrive-halted", |t| t.contains("not released"))
        .await;
    assert!(halted.contains("2 items not released"), "{halted}");
    assert_eq!(
        scheduler.handed_back(),
        vec!["item-0", "item-1"],
        "only the canary went"
    );

    // The audit names who edited (with the diff) and who redrove.
    browser
        .client
        .goto(&format!("{page}#/audit"))
        .await
        .unwrap();
    let audit = browser
        .text_until("#audit-table", |t| t.contains("edited"))
        .await;
    assert!(
        audit.contains(
            r#"item-0: {"fail":true,"url":"http://db-old"} → {"fail":null,"url":"http://db-new"}"#
        ),
        "{audit}"
    );
    assert!(audit.contains("redriven"), "{audit}");
    browser.close().await;
    scheduler.stop().await;
}

/// An embedder's named tokens keep to their roles: the read-only one may not redrive (403,
/// nothing handed back), the operator's redrive is named after its token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_embedders_named_tokens_keep_to_their_roles_and_name_who_redrove() {
    const VIEWER: &str = "viewer-token-1234";
    const ANA: &str = "ana-token-5678";
    let server = NatsServer::start();
    let env = Env::new(DLQ, &server.url());
    let tokens = vec![
        NamedToken::new("viewer", Role::ReadOnly, Token::new(VIEWER)),
        NamedToken::new("ana", Role::Operator, Token::new(ANA)),
    ];
    let scheduler = Scheduler::start_with(&env, tokens).await;
    scheduler.fail(0, FLAKY, json!({"n": 0})).await;
    let body = json!({"ids": ["job-42/item-0"]});

    let (status, answer) = post_as(VIEWER, scheduler.port(), "/v1/redrive", body.clone()).await;
    assert_eq!(status, 403, "{answer}");
    assert!(scheduler.handed_back().is_empty());

    let (status, answer) = post_as(ANA, scheduler.port(), "/v1/redrive", body).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(scheduler.handed_back(), vec!["item-0"]);
    let events = streamed(&server, "item-0").await;
    assert_eq!(events[1]["kind"], "redriven");
    assert_eq!(events[1]["by"], json!({"name": "ana"}));
    scheduler.stop().await;
}
