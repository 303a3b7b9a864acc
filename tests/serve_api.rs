//! `dlq serve` end to end through the binary: every route answers exactly what the CLI prints
//! for the same data; CLI commands go through the server automatically while it holds the data
//! directory (and their errors keep their exit codes); the bearer token; the loopback-only
//! listener; and the error naming a process that holds the directory without an API.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::Duration;

use dlq::domain::event::{EventKind, RemovalReason};
use dlq_testkit::cli::{failure, listed_ids, Env};
use dlq_testkit::{free_port, poll_until, spawn_tied, DEAD_BUS_URL};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use serde_json::{json, Value};

/// The `dlq` binary under test.
const DLQ: &str = env!("CARGO_BIN_EXE_dlq");

/// A running `dlq serve` on a free loopback port.
struct Server {
    child: Child,
    port: u16,
    log: std::path::PathBuf,
}

impl Server {
    /// Starts `dlq serve` on `env`'s data directory and waits for `/healthz`.
    fn start(env: &Env, extra: &[&str]) -> Server {
        let port = free_port(0);
        let listen = format!("127.0.0.1:{port}");
        let log = env.path(&format!("serve-{port}.log"));
        let mut cmd = serve_command(env, &["--listen", &listen]);
        cmd.args(extra)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap());
        let child = spawn_tied(cmd).unwrap();
        let mut server = Server { child, port, log };
        let up = poll_until(Duration::from_secs(60), || {
            if let Ok(Some(status)) = server.child.try_wait() {
                panic!("dlq serve exited ({status}): {}", server.log());
            }
            let (status, _) = http(port, "GET", "/healthz", None, None)?;
            (status == 200).then_some(())
        });
        assert!(up.is_some(), "dlq serve never answered: {}", server.log());
        server
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// `GET path` (no token); panics unless 200.
    fn get(&self, path: &str) -> String {
        let (status, body) = http(self.port, "GET", path, None, None).unwrap();
        assert_eq!(status, 200, "GET {path}: {body}");
        body
    }

    /// SIGTERM, then waits for the exit.
    fn stop(mut self) -> ExitStatus {
        kill(Pid::from_raw(self.child.id() as i32), Signal::SIGTERM).unwrap();
        let status = poll_until(Duration::from_secs(30), || self.child.try_wait().unwrap());
        status.unwrap_or_else(|| panic!("dlq serve did not stop: {}", self.log()))
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
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_dlq"));
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

/// One HTTP/1.1 request to 127.0.0.1:`port` (`Connection: close`); status and body, or `None`
/// if the connection failed.
fn http(
    port: u16,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: Option<&str>,
) -> Option<(u16, String)> {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).ok()?;
    stream
        .set_read_timeout(Some(Duration::from_secs(60)))
        .ok()?;
    let request = dlq_testkit::http::request(method, path, token, body);
    stream.write_all(request.as_bytes()).ok()?;
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).ok()?;
    let text = String::from_utf8(raw).unwrap();
    let (head, body) = text.split_once("\r\n\r\n")?;
    assert!(
        !head
            .to_ascii_lowercase()
            .contains("transfer-encoding: chunked"),
        "{head}"
    );
    let status = head.split_whitespace().nth(1)?.parse().ok()?;
    Some((status, body.to_owned()))
}

/// The JSON of an answer.
fn json_of(body: &str) -> Value {
    serde_json::from_str(body).unwrap_or_else(|err| panic!("not JSON ({err}): {body}"))
}

