//! A seeded whole-system simulation (issue 33), in the spirit of TigerBeetle's VOPR and
//! FoundationDB's simulator: [`ops`] generates a seed's operations, [`world`] holds the real
//! parts, [`driver`] applies each operation, [`oracle`] checks what must hold at rest, and
//! [`run_seed`] ties them together and reports a failing seed with the command that replays it.

pub mod driver;
pub mod incidents;
pub mod model;
pub mod ops;
pub mod oracle;
pub mod switches;
pub mod world;

use std::fmt::Write as _;
use std::time::Instant;

use ops::{Op, Switches};

/// Longest one operation may take (every wait inside is bounded; this bounds their sum).
const OP_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(180);

/// What one seed did.
pub struct Outcome {
    pub seed: u64,
    pub ops: usize,
    pub violations: Vec<String>,
    pub trace: Vec<String>,
    pub crash_states: u64,
    pub counts: oracle::Counts,
    pub acked: u64,
    pub millis: u128,
}

/// Runs seed `seed`: `count` generated operations under `switches`, then the oracle.
pub async fn run_seed(seed: u64, count: usize, switches: Switches) -> Outcome {
    let ops = ops::generate(seed, count, switches);
    run_ops(seed, &ops, switches).await
}

/// Runs the operations `ops` (of seed `seed`), then the oracle.
pub async fn run_ops(seed: u64, ops: &[Op], switches: Switches) -> Outcome {
    let started = Instant::now();
    let mut world = world::World::new().await;
    let mut violations = Vec::new();
    for (n, op) in ops.iter().enumerate() {
        let applied = tokio::time::timeout(OP_TIMEOUT, driver::apply(&mut world, op)).await;
        let applied = applied.unwrap_or_else(|_| {
            Err(driver::Fatal(format!(
                "the operation did not end within {OP_TIMEOUT:?}"
            )))
        });
        match applied {
            Ok(outcome) => world.trace.push(format!("{n:>3} {op:?} → {outcome}")),
            Err(driver::Fatal(reason)) => {
                world.trace.push(format!("{n:>3} {op:?} → FATAL"));
                violations.push(format!("after operation {n}: {reason}"));
                break;
            }
        }
    }
    let mut counts = oracle::Counts::default();
    if violations.is_empty() {
        let checked = tokio::time::timeout(OP_TIMEOUT * 3, async {
            let mut wrong = oracle::quiesce(&mut world).await;
            let (more, found) = oracle::check(&mut world, !switches.rebuild_after_retention).await;
            wrong.extend(more);
            (wrong, found)
        })
        .await;
        match checked {
            Ok((wrong, found)) => {
                violations.extend(wrong);
                counts = found;
            }
            Err(_) => violations.push(format!(
                "the oracle did not end within {:?}",
                OP_TIMEOUT * 3
            )),
        }
    }
    let _ = world.shutdown().await;
    Outcome {
        seed,
        ops: ops.len(),
        violations,
        trace: std::mem::take(&mut world.trace),
        crash_states: world.crash_states,
        counts,
        acked: world.model.acked,
        millis: started.elapsed().as_millis(),
    }
}

/// The report of a failing seed: the violations, the command that replays it, the trace.
pub fn report(outcome: &Outcome, count: usize, switches: Switches, test: &str) -> String {
    let mut text = String::new();
    let _ = writeln!(
        text,
        "seed {} failed ({} violations):",
        outcome.seed,
        outcome.violations.len()
    );
    let _ = writeln!(text, "  looks like: {}", classify(outcome).join("; "));
    for violation in outcome.violations.iter().take(12) {
        let _ = writeln!(text, "  - {violation}");
    }
    if outcome.violations.len() > 12 {
        let _ = writeln!(text, "  - ... {} more", outcome.violations.len() - 12);
    }
    let _ = writeln!(
        text,
        "replay: DLQ_SIM_SEED={} DLQ_SIM_OPS={count} DLQ_SIM_SWITCHES={switches} cargo test -p dlq-ops --test sim_whole_system -- --include-ignored --nocapture {test}",
        outcome.seed
    );
    let _ = writeln!(text, "operations:");
    for line in &outcome.trace {
        let _ = writeln!(text, "  {}", shorten(line));
    }
    text
}

/// Which of issue 33's scenarios (or the simulation's own finding) a failing seed's
/// violations look like, from their wording and the trace.
pub fn classify(outcome: &Outcome) -> Vec<&'static str> {
    let any = |needle: &str| outcome.violations.iter().any(|v| v.contains(needle));
    let traced = |needle: &str| outcome.trace.iter().any(|t| t.contains(needle));
    let mut found = Vec::new();
    if any("differs from a rebuild") || (any("lost by the sink") && traced("rebuilt from")) {
        found.push("scenario 1 (rebuild x retention deletes items)");
    }
    if any("does not open") && any("the projection holds events up to sequence") {
        found.push("scenario 2 (failed write x retention: the directory never opens)");
    }
    let waiting = any("wait for a predecessor");
    // A failed append burns its sequences, also when it hits the emitter's own `EmitFailed`
    // audit event (the caller then sees its item stored).
    let failed_append = traced("FailedEmit") || traced("UnconfirmedThenFailed");
    if waiting && failed_append {
        found.push("scenario 3 (a burned sequence stalls consumers)");
    }
    if any("told Unconfirmed") {
        found.push("scenario 3 (Unconfirmed, then the late write failed: lost)");
    }
    if waiting && outcome.counts.parked > 0 {
        found.push("scenario 4 (parked events stall consumers)");
    }
    if (any("verify: extra") || (any("verify: diverging") && !waiting)) && failed_append {
        found.push("scenario 5 (unstored events: verify reports extras)");
    }
    if any("~anti-entropy") {
        found.push("s6 (a repaired message published again after a power cut)");
    }
    if found.is_empty() {
        found.push("none of the known scenarios");
    }
    found
}

fn shorten(line: &str) -> String {
    if line.chars().count() <= 160 {
        return line.to_owned();
    }
    let cut: String = line.chars().take(157).collect();
    format!("{cut}...")
}

/// A one-line summary of a seed that held.
pub fn summary(outcome: &Outcome) -> String {
    format!(
        "seed {}: {} ops, {} acknowledged, {} crash states offered, {} events in the log, {} messages in the stream, {} items, {} parked, {} ms",
        outcome.seed,
        outcome.ops,
        outcome.acked,
        outcome.crash_states,
        outcome.counts.events_in_log,
        outcome.counts.messages_in_stream,
        outcome.counts.items,
        outcome.counts.parked,
        outcome.millis
    )
}
