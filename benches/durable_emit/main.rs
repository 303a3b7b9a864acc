#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! Durable-emit benchmark:
//! `cargo bench --bench durable_emit -- [--quick] [--json PATH] [--dir DIR] [--drain N,N]
//! [--only-drain] [--only-limit] [--no-sled-limit] [--sections up,store,down] [--ks 1,64] [--payloads 1,64]
//! [--emits N]`.
//!
//! Measures (1) this disk's fsync and group-commit limits, (1b) the same append handed to a
//! thread as the sink does, (2) `dead_letter` with a real
//! nats-server up and (3) killed, at K = 1, 8, 64, 256 concurrent emitters with ~1 KiB and
//! 64 KiB of `item_data`, (2b) the durable-only `store` with the bus up at K = 1, 64 and 256
//! (publishing in the background, its catch-up timed apart), and (4) the reconciler draining
//! backlogs. It reports and never
//! asserts; see `benches/README.md`.

/// The allocator the `dlq` binary ships with (src/main.rs), so the figures are the binary's.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

mod bus_alone;
mod drain;
mod emit;
mod handoff;
mod limit;
mod run;
mod store;
mod turns;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use dlq_testkit::bench::suite;
use dlq_testkit::NatsServer;
use emit::Payload;
use run::Row;
use suite::SuiteRow;

/// What one run measures.
struct Sizes {
    /// Serial fsyncs of each kind.
    fsyncs: usize,
    /// Group commits per batch size (fewer for big records).
    rounds: usize,
    /// Emits per K with the ~1 KiB and the 64 KiB payload.
    emits: [usize; 2],
    /// Backlogs drained.
    drains: Vec<usize>,
}

fn sizes(benching: bool, quick: bool) -> Sizes {
    let (fsyncs, rounds, emits, drains) = match (benching, quick) {
        // Without `--bench` (under `cargo test --all-targets`): a seconds-long smoke run of
        // every section, so CI proves the benchmark still works.
        (false, _) => (20, 3, [200, 30], vec![500]),
        (true, true) => (300, 30, [3_000, 300], vec![10_000]),
        (true, false) => (2_000, 200, [20_000, 4_000], vec![100_000]),
    };
    Sizes {
        fsyncs,
        rounds,
        emits,
        drains,
    }
}

fn payloads(emits: [usize; 2]) -> [Payload; 2] {
    [
        Payload {
            name: "1 KiB",
            blob: 1024,
            ks: vec![1, 8, 64, 256],
            emits: emits[0],
        },
        Payload {
            name: "64 KiB",
            blob: 65_536,
            ks: vec![1, 64, 256],
            emits: emits[1],
        },
    ]
}

fn print_table(rows: &[Row]) {
    let rate = |v: Option<f64>| v.map_or_else(|| "-".into(), |v| format!("{v:.0}"));
    let ms = |v: Option<u64>| v.map_or_else(|| "-".into(), |us| format!("{:.3}", us as f64 / 1e3));
    let verdict = |met: bool| if met { "met" } else { "**NOT met**" };
    println!("| section | measurement | n | calls/s | durable events/s | p50 ms | p99 ms | p999 ms | CPU us/event | of its ceiling (target) | other target | notes |");
    println!("|---|---|---:|---:|---:|---:|---:|---:|---:|---|---|---|");
    for r in rows {
        let target = match (&r.target, r.target_met) {
            (Some(t), Some(met)) => format!("{t}: {}", verdict(met)),
            _ => "-".into(),
        };
        let limit = match (&r.limit, r.events_per_sec) {
            (Some((limit, against)), Some(rate)) if *limit > 0.0 => {
                let share = rate / limit;
                let shown = format!("{:.1} % of {limit:.0} ({against})", share * 100.0);
                match r.limit_target {
                    Some((wanted, text)) => {
                        format!("{shown}, {text}: {}", verdict(share >= wanted))
                    }
                    None => shown,
                }
            }
            _ => "-".into(),
        };
        let cpu = match (r.cpu_us, r.cpu_target_us) {
            (Some(cpu), Some(max)) => format!("{cpu:.1} (<= {max:.0}: {})", verdict(cpu <= max)),
            (Some(cpu), None) => format!("{cpu:.1}"),
            _ => "-".into(),
        };
        let rates = [r.calls_per_sec, r.events_per_sec].map(rate).join(" | ");
        let latency = [r.p50_us, r.p99_us, r.p999_us].map(ms).join(" | ");
        let (section, name, n, note) = (r.section, &r.name, r.count, &r.note);
        println!(
            "| {section} | {name} | {n} | {rates} | {latency} | {cpu} | {limit} | {target} | {note} |"
        );
    }
}