/// stdout of a successful run, as text.
fn stdout(env: &Env, args: &[&str]) -> String {
    let out = env.run(args);
    assert!(
        out.status.success(),
        "dlq {args:?} failed ({:?}): {}",
        out.status.code(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// An analysis without its `generated_at`, which differs between two runs.
fn analysis(text: &str) -> Value {
    let mut value = json_of(text);
    value.as_object_mut().unwrap().remove("generated_at");
    value
}

/// Command line and API route pairs that must give the same bytes.
fn mirrored() -> Vec<(Vec<&'static str>, &'static str)> {
    vec![
        (vec!["list", "--limit", "5"], "/v1/items?limit=5"),
        (
            vec!["list", "--job-id", "j1", "--eligible", "--limit", "4"],
            "/v1/items?job_id=j1&eligible=true&limit=4",
        ),
        (
            vec!["list", "--error-type", "timeout", "--offset", "1"],
            "/v1/items?error_type=timeout&offset=1",
        ),
        (
            vec!["list", "--limit", "2", "--count", "--filter", r#"job_id == "j1" && failure_count >= 1"#],
            "/v1/items?limit=2&count=true&filter=job_id%20%3D%3D%20%22j1%22%20%26%26%20failure_count%20%3E%3D%201",
        ),
        (
            vec!["--format", "csv", "list", "--job-id", "j2"],
            "/v1/items?job_id=j2&format=csv",
        ),
        (
            vec!["--format", "table", "list", "--limit", "3"],
            "/v1/items?limit=3&format=table",
        ),
        (
            vec!["inspect", "item-1", "--job-id", "j2"],
            "/v1/items/j2/item-1",
        ),
        (vec!["inspect", "item-11"], "/v1/items/item-11"),
        (
            vec!["--format", "table", "inspect", "item-11"],
            "/v1/items/item-11?format=table",
        ),
        (vec!["stats"], "/v1/stats"),
        (vec!["stats", "--job-id", "j1"], "/v1/stats?job_id=j1"),
        (vec!["--format", "table", "stats"], "/v1/stats?format=table"),
    ]
}

#[test]
fn every_route_answers_what_the_cli_prints_and_the_cli_goes_through_it() {
    let env = Env::new(DLQ, DEAD_BUS_URL);
    env.demo("j1", 12);
    env.demo("j2", 3);
    let local: Vec<String> = mirrored()
        .iter()
        .map(|(args, _)| stdout(&env, args))
        .collect();
    let local_analysis = analysis(&stdout(&env, &["analyze"]));
    let filtered = json_of(&local[3]);
    assert_eq!(
        filtered["matched"], 12,
        "the filter is applied before paging, and --count counts every match"
    );
    assert_eq!(listed_ids(&filtered), ["j1/item-11", "j1/item-10"]);
    assert!(filtered["next_cursor"].is_string());

    let server = Server::start(&env, &[]);
    let announced = json_of(&std::fs::read_to_string(env.data.join("serve.json")).unwrap());
    assert_eq!(
        announced["url"],
        format!("http://127.0.0.1:{}", server.port)
    );
    assert_eq!(announced["pid"], server.child.id());
    assert_eq!(announced["token_required"], false);
    let health = json_of(&server.get("/healthz"));
    // The bus is dead: up, but degraded, and says why.
    assert_eq!(health["status"], "degraded", "{health}");
    assert!(
        health["reason"].as_str().unwrap().contains("bus"),
        "{health}"
    );
    assert!(health["node_id"].as_str().unwrap().starts_with("node-"));
    // 15 dead-letters stored for the dead bus; with the bus known down demo stores them
    // without a publish attempt, so no EmitFailed audit events beside them.
    assert_eq!(
        health["unpublished"], 15,
        "demo events wait for the dead bus"
    );
    assert_eq!(health["parked"], 0);

    // The API answers what the CLI printed, byte for byte; so does the CLI, now forwarded.
    for ((args, route), printed) in mirrored().iter().zip(&local) {
        assert_eq!(&server.get(route), printed, "GET {route} vs dlq {args:?}");
        assert_eq!(&stdout(&env, args), printed, "forwarded dlq {args:?}");
    }
    assert_eq!(analysis(&server.get("/v1/analyze")), local_analysis);
    assert_eq!(analysis(&stdout(&env, &["analyze"])), local_analysis);
    let export = env.path("analysis.json");
    let exported = stdout(&env, &["analyze", "--export", export.to_str().unwrap()]);
    assert_eq!(analysis(&exported), local_analysis);
    assert_eq!(
        analysis(&std::fs::read_to_string(&export).unwrap()),
        local_analysis,
        "--export writes the server's analysis here"
    );
    // Commands that need the directory itself say who holds it and where its API is.
    let (code, stderr) = failure(&env.run(&["status"]));
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains("Another process holds this data directory")
            && stderr.contains("`dlq serve`")
            && stderr.contains("delete, redrive and retry go through that API")
            && stderr.contains(&format!("pid {}", server.child.id()))
            && stderr.contains(&format!("http://127.0.0.1:{}", server.port)),
        "{stderr}"
    );
    let metrics = server.get("/metrics");
    assert!(metrics.contains("dlq_unpublished_events"), "{metrics}");
    let total = json_of(&server.get("/v1/stats"))["total_items"].clone();
    assert!(total.as_u64().unwrap() > 0, "{total}");
    assert!(
        metrics
            .lines()
            .any(|line| line == format!("dlq_items {total}")),
        "dlq_items should be {total}: {metrics}"
    );

    // Errors: the same message and exit code as without a server.
    let (status, body) = http(server.port, "GET", "/v1/items/nope", None, None).unwrap();
    assert_eq!(status, 404);
    assert_eq!(json_of(&body)["code"], "not_found");
    let (code, stderr) = failure(&env.run(&["inspect", "nope"]));
    assert_eq!(code, Some(3), "{stderr}");
    assert!(
        stderr.contains("item 'nope' not found in any job"),
        "{stderr}"
    );
    let (status, body) = http(
        server.port,
        "GET",
        "/v1/items?filter=item.x%20%3E",
        None,
        None,
    )
    .unwrap();
    assert_eq!(status, 400);
    assert_eq!(json_of(&body)["code"], "bad_request");
    assert!(
        json_of(&body)["error"]
            .as_str()
            .unwrap()
            .contains("column 9"),
        "{body}"
    );
    let out = env.run(&["list", "--filter", "item.x >"]);
    let (code, stderr) = failure(&out);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("invalid filter") && stderr.contains("column 9"),
        "{stderr}"
    );
    assert!(out.stdout.is_empty(), "nothing is listed");
    let url = announced["url"].as_str().unwrap().to_owned();
    let (code, stderr) =
        failure(&env.run(&["--api", &url, "list", "--filter", "item.missing == 1"]));
    assert_eq!(
        code,
        Some(2),
        "a filter that fails on an item, evaluated by the server: {stderr}"
    );
    assert!(stderr.contains("has(item.missing)"), "{stderr}");
    let (status, _) = http(server.port, "GET", "/v1/items?limt=5", None, None).unwrap();
    assert_eq!(status, 400, "unknown parameters are refused");
    let (status, body) = http(server.port, "GET", "/v1/purge", None, None).unwrap();
    assert_eq!(
        (status, json_of(&body)["code"].as_str()),
        (405, Some("method_not_allowed"))
    );
    let (status, _) = http(server.port, "GET", "/v2/anything", None, None).unwrap();
    assert_eq!(status, 404);

    // Removals through the API: the CLI still asks first (and refuses without a terminal).
    let (code, stderr) = failure(&env.run(&["clear", "j2"]));
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("nothing was changed"), "{stderr}");
    let (code, stderr) = failure(&env.run(&["clear", "no-such-job", "--yes"]));
    assert_eq!(code, Some(3), "{stderr}");
    let cleared = env.json(&["clear", "j2", "--yes", "--drain-timeout", "0s"]);
    assert_eq!(cleared["job_id"], "j2");
    assert_eq!(cleared["removed"], 3);
    assert_eq!(cleared["drained"], false);
    assert_eq!(env.json(&["list"])["matched"], 12);
    let dry = http(
        server.port,
        "POST",
        "/v1/purge",
        None,
        Some(r#"{"older_than_days": 0, "job_id": "j1", "dry_run": true}"#),
    )
    .unwrap();
    assert_eq!(dry.0, 200, "{}", dry.1);
    assert_eq!(json_of(&dry.1)["would_remove"], 12);
    let purged = env.json(&["purge", "--older-than-days", "3650", "--yes"]);
    assert_eq!(
        (purged["removed"].clone(), purged["job_id"].clone()),
        (json!(0), Value::Null)
    );
    let (status, body) = http(
        server.port,
        "POST",
        "/v1/purge",
        None,
        Some(r#"{"older_than": 1}"#),
    )
    .unwrap();
    assert_eq!(status, 400, "{body}");

    // A clean stop removes the announcement and releases the directory.
    assert!(server.stop().success());
    assert!(!env.data.join("serve.json").exists());
    let rt = tokio::runtime::Runtime::new().unwrap();
    let items = rt.block_on(env.items());
    assert_eq!(items.len(), 12);
    assert!(items.iter().all(|i| i.job_id == "j1"));
    let events = rt.block_on(env.events());
    let cleared = events
        .iter()
        .filter(|e| {
            matches!(&e.kind, EventKind::ItemRemoved { reason, .. } if *reason == RemovalReason::Cleared)
        })
        .count();
    assert_eq!(cleared, 3, "each removal is an event, as in the CLI");
}

/// `POST /v1/delete` answers what `dlq delete` prints; the CLI goes through it while the
/// server holds the directory (asking first, and refusing without a terminal); bad input is a
/// 400 or 404 that changes nothing; each deletion is an `item_removed` event with reason
/// `deleted`.
#[test]
fn delete_goes_through_the_api_and_answers_what_the_cli_prints() {
    let env = Env::new(DLQ, DEAD_BUS_URL);
    env.demo("j1", 4);
    env.demo("j2", 3);
    let server = Server::start(&env, &[]);
    let post = |body: &str| http(server.port, "POST", "/v1/delete", None, Some(body)).unwrap();

    let (status, body) = post(r#"{"job_id": "j2", "dry_run": true}"#);
    assert_eq!(status, 200, "{body}");
    let dry = json_of(&body);
    assert_eq!(dry["would_remove"], 3);
    assert_eq!(dry["items"].as_array().map(Vec::len), Some(3));
    assert_eq!(
        json_of(&stdout(
            &env,
            &["--format", "json", "delete", "--job-id", "j2", "--dry-run"]
        )),
        dry,
        "the CLI forwards and prints the server's answer"
    );
    for (body, want) in [
        (r#"{}"#, 400),
        (r#"{"ids": ["j1/item-0"], "all": true}"#, 400),
        (r#"{"filter": "item_id =="}"#, 400),
        (r#"{"ids": "j1/item-0"}"#, 400),
        (r#"{"idz": ["j1/item-0"]}"#, 400),
        (r#"{"ids": ["j1/nope"]}"#, 404),
    ] {
        let (status, answer) = post(body);
        assert_eq!(status, want, "{body}: {answer}");
    }
    let (code, stderr) = failure(&env.run(&["delete", "j1/item-0"]));
    assert_eq!(
        code,
        Some(2),
        "asks first, refuses without a terminal: {stderr}"
    );
    assert!(stderr.contains("nothing was changed"), "{stderr}");
    let (code, stderr) = failure(&env.run(&["delete", "j1/nope", "--yes"]));
    assert_eq!(code, Some(3), "{stderr}");
    assert_eq!(env.json(&["list"])["matched"], 7, "nothing was deleted yet");

    let (status, body) = post(r#"{"ids": ["j1/item-0", "j1/nope"], "drain_timeout": "0s"}"#);
    assert_eq!(status, 200, "{body}");
    let one = json_of(&body);
    assert_eq!(
        (one["removed"].clone(), one["unknown"].clone()),
        (json!(1), json!(["j1/nope"]))
    );
    let filtered = env.json(&[
        "delete",
        "--filter",
        "job_id == \"j2\"",
        "--yes",
        "--drain-timeout",
        "0s",
    ]);
    assert_eq!(filtered["removed"], 3);
    assert_eq!(env.json(&["list"])["matched"], 3);

    assert!(server.stop().success());
    let rt = tokio::runtime::Runtime::new().unwrap();
    let deleted = rt
        .block_on(env.events())
        .iter()
        .filter(|e| {
            matches!(&e.kind, EventKind::ItemRemoved { reason, .. } if *reason == RemovalReason::Deleted)
        })
        .count();
    assert_eq!(deleted, 4);
}

#[test]
fn with_a_token_every_route_but_healthz_needs_it() {
    let env = Env::new(DLQ, DEAD_BUS_URL);
    env.demo("j1", 2);
    let token_file = env.path("token");
    std::fs::write(&token_file, "s3cret-token\n").unwrap();
    let token_arg = token_file.to_str().unwrap().to_owned();
    let server = Server::start(&env, &["--token-file", &token_arg]);
    let announced = json_of(&std::fs::read_to_string(env.data.join("serve.json")).unwrap());
    assert_eq!(announced["token_required"], true);
    assert!(
        !announced.to_string().contains("s3cret"),
        "the token is never written"
    );

    let port = server.port;
    assert_eq!(http(port, "GET", "/healthz", None, None).unwrap().0, 200);
    for route in ["/v1/stats", "/v1/items", "/metrics", "/v1/items/j1/item-0"] {
        let (status, body) = http(port, "GET", route, None, None).unwrap();
        assert_eq!(status, 401, "{route}: {body}");
        assert_eq!(json_of(&body)["code"], "unauthorized");
        assert_eq!(
            http(port, "GET", route, Some("wrong"), None).unwrap().0,
            401
        );
        let (status, body) = http(port, "GET", route, Some("s3cret-token"), None).unwrap();
        assert_eq!(status, 200, "{route}: {body}");
    }
    let (status, _) = http(port, "POST", "/v1/jobs/j1/clear", None, None).unwrap();
    assert_eq!(status, 401);
    let delete = Some(r#"{"ids": ["j1/item-0"]}"#);
    assert_eq!(
        http(port, "POST", "/v1/delete", None, delete).unwrap().0,
        401
    );

    let (code, stderr) = failure(&env.run(&["stats"]));
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("--token-file"), "{stderr}");
    assert_eq!(
        env.json(&["--token-file", &token_arg, "stats"])["total_items"],
        2
    );
    let with_env = Command::new(env!("CARGO_BIN_EXE_dlq"))
        .arg("--data-dir")
        .arg(&env.data)
        .args(["--format", "json", "list"])
        .env("DLQ_API_TOKEN", "s3cret-token")
        .output()
        .unwrap();
    assert!(
        with_env.status.success(),
        "{}",
        String::from_utf8_lossy(&with_env.stderr)
    );
    assert_eq!(
        json_of(&String::from_utf8(with_env.stdout).unwrap())["matched"],
        2
    );
    assert!(server.stop().success());
}

#[test]
fn each_token_may_do_what_its_role_allows() {
    let env = Env::new(DLQ, DEAD_BUS_URL);
    env.demo("j1", 3);
    let tokens_file = env.path("tokens");
    std::fs::write(
        &tokens_file,
        "# name role token\nviewer v-secret\nops operator o-secret\nboss admin a-secret\n",
    )
    .unwrap();
    let token_file = env.path("token");
    std::fs::write(&token_file, "d-secret\n").unwrap();
    let server = Server::start(
        &env,
        &[
            "--tokens-file",
            tokens_file.to_str().unwrap(),
            "--token-file",
            token_file.to_str().unwrap(),
        ],
    );
    let port = server.port;
    for (token, name, role) in [
        ("v-secret", "viewer", "read-only"),
        ("o-secret", "ops", "operator"),
        ("a-secret", "boss", "admin"),
        ("d-secret", "default", "admin"),
    ] {
        let (status, body) = http(port, "GET", "/v1/whoami", Some(token), None).unwrap();
        assert_eq!(status, 200, "{body}");
        assert_eq!(json_of(&body), json!({"name": name, "role": role}));
    }
    assert_eq!(http(port, "GET", "/v1/whoami", None, None).unwrap().0, 401);
    assert_eq!(
        http(port, "GET", "/v1/whoami", Some("x-secret"), None)
            .unwrap()
            .0,
        401
    );

    let viewer = Some("v-secret");
    for route in ["/v1/stats", "/v1/items", "/v1/items/j1/item-0", "/metrics"] {
        let (status, body) = http(port, "GET", route, viewer, None).unwrap();
        assert_eq!(status, 200, "{route}: {body}");
    }
    let delete = Some(r#"{"ids": ["j1/item-0"]}"#);
    let purge = Some(r#"{"older_than_days": 0}"#);
    let retry = Some(r#"{"dry_run": true}"#);
    let redrive = Some(r#"{"ids": ["j1/item-0"]}"#);
    for (route, body, needed) in [
        ("/v1/jobs/j1/clear", None, "admin"),
        ("/v1/purge", purge, "admin"),
        ("/v1/jobs/j1/retry", retry, "operator"),
        ("/v1/delete", delete, "operator"),
        ("/v1/redrive", redrive, "operator"),
    ] {
        let (status, answer) = http(port, "POST", route, viewer, body).unwrap();
        assert_eq!(status, 403, "{route}: {answer}");
        let answer = json_of(&answer);
        assert_eq!(answer["code"], "forbidden");
        let message = answer["error"].as_str().unwrap();
        assert!(
            message.contains(&format!("needs the {needed} role")) && message.contains("viewer"),
            "{message}"
        );
    }
    assert_eq!(
        env.json(&["--token-file", token_file.to_str().unwrap(), "list"])["matched"],
        3
    );

    let ops = Some("o-secret");
    let (status, body) = http(port, "POST", "/v1/jobs/j1/clear", ops, None).unwrap();
    assert_eq!(status, 403, "{body}");
    // dlq serve registers no redrive handler: an operator is told so, and nothing changes.
    let (status, body) = http(port, "POST", "/v1/redrive", ops, redrive).unwrap();
    assert_eq!(status, 409, "{body}");
    let answer = json_of(&body);
    assert_eq!(answer["code"], "no_redrive_handler");
    let message = answer["error"].as_str().unwrap();
    assert!(
        message.contains("EmitterBuilder::redrive_handler"),
        "{message}"
    );
    let with_reason = Some(r#"{"ids": ["j1/item-0"], "reason": "poison input"}"#);
    let (status, body) = http(port, "POST", "/v1/delete", ops, with_reason).unwrap();
    assert_eq!(status, 200, "{body}");
    assert_eq!(json_of(&body)["removed"], 1);

    let clear = "/v1/jobs/j1/clear?reason=job%20retired";
    let (status, body) = http(port, "POST", clear, Some("a-secret"), None).unwrap();
    assert_eq!(status, 200, "{body}");
    assert_eq!(json_of(&body)["removed"], 2);
    // The audit, readable with a read-only token: newest first, one row per action.
    let (status, body) = http(port, "GET", "/v1/audit", viewer, None).unwrap();
    assert_eq!(status, 200, "{body}");
    let audit = json_of(&body);
    assert_eq!(audit["total"], 2);
    let rows: Vec<Value> = audit["actions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| json!([a["who"], a["what"], a["job_id"], a["reason"], a["items"]]))
        .collect();
    assert_eq!(
        rows,
        [
            json!(["boss", "cleared", "j1", "job retired", 2]),
            json!(["ops", "deleted", "j1", "poison input", 1]),
        ]
    );
    let (_, body) = http(port, "GET", "/v1/audit?limit=1&offset=1", viewer, None).unwrap();
    assert_eq!(json_of(&body)["actions"][0]["who"], "ops");
    assert!(server.stop().success());
    assert!(
        !server_log_mentions_secrets(&env),
        "tokens are never logged"
    );
    // Each removal names the token and the reason given.
    let rt = tokio::runtime::Runtime::new().unwrap();
    let removals: Vec<Value> = rt
        .block_on(env.events())
        .iter()
        .filter(|e| matches!(e.kind, EventKind::ItemRemoved { .. }))
        .map(|e| {
            let json = json_of(&String::from_utf8(e.to_json().unwrap()).unwrap());
            json!([json["item_id"], json["reason"], json["removed_by"]])
        })
        .collect();
    assert_eq!(
        removals,
        [
            json!(["item-0", "deleted", {"name": "ops", "reason": "poison input"}]),
            json!(["item-1", "cleared", {"name": "boss", "reason": "job retired"}]),
            json!(["item-2", "cleared", {"name": "boss", "reason": "job retired"}]),
        ]
    );
}

/// Whether any `serve-*.log` of `env` holds one of the tokens of the role test.
fn server_log_mentions_secrets(env: &Env) -> bool {
    std::fs::read_dir(env.path(""))
        .unwrap()
        .filter_map(Result::ok)
        .filter(|e| e.file_name().to_string_lossy().starts_with("serve-"))
        .any(|e| {
            std::fs::read_to_string(e.path())
                .unwrap_or_default()
                .contains("-secret")
        })
}

#[test]
fn a_remote_listener_is_refused_and_stale_or_missing_servers_are_handled() {
    let env = Env::new(DLQ, DEAD_BUS_URL);
    let port = free_port(0).to_string();
    let out = serve_command(&env, &["--listen", &format!("0.0.0.0:{port}")])
        .output()
        .unwrap();
    let (code, stderr) = failure(&out);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("not a loopback address") && stderr.contains("--allow-remote"),
        "{stderr}"
    );
    assert!(!env.data.exists(), "nothing was opened");

    // A serve.json left by a dead server is ignored: the CLI opens the directory itself.
    env.demo("j1", 2);
    let mut gone = Command::new("true").spawn().unwrap();
    gone.wait().unwrap();
    let stale = json!({ "url": "http://127.0.0.1:1", "pid": gone.id(), "token_required": false });
    std::fs::write(env.data.join("serve.json"), stale.to_string()).unwrap();
    assert_eq!(env.json(&["list"])["matched"], 2);

    // --api forces the API, and says so when nothing answers there.
    let (code, stderr) = failure(&env.run(&["--api", "http://127.0.0.1:1", "stats"]));
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains("cannot reach the dlq serve API at http://127.0.0.1:1"),
        "{stderr}"
    );
    let (code, stderr) = failure(&env.run(&["--api", "ftp://example.com", "stats"]));
    assert_eq!(code, Some(2), "{stderr}");
}

/// `dlq reconcile`, which holds the data directory while it waits up to `timeout` for the dead
/// bus.
fn reconcile_holder(env: &Env, timeout: &str) -> Child {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_dlq"));
    cmd.arg("--data-dir")
        .arg(&env.data)
        .args([
            "--nats-url",
            DEAD_BUS_URL,
            "reconcile",
            "--timeout",
            timeout,
        ])
        .env("DLQ_CONFIG", env.data.with_extension("yml"))
        .env("RUST_LOG", "error")
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    spawn_tied(cmd).unwrap()
}

/// Polls `dlq --lock-wait 0s list` until it fails because `holder` holds the directory.
fn held_list(env: &Env) -> std::process::Output {
    poll_until(Duration::from_secs(60), || {
        let out = env.run(&["--lock-wait", "0s", "list"]);
        (!out.status.success()).then_some(out)
    })
    .expect("the holder never took the data directory")
}

#[test]
fn a_holder_without_an_api_is_named_in_the_error() {
    let env = Env::new(DLQ, DEAD_BUS_URL);
    env.demo("j1", 2);
    let mut holder = reconcile_holder(&env, "300s");
    let (code, stderr) = failure(&held_list(&env));
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains(&format!("pid {}", holder.id())), "{stderr}");
    assert!(
        stderr.contains("reconcile --timeout 300s"),
        "names the command: {stderr}"
    );
    assert!(
        stderr.contains("serves no admin API") && stderr.contains("dlq serve"),
        "{stderr}"
    );
    holder.kill().unwrap();
    holder.wait().unwrap();
    assert_eq!(
        env.json(&["list"])["matched"],
        2,
        "free again once it is gone"
    );
}

/// A command started while a short-lived process holds the directory waits for it (up to
/// `--lock-wait`) instead of failing: `dlq list` racing `dlq run`'s start must not fail either.
#[test]
fn a_command_waits_for_a_directory_held_by_a_short_command() {
    let env = Env::new(DLQ, DEAD_BUS_URL);
    env.demo("j1", 2);
    let mut holder = reconcile_holder(&env, "4s");
    held_list(&env);
    assert!(holder.try_wait().unwrap().is_none(), "still holding");
    let out = env
        .command(&["--lock-wait", "120s", "--format", "json", "list"])
        .env("RUST_LOG", "warn")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!("held by pid {}", holder.id()))
            && stderr.contains("waiting up to 2m"),
        "says whom it waits for: {stderr}"
    );
    let listed: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(listed["matched"], 2);
}

/// `dlq serve` runs retention: items first failed longer ago than `retention_days` are purged
/// while it holds the directory (an `item_removed` event with reason `purged` each), recent
/// ones stay; SIGTERM then stops it cleanly and releases the directory.
#[tokio::test]
async fn serve_purges_expired_items_and_stops_cleanly_on_sigterm() {
    let env = Env::new(DLQ, DEAD_BUS_URL);
    let old = env.path("old");
    dlq_testkit::reference::write_reference_job(
        &old.join("aged"),
        "aged",
        &[
            dlq_testkit::reference::reference_item("o1", 1, 40),
            dlq_testkit::reference::reference_item("o2", 1, 40),
            dlq_testkit::reference::reference_item("n1", 1, 0),
        ],
    );
    env.json(&["import", old.to_str().unwrap(), "--drain-timeout", "0s"]);
    let config = env.data.with_extension("yml");
    let mut yaml = std::fs::read_to_string(&config).unwrap();
    yaml.push_str("retention:\n  retention_days: 30\n  check_interval: 200ms\n");
    std::fs::write(&config, yaml).unwrap();

    let server = Server::start(&env, &[]);
    let left = poll_until(Duration::from_secs(30), || {
        let ids = listed_ids(&json_of(&server.get("/v1/items?format=json")));
        (ids.len() == 1).then_some(ids)
    });
    assert_eq!(left, Some(vec!["aged/n1".to_owned()]), "{}", server.log());
    let status = server.stop();
    assert!(status.success(), "dlq serve exited with {status}");

    // The directory is free again, and the purges are in the log.
    let purged = env
        .events()
        .await
        .into_iter()
        .filter(|e| {
            matches!(
                &e.kind,
                EventKind::ItemRemoved {
                    reason: RemovalReason::Purged,
                    ..
                }
            )
        })
        .count();
    assert_eq!(purged, 2);
}
