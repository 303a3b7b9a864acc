//! `dlq tour`, the README's first command, run as a user runs it.
//!
//! * With nats-server installed, it runs the example job against its own server, kills the
//!   server, runs the job again (the failures wait in the sink), starts the server again, and
//!   rebuilds the tour's items from the stream: every dead-lettered item is there, nothing
//!   waits unpublished, and no nats-server of the tour is left running.
//! * Without nats-server it says how to get one and still stores every failure durably.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::Path;
use std::process::{Command, Output};

use serde_json::Value;

const DLQ: &str = env!("CARGO_BIN_EXE_dlq");

fn tour(data: &Path, nats_server: &Path, extra: &[&str]) -> Output {
    Command::new(DLQ)
        .arg("--data-dir")
        .arg(data)
        .args(extra)
        .args(["tour", "--outage", "1s"])
        .env("NATS_SERVER_BIN", nats_server)
        .env_remove("DLQ_NATS_URL")
        .env_remove("DLQ_CONFIG")
        .env("RUST_LOG", "error")
        .output()
        .expect("run dlq tour")
}

/// Processes whose command line mentions `needle`.
fn processes_mentioning(needle: &str) -> Vec<String> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        if let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) {
            let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
            if cmdline.contains(needle) {
                found.push(cmdline);
            }
        }
    }
    found
}

#[test]
fn the_tour_takes_its_bus_down_and_loses_nothing() {
    let bin = dlq_testkit::nats::find_binary().unwrap();
    let work = tempfile::tempdir().unwrap();
    let data = work.path().join("data");
    let out = tour(&data, &bin, &["--format", "json"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "tour failed: {stderr}");
    let summary: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stdout)));
    assert_eq!(summary["bus"], "private", "{summary}");
    assert_eq!(summary["jobs"].as_array().unwrap().len(), 2, "{summary}");
    // The second run's three failures (and their audit events) waited for the bus.
    assert!(
        summary["stored_while_bus_down"].as_u64().unwrap() >= 3,
        "{summary}"
    );
    assert_eq!(summary["drained"], true, "{summary}");
    assert_eq!(summary["unpublished"], 0, "{summary}");
    assert_eq!(summary["in_sink"], 6, "{summary}");
    assert_eq!(summary["rebuilt_from_stream"], 6, "{summary}");
    assert_eq!(summary["missing"], 0, "{summary}");
    assert_eq!(summary["diverging"], 0, "{summary}");
    assert!(stderr.contains("nothing was lost"), "{stderr}");
    assert!(stderr.contains("http://127.0.0.1:9465/"), "{stderr}");
    let store = data.join("tour").join("nats");
    assert_eq!(
        processes_mentioning(&store.to_string_lossy()),
        Vec::<String>::new(),
        "the tour's nats-server is still running"
    );
}

#[test]
fn without_nats_server_the_tour_says_how_to_get_it_and_keeps_the_failures() {
    let work = tempfile::tempdir().unwrap();
    let data = work.path().join("data");
    // A bus nobody listens on, so that a system NATS server cannot take part.
    let config = work.path().join("dead-bus.yml");
    let port = dlq_testkit::free_port(0);
    std::fs::write(&config, format!("bus:\n  url: nats://127.0.0.1:{port}\n")).unwrap();
    let out = tour(
        &data,
        &work.path().join("no-nats-server"),
        &["--config", config.to_str().unwrap()],
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("apt-get install nats-server"), "{stdout}");
    assert!(stdout.contains("3 kept failing"), "{stdout}");

    let list = Command::new(DLQ)
        .arg("--data-dir")
        .arg(&data)
        .args(["--format", "json", "list"])
        .env_remove("DLQ_CONFIG")
        .output()
        .unwrap();
    let list: Value = serde_json::from_slice(&list.stdout).unwrap();
    assert_eq!(
        dlq_testkit::cli::listed_ids(&list).len(),
        3,
        "the three failures are stored: {list}"
    );
}
