//! A scheduler that embeds the emitter serves the admin API and the page
//! (`dlq_ops::serve::serve_emitter`, issue 35): the real `dlq` binary finds it through
//! `serve.json` and forwards `list` and `stats` to it while the scheduler holds the data
//! directory; `GET /` serves the page; once the API is shut down (or its handle dropped) the
//! announcement is gone and the CLI opens the directory itself.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::Path;
use std::process::Output;
use std::time::Duration;

use dlq::emitter::TopicPolicy;
use dlq::sink::SinkConfig;
use dlq_ops::serve::client::discovery::ServeFile;
use dlq_ops::serve::{serve_emitter, ServeOptions, Token};
use dlq_testkit::cli::{failure, listed_ids, Env};
use dlq_testkit::items::failed_once;
use dlq_testkit::node::{self, NodeEmitter};
use dlq_testkit::{http_get, NatsServer};
use serde_json::{json, Value};

/// The `dlq` binary under test.
const DLQ: &str = env!("CARGO_BIN_EXE_dlq");
/// The token the scheduler chose for its API.
const TOKEN: &str = "scheduler-token-0815";

/// A scheduler's emitter on `env`'s data directory, with `count` items of `job-42`
/// dead-lettered.
async fn scheduler(env: &Env, count: usize) -> NodeEmitter {
    let emitter = node::emitter(
        SinkConfig::new(&env.data),
        &env.url,
        TopicPolicy::default(),
        Duration::from_secs(2),
    )
    .await;
    for i in 0..count {
        let item = failed_once(
            ("job-42", &format!("item-{i}")),
            "shell: cargo test",
            101,
            format!("cargo test failed on item {i}"),
            json!({ "n": i }),
        );
        emitter.dead_letter("mapreduce", item).await.unwrap();
    }
    emitter
}

/// Loopback on a free port.
fn loopback(token: Option<&str>) -> ServeOptions {
    ServeOptions {
        listen: "127.0.0.1:0".parse().unwrap(),
        token: token.map(Token::new),
        ..ServeOptions::default()
    }
}

/// `dlq ARGS` on `env` with the API token in the environment, off the test's runtime (the
/// server answers on it).
async fn dlq(env: &Env, args: &[&str]) -> Output {
    let mut cmd = env.command(args);
    cmd.env("DLQ_API_TOKEN", TOKEN);
    tokio::task::spawn_blocking(move || cmd.output().unwrap())
        .await
        .unwrap()
}

/// Stdout of a run that must have succeeded, as JSON.
fn json_of(args: &str, out: &Output) -> Value {
    assert!(out.status.success(), "dlq {args}: {:?}", failure(out));
    serde_json::from_slice(&out.stdout).unwrap()
}

fn port_of(url: &str) -> u16 {
    url.rsplit(':').next().unwrap().parse().unwrap()
}

fn announced(data_dir: &Path) -> bool {
    ServeFile::path(data_dir).exists()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_forwards_to_an_embedding_scheduler_and_opens_the_directory_after() {
    let server = NatsServer::start();
    let env = Env::new(DLQ, &server.url());
    let emitter = scheduler(&env, 3).await;
    let api = serve_emitter(&emitter, &env.data, loopback(Some(TOKEN)))
        .await
        .unwrap();

    let file = ServeFile::read_live(&env.data).expect("serve.json names a live process");
    assert_eq!(file.pid, std::process::id(), "the scheduler's own pid");
    assert_eq!(file.url, api.url());
    assert!(file.token_required);
    let text = std::fs::read_to_string(ServeFile::path(&env.data)).unwrap();
    assert!(!text.contains(TOKEN), "the token is never written: {text}");

    // Newest first, as `dlq list` orders them.
    let expected = ["job-42/item-2", "job-42/item-1", "job-42/item-0"];
    let list = json_of("list", &dlq(&env, &["list"]).await);
    assert_eq!(listed_ids(&list), expected, "{list}");
    let stats = json_of("stats", &dlq(&env, &["stats"]).await);
    assert_eq!(stats["total_items"], 3, "{stats}");

    let port = port_of(api.url());
    let (status, page) = tokio::task::spawn_blocking(move || http_get(port, "/"))
        .await
        .unwrap()
        .expect("GET /");
    assert_eq!(status, 200, "{page}");
    assert!(page.contains("<title>dlq</title>"), "{page}");
    let (status, _) = tokio::task::spawn_blocking(move || http_get(port, "/v1/items"))
        .await
        .unwrap()
        .expect("GET /v1/items");
    assert_eq!(status, 401, "the items need the scheduler's token");

    api.shutdown().await.unwrap();
    assert!(!announced(&env.data), "serve.json is removed on shutdown");
    emitter.shutdown().await.unwrap();
    drop(emitter);

    let list = json_of("list", &dlq(&env, &["list"]).await);
    assert_eq!(listed_ids(&list), expected, "opened here: {list}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_the_handle_takes_the_announcement_away() {
    let env = Env::new(DLQ, dlq_testkit::DEAD_BUS_URL);
    let emitter = scheduler(&env, 1).await;
    let api = serve_emitter(&emitter, &env.data, loopback(None))
        .await
        .unwrap();
    assert!(announced(&env.data));
    drop(api);
    assert!(!announced(&env.data), "removed by the drop itself");
    emitter.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_remote_address_needs_a_token_and_tls_as_for_dlq_serve() {
    let env = Env::new(DLQ, dlq_testkit::DEAD_BUS_URL);
    let emitter = scheduler(&env, 0).await;
    let options = ServeOptions {
        listen: "0.0.0.0:0".parse().unwrap(),
        ..ServeOptions::default()
    };
    let err = serve_emitter(&emitter, &env.data, options)
        .await
        .unwrap_err();
    assert!(err.to_string().contains("--allow-remote"), "{err}");
    assert!(!announced(&env.data), "nothing announced");
    emitter.shutdown().await.unwrap();
}