/// The rows in the suite's common shape.
fn suite_rows(rows: &[Row]) -> Vec<SuiteRow> {
    let mut out = Vec::new();
    for r in rows {
        let latency = |row: SuiteRow| match (r.p50_us, r.p99_us, r.p999_us) {
            (Some(a), Some(b), Some(c)) => row.latency_us(a, b, c),
            _ => row,
        };
        let row = match r.section {
            "1 limit" | "1b hand-off" => {
                let (value, unit) = match r.events_per_sec {
                    Some(v) => (v, "events/s"),
                    None => (r.calls_per_sec.unwrap_or(0.0), "fsyncs/s"),
                };
                let figure = match r.note.split(';').next() {
                    Some(batch) if batch.starts_with("batch") => format!("{}, {batch}", r.name),
                    _ => r.name.clone(),
                };
                SuiteRow::new("2 physical limit", figure, value, unit).note(r.note.clone())
            }
            "2a bus alone" => {
                let value = r.events_per_sec.unwrap_or(0.0);
                SuiteRow::new("2 physical limit", r.name.clone(), value, "events/s")
                    .note(r.note.clone())
            }
            "2 bus up" | "3 bus down" | "2b bus up" | "3b bus down" => {
                let bus = match r.section {
                    "2 bus up" | "2b bus up" => "bus up",
                    _ => "bus down",
                };
                let figure = format!("{bus}, {}", r.name.trim_start_matches("durable emit, "));
                let mut row = SuiteRow::new(
                    "1 durable emit",
                    figure.clone(),
                    r.events_per_sec.unwrap_or(0.0),
                    "events/s",
                );
                let mut note = r.note.clone();
                if let (Some(t), Some(met)) = (&r.target, r.target_met) {
                    note += &format!("; target {t}: {}", if met { "met" } else { "NOT met" });
                }
                if let Some((limit, against)) = &r.limit {
                    row = row.against(*limit, against.clone());
                    if let Some((wanted, text)) = r.limit_target {
                        let met = row.ratio.is_some_and(|share| share >= wanted);
                        row = row.target(text, met);
                    }
                }
                if let Some(cpu) = r.cpu_us {
                    out.push(cpu_row(&figure, cpu, r.cpu_target_us));
                }
                row.note(note)
            }
            _ => {
                let value = r.events_per_sec.unwrap_or(0.0);
                let mut row =
                    SuiteRow::new("4 reconciler drain", r.name.clone(), value, "events/s");
                if let Some((limit, against)) = &r.limit {
                    row = row.against(*limit, against.clone());
                    if let Some((wanted, text)) = r.limit_target {
                        let met = r.target_met != Some(false)
                            && row.ratio.is_some_and(|share| share >= wanted);
                        row = row.target(text, met);
                    }
                } else if let (Some(t), Some(met)) = (&r.target, r.target_met) {
                    row = row.target(t.clone(), met);
                }
                row.note(r.note.clone())
            }
        };
        out.push(latency(row));
    }
    out
}

/// A row's CPU per event as a row of its own (issue 37 reads it in every emit row), with the
/// target where the row has one.
fn cpu_row(figure: &str, cpu_us: f64, max_us: Option<f64>) -> SuiteRow {
    let row = SuiteRow::new("1b CPU per durable event", figure, cpu_us, "us CPU/event");
    let row = row.note("user + system time of this process over the calls, per event");
    match max_us {
        Some(max) => row.target(format!("<= {max:.0} us CPU per event"), cpu_us <= max),
        None => row,
    }
}

