//! What an operator who knows the `nats`, `kubectl` or `gh` command lines expects of `dlq`,
//! end to end through the binary (issue 36, items 1-3):
//!
//! - a command that reads the data directory refuses one that does not exist, in one line
//!   naming it, and creates nothing; writers create it; a workflow that fails validation
//!   leaves no data directory behind;
//! - `NATS_URL`, `-s/--server`, and a `--context` whose fields the flags override one by one;
//! - a bus that is down, unknown, untrusted (no `--tlsca`) or refuses the password is one line
//!   on stderr naming the server and the cause, with no log lines besides it.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::Path;
use std::process::{Command, Output, Stdio};

use dlq_testkit::nats::NatsServer;
use dlq_testkit::tls::pki;
use dlq_testkit::DEAD_BUS_URL;

/// The `dlq` binary under test.
const DLQ: &str = env!("CARGO_BIN_EXE_dlq");

/// A password of the test servers (not a secret).
const PASSWORD: &str = "conventions-pw-1";

/// `dlq ARGS` run in `dir`, with none of the caller's dlq or NATS settings, no `RUST_LOG`, the
/// `nats` CLI's contexts under `dir/config`, and stdin closed.
fn dlq(dir: &Path, args: &[&str]) -> Command {
    let mut cmd = Command::new(DLQ);
    cmd.args(args)
        .current_dir(dir)
        .env("HOME", dir)
        .env("XDG_CONFIG_HOME", dir.join("config"))
        .stdin(Stdio::null());
    for (name, _) in std::env::vars_os() {
        let name = name.to_string_lossy();
        if name.starts_with("DLQ_") || name.starts_with("NATS_") || name == "RUST_LOG" {
            cmd.env_remove(&*name);
        }
    }
    cmd
}

fn run(cmd: &mut Command) -> Output {
    cmd.output().unwrap()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Asserts that stderr is exactly one line, `dlq: ...`, holding every one of `words`, and
/// returns it.
fn one_line(out: &Output, words: &[&str]) -> String {
    let err = stderr(out);
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), 1, "one line on stderr, got: {err}");
    assert!(lines[0].starts_with("dlq: "), "{err}");
    for word in words {
        assert!(err.contains(word), "{word:?} missing from: {err}");
    }
    lines[0].to_owned()
}

#[test]
fn read_commands_refuse_a_missing_data_directory_and_create_nothing() {
    let work = tempfile::tempdir().unwrap();
    let dir = work.path();
    let reads: &[&[&str]] = &[
        &["list"],
        &["stats"],
        &["status"],
        &["inspect", "item-1"],
        &["analyze"],
        &["export", "out.jsonl"],
        &["jobs"],
        &["events", "job-1"],
        &["verify"],
        &["reconcile", "--timeout", "1s"],
        &["rebuild"],
        &["republish", "--dry-run"],
        &["resume", "job-1"],
        &["retry", "job-1"],
        &["clear", "job-1", "--yes"],
        &["purge", "--older-than-days", "1", "--yes"],
        &["delete", "job-1/item-1", "--yes"],
        &["redrive", "job-1/item-1", "--yes"],
    ];
    for args in reads {
        let mut full = vec!["--data-dir", "./typo-dir", "-s", DEAD_BUS_URL];
        full.extend_from_slice(args);
        let out = run(&mut dlq(dir, &full));
        assert_eq!(out.status.code(), Some(3), "dlq {args:?}: {}", stderr(&out));
        let line = one_line(&out, &["no data directory at ./typo-dir", "--data-dir"]);
        assert!(line.contains("demo, run, serve"), "{line}");
        assert!(!dir.join("typo-dir").exists(), "dlq {args:?} created it");
    }
    // The default directory, as in a new shell: `dlq list` in an empty directory.
    let out = run(&mut dlq(dir, &["list"]));
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    one_line(&out, &["no data directory at dlq-data"]);
    assert!(!dir.join("dlq-data").exists());
    assert!(
        !dir.join("out.jsonl").exists(),
        "export wrote nothing either"
    );
}

