//! Connecting to a secured nats-server: users and passwords of an account from the server's
//! configuration file, a token, credentials written in the URL, an NKey user (keys generated
//! here), a credentials file in operator mode (operator, account and user JWTs generated and
//! signed here), a missing JetStream permission, and TLS with certificates generated here (a
//! CA, the server's, a client's for mutual TLS). Each case is also run without what it needs
//! and must then fail with a line naming the cause. The `dlq` binary: a wrong password leaves
//! events stored and unpublished, and the right one publishes them all; plaintext credentials
//! to a remote host are refused; secrets never appear in `--help` or in errors.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::Duration;

use dlq::bus::{Bus, BusConfig, NatsBus, Secret};
use dlq_testkit::cli::Env;
use dlq_testkit::tls::{pki, write_private, Pki};
use dlq_testkit::NatsServer;

const DLQ: &str = env!("CARGO_BIN_EXE_dlq");
const PASSWORD: &str = "pw-s3cret-7731";
const TOKEN: &str = "t0ken-s3cret-5521";

fn config(url: &str) -> BusConfig {
    BusConfig {
        publish_timeout: Duration::from_millis(1500),
        reconnect_max_delay: Duration::from_millis(200),
        ..BusConfig::at(url)
    }
}

/// Connects and creates the stream (an authenticated JetStream API request): `Err` with the
/// refusal, or the setup error, when that does not work.
async fn ready(config: BusConfig) -> Result<(), String> {
    let bus = NatsBus::connect(config)
        .await
        .map_err(|err| err.to_string())?;
    if let Some(refusal) = bus.refusal() {
        return Err(refusal);
    }
    bus.prepare().await.map_err(|err| err.to_string())
}

