//! Runner-overhead benchmark: what `dlq run` costs per item beyond the command itself,
//! and what dead-lettering costs per failed agent.
//!
//! `cargo bench --bench runner_overhead -- [--quick] [--items N] [--failing N] [--runs N] [--json PATH]`
//!
//! 1. Baselines, in this process (Tokio, at most 16 children in flight, each `sh -c true` in a
//!    process group of its own with stdin closed, as the runner spawns them): (A) output to
//!    /dev/null; (B) output appended to `stdout.log`/`stderr.log` in a fresh per-item directory,
//!    removed afterwards (the file-system work an item needs anyway).
//! 2. The release `dlq run` of a workflow of N items running `true` at `max_parallel: 16`, bus
//!    down (port 1), fresh data directory. Overhead per item = (runner wall − baseline wall) / N.
//!    A 1-item run gives the fixed cost (start-up, sink open, shutdown).
//! 3. DLQ overhead per failed agent: M items running `exit 1` (one attempt, `on_item_failure`
//!    `dlq` by default) minus M items running `true`, divided by M; bus down, with the default
//!    topic policy (one publish retry after 500 ms) and with `retry_attempts: 0`. The runner
//!    dead-letters with `Emitter::store`, which returns once the item is durable: with the bus
//!    known down no publish is attempted (the reconciler publishes later), so the policy does
//!    not matter there.
//! 4. The same with a private `nats-server -js` up, when one is installed (skipped otherwise).
//!
//! N, M = 10,000, 2,000 (full); 2,000, 500 (`--quick`); 200, 50 as a smoke run under
//! `cargo test --all-targets` (no `--bench` argument), which writes no results file. Full and
//! quick write `benches/results/runner_overhead[-quick].md`. Each figure is the median wall time
//! of `--runs` runs (3 full, 1 otherwise). Item counts in each report are asserted; times never.
//! `--json PATH` also writes the figures in the suite's shape (`dlq_testkit::bench::suite`).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

/// The allocator the `dlq` binary ships with (src/main.rs), so the figures are the binary's.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

mod report;
mod runs;

use std::fmt::Write as _;
use std::path::PathBuf;
use std::time::Instant;

use dlq_testkit::bench::suite;
use report::{git_head, loadavg, machine, ms_per, rate, verdict, Row};
use runs::{baseline, median, run_dlq, Job, Run};

const BIN: &str = env!("CARGO_BIN_EXE_dlq");
const PARALLEL: usize = 16;
const DEAD_BUS: &str = "nats://127.0.0.1:1";
/// `/proc/*/stat` times are in USER_HZ ticks, 100 per second on Linux.
const TICK_SECS: f64 = 0.01;
const ITEM_TARGET_MS: f64 = 1.0;
const DLQ_TARGET_MS: f64 = 5.0;

/// A named measurement, run once per round.
type Case<'a> = (&'a str, Box<dyn FnMut() -> Run + 'a>);

