#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! Peers in the same run: `cargo bench --bench peers -- [--quick] [--events N] [--json PATH]`.
//!
//! One failed item at a time (the next waits for the previous to be durable and, where there
//! is a bus, acknowledged), 1 KiB of item data, the same event JSON for every contender. The
//! contenders take turns of 50 calls each until each made its N, so the disk's drift during
//! the run (its `fdatasync` time moved by 2 x within a minute on this VM) reaches all of them
//! alike, the ceilings (rows 1 and 2) included:
//!
//! 1. **plain file**: append the event and `fdatasync`, nothing else: the disk's ceiling.
//! 2. **the bus alone**: one JetStream publish with PubAck at a time, nothing stored: with
//!    row 1, the two steps every store-then-publish contender takes in series.
//! 3. **dlq**: `Emitter::dead_letter` with the bus up (segment log, then a JetStream publish
//!    with PubAck), what `dlq demo` does.
//! 4. **Redis + NATS** (the 003 design): `RPUSH` into a `redis-server` this bench starts on a
//!    free port with `appendonly yes`, `appendfsync always`, then the same JetStream publish.
//! 5. **RabbitMQ quorum queue**: a persistent publish to a quorum queue of the machine's
//!    RabbitMQ (127.0.0.1:5672, guest/guest) with publisher confirms; the row says why it is
//!    missing when none answers.
//!
//! Prints a Markdown table (events/s, p50/p99, ratio to the plain file) and writes it to
//! `benches/results/peers.md` (`peers-quick.md` with `--quick`). Without `--bench` (under
//! `cargo test --all-targets`) it is a smoke run of a few seconds that writes no file.

/// The allocator the `dlq` binary ships with (src/main.rs), so the figures are the binary's.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

mod contenders;
mod rabbit;
mod redis;

use std::path::PathBuf;

use std::time::Instant;

use dlq_testkit::bench::load::Run;
use dlq_testkit::bench::suite::{self, SuiteRow};

/// What one run measures.
struct Mode {
    name: &'static str,
    events: usize,
    /// Whether the table goes to `benches/results/peers[-quick].md`.
    writes: bool,
}

const FULL: Mode = Mode {
    name: "full",
    events: 3_000,
    writes: true,
};
const QUICK: Mode = Mode {
    name: "quick",
    events: 500,
    writes: true,
};
const SMOKE: Mode = Mode {
    name: "smoke (run by cargo test; use cargo bench for figures)",
    events: 30,
    writes: false,
};

/// One contender's result, or why it did not run.
pub struct Outcome {
    name: &'static str,
    run: Result<Run, String>,
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let quick = args.iter().any(|a| a == "--quick");
    let mut mode = if !args.iter().any(|a| a == "--bench") {
        SMOKE
    } else if quick {
        QUICK
    } else {
        FULL
    };
    if let Some(n) = value_of(&args, "--events").and_then(|n| n.parse().ok()) {
        mode.events = n;
    }
    let json = value_of(&args, "--json").map(PathBuf::from);
    let started = std::time::Instant::now();
    let work = tempfile::Builder::new()
        .prefix("dlq-peers-")
        .tempdir()
        .expect("temp dir");
    eprintln!(
        "peers, {}: {} events one at a time, in {}",
        mode.name,
        mode.events,
        suite::filesystem_of(work.path())
    );
    let event = contenders::sample_event_json();
    let names = [
        "plain file: append + fdatasync",
        "JetStream publish + PubAck alone, nothing stored",
        "dlq: dead_letter, bus up (segment log + fdatasync, JetStream PubAck)",
        "Redis appendfsync always + JetStream publish",
        "RabbitMQ quorum queue, persistent, publisher confirms",
    ];
    let ready = vec![
        Ok(contenders::plain_file(work.path(), &event)),
        Ok(contenders::bus_alone().await),
        Ok(contenders::dlq(work.path()).await),
        redis::contender(work.path()).await,
        rabbit::contender(&event).await,
    ];
    // On a task of the runtime's workers, as an embedding scheduler calls dlq: a call awaited
    // on the thread that blocks on the runtime is woken faster than one on a worker.
    let runs = tokio::spawn(alternate(ready, mode.events));
    let outcomes: Vec<Outcome> = names
        .into_iter()
        .zip(runs.await.expect("the contenders' task"))
        .map(|(name, run)| Outcome { name, run })
        .collect();
    let table = table(&mode, event.len(), &outcomes);
    println!("{table}");
    if mode.writes {
        suite::write_results("peers", quick, &table);
    }
    if let Some(path) = json {
        let rows = suite_rows(&outcomes);
        let elapsed = started.elapsed().as_secs_f64();
        suite::write(&path, "peers", mode.name, suite::machine(), elapsed, &rows);
    }
}

/// Calls per contender and turn: the contenders take turns at this many calls each, so the
/// disk's and the machine's drift during the run reaches every one of them alike.
const TURN: usize = 50;

