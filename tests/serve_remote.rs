//! `dlq serve` off loopback, through the binary: `--allow-remote` needs a token and TLS (or
//! `--insecure`); TLS with a certificate generated here, reached by a rustls client and by the
//! CLI (`--api-ca`), plain HTTP refused on that port; the limits on bodies and query strings;
//! failed authentications answered 429 after a few, and logged without the token. The listener
//! is on 127.0.0.1 with `--allow-remote`: the flags are what is checked.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use dlq_testkit::cli::{failure, Env};
use dlq_testkit::http::request;
use dlq_testkit::tls::pki;
use dlq_testkit::{free_port, poll_until, spawn_tied, DEAD_BUS_URL};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, ServerName};
use serde_json::Value;
use tokio_rustls::rustls::{self, ClientConfig, ClientConnection, RootCertStore};

/// The `dlq` binary under test.
const DLQ: &str = env!("CARGO_BIN_EXE_dlq");
/// The token of the servers here.
const TOKEN: &str = "the-right-token-4711";

/// A running `dlq serve`.
struct Server {
    child: Child,
    port: u16,
    log: PathBuf,
}

impl Server {
    /// Starts `dlq serve --listen 127.0.0.1:PORT EXTRA` and waits until `up(port)`.
    fn start(env: &Env, extra: &[&str], up: impl Fn(u16) -> bool) -> Server {
        let port = free_port(0);
        let listen = format!("127.0.0.1:{port}");
        let log = env.path(&format!("serve-{port}.log"));
        let mut cmd = serve_command(env, &["--listen", &listen]);
        cmd.args(extra)
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap());
        let child = spawn_tied(cmd).unwrap();
        let mut server = Server { child, port, log };
        let started = poll_until(Duration::from_secs(60), || {
            if let Ok(Some(status)) = server.child.try_wait() {
                panic!("dlq serve exited ({status}): {}", server.log());
            }
            up(port).then_some(())
        });
        assert!(
            started.is_some(),
            "dlq serve never answered: {}",
            server.log()
        );
        server
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `dlq serve ARGS` on `env`'s data directory and config.
fn serve_command(env: &Env, args: &[&str]) -> Command {
    let mut cmd = Command::new(DLQ);
    cmd.arg("--data-dir")
        .arg(&env.data)
        .args(["--nats-url", &env.url, "serve"])
        .args(args)
        .env("DLQ_CONFIG", env.data.with_extension("yml"))
        .env("RUST_LOG", "error")
        .env_remove("DLQ_API_TOKEN")
        .stdin(Stdio::null());
    cmd
}

/// Status, headers and body of a raw answer.
fn answer(raw: &[u8]) -> Option<(u16, String, String)> {
    let text = String::from_utf8_lossy(raw);
    let (head, body) = text.split_once("\r\n\r\n")?;
    let status = head.split_whitespace().nth(1)?.parse().ok()?;
    Some((status, head.to_owned(), body.to_owned()))
}

/// One plain HTTP request to 127.0.0.1:`port`; `None` if there was no HTTP answer.
fn http(
    port: u16,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: Option<&str>,
) -> Option<(u16, String, String)> {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).ok()?;
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .ok()?;
    stream
        .write_all(request(method, path, token, body).as_bytes())
        .ok()?;
    let mut raw = Vec::new();
    let _ = stream.read_to_end(&mut raw);
    answer(&raw)
}