/// Measures every case `runs` times, round-robin (so that a slow phase of the machine hits all
/// cases alike), and keeps each case's median.
fn measure(runs: usize, cases: &mut [Case<'_>]) -> Vec<Run> {
    let mut all: Vec<Vec<Run>> = vec![Vec::new(); cases.len()];
    for round in 1..=runs {
        for (i, (name, f)) in cases.iter_mut().enumerate() {
            eprintln!("  round {round}/{runs}: {name} ...");
            all[i].push(f());
        }
    }
    all.into_iter().map(median).collect()
}

fn main() {
    let (mut quick, mut benching) = (false, false);
    let (mut items, mut failing, mut runs) = (None, None, None);
    let mut shown_args = Vec::new();
    let mut json = None::<PathBuf>;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut number = |flag: &str| -> usize {
            let v = args
                .next()
                .unwrap_or_else(|| panic!("{flag} needs a number"));
            shown_args.push(format!("{flag} {v}"));
            v.parse()
                .unwrap_or_else(|_| panic!("{flag} needs a number, not {v:?}"))
        };
        match arg.as_str() {
            "--bench" => benching = true, // added by `cargo bench` for `harness = false` targets
            "--quick" => quick = true,
            "--json" => json = Some(args.next().expect("--json PATH").into()),
            "--items" => items = Some(number("--items")),
            "--failing" => failing = Some(number("--failing")),
            "--runs" => runs = Some(number("--runs").max(1)),
            other => eprintln!("ignoring unknown argument {other:?}"),
        }
    }
    let (mode, n_default, m_default) = match (benching, quick) {
        (false, _) => (
            "smoke (run by cargo test; use cargo bench for figures)",
            200,
            50,
        ),
        (true, true) => ("quick", 2_000, 500),
        (true, false) => ("full", 10_000, 2_000),
    };
    let (n, m) = (items.unwrap_or(n_default), failing.unwrap_or(m_default));
    let runs = runs.unwrap_or(if benching && !quick { 3 } else { 1 });
    let command = suite::bench_command("runner_overhead", quick, &shown_args);
    let base = option_env!("CARGO_TARGET_TMPDIR").map_or_else(std::env::temp_dir, PathBuf::from);
    std::fs::create_dir_all(&base).unwrap();
    let tmp = tempfile::tempdir_in(&base).unwrap(); // removed at exit
    let base = tmp.path();
    let (load_before, started) = (loadavg(), Instant::now());

    const RETRY0: &str = "topics:\n  default:\n    retry_attempts: 0\n";
    let dlq = |items: usize, shell: &'static str, bus: &str, config: Option<&'static str>| {
        let bus = bus.to_owned();
        move || {
            run_dlq(
                base,
                &Job {
                    items,
                    shell,
                    bus: &bus,
                    config,
                },
            )
        }
    };
    eprintln!("1-3/4: baselines, dlq run of {n} items, DLQ overhead over {m} items (bus down), {runs} round(s)");
    let files = base.join("baseline-files");
    let mut cases: Vec<Case> = vec![
        ("baseline A (/dev/null)", Box::new(|| baseline(n, None))),
        (
            "baseline B (log files)",
            Box::new(|| baseline(n, Some(&files))),
        ),
        ("dlq run, 1 item", Box::new(dlq(1, "true", DEAD_BUS, None))),
        (
            "dlq run, N x true",
            Box::new(dlq(n, "true", DEAD_BUS, None)),
        ),
        (
            "dlq run, M x true",
            Box::new(dlq(m, "true", DEAD_BUS, None)),
        ),
        (
            "dlq run, M x exit 1",
            Box::new(dlq(m, "exit 1", DEAD_BUS, None)),
        ),
        (
            "dlq run, M x exit 1, retry 0",
            Box::new(dlq(m, "exit 1", DEAD_BUS, Some(RETRY0))),
        ),
    ];
    let [a, b, fixed, ok_n, ok_m, fail_m, fail_m0] = measure(runs, &mut cases).try_into().unwrap();
    drop(cases);

    let bus_runs = if dlq_testkit::nats::installed_binary().is_some() {
        eprintln!("4/4: DLQ overhead with a private nats-server up");
        let mut server = dlq_testkit::NatsServer::start();
        let url = server.url();
        let mut cases: Vec<Case> = vec![
            ("bus up: M x true", Box::new(dlq(m, "true", &url, None))),
            ("bus up: M x exit 1", Box::new(dlq(m, "exit 1", &url, None))),
        ];
        let measured = measure(runs, &mut cases);
        drop(cases);
        server.kill();
        Some((measured[0], measured[1]))
    } else {
        eprintln!("4/4: skipped, no nats-server installed");
        None
    };

    let mut rows = vec![
        Row { name: "baseline A: `sh -c true`, output to /dev/null".into(), items: n, run: a, note: "in-process Tokio, own process group, stdin null; own CPU = spawning and reaping".into() },
        Row { name: "baseline B: A + per-item dir, output appended to stdout.log/stderr.log, dir removed".into(), items: n, run: b, note: "what the runner's agent does around the command, minimally".into() },
        Row { name: "`dlq run`, 1 item `true` (fixed cost)".into(), items: 1, run: fixed, note: "start-up (with the bus down it waits up to `publish_timeout`, 2 s, for a first connection), sink open, job files, shutdown".into() },
        Row { name: "`dlq run`, `true`".into(), items: n, run: ok_n, note: "bus down".into() },
        Row { name: "`dlq run`, `true`".into(), items: m, run: ok_m, note: "bus down; reference for the DLQ rows".into() },
        Row { name: "`dlq run`, `exit 1`, default topic policy".into(), items: m, run: fail_m, note: "bus down: sink write; the publish is left to the reconciler (no attempt, no 500 ms retry wait)".into() },
        Row { name: "`dlq run`, `exit 1`, `retry_attempts: 0`".into(), items: m, run: fail_m0, note: "bus down: sink write; the publish is left to the reconciler".into() },
    ];
    if let Some((ok, fail)) = bus_runs {
        rows.push(Row {
            name: "`dlq run`, `true`, bus up".into(),
            items: m,
            run: ok,
            note: "private `nats-server -js`".into(),
        });
        rows.push(Row {
            name: "`dlq run`, `exit 1`, bus up".into(),
            items: m,
            run: fail,
            note: "sink write, then JetStream publish + PubAck".into(),
        });
    }

    let mut out = String::new();
    let w = &mut out;
    writeln!(w, "<!-- produced by: {command} -->").unwrap();
    writeln!(w, "# dlq runner_overhead benchmark ({mode})\n").unwrap();
    writeln!(w, "- command: `{command}`; commit `{}`", git_head()).unwrap();
    writeln!(w, "- machine: {}", machine(base)).unwrap();
    writeln!(w, "- load average (1/5/15 min) before: {load_before}; after: {} (other processes compete for the cores)", loadavg()).unwrap();
    writeln!(w, "- N = {n} items for the per-item overhead, M = {m} for the per-failed-agent overhead; `max_parallel: {PARALLEL}`; each figure the median of {runs} run(s), cases interleaved").unwrap();
    writeln!(w, "- `dlq run`: the release binary, `--progress quiet --format json --drain-timeout 0s`, fresh `--data-dir`, bus `{DEAD_BUS}` (down: connection refused) unless stated, `RUST_LOG=warn`; wall time from spawn to exit; CPU from `/proc/PID/stat` of the exited, unreaped runner").unwrap();
    writeln!(
        w,
        "- total bench time: {:.0} s\n",
        started.elapsed().as_secs_f64()
    )
    .unwrap();
    writeln!(w, "| run | items | wall s | spread s | items/s | own CPU ms/item | children CPU ms/item | stderr lines | notes |").unwrap();
    writeln!(w, "|---|---:|---:|---:|---:|---:|---:|---:|---|").unwrap();
    for r in &rows {
        let secs = r.run.wall.as_secs_f64();
        writeln!(
            w,
            "| {} | {} | {secs:.2} | {:.2} | {} | {:.3} | {:.3} | {} | {} |",
            r.name,
            r.items,
            r.run.spread.as_secs_f64(),
            rate(r.items as f64 / secs),
            ms_per(r.run.own_cpu, r.items),
            ms_per(r.run.child_cpu, r.items),
            r.run.stderr_lines,
            r.note
        )
        .unwrap();
    }
    let wall = |r: &Run| r.wall.as_secs_f64();
    let vs_b = ms_per(wall(&ok_n) - wall(&b), n);
    let vs_a = ms_per(wall(&ok_n) - wall(&a), n);
    let no_fixed = ms_per(wall(&ok_n) - wall(&fixed) - wall(&b), n);
    let cpu = ms_per(ok_n.own_cpu, n);
    let dlq_default = ms_per(wall(&fail_m) - wall(&ok_m), m);
    let dlq_retry0 = ms_per(wall(&fail_m0) - wall(&ok_m), m);
    writeln!(w, "\n| figure | ms | target |").unwrap();
    writeln!(w, "|---|---:|---|").unwrap();
    let mut figures: Vec<(String, f64, Option<f64>)> = Vec::new();
    let mut fig = |name: &str, v: f64, target: Option<f64>| {
        let t = target.map_or("-".into(), |t| verdict(v, t));
        writeln!(w, "| {name} | {v:.3} | {t} |").unwrap();
        figures.push((name.to_owned(), v, target));
    };
    fig(
        "runner overhead per item: (dlq run N − baseline B) / N",
        vs_b,
        Some(ITEM_TARGET_MS),
    );
    fig(
        "runner overhead per item vs baseline A (/dev/null): (dlq run N − A) / N",
        vs_a,
        Some(ITEM_TARGET_MS),
    );
    fig(
        "the same without the fixed cost: (dlq run N − 1-item run − B) / N",
        no_fixed,
        None,
    );
    fig(
        "runner process CPU per item (user + sys, own threads)",
        cpu,
        None,
    );
    fig(
        "DLQ overhead per failed agent, bus down, default policy: (exit 1 − true) / M",
        dlq_default,
        Some(DLQ_TARGET_MS),
    );
    fig(
        "DLQ overhead per failed agent, bus down, `retry_attempts: 0`",
        dlq_retry0,
        Some(DLQ_TARGET_MS),
    );
    fig(
        "runner CPU per failed agent, bus down, default policy: (exit 1 − true) own CPU / M",
        ms_per(fail_m.own_cpu - ok_m.own_cpu, m),
        None,
    );
    if let Some((ok, fail)) = bus_runs {
        fig(
            "DLQ overhead per failed agent, bus up: (exit 1 − true) / M",
            ms_per(wall(&fail) - wall(&ok), m),
            Some(DLQ_TARGET_MS),
        );
        fig(
            "runner CPU per failed agent, bus up",
            ms_per(fail.own_cpu - ok.own_cpu, m),
            None,
        );
    } else {
        writeln!(
            w,
            "\nBus-up rows skipped: no `nats-server` found (NATS_SERVER_BIN, PATH, /usr/sbin)."
        )
        .unwrap();
    }
    writeln!(w, "\nThe runner dead-letters with `Emitter::store`: it returns once the item is durable and publishes in a background task, so the topic policy's retry delay (one retry after 500 ms by default) no longer holds the agent's `max_parallel` slot; with the bus known down no attempt is queued at all and the reconciler publishes the backlog when the bus is back. \"stderr lines\" counts the runner's warnings.").unwrap();
    writeln!(w, "\nOverheads are wall-clock per item with {PARALLEL} agents in flight (amortised): the latency one failed agent adds is about {PARALLEL} times its figure. Spread is the slowest minus the fastest of the runs; a difference of two medians smaller than their spreads (e.g. a negative overhead) is noise. Targets are reported, never asserted.").unwrap();
    print!("{out}");
    if benching {
        suite::write_results("runner_overhead", quick, &out);
    }
    if let Some(path) = json {
        let note = format!("N = {n}, M = {m} items, max_parallel {PARALLEL}, median of {runs}");
        let rows: Vec<_> = figures
            .into_iter()
            .map(|(name, v, target)| {
                let row = suite::SuiteRow::new("8 job runner", name, v, "ms").note(note.clone());
                match target {
                    Some(t) => row.target(format!("< {t} ms"), v < t),
                    None => row,
                }
            })
            .collect();
        suite::write(
            &path,
            "runner_overhead",
            mode,
            suite::machine(),
            started.elapsed().as_secs_f64(),
            &rows,
        );
    }
}