#[test]
fn writers_create_the_data_directory_and_forwarded_reads_need_none() {
    let work = tempfile::tempdir().unwrap();
    let dir = work.path();
    write_fast_config(dir);
    let out = run(&mut dlq(
        dir,
        &[
            "--config",
            "fast.yml",
            "--data-dir",
            "new-dir",
            "-s",
            DEAD_BUS_URL,
            "demo",
            "--count",
            "1",
            "--drain-timeout",
            "0s",
        ],
    ));
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(dir.join("new-dir").is_dir());
    let out = run(&mut dlq(dir, &["--data-dir", "new-dir", "status"]));
    assert!(out.status.success(), "{}", stderr(&out));

    // With --api a read goes to that API: the local directory does not matter.
    let out = run(&mut dlq(
        dir,
        &[
            "--data-dir",
            "absent",
            "--api",
            "http://127.0.0.1:1",
            "list",
        ],
    ));
    assert!(!out.status.success());
    one_line(&out, &["dlq serve API at http://127.0.0.1:1"]);
    assert!(!dir.join("absent").exists());
}

#[test]
fn a_workflow_that_fails_validation_leaves_no_data_directory() {
    let work = tempfile::tempdir().unwrap();
    let dir = work.path();
    std::fs::write(dir.join("broken.yml"), "name: broken\n").unwrap();
    let out = run(&mut dlq(
        dir,
        &[
            "--data-dir",
            "job-data",
            "-s",
            DEAD_BUS_URL,
            "run",
            "broken.yml",
        ],
    ));
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("mode"), "{}", stderr(&out));
    assert!(!dir.join("job-data").exists(), "validation created it");
}

#[test]
fn nats_url_and_the_server_flags_are_read_as_the_nats_cli_reads_them() {
    let server = NatsServer::start();
    let work = tempfile::tempdir().unwrap();
    let dir = work.path();

    // NATS_URL alone names the bus (first a read: a dlq that ignored it would reach
    // whatever answers on the default port).
    let out = run(dlq(dir, &["stream", "show"]).env("NATS_URL", DEAD_BUS_URL));
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    one_line(&out, &[DEAD_BUS_URL, "unreachable"]);
    let out = run(dlq(dir, &["stream", "create"]).env("NATS_URL", server.url()));
    assert!(out.status.success(), "{}", stderr(&out));

    // DLQ_NATS_URL wins over NATS_URL; a flag wins over both.
    let out = run(dlq(dir, &["stream", "show"])
        .env("NATS_URL", DEAD_BUS_URL)
        .env("DLQ_NATS_URL", server.url()));
    assert!(out.status.success(), "{}", stderr(&out));
    let url = server.url();
    for flag in ["-s", "--server", "--nats-url"] {
        let out = run(dlq(dir, &[flag, &url, "stream", "show"])
            .env("NATS_URL", DEAD_BUS_URL)
            .env("DLQ_NATS_URL", DEAD_BUS_URL));
        assert!(out.status.success(), "{flag}: {}", stderr(&out));
    }
}

/// A server whose account has JetStream and one user, `sec`, with [`PASSWORD`].
fn password_server() -> NatsServer {
    NatsServer::start_with_config(&format!(
        "accounts {{\n  DLQ {{\n    jetstream: enabled\n    users: [\n      {{user: sec, password: \"{PASSWORD}\"}}\n    ]\n  }}\n}}\n"
    ))
}

