//! Least privilege: a nats-server started from `deploy/nats-permissions.conf` itself (read
//! here, so the documented permissions and the tested ones cannot drift), with the `dlq`
//! binary run as each of its users. The emitter stores and publishes once the operator created
//! the stream (and creates it itself with the snippet's optional line uncommented); the
//! consumer rebuilds (`consume`, `consume --durable` twice, `verify`) across a deleted message
//! it must read by sequence; the operator creates, updates and republishes an event the stream lost. Each role is
//! refused what it must not do: the consumer publishing on the DLQ subject or deleting the
//! stream, the emitter deleting the stream or reading it.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::process::Output;
use std::time::Duration;

use async_nats::jetstream;
use dlq_testkit::cli::Env;
use dlq_testkit::{workspace_root, NatsServer};

const DLQ: &str = env!("CARGO_BIN_EXE_dlq");
const EMITTER: (&str, &str) = ("dlq-emitter", "emitter-pw-4411");
const CONSUMER: (&str, &str) = ("dlq-consumer", "consumer-pw-4412");
const OPERATOR: (&str, &str) = ("dlq-operator", "operator-pw-4413");
/// A user with every permission, added to the account by the test only: it deletes a message
/// (a hole the consumer must read around) and nothing else.
const ADMIN: (&str, &str) = ("test-admin", "admin-pw-4414");

/// The snippet as shipped.
fn snippet() -> String {
    std::fs::read_to_string(workspace_root().join("deploy/nats-permissions.conf")).unwrap()
}

/// A server with the snippet's account and users, the passwords defined as the variables it
/// reads, and the test's admin user added to the account.
fn server(snippet: &str) -> NatsServer {
    let users = "    users: [\n";
    assert!(
        snippet.contains(users),
        "the snippet lists the account's users"
    );
    let (admin, admin_pw) = ADMIN;
    let snippet = snippet.replacen(
        users,
        &format!("{users}      {{user: {admin}, password: \"{admin_pw}\"}}\n"),
        1,
    );
    NatsServer::start_with_config(&format!(
        "DLQ_EMITTER_PASSWORD: \"{}\"\nDLQ_CONSUMER_PASSWORD: \"{}\"\nDLQ_OPERATOR_PASSWORD: \"{}\"\nDLQ_CONSOLE_PASSWORD: \"console-pw\"\nDLQ_NODE_A_PASSWORD: \"node-a-pw\"\n{snippet}",
        EMITTER.1, CONSUMER.1, OPERATOR.1
    ))
}

/// `dlq <args>` as `role`.
fn run_as(env: &Env, role: (&str, &str), args: &[&str]) -> Output {
    let mut all = vec!["--user", role.0, "--password", role.1];
    all.extend_from_slice(args);
    env.run(&all)
}