/// One HTTPS request to 127.0.0.1:`port`, trusting the CA in `ca`; `None` if it failed.
fn https(ca: &Path, port: u16, path: &str, token: Option<&str>) -> Option<(u16, String, String)> {
    let mut roots = RootCertStore::empty();
    for cert in CertificateDer::pem_file_iter(ca).unwrap() {
        roots.add(cert.unwrap()).unwrap();
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let name = ServerName::try_from("127.0.0.1").unwrap();
    let mut connection = ClientConnection::new(Arc::new(config), name).unwrap();
    let mut socket = TcpStream::connect(("127.0.0.1", port)).ok()?;
    socket
        .set_read_timeout(Some(Duration::from_secs(30)))
        .ok()?;
    let mut tls = rustls::Stream::new(&mut connection, &mut socket);
    tls.write_all(request("GET", path, token, None).as_bytes())
        .ok()?;
    let mut raw = Vec::new();
    let _ = tls.read_to_end(&mut raw);
    answer(&raw)
}

/// A file holding [`TOKEN`].
fn token_file(env: &Env) -> String {
    let path = env.path("token");
    std::fs::write(&path, format!("{TOKEN}\n")).unwrap();
    path.to_str().unwrap().to_owned()
}

fn json_of(body: &str) -> Value {
    serde_json::from_str(body).unwrap_or_else(|err| panic!("not JSON ({err}): {body}"))
}

#[test]
fn remote_needs_a_token_and_tls_or_an_explicit_insecure() {
    let env = Env::new(DLQ, DEAD_BUS_URL);
    let listen = format!("127.0.0.1:{}", free_port(0));
    let token = token_file(&env);
    let refused = |args: &[&str], expected: &[&str]| {
        // Spawned, not `output()`: a server that wrongly starts must fail the test, not hang it.
        let err = env.path("refused.log");
        let mut cmd = serve_command(&env, args);
        cmd.stdout(Stdio::null())
            .stderr(std::fs::File::create(&err).unwrap());
        let mut child = spawn_tied(cmd).unwrap();
        let status = poll_until(Duration::from_secs(30), || child.try_wait().unwrap());
        let _ = child.kill();
        let stderr = std::fs::read_to_string(&err).unwrap();
        let code = status.and_then(|status| status.code());
        assert_eq!(code, Some(2), "{args:?}: {stderr}");
        for text in expected {
            assert!(stderr.contains(text), "{args:?}: {stderr}");
        }
    };
    refused(
        &["--listen", &listen, "--allow-remote", "--insecure"],
        &["--allow-remote needs an API token", "--token-file"],
    );
    refused(
        &[
            "--listen",
            &listen,
            "--allow-remote",
            "--token-file",
            &token,
        ],
        &[
            "--allow-remote needs TLS",
            "--tls-cert",
            "--tls-key",
            "--insecure",
        ],
    );
    let not_pem = env.path("not.pem");
    std::fs::write(&not_pem, "hello").unwrap();
    let not_pem = not_pem.to_str().unwrap();
    refused(
        &[
            "--listen",
            &listen,
            "--allow-remote",
            "--token-file",
            &token,
            "--tls-cert",
            not_pem,
            "--tls-key",
            not_pem,
        ],
        &["cannot use", "not.pem", "for TLS"],
    );
    assert!(!env.data.exists(), "nothing was opened");

    // --insecure: plain HTTP, still with the token, and a warning in the log.
    let server = Server::start(
        &env,
        &["--allow-remote", "--insecure", "--token-file", &token],
        |port| http(port, "GET", "/healthz", None, None).is_some_and(|(s, _, _)| s == 200),
    );
    let (status, _, _) = http(server.port, "GET", "/v1/stats", None, None).unwrap();
    assert_eq!(status, 401);
    let (status, _, _) = http(server.port, "GET", "/v1/stats", Some(TOKEN), None).unwrap();
    assert_eq!(status, 200);
    assert!(server.log().contains("plain HTTP"), "{}", server.log());
}

#[test]
fn tls_serves_https_to_clients_that_trust_its_ca_and_refuses_plain_http() {
    let env = Env::new(DLQ, DEAD_BUS_URL);
    env.demo("j1", 3);
    let certs = pki(&env.path(""));
    let token = token_file(&env);
    let ca = certs.ca.clone();
    let server = Server::start(
        &env,
        &[
            "--allow-remote",
            "--token-file",
            &token,
            "--tls-cert",
            certs.server_cert.to_str().unwrap(),
            "--tls-key",
            certs.server_key.to_str().unwrap(),
        ],
        |port| https(&ca, port, "/healthz", None).is_some_and(|(s, _, _)| s == 200),
    );
    let port = server.port;
    let (status, _, body) = https(&certs.ca, port, "/v1/stats", Some(TOKEN)).unwrap();
    assert_eq!(status, 200, "{body}");
    assert_eq!(json_of(&body)["total_items"], 3);
    let (status, _, _) = https(&certs.ca, port, "/v1/stats", None).unwrap();
    assert_eq!(status, 401);

    // Plain HTTP on the TLS port gets no HTTP answer.
    assert!(http(port, "GET", "/healthz", None, None).is_none());
    // A client that does not trust the CA gets nothing either.
    std::fs::create_dir_all(env.path("other")).unwrap();
    let other = pki(&env.path("other"));
    assert!(https(&other.ca, port, "/healthz", None).is_none());

    // The announcement says https, and the CLI goes through it with --api-ca.
    let announced = json_of(&std::fs::read_to_string(env.data.join("serve.json")).unwrap());
    assert_eq!(announced["url"], format!("https://127.0.0.1:{port}"));
    let ca_arg = certs.ca.to_str().unwrap();
    let stats = env.json(&["--api-ca", ca_arg, "--token-file", &token, "stats"]);
    assert_eq!(stats["total_items"], 3, "{stats}");
    let url = format!("https://127.0.0.1:{port}");
    let stats = env.json(&[
        "--api",
        &url,
        "--api-ca",
        ca_arg,
        "--token-file",
        &token,
        "stats",
    ]);
    assert_eq!(stats["total_items"], 3, "{stats}");
    // Without the CA the CLI says what to give.
    let out = env.run(&["--api", &url, "--token-file", &token, "stats"]);
    let (_, stderr) = failure(&out);
    assert!(stderr.contains("--api-ca"), "{stderr}");
}

#[test]
fn oversized_bodies_and_query_strings_get_their_limit_errors() {
    let env = Env::new(DLQ, DEAD_BUS_URL);
    let server = Server::start(&env, &[], |port| {
        http(port, "GET", "/healthz", None, None).is_some_and(|(s, _, _)| s == 200)
    });
    let big = format!(
        "{{\"older_than_days\": 1, \"job_id\": \"{}\"}}",
        "x".repeat(100 * 1024)
    );
    let (status, _, body) = http(server.port, "POST", "/v1/purge", None, Some(&big)).unwrap();
    assert_eq!(status, 413, "{body}");
    let body = json_of(&body);
    assert_eq!(body["code"], "payload_too_large", "{body}");
    assert!(
        body["error"].as_str().unwrap().contains("65536 bytes"),
        "{body}"
    );

    let path = format!("/v1/items?filter={}", "a".repeat(9 * 1024));
    let (status, _, body) = http(server.port, "GET", &path, None, None).unwrap();
    assert_eq!(status, 414, "{body}");
    let body = json_of(&body);
    assert_eq!(body["code"], "uri_too_long", "{body}");
    assert!(
        body["error"].as_str().unwrap().contains("8192 bytes"),
        "{body}"
    );

    // Within the limits, the same routes answer as usual.
    let (status, _, body) = http(server.port, "GET", "/v1/items?limit=1", None, None).unwrap();
    assert_eq!(status, 200, "{body}");
}

#[test]
fn repeated_wrong_tokens_get_429_and_the_log_never_shows_them() {
    let env = Env::new(DLQ, DEAD_BUS_URL);
    let token = token_file(&env);
    let server = Server::start(&env, &["--token-file", &token], |port| {
        http(port, "GET", "/healthz", None, None).is_some_and(|(s, _, _)| s == 200)
    });
    let guess = "guessed-token-0815";
    // Requests without a token guess nothing and are not counted.
    for _ in 0..10 {
        let (status, _, _) = http(server.port, "GET", "/v1/stats", None, None).unwrap();
        assert_eq!(status, 401);
    }
    for n in 1..=5 {
        let (status, _, body) = http(server.port, "GET", "/v1/stats", Some(guess), None).unwrap();
        assert_eq!(status, 401, "attempt {n}: {body}");
    }
    let (status, head, body) = http(server.port, "GET", "/v1/stats", Some(guess), None).unwrap();
    assert_eq!(status, 429, "{body}");
    assert_eq!(json_of(&body)["code"], "too_many_requests", "{body}");
    assert!(head.to_ascii_lowercase().contains("retry-after:"), "{head}");
    // Until the window passes, even the right token waits; /healthz stays open.
    let (status, _, _) = http(server.port, "GET", "/v1/stats", Some(TOKEN), None).unwrap();
    assert_eq!(status, 429);
    let (status, _, _) = http(server.port, "GET", "/healthz", None, None).unwrap();
    assert_eq!(status, 200);

    let log = server.log();
    assert!(log.contains("wrong token"), "{log}");
    assert!(log.contains("127.0.0.1:"), "the peer is named: {log}");
    assert!(
        !log.contains(guess),
        "the presented token is never logged: {log}"
    );
    assert!(!log.contains(TOKEN), "{log}");
}