/// A server whose account `DLQ` (with JetStream) has a user with a password and an NKey user.
fn account_server(nkey_public: &str) -> NatsServer {
    NatsServer::start_with_config(&format!(
        "accounts {{\n  DLQ {{\n    jetstream: enabled\n    users: [\n      {{user: dlq, password: \"{PASSWORD}\"}}\n      {{nkey: {nkey_public}}}\n    ]\n  }}\n}}\n"
    ))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn user_password_and_nkey_users_of_an_account() {
    let user_key = nkeys::KeyPair::new_user();
    let server = account_server(&user_key.public_key());
    let url = server.url();

    let none = ready(config(&url)).await.unwrap_err();
    assert!(none.contains("requires authentication"), "{none}");

    let mut wrong = config(&url);
    wrong.auth.user = Some(Secret::new("dlq"));
    wrong.auth.password = Some(Secret::new("not-the-password-991"));
    let refused = ready(wrong).await.unwrap_err();
    assert!(refused.contains("refused user `dlq`"), "{refused}");
    assert!(refused.contains("--password"), "{refused}");
    assert!(!refused.contains("not-the-password-991"), "{refused}");

    let mut right = config(&url);
    right.auth.user = Some(Secret::new("dlq"));
    right.auth.password = Some(Secret::new(PASSWORD));
    ready(right).await.unwrap();

    // Written in the URL (async-nats alone would drop them), percent-encoding and all.
    let in_url = url.replace(
        "nats://",
        &format!("nats://dlq:{}@", PASSWORD.replace('-', "%2D")),
    );
    ready(config(&in_url)).await.unwrap();

    let dir = tempfile::tempdir().unwrap();
    let seed = dir.path().join("dlq.nk");
    write_private(&seed, &format!("{}\n", user_key.seed().unwrap()));
    let mut nkey = config(&url);
    nkey.auth.nkey = Some(seed);
    ready(nkey).await.unwrap();

    let stranger = dir.path().join("stranger.nk");
    write_private(&stranger, &nkeys::KeyPair::new_user().seed().unwrap());
    let mut unknown = config(&url);
    unknown.auth.nkey = Some(stranger.clone());
    let refused = ready(unknown).await.unwrap_err();
    assert!(
        refused.contains(&stranger.display().to_string()),
        "{refused}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn token_in_the_url_or_the_options() {
    let server =
        NatsServer::start_with_config(&format!("authorization {{ token: \"{TOKEN}\" }}\n"));
    let url = server.url();
    let none = ready(config(&url)).await.unwrap_err();
    assert!(none.contains("requires authentication"), "{none}");
    ready(config(&url.replace("nats://", &format!("nats://{TOKEN}@"))))
        .await
        .unwrap();
    let mut option = config(&url);
    option.auth.token = Some(Secret::new(TOKEN));
    ready(option).await.unwrap();
    let mut wrong = config(&url);
    wrong.auth.token = Some(Secret::new("t0ken-wrong-1"));
    let refused = ready(wrong).await.unwrap_err();
    assert!(refused.contains("refused a token"), "{refused}");
    assert!(!refused.contains("t0ken-wrong-1"), "{refused}");
}

/// A NATS JWT (`ed25519-nkey`) with `claims`, issued by `issuer` for `subject`.
fn jwt(issuer: &nkeys::KeyPair, subject: &str, name: &str, nats: serde_json::Value) -> String {
    use base64::engine::general_purpose::URL_SAFE_NO_PAD;
    use base64::Engine;
    let header = URL_SAFE_NO_PAD.encode(r#"{"typ":"JWT","alg":"ed25519-nkey"}"#);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let claims = serde_json::json!({
        "jti": format!("JTI{now}{}", &subject[..12]),
        "iat": now,
        "iss": issuer.public_key(),
        "name": name,
        "sub": subject,
        "nats": nats,
    });
    let body = format!("{header}.{}", URL_SAFE_NO_PAD.encode(claims.to_string()));
    let signature = URL_SAFE_NO_PAD.encode(issuer.sign(body.as_bytes()).unwrap());
    format!("{body}.{signature}")
}

/// Operator mode: an operator, a system account, an account with JetStream and a user, all
/// generated here; the user's JWT and seed in a credentials file as `nsc` writes it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn credentials_file_in_operator_mode() {
    use serde_json::json;
    let (operator, system, account, user) = (
        nkeys::KeyPair::new_operator(),
        nkeys::KeyPair::new_account(),
        nkeys::KeyPair::new_account(),
        nkeys::KeyPair::new_user(),
    );
    let unlimited = json!({
        "subs": -1, "data": -1, "payload": -1, "imports": -1, "exports": -1,
        "wildcards": true, "conn": -1, "leaf": -1,
        "mem_storage": -1, "disk_storage": -1, "streams": -1, "consumer": -1,
    });
    let operator_jwt = jwt(
        &operator,
        &operator.public_key(),
        "dlq-test-operator",
        json!({"type": "operator", "version": 2, "system_account": system.public_key()}),
    );
    let account_jwt = |key: &nkeys::KeyPair, name: &str, limits: serde_json::Value| {
        jwt(
            &operator,
            &key.public_key(),
            name,
            json!({"type": "account", "version": 2, "limits": limits,
                   "default_permissions": {"pub": {}, "sub": {}}}),
        )
    };
    let system_jwt = account_jwt(
        &system,
        "SYS",
        json!({"subs": -1, "data": -1, "payload": -1, "imports": -1, "exports": -1,
               "wildcards": true, "conn": -1, "leaf": -1}),
    );
    let dlq_jwt = account_jwt(&account, "DLQ", unlimited);
    let user_jwt = jwt(
        &account,
        &user.public_key(),
        "dlq",
        json!({"type": "user", "version": 2, "pub": {}, "sub": {},
               "subs": -1, "data": -1, "payload": -1}),
    );
    let server = NatsServer::start_with_config(&format!(
        "operator: \"{operator_jwt}\"\nsystem_account: {}\nresolver: MEMORY\nresolver_preload: {{\n  {}: \"{system_jwt}\"\n  {}: \"{dlq_jwt}\"\n}}\n",
        system.public_key(),
        system.public_key(),
        account.public_key(),
    ));
    let dir = tempfile::tempdir().unwrap();
    let creds = dir.path().join("dlq.creds");
    write_private(
        &creds,
        &format!(
            "-----BEGIN NATS USER JWT-----\n{user_jwt}\n------END NATS USER JWT------\n\n************************* IMPORTANT *************************\nNKEY Seed printed below can be used to sign and prove identity.\nNKEYs are sensitive and should be treated as secrets.\n\n-----BEGIN USER NKEY SEED-----\n{}\n------END USER NKEY SEED------\n\n*************************************************************\n",
            user.seed().unwrap()
        ),
    );

    let none = ready(config(&server.url())).await.unwrap_err();
    assert!(none.contains("requires authentication"), "{none}");
    let mut with_creds = config(&server.url());
    with_creds.auth.creds = Some(creds);
    ready(with_creds).await.unwrap();
}

/// A user that may not use the JetStream API connects, but creating the stream is denied: the
/// bus names the permission and what to grant.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_permission_is_named() {
    let server = NatsServer::start_with_config(&format!(
        "accounts {{\n  DLQ {{\n    jetstream: enabled\n    users: [\n      {{user: limited, password: \"{PASSWORD}\", permissions: {{publish: {{deny: [\"$JS.API.>\"]}}}}}}\n    ]\n  }}\n}}\n"
    ));
    let mut limited = config(&server.url());
    limited.auth.user = Some(Secret::new("limited"));
    limited.auth.password = Some(Secret::new(PASSWORD));
    let bus = NatsBus::connect(limited).await.unwrap();
    assert!(bus.is_healthy(), "the credentials are right");
    assert!(bus.prepare().await.is_err());
    let mut refusal = bus.refusal();
    for _ in 0..100 {
        if refusal.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        refusal = bus.refusal();
    }
    let refusal = refusal.expect("a refusal naming the permission");
    assert!(refusal.contains("denied a permission"), "{refusal}");
    assert!(refusal.contains("$JS.API"), "{refusal}");
}