/// `dlq <args>` as `role`; must succeed; stdout parsed as JSON.
fn json_as(env: &Env, role: (&str, &str), args: &[&str]) -> serde_json::Value {
    let out = run_as(env, role, args);
    assert!(
        out.status.success(),
        "dlq {args:?} as {} failed ({:?}): {}",
        role.0,
        out.status.code(),
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

fn demo(env: &Env, role: (&str, &str), job: &str) -> serde_json::Value {
    json_as(
        env,
        role,
        &[
            "demo",
            "--count",
            "3",
            "--job-id",
            job,
            "--drain-timeout",
            "0s",
        ],
    )
}

async fn client(url: &str, role: (&str, &str)) -> async_nats::Client {
    async_nats::ConnectOptions::with_user_and_password(role.0.into(), role.1.into())
        .connect(url)
        .await
        .unwrap()
}

fn context(client: &async_nats::Client) -> jetstream::Context {
    let mut js = jetstream::new(client.clone());
    js.set_timeout(Duration::from_secs(1));
    js
}

async fn stream_messages(url: &str) -> u64 {
    let admin = client(url, ADMIN).await;
    let mut stream = context(&admin).get_stream("DLQ").await.unwrap();
    stream.info().await.unwrap().state.messages
}

/// The emitter cannot create the stream: its events stay stored and unpublished until the
/// operator creates it; then they are published. The emitter may not delete the stream nor
/// read it; the operator updates it and republishes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn emitter_publishes_into_the_stream_the_operator_created() {
    let server = server(&snippet());
    let env = Env::new(DLQ, &server.url());

    let before = demo(&env, EMITTER, "perm-a");
    assert_eq!(before["emitted"], 3, "{before}");
    assert_eq!(before["published_on_emit"], 0, "no stream yet: {before}");
    let unpublished = before["unpublished"].as_u64().unwrap();
    assert!(unpublished > 0, "{before}");

    json_as(&env, OPERATOR, &["stream", "create"]);
    let out = run_as(&env, EMITTER, &["reconcile"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(stream_messages(&server.url()).await, unpublished);
    let after = demo(&env, EMITTER, "perm-b");
    assert_eq!(
        after["published_on_emit"], after["emitted"],
        "published with the stream there: {after}"
    );

    // Operator: republishes what the stream lost (the admin deletes the last event but one,
    // emitted after the stream's first message: older ones count as before the stream),
    // applies a changed setting.
    let admin = client(&server.url(), ADMIN).await;
    let mut stream = context(&admin).get_stream("DLQ").await.unwrap();
    let last = stream.info().await.unwrap().state.last_sequence;
    assert!(stream.delete_message(last - 1).await.unwrap());
    let republish = json_as(&env, OPERATOR, &["republish"]);
    assert_eq!(republish["republished"], 1, "{republish}");
    let config = env.data.with_extension("yml");
    let mut text = std::fs::read_to_string(&config).unwrap();
    text.push_str("  duplicate_window: 5m\n");
    std::fs::write(&config, text).unwrap();
    let update = json_as(&env, OPERATOR, &["stream", "update", "--yes"]);
    assert_eq!(update["applied"], true, "{update}");

    // Refused: deleting the stream, reading it.
    let emitter = client(&server.url(), EMITTER).await;
    let js = context(&emitter);
    assert!(js.delete_stream("DLQ").await.is_err());
    let out = run_as(&env, EMITTER, &["consume"]);
    assert!(!out.status.success(), "the emitter may not read the stream");
    let held = stream_messages(&server.url()).await;
    assert!(held > unpublished, "the stream is still there: {held}");
}

/// With the snippet's optional line uncommented, an emitting node creates the stream itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn emitter_creates_the_stream_when_allowed() {
    let optional = "# \"$JS.API.STREAM.CREATE.DLQ\"";
    let shipped = snippet();
    assert!(shipped.contains(optional), "the snippet offers the line");
    let server = server(&shipped.replacen(optional, "\"$JS.API.STREAM.CREATE.DLQ\"", 1));
    let env = Env::new(DLQ, &server.url());
    let out = demo(&env, EMITTER, "perm-c");
    assert_eq!(out["published_on_emit"], out["emitted"], "{out}");
    assert_eq!(out["unpublished"], 0, "{out}");
}

/// The consumer rebuilds with reads only, around a deleted message it reads by sequence; it
/// may not publish on the DLQ subject nor delete the stream.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consumer_rebuilds_and_cannot_write() {
    let server = server(&snippet());
    let url = server.url();
    let env = Env::new(DLQ, &url);
    json_as(&env, OPERATOR, &["stream", "create"]);
    demo(&env, EMITTER, "perm-d");
    // A message that is not an event, deleted: a hole in the middle of the stream.
    let admin = client(&url, ADMIN).await;
    let js = context(&admin);
    let seq = js
        .publish("sys.job.dlq", "not an event".into())
        .await
        .unwrap()
        .await
        .unwrap()
        .sequence;
    let stream = js.get_stream("DLQ").await.unwrap();
    assert!(stream.delete_message(seq).await.unwrap());
    demo(&env, EMITTER, "perm-e");
    let held = stream_messages(&url).await;

    let read = json_as(&env, CONSUMER, &["consume"]);
    assert_eq!(read["stream_messages"], held, "{read}");
    assert_eq!(read["items"], 6, "{read}");

    let store = env.path("consumer-store");
    let store = store.to_str().unwrap();
    let durable = ["consume", "--durable", "perm-reader", "--store", store];
    let first = json_as(&env, CONSUMER, &durable);
    assert_eq!(first["items"], 6, "{first}");
    demo(&env, EMITTER, "perm-f");
    // Again: the consumer is recreated at the store's checkpoint.
    let second = json_as(&env, CONSUMER, &durable);
    assert_eq!(second["items"], 9, "{second}");
    assert!(
        second["messages_this_run"].as_u64().unwrap() > 0,
        "{second}"
    );

    let verify = run_as(&env, CONSUMER, &["verify"]);
    assert!(
        verify.status.success(),
        "{}{}",
        String::from_utf8_lossy(&verify.stdout),
        String::from_utf8_lossy(&verify.stderr)
    );

    // Refused: publishing on the DLQ subject, deleting the stream.
    let consumer = client(&url, CONSUMER).await;
    let js = context(&consumer);
    let before = stream_messages(&url).await;
    let acked = match js.publish("sys.job.dlq", "forged".into()).await {
        Ok(ack) => ack.await.is_ok(),
        Err(_) => false,
    };
    assert!(!acked, "no ack for a denied publish");
    assert!(js.delete_stream("DLQ").await.is_err());
    assert_eq!(stream_messages(&url).await, before, "nothing stored");
}

/// The consumer's user of the snippet without `$JS.API.CONSUMER.MSG.NEXT` (and named `name`):
/// it may create a consumer, but not fetch from it.
fn consumer_without_fetch(snippet: &str, name: &str, password: &str) -> String {
    let start = snippet.find("        user: dlq-consumer").unwrap();
    let end = start + snippet[start..].find("\n      }\n").unwrap();
    let block: String = snippet[start..end]
        .lines()
        .filter(|line| !line.contains("$JS.API.CONSUMER.MSG.NEXT"))
        .map(|line| {
            if line.contains("user: dlq-consumer") {
                format!("        user: {name}")
            } else if line.contains("password:") {
                format!("        password: \"{password}\"")
            } else {
                line.to_owned()
            }
        })
        .collect::<Vec<_>>()
        .join("\n");
    assert!(block.contains("$JS.API.CONSUMER.CREATE.DLQ"), "{block}");
    snippet.replacen(
        "    users: [\n",
        &format!("    users: [\n      {{\n{block}\n      }}\n"),
        1,
    )
}

/// `dlq <args>` as `role`, waited for with a generous deadline (killed and failed after it):
/// the command must end by itself.
fn run_bounded(env: &Env, role: (&str, &str), args: &[&str]) -> (Option<i32>, String) {
    let mut all = vec!["--user", role.0, "--password", role.1];
    all.extend_from_slice(args);
    let stderr = env.path(&format!("stderr-{}.txt", args.len()));
    let mut cmd = env.command(&all);
    cmd.stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(&stderr).unwrap());
    let mut child = dlq_testkit::process::spawn_tied(cmd).unwrap();
    let status =
        dlq_testkit::wait::poll_until(Duration::from_secs(120), || child.try_wait().unwrap());
    let Some(status) = status else {
        child.kill().unwrap();
        child.wait().unwrap();
        panic!("dlq {args:?} as {} still runs after 120 s", role.0);
    };
    (status.code(), std::fs::read_to_string(&stderr).unwrap())
}

