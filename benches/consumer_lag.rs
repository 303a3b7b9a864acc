//! Consumer lag under a steady emission load.
//!
//! `cargo bench --bench consumer_lag -- [--quick] [--seconds S] [--rates 1000,5000,max]`
//!
//! For each rate: a fresh private nats-server, a fresh sled sink and the real library emitter
//! (`Emitter::dead_letter`: durable write, then JetStream publish with PubAck; reconciler on),
//! and a live durable consumer (`dlq::consumer::run_durable`, `follow: true`, its own sled
//! store). 64 emitting tasks take tickets; ticket `i` is emitted at `start + i / rate` (open
//! loop: a late ticket goes at once; none goes after the end), so the achieved rate is the target
//! or the emitter's maximum, whichever is lower; `max` emits unpaced. The load runs for S seconds (full: 20,
//! `--quick`: 5, smoke under `cargo test`: 1 s at 500 events/s).
//!
//! Lag = stream last sequence minus the consumer's checkpoint (the stream sequence its store
//! has saved, i.e. processed and durable), sampled every 100 ms: p50, p99, max in events. Lag in
//! ms: for each sample, the time until the checkpoint (polled every 2 ms) reached the stream's
//! last sequence at that sample, i.e. how stale the consumer's projection is. Catch-up: from the
//! end of the load until the checkpoint reaches the stream's final last sequence. Every run
//! checks that the consumer applied exactly the events emitted. Figures are reported, never
//! asserted; full and quick runs write `benches/results/consumer_lag[-quick].md`; `--json PATH`
//! also writes the suite's rows (`dlq_testkit::bench::suite`).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

/// The allocator the `dlq` binary ships with (src/main.rs), so the figures are the binary's.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use dlq::bus::{Bus, BusConfig, NatsBus};
use dlq::consumer::{run_durable, ConsumerStore, DurableConfig};
use dlq::emitter::reconciler::ReconcilerConfig;
use dlq::emitter::{Emitter, EmitterBuilder};
use dlq::sink::{LocalSink, Sink, SinkConfig};
use dlq_testkit::bench::suite;
use dlq_testkit::items::template_item;
use dlq_testkit::NatsServer;
use tokio_util::sync::CancellationToken;

const TOPIC: &str = "bench";
const JOBS: usize = 64;
const EMITTERS: usize = 64;
const SAMPLE_EVERY: Duration = Duration::from_millis(100);
const POLL_EVERY: Duration = Duration::from_millis(2);

/// A target rate in events/s; `None` = unpaced (the emitter's maximum).
type Rate = Option<u64>;

fn rate_name(rate: Rate) -> String {
    rate.map_or_else(|| "max".to_owned(), |r| r.to_string())
}

/// One sample: time since the load started, stream last sequence, consumer checkpoint.
#[derive(Clone, Copy)]
struct Sample {
    at: Duration,
    last: u64,
    checkpoint: u64,
}

struct Outcome {
    rate: Rate,
    emitted: u64,
    load_secs: f64,
    samples: Vec<Sample>,
    lag_ms: Vec<f64>,
    catch_up: Duration,
    final_last: u64,
    applied: u64,
    emit_errors: u64,
}

fn quantile<T: Copy + PartialOrd>(sorted: &[T], q: f64) -> Option<T> {
    if sorted.is_empty() {
        return None;
    }
    let index = ((sorted.len() as f64 * q).ceil() as usize).clamp(1, sorted.len()) - 1;
    Some(sorted[index])
}

async fn stream_last(js: &async_nats::jetstream::Context) -> u64 {
    let mut stream = js.get_stream("DLQ").await.unwrap();
    stream.info().await.unwrap().state.last_sequence
}

