//! The TLS-first handshake (`--tlsfirst`, `bus.tls.first`, a context's `tls_first`) against a
//! server with `handshake_first`: a feature of nats-server 2.10.4 and later, so this test runs
//! the recent server that `scripts/install-nats-server-recent.sh` installs (Debian's 2.9.10
//! has no such option). Without the flag the connection fails with a line that names it; with
//! it, the library and the binary publish.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::Duration;

use dlq::bus::{Bus, BusConfig, NatsBus};
use dlq_testkit::cli::Env;
use dlq_testkit::tls::pki;
use dlq_testkit::NatsServer;
use serde_json::Value;

const DLQ: &str = env!("CARGO_BIN_EXE_dlq");

async fn ready(config: BusConfig) -> Result<(), String> {
    let bus = NatsBus::connect(config)
        .await
        .map_err(|err| err.to_string())?;
    if let Some(refusal) = bus.refusal() {
        return Err(refusal);
    }
    bus.prepare().await.map_err(|err| err.to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_first_is_needed_for_a_handshake_first_server_and_works() {
    let dir = tempfile::tempdir().unwrap();
    let pki = pki(dir.path());
    let server = NatsServer::start_recent_with_config(&format!(
        "tls {{\n  cert_file: \"{}\"\n  key_file: \"{}\"\n  timeout: 2\n  handshake_first: true\n}}\n",
        pki.server_cert.display(),
        pki.server_key.display(),
    ));
    let url = server.url().replace("nats://", "tls://");
    let config = |first: bool| {
        let mut config = BusConfig {
            publish_timeout: Duration::from_millis(1500),
            reconnect_max_delay: Duration::from_millis(200),
            ..BusConfig::at(&url)
        };
        config.tls.ca = Some(pki.ca.clone());
        config.tls.first = first;
        config
    };

    let refused = ready(config(false)).await.unwrap_err();
    assert!(refused.contains("--tlsfirst"), "{refused}");
    ready(config(true)).await.unwrap();

    let env = Env::new(DLQ, &url);
    let ca = pki.ca.to_str().unwrap();
    let out = env.run(&[
        "--tlsfirst",
        "--tlsca",
        ca,
        "demo",
        "--count",
        "3",
        "--drain-timeout",
        "10s",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let summary: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(summary["emitted"], 3, "{summary}");
    assert_eq!(summary["unpublished"], 0, "{summary}");
}