#[test]
fn a_flag_overrides_one_field_of_a_context() {
    let server = password_server();
    let work = tempfile::tempdir().unwrap();
    let dir = work.path();
    let contexts = dir.join("config/nats/context");
    std::fs::create_dir_all(&contexts).unwrap();
    std::fs::write(
        contexts.join("sec.json"),
        format!(
            r#"{{"description":"test","url":"{}","user":"sec","password":"{PASSWORD}"}}"#,
            server.url()
        ),
    )
    .unwrap();

    let out = run(&mut dlq(dir, &["--context", "sec", "stream", "create"]));
    assert!(out.status.success(), "{}", stderr(&out));
    // The context's user with the flag's password, as `nats --context sec --password wrong`.
    let out = run(&mut dlq(
        dir,
        &["--context", "sec", "--password", "wrong", "stream", "show"],
    ));
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let line = one_line(&out, &["refused user `sec`", "authorization violation"]);
    assert!(!line.contains("wrong"), "never print a secret: {line}");
    // The environment variable of a flag overrides the same way.
    let out = run(dlq(dir, &["--context", "sec", "stream", "show"]).env("NATS_PASSWORD", "nope"));
    one_line(&out, &["refused user `sec`"]);
    // And the right password by flag over a context without one.
    std::fs::write(
        contexts.join("nopw.json"),
        format!(r#"{{"url":"{}","user":"sec"}}"#, server.url()),
    )
    .unwrap();
    let out = run(&mut dlq(
        dir,
        &[
            "--context",
            "nopw",
            "--password",
            PASSWORD,
            "stream",
            "show",
        ],
    ));
    assert!(out.status.success(), "{}", stderr(&out));
}

#[test]
fn each_bus_failure_is_one_line_naming_the_server_and_the_cause() {
    let work = tempfile::tempdir().unwrap();
    let dir = work.path();
    let show = |url: &str, extra: &[&str]| {
        let mut args = vec!["-s", url];
        args.extend_from_slice(extra);
        args.extend_from_slice(&["stream", "show"]);
        let out = run(&mut dlq(dir, &args));
        assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
        out
    };

    // Down.
    one_line(
        &show(DEAD_BUS_URL, &[]),
        &[DEAD_BUS_URL, "unreachable", "--server"],
    );
    // An unknown host (an empty label: refused by the resolver library, no DNS query sent).
    let unknown = "nats://no-such-host..invalid:4222";
    one_line(
        &show(unknown, &[]),
        &[unknown, "cannot resolve", "--server"],
    );

    // A wrong password.
    let server = password_server();
    let url = server.url();
    one_line(
        &show(&url, &["--user", "sec", "--password", "wrong"]),
        &[
            url.as_str(),
            "refused user `sec`",
            "authorization violation",
        ],
    );

    // Asked for with -v, the NATS client's own log shows too.
    let out = run(&mut dlq(
        dir,
        &[
            "-v",
            "-s",
            &url,
            "--user",
            "sec",
            "--password",
            "wrong",
            "stream",
            "show",
        ],
    ));
    let err = stderr(&out);
    assert!(err.lines().count() > 1, "{err}");
    assert!(err.contains("async_nats"), "{err}");

    // A TLS server whose CA is not given.
    let pki = pki(&dir.join("pki"));
    let tls = NatsServer::start_with_config(&format!(
        "tls {{\n  cert_file: \"{}\"\n  key_file: \"{}\"\n  timeout: 2\n}}\n",
        pki.server_cert.display(),
        pki.server_key.display(),
    ));
    let tls_url = tls.url().replace("nats://", "tls://");
    one_line(
        &show(&tls_url, &[]),
        &[tls_url.as_str(), "not trusted", "--tlsca"],
    );
    // With the CA the same command connects (the stream does not exist yet: exit 3).
    let ca = pki.ca.to_string_lossy().into_owned();
    let out = run(&mut dlq(
        dir,
        &["-s", &tls_url, "--tlsca", &ca, "stream", "show"],
    ));
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
}

#[test]
fn reconcile_names_a_dead_bus_or_a_refusing_one_and_keeps_the_events() {
    let work = tempfile::tempdir().unwrap();
    let dir = work.path();
    write_fast_config(dir);
    let base = ["--config", "fast.yml", "-s", DEAD_BUS_URL];
    let mut demo = base.to_vec();
    demo.extend_from_slice(&["demo", "--count", "3", "--drain-timeout", "0s"]);
    let out = run(dlq(dir, &demo).env("RUST_LOG", "error"));
    assert!(out.status.success(), "{}", stderr(&out));

    let mut reconcile = base.to_vec();
    // A bus that does not answer is waited for (up to --timeout), then named.
    reconcile.extend_from_slice(&["--format", "json", "reconcile", "--timeout", "1s"]);
    let out = run(&mut dlq(dir, &reconcile));
    assert_eq!(out.status.code(), Some(4), "{}", stderr(&out));
    one_line(
        &out,
        &[
            DEAD_BUS_URL,
            "unreachable",
            "unpublished events stay stored",
        ],
    );
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["unpublished_before"], report["unpublished_after"]);
    assert!(
        report["unpublished_after"].as_u64().unwrap() > 0,
        "{report}"
    );
    assert_eq!(report["drained"], false);

    // A bus that refuses the password is said at once, before any wait.
    let server = password_server();
    let url = server.url();
    let out = run(&mut dlq(
        dir,
        &[
            "--config",
            "fast.yml",
            "-s",
            &url,
            "--user",
            "sec",
            "--password",
            "wrong",
            "--format",
            "json",
            "reconcile",
            "--timeout",
            "300s",
        ],
    ));
    assert_eq!(out.status.code(), Some(4), "{}", stderr(&out));
    one_line(&out, &[url.as_str(), "refused user `sec`", "stay stored"]);
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["unpublished_before"], report["unpublished_after"]);
}

/// `fast.yml` in `dir`: no emit-path retries and a short publish timeout, so runs without a
/// bus end quickly.
fn write_fast_config(dir: &std::path::Path) {
    let yaml = "topics:\n  default:\n    retry_attempts: 0\nbus:\n  publish_timeout: 300ms\n";
    std::fs::write(dir.join("fast.yml"), yaml).unwrap();
}