fn main() {
    let (mut quick, mut json, mut dir) = (false, None::<PathBuf>, None::<PathBuf>);
    let (mut benching, mut drains, mut only_drain) = (false, None::<Vec<usize>>, false);
    let (mut only_limit, mut sled_limit) = (false, true);
    let mut sections: Option<Vec<String>> = None;
    let mut only_ks: Option<Vec<usize>> = None;
    let mut only_payloads: Option<Vec<usize>> = None;
    let mut emits: Option<usize> = None;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--quick" => quick = true,
            "--json" => json = Some(args.next().expect("--json needs a path").into()),
            "--dir" => dir = Some(args.next().expect("--dir needs a directory").into()),
            "--drain" => {
                let list = args.next().expect("--drain N[,N...]");
                let sizes = list
                    .split(',')
                    .map(|n| n.trim().replace('_', "").parse().expect("--drain N[,N...]"));
                drains = Some(sizes.collect());
            }
            "--only-drain" => only_drain = true,
            "--only-limit" => only_limit = true,
            // Skips the limit section's sled rows: a profile then holds only the sink's path.
            "--no-sled-limit" => sled_limit = false,
            // The emit sections to run after the limit (up, store, down); no drain.
            "--sections" => {
                let list = args.next().expect("--sections up,store,down");
                sections = Some(list.split(',').map(|s| s.trim().to_owned()).collect());
                drains = Some(Vec::new());
            }
            // Only these numbers of concurrent emitters (for profiling one of them).
            "--ks" => {
                let list = args.next().expect("--ks K[,K...]");
                let ks = list
                    .split(',')
                    .map(|k| k.trim().parse().expect("--ks K[,K...]"));
                only_ks = Some(ks.collect());
            }
            // Only these payloads, in KiB (1, 64): a profile or a CPU figure of one of them.
            "--payloads" => {
                let list = args.next().expect("--payloads KIB[,KIB...]");
                let kib = list
                    .split(',')
                    .map(|k| k.trim().parse().expect("--payloads KIB[,KIB...]"));
                only_payloads = Some(kib.collect());
            }
            // Emits per K for the 1 KiB payload (20,000 by default): a longer run for an A/B
            // figure, where the first touches of memory weigh less.
            "--emits" => {
                let n = args.next().expect("--emits N");
                emits = Some(n.trim().replace('_', "").parse().expect("--emits N"));
            }
            "--bench" => benching = true, // added by `cargo bench` for `harness = false` targets
            other => eprintln!("ignoring unknown argument {other:?}"),
        }
    }
    let mut sizes = sizes(benching, quick);
    if let Some(drains) = drains {
        sizes.drains = drains;
    }
    if let Some(emits) = emits {
        sizes.emits[0] = emits;
    }
    let mut payloads = Vec::from(payloads(sizes.emits));
    if let Some(only) = &only_payloads {
        payloads.retain(|p| only.contains(&(p.blob / 1024)));
    }
    if let Some(only) = &only_ks {
        for payload in &mut payloads {
            payload.ks.retain(|k| only.contains(k));
        }
    }
    let (base, location) = match (dir, option_env!("CARGO_TARGET_TMPDIR")) {
        (Some(dir), _) => (dir, "--dir"),
        (None, Some(tmp)) => (PathBuf::from(tmp), "the target dir (CARGO_TARGET_TMPDIR)"),
        (None, None) => (std::env::temp_dir(), "the system temp dir"),
    };
    std::fs::create_dir_all(&base).expect("create bench base dir");
    let tmp = tempfile::tempdir_in(&base).expect("temp dir"); // removed at exit
    let dir = tmp.path();
    let fs = suite::filesystem_of(dir);
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let mode = match (benching, quick) {
        (false, _) => "smoke (run by cargo test; use cargo bench for figures)",
        (true, true) => "quick",
        (true, false) => "full",
    };
    let records: Vec<(usize, usize)> = payloads.iter().map(|p| (p.blob, p.event_bytes())).collect();
    println!("# dlq durable_emit benchmark ({mode})\n");
    let shown = dir.display();
    println!("- temp dir: `{shown}` (under {location}); filesystem: {fs}");
    println!("- cores: {cores}; a private `nats-server -js` per bus section (its store under the system temp dir)");
    for (p, (_, record)) in payloads.iter().zip(&records) {
        let ks: Vec<String> = p.ks.iter().map(|k| k.to_string()).collect();
        println!(
            "- payload {}: `item_data` with a {}-letter blob, stored event {record} B; {} emits per K (K = {}), a distinct item id each over {} jobs, capacity_per_job 10,000,000",
            p.name, p.blob, p.emits, ks.join(", "), run::JOBS
        );
    }
    println!();

    dlq_testkit::group_commits::install();
    let started = Instant::now();
    let mut rows = Vec::new();
    let runtime = tokio::runtime::Runtime::new().expect("runtime"); // one worker per core
    runtime.block_on(async {
        if !only_drain {
            eprintln!("1/4 physical limit ...");
            let mut limits = limit::physical_limit(
                dir,
                sizes.fsyncs,
                sizes.rounds,
                &records,
                sled_limit,
                &mut rows,
            );
            eprintln!("1b/4 the hand-off ...");
            handoff::handed_off_fsyncs(dir, sizes.fsyncs, &records, &mut limits, &mut rows).await;
            if only_limit {
                return;
            }
            let runs = |section: &str| {
                sections
                    .as_ref()
                    .is_none_or(|list| list.iter().any(|s| s == section))
            };
            let mut server = NatsServer::start();
            let mut bus_limits = bus_alone::BusLimits::new();
            if runs("up") {
                eprintln!("2a/4 the bus alone ...");
                for payload in &payloads {
                    bus_alone::bus_alone(&server.url(), payload, &mut bus_limits, &mut rows).await;
                }
                eprintln!("2/4 durable emit, bus up ...");
                for payload in &payloads {
                    let url = server.url();
                    emit::emit_scenarios(dir, &url, true, payload, &limits, &bus_limits, &mut rows)
                        .await;
                }
            }
            if runs("store") {
                eprintln!("2b/4 durable-only store, bus up ...");
                for payload in &payloads {
                    store::store_scenarios(dir, &server.url(), true, payload, &limits, &mut rows)
                        .await;
                }
            }
            server.kill();
            if runs("down") {
                eprintln!("3/4 durable emit, bus down ...");
                for payload in &payloads {
                    let url = server.url();
                    emit::emit_scenarios(
                        dir,
                        &url,
                        false,
                        payload,
                        &limits,
                        &bus_limits,
                        &mut rows,
                    )
                    .await;
                }
                eprintln!("3b/4 durable-only store, bus down ...");
                for payload in &payloads {
                    store::store_scenarios(dir, &server.url(), false, payload, &limits, &mut rows)
                        .await;
                }
            }
        }
        for &n in &sizes.drains {
            eprintln!("4/4 backlog of {n} and reconciler drain ...");
            drain::drain(dir, n, &mut rows).await;
        }
    });
    runtime.shutdown_timeout(Duration::from_secs(5));
    let elapsed = started.elapsed().as_secs_f64();

    print_table(&rows);
    println!("\nTargets (issue 37; reported, never asserted): `dead_letter` bus up >= 60 % of the bus alone at K = 64 and 256, >= 90 % of the serial ceiling 1/(1/plain + 1/bus) at K = 1, <= 25 us CPU per event at K = 256; `store` bus down >= 50 % of the plain-file group commit at K = 64 and 256, p99 <= 5 ms at K = 64, <= 15 us CPU per event at K = 256; `store` at K = 1: p50 <= 1.3 x one plain append + fdatasync; drain >= 80 % of the bus alone.");
    println!("Total bench time: {elapsed:.1} s");
    if let Some(path) = json {
        let mut machine = suite::machine();
        machine.push(("durable_emit dir".into(), fs));
        suite::write(
            &path,
            "durable_emit",
            mode,
            machine,
            elapsed,
            &suite_rows(&rows),
        );
    }
}