/// Makes `total` calls of every contender that is ready, one call at a time, the contenders
/// taking turns of [`TURN`] calls; then closes them. A contender whose call failed is an
/// error with its first failure.
async fn alternate(
    mut contenders: Vec<Result<contenders::Contender, String>>,
    total: usize,
) -> Vec<Result<Run, String>> {
    let mut runs: Vec<Run> = contenders.iter().map(|_| Run::empty()).collect();
    let mut made = 0;
    while made < total {
        let turn = TURN.min(total - made);
        for (contender, run) in contenders.iter_mut().zip(&mut runs) {
            let Ok(contender) = contender else { continue };
            let started = Instant::now();
            for n in made..made + turn {
                let pending = (contender.call)(n);
                let t = Instant::now();
                let result = pending.await;
                run.record(t, result.map(|()| true));
            }
            run.secs += started.elapsed().as_secs_f64();
        }
        made += turn;
    }
    let mut outcomes = Vec::new();
    for (contender, run) in contenders.into_iter().zip(runs) {
        outcomes.push(match contender {
            Err(why) => Err(why),
            Ok(contender) => {
                let closed = match contender.close {
                    Some(close) => close.await,
                    None => Ok(()),
                };
                drop(contender.keep);
                match (run.errors.first(), closed) {
                    (Some(err), _) => Err(format!("{} errors, first: {err}", run.errors.len())),
                    (None, Err(err)) => Err(format!("closing: {err}")),
                    (None, Ok(())) => Ok(run),
                }
            }
        });
    }
    outcomes
}

fn value_of(args: &[String], flag: &str) -> Option<String> {
    args.iter()
        .position(|a| a == flag)
        .and_then(|i| args.get(i + 1).cloned())
}

/// Where the plain file and the bus alone are in the outcomes.
const PLAIN: usize = 0;
const BUS_ALONE: usize = 1;

/// The rate of the outcome at `index` (NaN when it did not run).
fn rate_at(outcomes: &[Outcome], index: usize) -> f64 {
    outcomes
        .get(index)
        .and_then(|o| o.run.as_ref().ok())
        .map_or(f64::NAN, Run::rate)
}

fn table(mode: &Mode, bytes: usize, outcomes: &[Outcome]) -> String {
    let plain = rate_at(outcomes, PLAIN);
    let mut text = format!(
        "## Peers, one at a time ({}; {} events of {bytes} B each, the contenders taking turns of {TURN} calls; {})\n\n| contender | events/s | p50/p99 | of the plain file |\n|---|---:|---:|---:|\n",
        mode.name,
        mode.events,
        suite::machine()
            .iter()
            .map(|(k, v)| format!("{k} {v}"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    for outcome in outcomes {
        match &outcome.run {
            Ok(run) => text.push_str(&format!(
                "| {} | {:.0} | {} | {:.0} % |\n",
                outcome.name,
                run.rate(),
                run.p50_p99(),
                run.rate() / plain * 100.0
            )),
            Err(why) => text.push_str(&format!("| {} | not run: {why} | | |\n", outcome.name)),
        }
    }
    let bus = rate_at(outcomes, BUS_ALONE);
    // A contender that stores, then publishes, takes both steps in series: its ceiling is one
    // mean plain append + fdatasync plus one mean publish.
    let serial = 1.0 / (1.0 / plain + 1.0 / bus);
    text.push_str(&format!(
        "\nStore, then publish, in series (rows 1 + 2: 1 / (1 / plain + 1 / bus)): at most {serial:.0} events/s, {:.0} % of the plain file.\n",
        serial / plain * 100.0
    ));
    text
}

/// Where dlq and its peers are in the outcomes.
const DLQ: usize = 2;
const PEERS: [usize; 2] = [3, 4];
/// Issue 37's K = 1 targets: dlq at this share of the serial ceiling, and this many times the
/// better peer.
const SERIAL_SHARE: f64 = 0.9;
const PEER_TIMES: f64 = 1.1;

fn suite_rows(outcomes: &[Outcome]) -> Vec<SuiteRow> {
    let plain = rate_at(outcomes, PLAIN);
    let mut rows: Vec<SuiteRow> = outcomes
        .iter()
        .filter_map(|o| o.run.as_ref().ok().map(|run| (o.name, run)))
        .map(|(name, run)| {
            let q = |q| run.hist.value_at_quantile(q);
            SuiteRow::new("peers, one at a time", name, run.rate(), "events/s")
                .against(plain, "plain file append + fdatasync")
                .latency_us(q(0.5), q(0.99), q(0.999))
        })
        .collect();
    let dlq = rate_at(outcomes, DLQ);
    if dlq.is_nan() {
        return rows;
    }
    let serial = 1.0 / (1.0 / plain + 1.0 / rate_at(outcomes, BUS_ALONE));
    if serial.is_finite() {
        let row = SuiteRow::new(
            "peers, one at a time",
            "dlq against the serial ceiling",
            dlq,
            "events/s",
        )
        .against(
            serial,
            "serial ceiling 1/(1/plain + 1/bus), rows plain file and bus alone",
        );
        let met = row.ratio.is_some_and(|r| r >= SERIAL_SHARE);
        rows.push(row.target(">= 90 % of the serial ceiling (K = 1)", met));
    }
    let better = PEERS
        .iter()
        .map(|&i| (i, rate_at(outcomes, i)))
        .filter(|(_, rate)| !rate.is_nan())
        .max_by(|a, b| a.1.total_cmp(&b.1));
    if let Some((index, rate)) = better {
        let name = outcomes.get(index).map_or("", |o| o.name);
        let row = SuiteRow::new(
            "peers, one at a time",
            "dlq against the better peer",
            dlq,
            "events/s",
        )
        .against(rate, format!("the better peer that ran: {name}"));
        let met = row.ratio.is_some_and(|r| r >= PEER_TIMES);
        rows.push(row.target(">= 1.1 x the better peer (K = 1)", met));
    }
    rows
}