/// Emits at `rate` for `seconds` from `EMITTERS` tasks; returns (emitted, errors, seconds).
async fn emit_load(
    emitter: &Emitter<LocalSink, NatsBus>,
    rate: Rate,
    seconds: f64,
) -> (u64, u64, f64) {
    let template = Arc::new(template_item());
    let next = Arc::new(AtomicU64::new(0));
    let errors = Arc::new(AtomicU64::new(0));
    let started = tokio::time::Instant::now();
    let end = started + Duration::from_secs_f64(seconds);
    let tasks: Vec<_> = (0..EMITTERS)
        .map(|_| {
            let (emitter, template) = (emitter.clone(), template.clone());
            let (next, errors) = (next.clone(), errors.clone());
            tokio::spawn(async move {
                loop {
                    let ticket = next.fetch_add(1, Ordering::Relaxed);
                    if let Some(rate) = rate {
                        let due = started + Duration::from_secs_f64(ticket as f64 / rate as f64);
                        if due >= end {
                            return;
                        }
                        tokio::time::sleep_until(due).await;
                    }
                    // A rate the emitter cannot keep up with stops on time too.
                    if tokio::time::Instant::now() >= end {
                        return;
                    }
                    let mut item = (*template).clone();
                    item.job_id = format!("job-{}", ticket as usize % JOBS);
                    item.item_id = format!("item-{ticket}");
                    match emitter.dead_letter(TOPIC, item).await {
                        Ok(receipt) if receipt.published => {}
                        _ => {
                            errors.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    let secs = started.elapsed().as_secs_f64();
    // Tickets taken minus those that found the load over, one per task.
    let emitted = next.load(Ordering::Relaxed) - EMITTERS as u64;
    (emitted, errors.load(Ordering::Relaxed), secs)
}

async fn run_rate(base: &Path, rate: Rate, seconds: f64) -> Outcome {
    let dir = base.join(format!("rate-{}", rate_name(rate)));
    let server = NatsServer::start();
    let mut sink_config = SinkConfig::new(dir.join("sink"));
    sink_config.capacity_per_job = 10_000_000;
    let sink = LocalSink::open(sink_config).unwrap();
    let bus = NatsBus::connect(BusConfig {
        url: server.url(),
        ..BusConfig::default()
    })
    .await
    .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while !bus.is_healthy() {
        assert!(Instant::now() < deadline, "bus not connected within 20 s");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    bus.ensure_stream().await.unwrap();
    let emitter = EmitterBuilder::new(sink, bus)
        .reconciler(Some(ReconcilerConfig::default()))
        .build();
    let js = async_nats::jetstream::new(async_nats::connect(server.url()).await.unwrap());

    // The live consumer, started on the empty stream.
    let store = Arc::new(ConsumerStore::open(&dir.join("consumer")).unwrap());
    let shutdown = CancellationToken::new();
    let config = DurableConfig {
        bus: BusConfig::at(server.url()),
        stream: "DLQ".into(),
        name: "lag".into(),
        from_start: true,
        follow: true,
        accept_gaps: Vec::new(),
    };
    let consumer = tokio::spawn({
        let (store, shutdown) = (store.clone(), shutdown.clone());
        async move { run_durable(&config, &store, shutdown).await }
    });

    // Checkpoint changes, polled every 2 ms: (time since start, checkpoint).
    let t0 = Instant::now();
    let progress = Arc::new(Mutex::new(vec![(Duration::ZERO, 0u64)]));
    let polling = Arc::new(AtomicBool::new(true));
    let poller = std::thread::spawn({
        let (store, progress, polling) = (store.clone(), progress.clone(), polling.clone());
        move || {
            while polling.load(Ordering::Relaxed) {
                let checkpoint = store.checkpoint().unwrap();
                let mut progress = progress.lock().unwrap();
                if progress.last().is_none_or(|&(_, c)| c != checkpoint) {
                    progress.push((t0.elapsed(), checkpoint));
                }
                drop(progress);
                std::thread::sleep(POLL_EVERY);
            }
        }
    });
    let sampling = CancellationToken::new();
    let sampler = tokio::spawn({
        let (js, store, sampling) = (js.clone(), store.clone(), sampling.clone());
        async move {
            let mut samples = Vec::new();
            let mut tick = tokio::time::interval(SAMPLE_EVERY);
            while !sampling.is_cancelled() {
                tick.tick().await;
                let (at, last) = (t0.elapsed(), stream_last(&js).await);
                let checkpoint = store.checkpoint().unwrap();
                samples.push(Sample {
                    at,
                    last,
                    checkpoint,
                });
            }
            samples
        }
    });

    let (emitted, emit_errors, load_secs) = emit_load(&emitter, rate, seconds).await;
    let load_end = t0.elapsed();
    let deadline = Instant::now() + Duration::from_secs(120);
    while emitter.sink().backlog().unwrap().count > 0 {
        assert!(
            Instant::now() < deadline,
            "reconciler did not drain in 120 s"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let final_last = stream_last(&js).await;
    let deadline = Instant::now() + Duration::from_secs(300);
    while store.checkpoint().unwrap() < final_last {
        assert!(
            Instant::now() < deadline,
            "consumer did not catch up in 300 s"
        );
        tokio::time::sleep(POLL_EVERY).await;
    }
    sampling.cancel();
    let samples = sampler.await.unwrap();
    polling.store(false, Ordering::Relaxed);
    poller.join().unwrap();
    shutdown.cancel();
    let run = consumer.await.unwrap().unwrap();
    emitter.shutdown().await.unwrap();

    let progress = progress.lock().unwrap().clone();
    let reached_at = |seq: u64| progress.iter().find(|&&(_, c)| c >= seq).map(|&(at, _)| at);
    let catch_up = reached_at(final_last)
        .unwrap_or_else(|| t0.elapsed())
        .saturating_sub(load_end);
    // Samples taken during the load only.
    let samples: Vec<Sample> = samples.into_iter().filter(|s| s.at <= load_end).collect();
    let lag_ms = samples
        .iter()
        .map(|s| match reached_at(s.last) {
            Some(at) => at.saturating_sub(s.at).as_secs_f64() * 1000.0,
            None => f64::NAN,
        })
        .collect();
    Outcome {
        rate,
        emitted,
        load_secs,
        samples,
        lag_ms,
        catch_up,
        final_last,
        applied: run.fold.stats.applied,
        emit_errors,
    }
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|l| l.split_whitespace().next().map(str::to_owned))
        .unwrap_or_else(|| "?".into())
}

fn report(outcomes: &[Outcome], mode: &str, command: &str, seconds: f64) -> String {
    let mut w = String::new();
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    writeln!(w, "<!-- produced by: {command} -->").unwrap();
    writeln!(w, "# dlq consumer_lag benchmark ({mode})\n").unwrap();
    writeln!(w, "- command: `{command}`").unwrap();
    writeln!(w, "- machine: {cores} cores; emitter, consumer and nats-server share them; load average before: see below").unwrap();
    writeln!(w, "- load: {EMITTERS} tasks calling `Emitter::dead_letter` (sled sink, then JetStream publish with PubAck; reconciler on), ~1 KiB `item_data`, distinct items over {JOBS} jobs, {seconds} s per rate; a fresh nats-server, sink and consumer store per rate").unwrap();
    writeln!(w, "- consumer: `run_durable` with `follow: true`, started before the load on the empty stream").unwrap();
    writeln!(w, "- lag = stream last sequence - consumer checkpoint, sampled every {} ms during the load; lag ms = time until the checkpoint reached the sample's last sequence (checkpoint polled every {} ms)\n", SAMPLE_EVERY.as_millis(), POLL_EVERY.as_millis()).unwrap();
    writeln!(w, "| target rate ev/s | achieved ev/s | events | samples | lag p50 ev | lag p99 ev | lag max ev | lag p50 ms | lag p99 ms | lag max ms | catch-up after load ms | applied = emitted |").unwrap();
    writeln!(
        w,
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"
    )
    .unwrap();
    for o in outcomes {
        let (lags, ms) = sorted_lags(o);
        let ev = |q| quantile(&lags, q).map_or("-".into(), |v| v.to_string());
        let mss = |q| quantile(&ms, q).map_or("-".into(), |v| format!("{v:.0}"));
        let ok = if o.applied == o.emitted && o.final_last == o.emitted {
            "yes".to_owned()
        } else {
            format!(
                "**no**: applied {}, emitted {}, stream {}",
                o.applied, o.emitted, o.final_last
            )
        };
        let errors = if o.emit_errors > 0 {
            format!(" ({} emits not published at once)", o.emit_errors)
        } else {
            String::new()
        };
        writeln!(
            w,
            "| {} | {:.0} | {}{errors} | {} | {} | {} | {} | {} | {} | {} | {} | {ok} |",
            rate_name(o.rate),
            o.emitted as f64 / o.load_secs,
            o.emitted,
            o.samples.len(),
            ev(0.5),
            ev(0.99),
            ev(1.0),
            mss(0.5),
            mss(0.99),
            mss(1.0),
            o.catch_up.as_millis(),
        )
        .unwrap();
    }
    writeln!(w, "\nA target rate above what the emitter sustains runs at its maximum (achieved column). Lag in events includes events emitted but not yet fetched, fetched but not yet saved: the checkpoint moves once per saved batch. Figures vary with the machine and its load; reported, never asserted.").unwrap();
    w
}

fn main() {
    let (mut quick, mut benching) = (false, false);
    let (mut seconds, mut rates) = (None::<f64>, None::<Vec<Rate>>);
    let mut shown = Vec::new();
    let mut json = None::<PathBuf>;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--bench" => benching = true,
            "--quick" => quick = true,
            "--json" => json = Some(args.next().expect("--json PATH").into()),
            "--seconds" => {
                let v = args.next().expect("--seconds S");
                seconds = Some(v.parse().expect("--seconds S"));
                shown.push(format!("--seconds {v}"));
            }
            "--rates" => {
                let v = args.next().expect("--rates 1000,5000,max");
                let parsed = v
                    .split(',')
                    .map(|r| match r.trim() {
                        "max" => None,
                        n => Some(n.parse().expect("a rate is a number or max")),
                    })
                    .collect();
                rates = Some(parsed);
                shown.push(format!("--rates {v}"));
            }
            other => eprintln!("ignoring unknown argument {other:?}"),
        }
    }
    let (mode, default_seconds, default_rates): (&str, f64, Vec<Rate>) = match (benching, quick) {
        (false, _) => ("smoke", 1.0, vec![Some(500)]),
        (true, true) => ("quick", 5.0, vec![Some(1_000), Some(5_000), None]),
        (true, false) => (
            "full",
            20.0,
            vec![Some(1_000), Some(5_000), Some(10_000), None],
        ),
    };
    let seconds = seconds.unwrap_or(default_seconds);
    let rates = rates.unwrap_or(default_rates);
    let command = suite::bench_command("consumer_lag", quick, &shown);
    let base = option_env!("CARGO_TARGET_TMPDIR").map_or_else(std::env::temp_dir, PathBuf::from);
    std::fs::create_dir_all(&base).unwrap();
    let tmp = tempfile::tempdir_in(&base).unwrap();
    let load_before = loadavg();
    let started = std::time::Instant::now();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let outcomes: Vec<Outcome> = runtime.block_on(async {
        let mut outcomes = Vec::new();
        for &rate in &rates {
            eprintln!("rate {}: {seconds} s of load ...", rate_name(rate));
            outcomes.push(run_rate(tmp.path(), rate, seconds).await);
        }
        outcomes
    });
    let mut out = report(&outcomes, mode, &command, seconds);
    writeln!(
        out,
        "\nLoad average (1 min) before: {load_before}; after: {}.",
        loadavg()
    )
    .unwrap();
    print!("{out}");
    if benching {
        suite::write_results("consumer_lag", quick, &out);
    }
    if let Some(path) = json {
        let rows: Vec<_> = outcomes.iter().map(|o| suite_row(o, seconds)).collect();
        suite::write(
            &path,
            "consumer_lag",
            mode,
            suite::machine(),
            started.elapsed().as_secs_f64(),
            &rows,
        );
    }
}

/// A rate's lag samples, sorted: in events (stream last sequence minus checkpoint) and in ms.
fn sorted_lags(o: &Outcome) -> (Vec<u64>, Vec<f64>) {
    let mut lags: Vec<u64> = o
        .samples
        .iter()
        .map(|s| s.last.saturating_sub(s.checkpoint))
        .collect();
    lags.sort_unstable();
    let mut ms: Vec<f64> = o.lag_ms.iter().copied().filter(|m| m.is_finite()).collect();
    ms.sort_by(f64::total_cmp);
    (lags, ms)
}

/// One rate's lag in the suite's shape: p99 lag in ms, the rest in the note.
fn suite_row(o: &Outcome, seconds: f64) -> suite::SuiteRow {
    let (lags, ms) = sorted_lags(o);
    let ev = |q| quantile(&lags, q).unwrap_or(0);
    let p99 = quantile(&ms, 0.99).unwrap_or(f64::NAN);
    let figure = match o.rate {
        Some(r) => format!("consumer lag p99, emitting {r} events/s"),
        None => "consumer lag p99, emitting at the emitter's maximum".to_owned(),
    };
    let note = format!(
        "achieved {:.0} events/s for {seconds} s; lag p50/p99/max {}/{}/{} events, p50/max {:.0}/{:.0} ms; catch-up {} ms; applied {} of {} emitted",
        o.emitted as f64 / o.load_secs, ev(0.5), ev(0.99), ev(1.0),
        quantile(&ms, 0.5).unwrap_or(f64::NAN), quantile(&ms, 1.0).unwrap_or(f64::NAN),
        o.catch_up.as_millis(), o.applied, o.emitted
    );
    suite::SuiteRow::new("7 consumers", figure, p99, "ms").note(note)
}