/// A server that requires TLS and a client certificate signed by the CA.
fn tls_server(pki: &Pki) -> NatsServer {
    NatsServer::start_with_config(&format!(
        "tls {{\n  cert_file: \"{}\"\n  key_file: \"{}\"\n  ca_file: \"{}\"\n  timeout: 2\n  verify: true\n}}\n",
        pki.server_cert.display(),
        pki.server_key.display(),
        pki.ca.display()
    ))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_with_a_private_ca_and_mutual_tls() {
    let dir = tempfile::tempdir().unwrap();
    let pki = pki(dir.path());
    let server = tls_server(&pki);
    let tls_url = server.url().replace("nats://", "tls://");

    let mut untrusted = config(&tls_url);
    untrusted.tls.cert = Some(pki.client_cert.clone());
    untrusted.tls.key = Some(pki.client_key.clone());
    let refused = ready(untrusted).await.unwrap_err();
    assert!(refused.contains("not trusted"), "{refused}");
    assert!(refused.contains("--tlsca"), "{refused}");

    // The server asks for a client certificate: without one nothing works.
    let mut no_client_cert = config(&tls_url);
    no_client_cert.tls.ca = Some(pki.ca.clone());
    assert!(ready(no_client_cert).await.is_err());

    // A nats:// URL with a CA given: TLS is required all the same.
    let mut mutual = config(&server.url());
    mutual.tls.ca = Some(pki.ca.clone());
    mutual.tls.cert = Some(pki.client_cert.clone());
    mutual.tls.key = Some(pki.client_key.clone());
    ready(mutual).await.unwrap();
}

/// Events emitted with a wrong password stay stored and unpublished, with one line saying
/// why; with the right password (from the environment, as the nats CLI names it) `dlq
/// reconcile` publishes every one, and the stream then holds all of them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_password_loses_nothing_and_the_fixed_config_publishes_all() {
    let server = account_server(&nkeys::KeyPair::new_user().public_key());
    let env = Env::new(DLQ, &server.url());

    let out = env.run(&[
        "--user",
        "dlq",
        "--password",
        "wr0ng-pw-4410",
        "demo",
        "--count",
        "5",
        "--job-id",
        "auth-job",
        "--drain-timeout",
        "500ms",
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let summary: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(summary["emitted"], 5, "{summary}");
    // The five items and the audit events of their failed publishes.
    assert!(summary["unpublished"].as_u64().unwrap() >= 5, "{summary}");
    assert!(stderr.contains("refused user `dlq`"), "{stderr}");
    assert!(!stderr.contains("wr0ng-pw-4410"), "{stderr}");

    let out = env
        .command(&["reconcile", "--timeout", "20s"])
        .env("NATS_USER", "dlq")
        .env("NATS_PASSWORD", PASSWORD)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["unpublished_after"], 0, "{report}");

    // The same credentials from a context of the nats CLI.
    let contexts = env.path("xdg").join("nats").join("context");
    std::fs::create_dir_all(&contexts).unwrap();
    std::fs::write(
        contexts.join("dlq-test.json"),
        format!(r#"{{"description":"","url":"","user":"dlq","password":"{PASSWORD}","creds":""}}"#),
    )
    .unwrap();
    let out = env
        .command(&["--context", "dlq-test", "verify"])
        .env("XDG_CONFIG_HOME", env.path("xdg"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "verify: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    // And the stream cannot be read without the credentials.
    let out = env.run(&["consume"]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("requires authentication"), "{stderr}");
}

#[test]
fn plaintext_credentials_to_a_remote_host_are_refused_unless_allowed() {
    let env = Env::new(DLQ, &format!("nats://dlq:{PASSWORD}@nats.invalid:4222"));
    let out = env.run(&["demo", "--count", "1", "--drain-timeout", "0s"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("plain text to nats.invalid"), "{stderr}");
    assert!(stderr.contains("--allow-insecure-credentials"), "{stderr}");
    assert!(!stderr.contains(PASSWORD), "{stderr}");
    // With the switch the settings are accepted (the host does not exist: the events stay).
    let out = env.run(&[
        "--allow-insecure-credentials",
        "demo",
        "--count",
        "1",
        "--drain-timeout",
        "0s",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn help_never_shows_a_secret_from_the_environment() {
    let out = std::process::Command::new(DLQ)
        .arg("--help")
        .env("NATS_PASSWORD", PASSWORD)
        .env("NATS_USER", TOKEN)
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&out.stdout);
    assert!(
        help.contains("--password") && help.contains("NATS_PASSWORD"),
        "{help}"
    );
    assert!(!help.contains(PASSWORD) && !help.contains(TOKEN), "{help}");
}
