//! The three-node cluster of `deploy/nats-cluster/` as deployed: TLS for clients, mutual TLS
//! between the nodes, and the least-privilege users of `deploy/nats-permissions.conf`; the
//! `dlq` binary runs with `deploy/dlq.cluster.yml` itself.
//!
//! * Every node says (in `/varz`) that clients need TLS and a login, and that routes need
//!   TLS with a verified certificate.
//! * `dlq-operator` creates the three-replica stream; `dlq-emitter` publishes to it, also after
//!   a node is killed (the client fails over over TLS); `dlq-consumer` verifies that the stream
//!   holds every event the node stored. `dlq-emitter` may not create the stream.
//! * A client that does not trust the cluster's CA is refused with a line that says so, and its
//!   events stay stored and unpublished.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use dlq_testkit::http_get;
use dlq_testkit::NatsCluster;
use serde_json::Value;

const DLQ: &str = env!("CARGO_BIN_EXE_dlq");

/// The deployed configuration, used as it is.
fn deployed_config() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/dlq.cluster.yml")
}

/// `dlq --config deploy/dlq.cluster.yml` as `user`, with this cluster's URLs and CA.
fn dlq_as(cluster: &NatsCluster, user: &str, data: &Path, urls: &[String], ca: &Path) -> Command {
    let mut cmd = Command::new(DLQ);
    cmd.arg("--config")
        .arg(deployed_config())
        .arg("--data-dir")
        .arg(data)
        .args(["--nats-url", &urls.join(","), "--format", "json"])
        .arg("--tlsca")
        .arg(ca)
        .env("NATS_USER", user)
        .env("NATS_PASSWORD", cluster.password(user))
        .env_remove("DLQ_NATS_URL")
        .env_remove("DLQ_CONFIG")
        .env("RUST_LOG", "warn");
    cmd
}

fn run(mut cmd: Command, args: &[&str]) -> Output {
    cmd.args(args).output().expect("run dlq")
}

fn json(out: &Output) -> Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|err| {
        panic!(
            "dlq printed no JSON ({err}): status {:?}, stdout {} stderr {}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

fn varz(cluster: &NatsCluster, node: usize) -> Value {
    let (status, body) = http_get(cluster.http_port(node), "/varz").expect("GET /varz");
    assert_eq!(status, 200, "{body}");
    serde_json::from_str(&body).unwrap()
}

#[test]
fn the_deployed_cluster_needs_tls_and_users_and_loses_nothing_with_them() {
    let mut cluster = NatsCluster::start_secure();
    for node in 0..3 {
        let v = varz(&cluster, node);
        assert_eq!(v["tls_required"], true, "clients need TLS: {v}");
        assert_eq!(v["auth_required"], true, "clients need a login: {v}");
        assert_eq!(v["cluster"]["tls_required"], true, "routes need TLS: {v}");
        assert_eq!(
            v["cluster"]["tls_verify"], true,
            "routes need a certificate: {v}"
        );
    }
    let work = tempfile::tempdir().unwrap();
    let data = work.path().join("data");
    let ca = cluster.ca_path();
    let urls = cluster.urls();

    // The emitter's user may not create the stream; the operator's may.
    let out = run(
        dlq_as(&cluster, "dlq-emitter", &data, &urls, &ca),
        &["stream", "create"],
    );
    assert!(!out.status.success(), "dlq-emitter created the stream");
    let out = run(
        dlq_as(&cluster, "dlq-operator", &data, &urls, &ca),
        &["stream", "create"],
    );
    assert!(
        out.status.success(),
        "stream create: {}",
        String::from_utf8_lossy(&out.stderr)
    );

    let demo = |cluster: &NatsCluster, urls: &[String], job: &str, count: &str| {
        let out = run(
            dlq_as(cluster, "dlq-emitter", &data, urls, &ca),
            &[
                "demo",
                "--count",
                count,
                "--job-id",
                job,
                "--drain-timeout",
                "30s",
            ],
        );
        assert!(
            out.status.success(),
            "demo: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        json(&out)
    };
    let first = demo(&cluster, &urls, "secure-1", "20");
    assert_eq!(first["emitted"], 20, "{first}");
    assert_eq!(first["unpublished"], 0, "{first}");

    // One node down: the emitter reaches the others, over TLS, as the same user.
    cluster.kill(0);
    cluster
        .try_wait_ready(&[1, 2])
        .unwrap_or_else(|e| panic!("{e}\n{}", cluster.log_tails()));
    let second = demo(&cluster, &urls, "secure-2", "10");
    assert_eq!(second["emitted"], 10, "{second}");
    assert_eq!(second["unpublished"], 0, "{second}");

    // The consumer's user reads the whole stream: it holds every event this node stored.
    let out = run(
        dlq_as(&cluster, "dlq-consumer", &data, &urls[1..], &ca),
        &["verify"],
    );
    assert!(
        out.status.success(),
        "verify as dlq-consumer: {} {}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let report = json(&out);
    for field in ["missing", "extra", "diverging", "unpublished"] {
        assert_eq!(report[field], 0, "{field}: {report}");
    }
    // Thirty dead-letter events (and any audit event of a publish the kill interrupted).
    assert!(report["events_applied"].as_u64().unwrap() >= 30, "{report}");

    // A client that trusts another CA is refused, and keeps its events.
    let other = dlq_testkit::tls::pki(&work.path().join("other-pki"));
    let stranger = work.path().join("stranger");
    let out = run(
        dlq_as(&cluster, "dlq-emitter", &stranger, &urls[1..], &other.ca),
        &[
            "demo",
            "--count",
            "3",
            "--job-id",
            "stranger",
            "--drain-timeout",
            "1s",
        ],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let summary = json(&out);
    assert_eq!(summary["emitted"], 3, "{summary}");
    assert!(summary["unpublished"].as_u64().unwrap() >= 3, "{summary}");
    assert!(stderr.to_lowercase().contains("certificate"), "{stderr}");
    assert!(
        !stderr.contains(&cluster.password("dlq-emitter")),
        "{stderr}"
    );
}
