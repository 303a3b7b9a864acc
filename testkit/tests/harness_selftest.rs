//! Tests of the test harness itself, against a real `nats-server` (never the one on :4222).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::Duration;

use async_nats::jetstream::{self, stream::StorageType};
use async_nats::HeaderMap;
use dlq_testkit::{wait_for, NatsServer};
use tokio::time::timeout;

const STEP: Duration = Duration::from_secs(10);

async fn jetstream_for(server: &NatsServer) -> jetstream::Context {
    let client = timeout(STEP, async_nats::connect(server.url()))
        .await
        .expect("connect timed out")
        .expect("connect to test nats-server");
    jetstream::new(client)
}

async fn create_stream(js: &jetstream::Context, name: &str) -> jetstream::stream::Stream {
    let config = jetstream::stream::Config {
        name: name.to_string(),
        subjects: vec![format!("{name}.>")],
        storage: StorageType::File,
        ..Default::default()
    };
    timeout(STEP, js.get_or_create_stream(config))
        .await
        .expect("create stream timed out")
        .expect("create stream")
}

async fn publish(
    js: &jetstream::Context,
    subject: &str,
    payload: &str,
) -> jetstream::publish::PublishAck {
    let ack = async {
        js.publish(subject.to_string(), payload.to_string().into())
            .await?
            .await
    };
    timeout(STEP, ack)
        .await
        .expect("publish timed out")
        .expect("publish ack")
}

async fn message_count(js: &jetstream::Context, stream: &str) -> u64 {
    let mut stream = js.get_stream(stream).await.expect("get stream");
    stream.info().await.expect("stream info").state.messages
}

#[tokio::test]
async fn start_connect_create_stream_and_publish_with_ack() {
    let server = NatsServer::start();
    assert_ne!(
        server.port(),
        4222,
        "must never use the system server's port"
    );
    assert_eq!(server.url(), format!("nats://127.0.0.1:{}", server.port()));
    assert!(server.store_dir().is_dir());

    let js = jetstream_for(&server).await;
    create_stream(&js, "SELFTEST").await;
    let ack = publish(&js, "SELFTEST.a", "hello").await;
    assert_eq!(ack.stream, "SELFTEST");
    assert_eq!(ack.sequence, 1);
    assert!(!ack.duplicate);
    assert_eq!(message_count(&js, "SELFTEST").await, 1);
    assert!(
        server.store_dir().join("jetstream").is_dir(),
        "JetStream file storage lives in the harness's store dir"
    );
}

#[tokio::test]
async fn kill_makes_new_connections_fail() {
    let mut server = NatsServer::start();
    let url = server.url();
    jetstream_for(&server).await;
    assert!(server.is_running());

    server.kill();
    assert!(!server.is_running());
    let attempt = timeout(STEP, async_nats::connect(url)).await;
    assert!(
        matches!(attempt, Ok(Err(_))),
        "connecting to a killed server must fail promptly"
    );
    assert!(std::net::TcpStream::connect(("127.0.0.1", server.port())).is_err());
    server.kill(); // idempotent
}

#[tokio::test]
async fn restart_on_same_port_keeps_jetstream_file_data() {
    let mut server = NatsServer::start();
    let (port, old_pid) = (server.port(), server.pid());
    {
        let js = jetstream_for(&server).await;
        create_stream(&js, "DURABLE").await;
        for i in 1..=3 {
            let ack = publish(&js, "DURABLE.x", &format!("m{i}")).await;
            assert_eq!(ack.sequence, i);
        }
    }

    server.kill();
    server.restart();
    assert_eq!(server.port(), port, "restart must reuse the port");
    assert_ne!(server.pid(), old_pid);
    assert!(server.is_running());

    let js = jetstream_for(&server).await;
    wait_for("3 messages recovered after restart", STEP, || async {
        message_count(&js, "DURABLE").await == 3
    })
    .await;
    let stream = js.get_stream("DURABLE").await.expect("get stream");
    let first = stream.get_raw_message(1).await.expect("message 1");
    assert_eq!(&first.payload[..], b"m1");
    assert_eq!(publish(&js, "DURABLE.x", "m4").await.sequence, 4);
}

#[tokio::test]
async fn stop_freezes_publishes_and_cont_resumes_them() {
    let mut server = NatsServer::start();
    let js = jetstream_for(&server).await;
    create_stream(&js, "FROZEN").await;
    assert_eq!(publish(&js, "FROZEN.a", "before").await.sequence, 1);

    server.stop();
    assert!(server.is_running() && server.is_stopped());
    // The port still accepts TCP connections (the kernel completes the handshake)...
    assert!(std::net::TcpStream::connect(("127.0.0.1", server.port())).is_ok());
    // ...but nothing is answered, so a publish with ack hangs.
    let mut headers = HeaderMap::new();
    headers.insert("Nats-Msg-Id", "frozen-1");
    let frozen = timeout(Duration::from_secs(1), async {
        js.publish_with_headers("FROZEN.a", headers.clone(), "during".into())
            .await?
            .await
    })
    .await;
    assert!(
        frozen.is_err(),
        "publish to a stopped server must time out: {frozen:?}"
    );

    server.cont();
    assert!(!server.is_stopped());
    // The timed-out publish was already in the socket: after SIGCONT the server stores it, so
    // retrying it with the same Nats-Msg-Id is reported as a duplicate, not stored twice.
    let retry = timeout(STEP, async {
        js.publish_with_headers("FROZEN.a", headers, "during".into())
            .await?
            .await
    })
    .await
    .expect("retry timed out")
    .expect("retry ack");
    assert_eq!(retry.sequence, 2);
    assert!(retry.duplicate, "retry after thaw should be deduplicated");
    assert_eq!(publish(&js, "FROZEN.a", "after").await.sequence, 3);
}

#[tokio::test]
async fn two_servers_get_different_ports_and_dirs() {
    let a = NatsServer::start();
    let b = NatsServer::start();
    assert_ne!(a.port(), b.port());
    assert_ne!(a.monitor_port(), b.monitor_port());
    assert_ne!(a.pid(), b.pid());
    assert_ne!(a.store_dir(), b.store_dir());
    for server in [&a, &b] {
        assert_ne!(server.port(), 4222);
        jetstream_for(server).await;
    }
}

#[test]
fn drop_kills_and_reaps_the_process() {
    let mut server = NatsServer::start();
    server.stop(); // Drop must also handle a frozen server.
    let pid = server.pid();
    let store = server.store_dir().to_path_buf();
    drop(server);
    assert!(
        !std::path::Path::new(&format!("/proc/{pid}")).exists(),
        "nats-server {pid} outlived its NatsServer"
    );
    assert!(!store.exists(), "temp store dir should be removed");
}

#[tokio::test]
#[should_panic(expected = "waiting for something that never happens")]
async fn wait_for_panics_naming_the_condition() {
    wait_for(
        "something that never happens",
        Duration::from_millis(200),
        || async { false },
    )
    .await;
}
