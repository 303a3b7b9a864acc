//! The whole-system simulation of issue 33: seeded random operations on the real sink (its log
//! on the simulated disk, sled rolled back to its last checkpoint at a power cut), the real
//! emitter with its reconciler and anti-entropy, a real nats-server (killed, restarted, frozen;
//! a small `max_payload`), log retention, rebuilds and a durable consumer; after quiescence the
//! oracle checks every promise (see `sim/oracle.rs`).
//!
//! `DLQ_SIM_SEED=N` replays one seed, `DLQ_SIM_SEEDS=N` runs N seeds from `DLQ_SIM_FIRST_SEED`
//! (default 1), `DLQ_SIM_OPS=N` operations per seed, `DLQ_SIM_SWITCHES=all|none|s1,..,s6` the
//! scenario switches (`sim/ops.rs`). `scripts/sim.sh --long` runs many seeds.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod sim;

use sim::ops::Switches;

/// Operations per seed in CI.
const CI_OPS: usize = 40;
/// Seeds per CI run.
const CI_SEEDS: u64 = 24;

/// What CI runs: every scenario of issue 33, all switches on.
const CI_SWITCHES: Switches = Switches::ALL;

/// Seeds that broke a promise on the code before the fixes of issue 33 (main at 1f7005b), each
/// with the switches it was found under (40 operations) and the scenario it showed.
const REGRESSION_SEEDS: &[(u64, &str, &str)] = &[
    (
        6,
        "s1",
        "1: a rebuild after retention loses the items kept whole",
    ),
    (
        11,
        "s1",
        "1: a rebuild after retention loses the items kept whole",
    ),
    (
        104,
        "s2",
        "2: a failed first append after a reopen, then retention: the directory never opens",
    ),
    (
        170,
        "s2",
        "2: a failed first append after a reopen, then retention: the directory never opens",
    ),
    (
        5,
        "s3",
        "3: a failed append with the bus down burns a sequence; consumers wait",
    ),
    (
        4,
        "s3",
        "3: the failed append is the emitter's own EmitFailed audit event",
    ),
    (1, "s4", "4: parked (oversized) events stall consumers"),
    (
        1,
        "s5",
        "5: a failed append with the bus up: verify reports extras",
    ),
    // Found after the first fixes (main at 4847798):
    (
        10,
        "s3",
        "3: a volatile copy applied beneath a later stored event of the item: verify says diverging",
    ),
    (
        9,
        "s1,s2,s3,s4,s5,s6",
        "3: Unconfirmed, the late write fails with the bus down, then a restart: neither stored nor published",
    ),
    (
        7,
        "s6",
        "s6: a repaired stream loss, then a power cut: the event twice in the stream",
    ),
];

fn env_number<T: std::str::FromStr>(name: &str) -> Option<T> {
    std::env::var(name).ok().and_then(|v| v.parse().ok())
}

fn env_switches(default: Switches) -> Switches {
    match std::env::var("DLQ_SIM_SWITCHES") {
        Ok(text) => Switches::parse(&text)
            .unwrap_or_else(|| panic!("DLQ_SIM_SWITCHES={text}: use all, none or s1,..,s6")),
        Err(_) => default,
    }
}

/// Runs `seeds` and fails with every failing seed's report.
async fn run(seeds: Vec<u64>, count: usize, switches: Switches, test: &str) {
    let mut failures = Vec::new();
    for seed in seeds {
        let outcome = sim::run_seed(seed, count, switches).await;
        if outcome.violations.is_empty() {
            eprintln!("{}", sim::summary(&outcome));
        } else {
            let report = sim::report(&outcome, count, switches, test);
            eprintln!("{report}");
            failures.push(report);
        }
    }
    assert!(
        failures.is_empty(),
        "{} seeds failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

fn seeds(default_first: u64, default_count: u64) -> Vec<u64> {
    if let Some(seed) = env_number("DLQ_SIM_SEED") {
        return vec![seed];
    }
    let first = env_number("DLQ_SIM_FIRST_SEED").unwrap_or(default_first);
    let count = env_number("DLQ_SIM_SEEDS").unwrap_or(default_count);
    (first..first + count).collect()
}

/// CI's seeds, every scenario switched on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seeds_keep_every_promise() {
    let count = env_number("DLQ_SIM_OPS").unwrap_or(CI_OPS);
    let switches = env_switches(CI_SWITCHES);
    run(
        seeds(1, CI_SEEDS),
        count,
        switches,
        "seeds_keep_every_promise",
    )
    .await;
}

/// The seeds that found the scenarios of issue 33 on the code before its fixes, and scenario 2
/// also as fixed operations (the shortest way there).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn issue_33_regression_seeds() {
    let mut failures = regression(REGRESSION_SEEDS).await;
    let outcome = sim::run_ops(0, &scenario_2_ops(), Switches::ALL).await;
    eprintln!(
        "scenario 2: fixed operations: {} violations",
        outcome.violations.len()
    );
    if !outcome.violations.is_empty() {
        failures.push(format!(
            "scenario 2 (fixed operations):\n{}",
            sim::report(&outcome, 0, Switches::ALL, "issue_33_regression_seeds")
        ));
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Runs each `(seed, switches, scenario)`; returns the reports of those that failed.
async fn regression(cases: &[(u64, &str, &str)]) -> Vec<String> {
    let mut failures = Vec::new();
    for (seed, switches, scenario) in cases {
        let switches = Switches::parse(switches).expect("valid switches");
        let outcome = sim::run_seed(*seed, CI_OPS, switches).await;
        eprintln!(
            "scenario {scenario}: seed {seed}: {} violations",
            outcome.violations.len()
        );
        if !outcome.violations.is_empty() {
            failures.push(format!(
                "scenario {scenario}:\n{}",
                sim::report(&outcome, CI_OPS, switches, "issue_33_regression_seeds")
            ));
        }
    }
    failures
}

/// Scenario 2 as the generator finds it: retention on (a time jump), the first append after a
/// reopen fails at its group's `fdatasync` (the segment's header sync before it succeeds), and
/// the next open finds only that empty segment.
fn scenario_2_ops() -> Vec<sim::ops::Op> {
    use sim::ops::{FaultAt, Op};
    vec![
        Op::Emit {
            tasks: 5,
            job: 0,
            first: 0,
        },
        Op::Emit {
            tasks: 5,
            job: 1,
            first: 5,
        },
        Op::TimeJump,
        Op::FailedEmit {
            at: FaultAt::Sync,
            skip: 1,
            errno: 5,
            tasks: 1,
            job: 0,
            first: 20,
        },
        Op::Restart,
    ]
}
