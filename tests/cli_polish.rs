//! The command line as a new user meets it (issue 36, items 4 and 5), through the binary:
//!
//! - a bus outage adds no wait to a job: `dlq run` and `dlq demo` against a refused port store
//!   every failure and say so in one line, with no warning per item and no drain wait (the
//!   timings are in docs/cli.md; no test asserts on elapsed time);
//! - `--version` names the commit; `dlq list -h` shows list's own options before the global
//!   and connection ones; logs carry no colour when stderr is not a terminal; `export` names
//!   its format as `--format` spells it; a YAML syntax error is called one, with line and
//!   column.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::process::{Command, Output};

use dlq::sink::Sink;
use dlq_testkit::cli::Env;
use dlq_testkit::DEAD_BUS_URL;

/// The `dlq` binary under test.
const DLQ: &str = env!("CARGO_BIN_EXE_dlq");

/// A workflow of three items of which `b` and `c` fail once and are dead-lettered.
const WORKFLOW: &str = r#"name: outage
mode: mapreduce
map:
  input: items.json
  json_path: "$.items[*]"
  agent_template:
    - shell: "test ${item.ok} = true"
error_policy:
  on_item_failure: dlq
  retry_config:
    max_attempts: 1
"#;

/// `dlq ARGS` on `env`'s data directory as a user runs it: the default configuration (no
/// test config, no `RUST_LOG`), the dead bus, stdin closed.
fn as_user(env: &Env, args: &[&str]) -> Command {
    let mut cmd = env.command(args);
    cmd.env_remove("DLQ_CONFIG").env_remove("RUST_LOG");
    cmd
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn ok(out: &Output) {
    assert!(
        out.status.success(),
        "exit {:?}\nstdout: {}\nstderr: {}",
        out.status.code(),
        text(&out.stdout),
        text(&out.stderr)
    );
}

/// Events stored and not yet published in `env`'s data directory.
async fn backlog(env: &Env) -> u64 {
    env.with_sink(|sink| sink.backlog().unwrap().count).await
}

#[tokio::test]
async fn a_job_with_the_bus_refused_stores_its_failures_and_says_so_in_one_line() {
    let env = Env::new(DLQ, DEAD_BUS_URL);
    let flow = env.path("flow");
    std::fs::create_dir_all(&flow).unwrap();
    std::fs::write(
        flow.join("items.json"),
        r#"{"items": [{"ok": true}, {"ok": false}, {"ok": false}]}"#,
    )
    .unwrap();
    std::fs::write(flow.join("flow.yml"), WORKFLOW).unwrap();
    let workflow = flow.join("flow.yml");
    let out = as_user(
        &env,
        &[
            "--format",
            "table",
            "run",
            workflow.to_str().unwrap(),
            "--job-id",
            "outage",
            "--progress",
            "quiet",
        ],
    )
    .output()
    .unwrap();
    ok(&out);
    let stdout = text(&out.stdout);
    assert!(
        stdout.contains(&format!(
            "bus at {DEAD_BUS_URL} unreachable: 2 events stored, the reconciler publishes them when it is back"
        )),
        "{stdout}"
    );
    // Said once, and nothing else about the bus: no log line on stderr.
    assert_eq!(stdout.matches("unreachable").count(), 1, "{stdout}");
    assert_eq!(text(&out.stderr), "", "nothing on stderr");
    // Durable and waiting for the reconciler.
    assert_eq!(env.items().await.len(), 2);
    assert_eq!(backlog(&env).await, 2);
}

#[tokio::test]
async fn demo_with_the_bus_refused_prints_one_summary_line_and_no_warning_per_item() {
    let env = Env::new(DLQ, DEAD_BUS_URL);
    let out = as_user(&env, &["--format", "table", "demo", "--count", "20"])
        .output()
        .unwrap();
    ok(&out);
    let stderr = text(&out.stderr);
    assert!(!stderr.contains("WARN"), "a warning per item: {stderr}");
    assert_eq!(stderr, "", "nothing on stderr");
    let stdout = text(&out.stdout);
    assert!(
        stdout.contains("emitted (durable): 20, failed: 0"),
        "{stdout}"
    );
    let lines: Vec<&str> = stdout.lines().filter(|l| l.contains("bus at")).collect();
    assert_eq!(
        lines,
        [format!(
            "  bus at {DEAD_BUS_URL} unreachable: 20 events stored, the reconciler publishes them when it is back (`dlq reconcile`)"
        )],
        "{stdout}"
    );
    assert_eq!(env.items().await.len(), 20);
    assert_eq!(backlog(&env).await, 20);
}

#[test]
fn version_names_the_commit_of_a_git_checkout() {
    let out = Command::new(DLQ).arg("--version").output().unwrap();
    ok(&out);
    let version = text(&out.stdout);
    let head = Command::new("git")
        .args(["rev-parse", "--short", "HEAD"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .ok()
        .filter(|out| out.status.success())
        .map(|out| text(&out.stdout).trim().to_owned());
    match head {
        Some(commit) => assert_eq!(
            version.trim(),
            format!("dlq {} (commit {commit})", env!("CARGO_PKG_VERSION"))
        ),
        // Not a checkout (a source tarball): the version alone.
        None => assert_eq!(version.trim(), format!("dlq {}", env!("CARGO_PKG_VERSION"))),
    }
}

#[test]
fn list_help_shows_its_own_options_before_the_connection_flags() {
    let out = Command::new(DLQ).args(["list", "-h"]).output().unwrap();
    ok(&out);
    let help = text(&out.stdout);
    let lines: Vec<&str> = help.lines().collect();
    let at = |needle: &str| {
        lines
            .iter()
            .position(|l| l.trim_start().starts_with(needle))
            .unwrap_or_else(|| panic!("{needle:?} missing from:\n{help}"))
    };
    // list's own options open the help, the global and connection flags follow under their
    // own headings.
    assert_eq!(at("Options:") + 1, at("--job-id"), "{help}");
    assert!(at("--count") < at("Global options:"), "{help}");
    assert!(at("Global options:") < at("--data-dir"), "{help}");
    assert!(at("NATS connection:") < at("-s, --server"), "{help}");
    assert!(at("--count") < at("NATS connection:"), "{help}");
    assert!(at("NATS connection:") < at("--tlsca"), "{help}");
}

#[test]
fn logs_carry_no_colour_when_stderr_is_not_a_terminal() {
    let env = Env::new(DLQ, DEAD_BUS_URL);
    // -vv: the sink's debug lines (its checkpoints), always there, so that there is a log to
    // look at.
    let out = env
        .command(&["-vv", "demo", "--count", "1", "--drain-timeout", "0s"])
        .env_remove("RUST_LOG")
        .output()
        .unwrap();
    ok(&out);
    let stderr = text(&out.stderr);
    assert!(stderr.contains("DEBUG"), "no log to look at: {stderr}");
    assert!(!stderr.contains('\u{1b}'), "ANSI escapes in: {stderr:?}");
}

/// `generate` and `import` draw a progress bar only on a terminal: with stderr a pipe, as
/// here, it stays free of any (the bar itself is unit-tested in `cli::work_bar`).
#[test]
fn long_work_draws_no_progress_bar_when_stderr_is_not_a_terminal() {
    let env = Env::new(DLQ, DEAD_BUS_URL);
    let out = env.run(&["generate", "--items", "300", "--jobs", "3"]);
    ok(&out);
    assert_eq!(text(&out.stderr), "", "generate wrote to stderr");
    let file = env.path("all.jsonl");
    ok(&env.run(&["--format", "jsonl", "export", file.to_str().unwrap()]));
    let other = Env::new(DLQ, DEAD_BUS_URL);
    let out = other.run(&["import", file.to_str().unwrap(), "--drain-timeout", "0s"]);
    ok(&out);
    let stderr = text(&out.stderr);
    for mark in ["ETA", "elapsed", "300/300", "\r", "\u{1b}"] {
        assert!(!stderr.contains(mark), "{mark:?} in: {stderr:?}");
    }
    assert!(
        text(&out.stdout).contains("\"imported\":300"),
        "{}",
        text(&out.stdout)
    );
}

#[test]
fn export_names_its_format_as_the_user_types_it() {
    let env = Env::new(DLQ, DEAD_BUS_URL);
    env.demo("j", 2);
    let file = env.path("out.jsonl");
    let out = env
        .command(&["--format", "jsonl", "export", file.to_str().unwrap()])
        .output()
        .unwrap();
    ok(&out);
    let stderr = text(&out.stderr);
    assert!(stderr.contains("exported 2 items of 1 jobs"), "{stderr}");
    assert!(stderr.contains("(jsonl)"), "{stderr}");
    assert!(!stderr.contains("Jsonl"), "{stderr}");
}

#[test]
fn a_yaml_syntax_error_is_called_one_with_its_line_and_column() {
    let env = Env::new(DLQ, DEAD_BUS_URL);
    let broken = env.path("broken.yml");
    std::fs::write(
        &broken,
        "name: x\nmode: mapreduce\nmap:\n  input: items.json\n  agent_template: [\n    - shell: true\n",
    )
    .unwrap();
    let out = env
        .command(&["run", broken.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    let stderr = text(&out.stderr);
    assert!(
        stderr.starts_with("dlq: workflow file is not valid YAML: "),
        "{stderr}"
    );
    assert!(stderr.contains("line 6 column"), "{stderr}");
    assert!(stderr.contains("broken.yml:6:"), "{stderr}");
    assert!(!stderr.contains("schema"), "{stderr}");

    // A file that is YAML but not a workflow is still a schema mismatch.
    let unknown = env.path("unknown.yml");
    std::fs::write(&unknown, "name: x\nmode: mapreduce\nmapp: 1\n").unwrap();
    let out = env
        .command(&["run", unknown.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("does not match the workflow schema") && stderr.contains("mapp"),
        "{stderr}"
    );
    assert!(
        !env.data.exists(),
        "a failed validation creates no data directory"
    );
}

#[test]
fn completions_and_the_man_page_come_from_the_command_line() {
    let work = tempfile::tempdir().unwrap();
    let dlq = |args: &[&str]| {
        let out = Command::new(DLQ)
            .args(args)
            .current_dir(work.path())
            .env_remove("DLQ_DATA_DIR")
            .output()
            .unwrap();
        ok(&out);
        text(&out.stdout)
    };
    let bash = dlq(&["completions", "bash"]);
    assert!(bash.contains("complete -F"), "{bash}");
    assert!(
        bash.contains("reconcile") && bash.contains("--server"),
        "{bash}"
    );
    let zsh = dlq(&["completions", "zsh"]);
    assert!(zsh.starts_with("#compdef dlq"), "{zsh}");
    let fish = dlq(&["completions", "fish"]);
    assert!(fish.contains("complete -c dlq"), "{fish}");
    let man = dlq(&["man"]);
    assert!(man.contains(".TH dlq"), "{man}");
    assert!(
        man.contains(".SH NAME") && man.contains("reconcile"),
        "{man}"
    );
    // Neither needs nor creates a data directory.
    assert!(!work.path().join("dlq-data").exists());
}
