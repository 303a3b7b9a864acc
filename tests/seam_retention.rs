//! Where retention meets the rest, through the real `dlq` binary (issue 33, items 1 and 2):
//! `dlq rebuild` with retention on keeps every item; a failed write followed by retention
//! leaves a directory that opens; every recovery hint an error prints, followed, keeps what it
//! says it keeps. And a CLI whose stdout reader went away ends quietly.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::process::Stdio;

use dlq_testkit::cli::Env;
use dlq_testkit::DEAD_BUS_URL;

/// The `dlq` binary under test.
const DLQ: &str = env!("CARGO_BIN_EXE_dlq");

/// Runs `args` with stdout a pipe whose reading end is already closed: the first write fails.
fn run_into_closed_pipe(env: &Env, args: &[&str]) -> std::process::Output {
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let mut cmd = env.command(args);
    cmd.stdout(writer).stderr(Stdio::piped());
    let child = cmd.spawn().unwrap();
    // The command holds the only writer now.
    drop(cmd);
    child.wait_with_output().unwrap()
}

/// `dlq status | head -3` and `dlq list | head`: `println!` (status) and a buffered writer
/// (list, stats) both meet the closed pipe; each ends with 141 and says nothing.
#[test]
fn a_closed_stdout_ends_every_command_quietly() {
    let env = Env::new(DLQ, DEAD_BUS_URL);
    env.demo("j1", 3);
    for args in [
        &["--format", "table", "status"][..],
        &["--format", "json", "status"],
        &["--format", "table", "list"],
        &["--format", "table", "stats"],
    ] {
        let out = run_into_closed_pipe(&env, args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(141), "dlq {args:?}: {stderr}");
        assert!(stderr.is_empty(), "dlq {args:?} printed: {stderr}");
    }
    // Output that is read still arrives whole.
    assert_eq!(env.json(&["status"])["items"], 3);
}