/// A consumer whose user may not publish the pull requests (`$JS.API.CONSUMER.MSG.NEXT`)
/// gets no answer from the server: `dlq consume` (plain and durable) ends on its own with a
/// one-line error naming the missing permission and the fix, exit 1.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_consumer_denied_fetching_fails_and_names_the_permission() {
    const NO_FETCH: (&str, &str) = ("dlq-no-fetch", "no-fetch-pw-4415");
    let server = server(&consumer_without_fetch(&snippet(), NO_FETCH.0, NO_FETCH.1));
    let env = Env::new(DLQ, &server.url());
    json_as(&env, OPERATOR, &["stream", "create"]);
    demo(&env, EMITTER, "perm-g");

    let store = env.path("denied-store");
    let store = store.to_str().unwrap();
    for args in [
        &["consume"][..],
        &["consume", "--durable", "denied", "--store", store][..],
    ] {
        let (code, stderr) = run_bounded(&env, NO_FETCH, args);
        assert_eq!(code, Some(1), "dlq {args:?}: {stderr}");
        let line = stderr.trim();
        assert!(
            line.contains("allow publish on \"$JS.API.CONSUMER.MSG.NEXT.DLQ.*\""),
            "dlq {args:?}: {stderr}"
        );
        assert!(line.contains("deploy/nats-permissions.conf"), "{stderr}");
        assert_eq!(line.lines().count(), 1, "one line: {stderr}");
    }
}
