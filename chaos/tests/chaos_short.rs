//! The short chaos drills, run in CI: each fault for 10 s through the real
//! `dlq-chaos` binary, which starts its own nats-server, two emitter processes and a
//! subscriber. Fails if our emitter loses anything it acknowledged or the subscriber sees a
//! duplicate after dedup by id, or `dlq verify` finds any difference; for bus-kill and
//! net-partition the baseline (a sink-then-publish emitter without a reconciler) runs too and
//! must lose something. net-partition (15 s) builds its own network namespaces and needs root
//! and nftables: without them it fails, it does not skip. The cluster drill runs 20 s against a private three-node JetStream cluster
//! (`deploy/nats-cluster/`), with the baseline. `stream-loss` deletes acknowledged messages from
//! the stream and checks that the emitters' anti-entropy brings each back (the baseline, which
//! runs none, loses them). The full drills (`--duration 5m`) are described
//! in `chaos/README.md`.
//!
//! The drill runs `dlq verify` and `dlq republish` with the `dlq` binary next to `dlq-chaos`
//! (another package's binary: Cargo builds it for the dlq package's own tests, so `cargo test
//! --workspace` has it; after `cargo test -p dlq-chaos` alone, build it with `cargo build -p
//! dlq`).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

/// Longest a single drill may take before it is killed and the test fails.
const DRILL_TIMEOUT: Duration = Duration::from_secs(150);
/// The same for the cluster drill: two modes, each starting three nodes and waiting for them to
/// recover after a 20 s fault.
const CLUSTER_DRILL_TIMEOUT: Duration = Duration::from_secs(300);

/// A running drill; killed on drop (its nats-servers die with it and the emitters stop when
/// their stdin closes), so a failing test leaves no process behind.
struct Drill(Child);

impl Drop for Drill {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The `dlq` binary of the same build as `dlq-chaos` (the drill's own default for `--dlq-bin`).
fn dlq_bin() -> PathBuf {
    let bin = Path::new(env!("CARGO_BIN_EXE_dlq-chaos")).with_file_name("dlq");
    assert!(
        bin.is_file(),
        "{} is missing: run `cargo test --workspace`, or `cargo build -p dlq-ops` first",
        bin.display()
    );
    bin
}

/// Runs `dlq-chaos drill --fault FAULT` with the short settings (10 s) plus `extra`, returns
/// result.json.
fn drill(fault: &str, extra: &[&str]) -> Value {
    drill_for(fault, "10s", DRILL_TIMEOUT, extra)
}

/// Runs `dlq-chaos drill --fault FAULT --duration DURATION` plus `extra`, killed after
/// `timeout`; returns result.json.
fn drill_for(fault: &str, duration: &str, timeout: Duration, extra: &[&str]) -> Value {
    let out = tempfile::Builder::new()
        .prefix("dlq-chaos-test-")
        .tempdir()
        .unwrap();
    let started = Instant::now();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_dlq-chaos"));
    cmd.args([
        "drill",
        "--fault",
        fault,
        "--duration",
        duration,
        "--rate",
        "100",
    ])
    .args(["--emitters", "2", "--warmup", "3s", "--after", "5s"])
    .args(["--drain-timeout", "60s", "--dlq-bin"])
    .arg(dlq_bin())
    .arg("--out")
    .arg(out.path())
    .args(extra)
    .stdin(Stdio::null())
    .stdout(std::fs::File::create(out.path().join("stdout.txt")).unwrap())
    .stderr(std::fs::File::create(out.path().join("stderr.txt")).unwrap());
    let mut run = Drill(cmd.spawn().expect("run dlq-chaos"));
    let status = loop {
        if let Some(status) = run.0.try_wait().unwrap() {
            break status;
        }
        if started.elapsed() > timeout {
            panic!("dlq-chaos drill --fault {fault} still running after {timeout:?}");
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let stderr = std::fs::read_to_string(out.path().join("stderr.txt")).unwrap_or_default();
    let report = std::fs::read_to_string(out.path().join("report.md")).unwrap_or_default();
    eprintln!(
        "drill {fault} {extra:?}: {status} in {:.1} s\n{report}",
        started.elapsed().as_secs_f64()
    );
    assert!(
        status.success(),
        "dlq-chaos drill --fault {fault} failed ({status})\n{stderr}\n{report}"
    );
    for file in ["result.json", "report.md", "chart.svg"] {
        assert!(out.path().join(file).is_file(), "{file} was not written");
    }
    read_result(&out.path().join("result.json"))
}

fn read_result(path: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn n(v: &Value, key: &str) -> u64 {
    v[key]
        .as_u64()
        .unwrap_or_else(|| panic!("{key} is not a number in {v}"))
}

/// Our emitter: something was acknowledged, nothing of it lost, no duplicate after dedup,
/// every sink drained, `dlq republish` ran and found nothing the single server lost after its
/// ack, and `dlq verify` finds nothing missing.
fn assert_ours_lossless(result: &Value) {
    assert_ours_lossless_after_repair(result);
    for verify in result["ours"]["verify"].as_array().unwrap() {
        assert_eq!(n(verify, "republished"), 0, "the stream lost: {verify}");
    }
}

/// As [`assert_ours_lossless`], except that what the bus lost after acknowledging it may have
/// been re-published by `dlq republish` (a cluster failover can lose acknowledged messages;
/// nats-io/nats-server#3402).
fn assert_ours_lossless_after_repair(result: &Value) {
    let ours = &result["ours"];
    assert!(n(ours, "acknowledged") > 100, "too little load: {ours}");
    assert_eq!(n(ours, "lost"), 0, "lost ids: {}", ours["lost_sample"]);
    assert_eq!(n(ours, "acked_in_stream"), n(ours, "acknowledged"));
    assert_eq!(n(ours, "subscriber_duplicates_after_dedup"), 0);
    assert_eq!(n(ours, "stream_duplicates_after_dedup"), 0);
    assert_eq!(n(ours, "final_unpublished"), 0, "backlog left");
    assert!(ours["time_to_drain_s"].is_number(), "never drained");
    // `dlq verify` finds nothing missing, extra, diverging or unpublished (exit 0). The only
    // items the stream holds beyond the sinks are those of emits the sink refused, published
    // under a volatile id: verify reports exactly that many apart, as unstored.
    let verified = ours["verify"].as_array().unwrap();
    assert!(!verified.is_empty(), "dlq verify did not run: {ours}");
    let mut unstored = 0;
    for verify in verified {
        for count in ["missing", "extra", "diverging", "unpublished"] {
            assert_eq!(n(verify, count), 0, "dlq verify, {count}: {verify}");
        }
        assert_eq!(verify["exit"].as_i64(), Some(0), "dlq verify: {verify}");
        unstored += n(verify, "unstored");
        n(verify, "republished");
    }
    assert_eq!(
        unstored,
        n(ours, "not_stored_published"),
        "items published, not stored"
    );
    assert_eq!(result["pass"], Value::Bool(true));
}

#[test]
fn bus_kill_loses_nothing_and_the_baseline_loss_is_reported() {
    let result = drill("bus-kill", &["--baseline-too"]);
    assert_ours_lossless(&result);
    assert!(
        n(&result["ours"], "peak_backlog") > 0,
        "the outage left no backlog"
    );
    let baseline = &result["baseline"];
    assert_eq!(baseline["reconciler"], Value::Bool(false));
    // Without a reconciler, what was acknowledged during the 10 s outage never reaches the
    // stream: the drill must see that loss, or it could not see ours either.
    let lost = n(baseline, "lost");
    assert!(lost > 0, "the baseline lost nothing: {baseline}");
    assert_eq!(
        lost + n(baseline, "acked_in_stream"),
        n(baseline, "acknowledged")
    );
    eprintln!("baseline lost {lost} of {}", n(baseline, "acknowledged"));
}

#[test]
fn bus_freeze_loses_nothing() {
    let result = drill("bus-freeze", &[]);
    assert_ours_lossless(&result);
    // Publishes hang during the freeze: the emit path takes its whole retry budget.
    assert!(
        result["ours"]["latency"]["during"]["p50_ms"]
            .as_f64()
            .unwrap()
            > 1000.0
    );
}

#[test]
fn net_cut_blackhole_loses_nothing() {
    let result = drill("net-cut", &["--mode", "blackhole"]);
    assert_ours_lossless(&result);
}

#[test]
fn net_cut_reset_loses_nothing() {
    let result = drill("net-cut", &["--mode", "reset"]);
    assert_ours_lossless(&result);
}

/// The namespace a drill that died would leave: owned by pid 1, which is never a drill.
const STALE_NETNS: &str = "dlqc-1-stale";

/// Whether network namespace `name` exists.
fn netns_exists(name: &str) -> bool {
    let out = Command::new("ip").args(["netns", "list"]).output().unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .any(|line| line.split_whitespace().next() == Some(name))
}

#[test]
fn net_partition_through_namespaces_loses_nothing_and_cleans_up() {
    // A leftover of a drill killed earlier; the drill must delete it. This also checks that the
    // machine allows network namespaces: the drill needs root (or CAP_NET_ADMIN and
    // CAP_SYS_ADMIN), iproute2 and nftables. Without them this test fails, it never skips.
    let made = Command::new("ip")
        .args(["netns", "add", STALE_NETNS])
        .output()
        .expect("net-partition needs `ip` (iproute2) on PATH");
    assert!(
        made.status.success() || netns_exists(STALE_NETNS),
        "net-partition needs network namespaces: `ip netns add` failed ({}): {}; run as root \
         (or with CAP_NET_ADMIN and CAP_SYS_ADMIN)",
        made.status,
        String::from_utf8_lossy(&made.stderr).trim()
    );
    let result = drill_for("net-partition", "15s", DRILL_TIMEOUT, &["--baseline-too"]);
    assert!(
        !netns_exists(STALE_NETNS),
        "the drill did not delete the stale namespace {STALE_NETNS}"
    );
    let ours = &result["ours"];
    assert_ours_lossless(&result);
    assert!(n(ours, "peak_backlog") > 0, "the partition left no backlog");
    let marks = ours["marks"].to_string();
    for phase in [
        "packet loss: nftables drops 20%",
        "slow link: tc tbf",
        "full cut",
    ] {
        assert!(marks.contains(phase), "no {phase:?} phase: {marks}");
    }
    assert_eq!(marks.matches("healed: ").count(), 3, "{marks}");
    // The subscriber reaches the server over the control link, which is never cut: it saw
    // every acknowledged event.
    assert_eq!(n(ours, "acked_not_seen_by_subscriber"), 0);
    // Without a reconciler, what could not be published while the link was degraded or cut
    // stays in the sinks, and `dlq verify` finds those items missing from the stream. (Unlike
    // the proxy's cut, a 5 s link cut keeps the TCP connections: publishes the client had
    // buffered and given up on may still arrive once it heals, so the baseline's count of
    // acknowledged ids never in the stream varies from run to run and may be 0.)
    let baseline = &result["baseline"];
    assert_eq!(baseline["reconciler"], Value::Bool(false));
    assert!(
        n(baseline, "final_unpublished") > 0,
        "the baseline published everything: {baseline}"
    );
    let lost = n(baseline, "lost");
    assert_eq!(
        lost + n(baseline, "acked_in_stream"),
        n(baseline, "acknowledged")
    );
    let missing: u64 = baseline["verify"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| n(v, "missing"))
        .sum();
    assert!(
        missing > 0,
        "dlq verify saw no loss: {}",
        baseline["verify"]
    );
    // Every namespace and link of the drill is gone (named after its pid, as the timeline
    // shows: `ip -n dlqc-PID-emit ...`).
    let pid: String = marks
        .split("dlqc-")
        .nth(1)
        .unwrap_or_default()
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    assert!(!pid.is_empty(), "no namespace in the timeline: {marks}");
    let left = Command::new("sh")
        .args(["-c", "ip netns list; ip -o link show"])
        .output()
        .unwrap();
    let left = String::from_utf8_lossy(&left.stdout);
    for name in [format!("dlqc-{pid}-"), format!("dlqc{pid}")] {
        assert!(!left.contains(&name), "{name}* left behind:\n{left}");
    }
    eprintln!(
        "net-partition baseline: {lost} of {} acknowledged ids never in the stream, {missing} \
         items missing for dlq verify",
        n(baseline, "acknowledged")
    );
}

#[test]
fn emitter_killed_during_outage_loses_nothing() {
    let result = drill("emitter-kill", &[]);
    assert_ours_lossless(&result);
    let marks = result["ours"]["marks"].to_string();
    assert!(marks.contains("chaos-0 SIGKILLed") && marks.contains("chaos-0 restarted"));
}

#[test]
fn failing_sink_loses_nothing_acknowledged() {
    let result = drill("sink-fail", &[]);
    assert_ours_lossless(&result);
    // While the disk fails, emits are refused as not stored and published without a copy.
    let ours = &result["ours"];
    assert!(n(ours, "not_stored") > 0, "the sink never failed: {ours}");
}

#[test]
fn cluster_losing_one_node_then_two_loses_nothing_and_the_baseline_loss_is_reported() {
    let result = drill_for(
        "cluster-kill",
        "20s",
        CLUSTER_DRILL_TIMEOUT,
        &["--baseline-too"],
    );
    assert_ours_lossless_after_repair(&result);
    let ours = &result["ours"];
    // Two of three nodes down: JetStream has no quorum, publishes fail, a backlog builds up.
    assert!(n(ours, "peak_backlog") > 0, "the outage left no backlog");
    let marks = ours["marks"].to_string();
    assert!(
        marks.contains("(the stream leader) SIGKILLed") && marks.contains("no quorum"),
        "{marks}"
    );
    assert!(marks.contains("cluster recovered"), "{marks}");
    assert!(
        ours["latency"]["degraded"].is_object(),
        "{}",
        ours["latency"]
    );
    // The subscriber sits on the node that is never killed: it received every acknowledged
    // event (each reached the stream, so it was routed to the subscriber's node too).
    assert_eq!(n(ours, "acked_not_seen_by_subscriber"), 0);
    let baseline = &result["baseline"];
    assert_eq!(baseline["reconciler"], Value::Bool(false));
    let lost = n(baseline, "lost");
    assert!(lost > 0, "the cluster baseline lost nothing: {baseline}");
    assert_eq!(
        lost + n(baseline, "acked_in_stream"),
        n(baseline, "acknowledged")
    );
    eprintln!(
        "cluster baseline lost {lost} of {}",
        n(baseline, "acknowledged")
    );
}

/// The number in the `stream-loss` timeline mark "the stream lost N acknowledged messages".
fn deleted_by_the_drill(mode: &Value) -> u64 {
    let marks = mode["marks"].as_array().unwrap();
    marks
        .iter()
        .filter_map(|m| m["what"].as_str()?.strip_prefix("the stream lost "))
        .find_map(|rest| rest.split(' ').next()?.parse().ok())
        .unwrap_or_else(|| panic!("no deletion count in the timeline: {marks:?}"))
}

#[test]
fn stream_losing_acknowledged_messages_is_repaired_by_anti_entropy() {
    let result = drill("stream-loss", &["--baseline-too"]);
    // Lossless, and `dlq republish` at the end found nothing to re-publish: the emitters'
    // anti-entropy had already brought back every deleted message.
    assert_ours_lossless(&result);
    let ours = &result["ours"];
    let deleted = deleted_by_the_drill(ours);
    assert!(deleted > 0, "the drill deleted nothing: {ours}");
    assert_eq!(
        n(ours, "anti_entropy_republished"),
        deleted,
        "each deleted message re-published once: {ours}"
    );
    assert_eq!(n(ours, "anti_entropy_missing"), deleted);
    // Without anti-entropy (the baseline), the deleted messages stay lost.
    let baseline = &result["baseline"];
    let lost = n(baseline, "lost");
    assert!(lost > 0, "the baseline lost nothing: {baseline}");
    assert_eq!(lost, deleted_by_the_drill(baseline), "{baseline}");
    assert_eq!(n(baseline, "anti_entropy_republished"), 0);
}
