//! How fast a consumer rebuilds the dead-letter state from the stream alone.
//!
//! `cargo bench --bench consumer_rebuild -- [--events N]` (default 100,000): fills a sink with N
//! dead-letter events (1 KiB `item_data`, 100 jobs), lets the real reconciler publish them into a
//! private nats-server, then times (1) an in-memory rebuild from the start of the stream
//! (`dlq::consumer::read_from_start`, what `dlq consume` and `dlq verify` do) and (2) a durable
//! consumer's first catch-up into its own sled store; then the two halves of (1) apart: the bus
//! alone (every message fetched, nothing decoded; the first pass, which also copies the payloads,
//! is not timed) and our CPU alone (decode and fold of those payloads, no bus); and (3) the fleet
//! console's first catch-up (`dlq console`'s consumer and its view, until the view holds every
//! item); and (4) sled alone writing the same items as the durable consumer's store does (its
//! chunks, one batch and durable flush per 5,000 events, encoded beforehand: the encoding is
//! timed apart, our CPU for a save), the other half of a durable catch-up, so each rebuild is
//! read against its ceiling in the same run. Without `--bench` (under `cargo test`) it
//! runs with 500 events as a smoke test. Each rebuild runs `--runs` times (default 3; the durable
//! one into a fresh store each time) and the median is reported, with its CPU per event (this
//! process and the nats-server, `/proc/PID/stat`). (5) The cores over the CPU per event of the
//! bus alone and sled alone: what a durable rebuild could reach if reading and writing overlapped
//! perfectly and decoding cost nothing, its third ceiling. Progress goes
//! to stderr. Figures are reported, never asserted. `--json PATH` also writes the suite's rows
//! (`dlq_testkit::bench::suite`).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

/// The allocator the `dlq` binary ships with (src/main.rs), so the figures are the binary's.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::time::{Duration, Instant};

use chrono::Utc;
use dlq::bus::{Bus, BusConfig, NatsBus};
use dlq::consumer::{
    for_each_message, read_from_start, run_durable, ConsumerStore, DurableConfig, Fold,
};
use dlq::domain::command::Command;
use dlq::domain::event::Event;
use dlq::domain::model::{DeadLetteredItem, ErrorType, FailureDetail};
use dlq::emitter::EmitterBuilder;
use dlq::sink::{LocalSink, Sink, SinkConfig};
use dlq_ops::serve::console::{follow, Console, ControlClient};
use dlq_testkit::bench::{cpu, suite};
use dlq_testkit::NatsServer;
use tokio_util::sync::CancellationToken;

async fn fill(sink: &LocalSink, events: usize) {
    let blob = "x".repeat(1024);
    let tasks: Vec<_> = (0..64)
        .map(|task| {
            let (sink, blob) = (sink.clone(), blob.clone());
            tokio::spawn(async move {
                for n in (task..events).step_by(64) {
                    let failure = FailureDetail {
                        attempt_number: 1,
                        timestamp: Utc::now(),
                        error_type: ErrorType::CommandFailed { exit_code: 1 },
                        error_message: format!("step {n} failed"),
                        stack_trace: None,
                        agent_id: "a".into(),
                        step_failed: "shell: make".into(),
                        duration_ms: 1,
                        json_log_location: None,
                    };
                    let data = serde_json::json!({ "blob": blob });
                    let job = format!("job-{}", n % 100);
                    let item =
                        DeadLetteredItem::new(&job, &format!("i{n}"), data, vec![failure]).unwrap();
                    let topic = "bench".to_owned();
                    let command = Command::DeadLetter {
                        topic,
                        item: item.into(),
                    };
                    sink.append(command).await.unwrap();
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
}

/// Seconds sled takes to write `chunks` into a new database at `dir` configured as a
/// consumer's store, in as many batches as a catch-up of `events` saves (one per 5,000), each
/// applied and made durable (sled's flush, then `fdatasync` of its log) before the next.
fn write_chunks_alone(dir: &std::path::Path, chunks: &[Vec<u8>], events: usize) -> f64 {
    let db = sled::Config::new()
        .path(dir)
        .flush_every_ms(None)
        .open()
        .unwrap();
    let log = std::fs::File::open(dir.join("db")).unwrap();
    let saves = events.div_ceil(5_000).max(1);
    let per_save = chunks.len().div_ceil(saves).max(1);
    let started = Instant::now();
    for (save, group) in chunks.chunks(per_save).enumerate() {
        let mut batch = sled::Batch::default();
        for (n, chunk) in group.iter().enumerate() {
            let number = (save * per_save + n) as u64;
            batch.insert(
                [&b"c"[..], &number.to_be_bytes()].concat(),
                chunk.as_slice(),
            );
        }
        batch.insert(&b"m/checkpoint"[..], &(save as u64).to_be_bytes()[..]);
        db.apply_batch(batch).unwrap();
        db.flush().unwrap();
        log.sync_data().unwrap();
    }
    started.elapsed().as_secs_f64()
}

/// CPU seconds used so far by this process and the bus's server together.
fn cpu_with(server: &NatsServer) -> f64 {
    cpu::seconds(None) + cpu::seconds(Some(server.pid()))
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

fn main() {
    let mut args = std::env::args().skip(1);
    let (mut benching, mut events, mut runs) = (false, 100_000usize, 3usize);
    let mut json = None::<std::path::PathBuf>;
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--bench" => benching = true,
            "--events" => {
                events = args
                    .next()
                    .and_then(|n| n.parse().ok())
                    .expect("--events N")
            }
            "--runs" => runs = args.next().and_then(|n| n.parse().ok()).expect("--runs N"),
            "--json" => json = Some(args.next().expect("--json PATH").into()),
            _ => {}
        }
    }
    if !benching {
        (events, runs) = (500, 1);
    }
    let runs = runs.max(1);
    let started = Instant::now();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let work = tempfile::tempdir().unwrap();
        let server = NatsServer::start();
        let sink = LocalSink::open(SinkConfig {
            capacity_per_job: 10_000_000,
            ..SinkConfig::new(work.path().join("data"))
        })
        .unwrap();
        fill(&sink, events).await;
        let bus = NatsBus::connect(BusConfig {
            url: server.url(),
            ..BusConfig::default()
        })
        .await
        .unwrap();
        let emitter = EmitterBuilder::new(sink, bus).build();
        let deadline = Instant::now() + Duration::from_secs(600);
        while emitter.sink().backlog().unwrap().count > 0 && Instant::now() < deadline {
            assert!(emitter.bus().is_healthy() || Instant::now() < deadline);
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        emitter.shutdown().await.unwrap();

        eprintln!("{events} events published; {runs} in-memory rebuild(s) ...");
        let mut in_memory = Vec::new();
        let mut cpu_in_memory = Vec::new();
        let mut items = None;
        for _ in 0..runs {
            let (started, cpu_before) = (Instant::now(), cpu_with(&server));
            let read = read_from_start(&BusConfig::at(server.url()), "DLQ", None).await.unwrap();
            in_memory.push(started.elapsed().as_secs_f64());
            cpu_in_memory.push(cpu_with(&server) - cpu_before);
            assert_eq!(read.fold.stats.applied as usize, events);
            items = Some(read.fold.projection);
        }

        // The other half of a durable catch-up on its own: sled writing the same items in the
        // store's own chunks (its item log), one batch and one durable
        // flush per 5,000 events as the consumer saves, encoded beforehand, nothing else.
        eprintln!("{runs} sled-alone write(s) ...");
        // Our CPU for the same save, apart: every item encoded as the store's chunks.
        let items = items.unwrap();
        let (mut encode_only, mut cpu_encode_only, mut chunks) = (Vec::new(), Vec::new(), Vec::new());
        for _ in 0..runs {
            let (started, cpu_before) = (Instant::now(), cpu_with(&server));
            chunks = dlq::consumer::test_support::item_chunks(items.items.values()).unwrap();
            encode_only.push(started.elapsed().as_secs_f64());
            cpu_encode_only.push(cpu_with(&server) - cpu_before);
        }
        let (mut sled_only, mut cpu_sled_only) = (Vec::new(), Vec::new());
        for run in 0..runs {
            let dir = work.path().join(format!("sled-alone-{run}"));
            let cpu_before = cpu_with(&server);
            sled_only.push(write_chunks_alone(&dir, &chunks, events));
            cpu_sled_only.push(cpu_with(&server) - cpu_before);
        }

        // The two halves of the in-memory rebuild on their own: the bus (messages fetched,
        // nothing decoded) and our CPU (decode + fold of payloads already in memory).
        eprintln!("{runs} read-only pass(es) and decode+fold pass(es) ...");
        let (mut read_only, mut fold_only) = (Vec::new(), Vec::new());
        let (mut cpu_read_only, mut cpu_fold_only) = (Vec::new(), Vec::new());
        let mut payloads: Vec<Vec<u8>> = Vec::with_capacity(events);
        for run in 0..runs {
            let (started, cpu_before) = (Instant::now(), cpu_with(&server));
            let mut count = 0usize;
            for_each_message(&BusConfig::at(server.url()), "DLQ", |message| {
                count += 1;
                if run == 0 {
                    payloads.push(message.payload.to_vec());
                }
            })
            .await
            .unwrap();
            let (elapsed, cpu_used) = (started.elapsed().as_secs_f64(), cpu_with(&server) - cpu_before);
            assert_eq!(count, events);
            if run > 0 || runs == 1 {
                read_only.push(elapsed);
                cpu_read_only.push(cpu_used);
            }
            let (started, cpu_before) = (Instant::now(), cpu_with(&server));
            let mut fold = Fold::untracked();
            for payload in &payloads {
                fold.offer(Event::from_json(payload).unwrap());
            }
            fold_only.push(started.elapsed().as_secs_f64());
            cpu_fold_only.push(cpu_with(&server) - cpu_before);
            assert_eq!(fold.stats.applied as usize, events);
        }

        eprintln!("{runs} durable rebuild(s) ...");
        let config = DurableConfig {
            bus: BusConfig::at(server.url()),
            stream: "DLQ".into(),
            name: "bench".into(),
            from_start: true,
            follow: false,
            accept_gaps: Vec::new(),
        };
        let (mut durable, mut cpu_durable) = (Vec::new(), Vec::new());
        for run in 0..runs {
            // A fresh store each time: a first catch-up.
            let store = ConsumerStore::open(&work.path().join(format!("consumer-{run}"))).unwrap();
            let (started, cpu_before) = (Instant::now(), cpu_with(&server));
            let run = run_durable(&config, &store, CancellationToken::new())
                .await
                .unwrap();
            durable.push(started.elapsed().as_secs_f64());
            cpu_durable.push(cpu_with(&server) - cpu_before);
            assert_eq!(run.applied_this_run as usize, events);
        }
        eprintln!("{runs} console catch-up(s) ...");
        let client = async_nats::connect(server.url()).await.unwrap();
        let (mut console_secs, mut cpu_console) = (Vec::new(), Vec::new());
        for run in 0..runs {
            let store = ConsumerStore::open(&work.path().join(format!("console-{run}"))).unwrap();
            let console = Console::new(ControlClient::new(client.clone(), "dlq.control"));
            let stop = CancellationToken::new();
            let config = DurableConfig {
                name: format!("bench-console-{run}"),
                ..config.clone()
            };
            let (started, cpu_before) = (Instant::now(), cpu_with(&server));
            let following = tokio::spawn(follow(config, store, console.clone(), stop.clone()));
            // Caught up once the view (what the page and the API read) holds every item.
            let deadline = started + Duration::from_secs(600);
            let held = || console.view().nodes().iter().map(|n| n.items).sum::<u64>();
            while held() < events as u64 {
                assert!(Instant::now() < deadline, "the console holds {} of {events} items after 600 s", held());
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            console_secs.push(started.elapsed().as_secs_f64());
            cpu_console.push(cpu_with(&server) - cpu_before);
            stop.cancel();
            following.await.unwrap();
        }
        eprintln!("done");
        let console = median(console_secs);
        let (in_memory, durable) = (median(in_memory), median(durable));
        let (read_only, fold_only) = (median(read_only), median(fold_only));
        let (sled_only, encode_only) = (median(sled_only), median(encode_only));
        // CPU per event, this process and the nats-server together, in µs (median of the runs).
        let us = |cpu: Vec<f64>| median(cpu) / events as f64 * 1e6;
        let (cpu_in_memory, cpu_durable, cpu_console) = (us(cpu_in_memory), us(cpu_durable), us(cpu_console));
        let (cpu_read_only, cpu_fold_only, cpu_sled_only) = (us(cpu_read_only), us(cpu_fold_only), us(cpu_sled_only));
        let cpu_encode_only = us(cpu_encode_only);
        // What the machine's cores could do if the bus's and sled's work (the least a durable
        // rebuild does: read every message, write every item) overlapped perfectly, our own
        // decoding and folding free.
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get()) as f64;
        let cores_ceiling = cores / (cpu_read_only + cpu_sled_only) * 1e6;

        println!(
            "| rebuild from the stream ({events} events, ~1.3 KB each; median of {runs}) | events/s | seconds | CPU µs/event (ours + nats-server) |"
        );
        println!("|---|---:|---:|---:|");
        let line = |what: &str, secs: f64, cpu_us: f64| {
            println!("| {what} | {:.0} | {secs:.2} | {cpu_us:.1} |", events as f64 / secs);
        };
        line("in memory (`dlq consume`, `dlq verify`)", in_memory, cpu_in_memory);
        line("durable consumer into its own sled store, first catch-up", durable, cpu_durable);
        line("the fleet console's first catch-up (consumer, store and view)", console, cpu_console);
        line("the bus alone: fetch every message, decode nothing", read_only, cpu_read_only);
        line("our CPU alone: decode + fold payloads already in memory", fold_only, cpu_fold_only);
        line("our CPU alone: encode every item as the store's chunks", encode_only, cpu_encode_only);
        line(
            "sled alone: the same items written as the store writes them (batch and durable flush per 5,000)",
            sled_only,
            cpu_sled_only,
        );
        println!(
            "| {cores} cores over the CPU of the bus alone + sled alone ({:.1} µs/event) | {cores_ceiling:.0} | – | – |",
            cpu_read_only + cpu_sled_only
        );
        println!("\ntarget: >= 100,000 events/s; reported, not asserted");
        if let Some(path) = &json {
            let note = format!("{events} events of ~1.3 KB from a private nats-server; median of {runs}");
            let with_cpu = |cpu_us: f64| format!("{note}; CPU {cpu_us:.1} µs/event, this process and the nats-server");
            // Every rebuild reads the whole stream: the bus alone is its ceiling; a durable
            // one also writes every item: the slowest of the bus alone, sled alone and the
            // cores doing both's work (the highest a pipelined reader and writer could reach).
            let bus_alone = events as f64 / read_only;
            let bus_and_sled = bus_alone.min(events as f64 / sled_only).min(cores_ceiling);
            let (bus_label, both_label) = (
                "bus alone: fetch every message, decode nothing",
                "bus alone, sled alone writing the same items, or the cores over their CPU per event: the slowest",
            );
            let rows = [
                ("rebuild from the stream, in memory (`dlq consume`, `dlq verify`)", in_memory, cpu_in_memory, bus_alone, bus_label),
                ("rebuild from the stream, durable consumer's first catch-up", durable, cpu_durable, bus_and_sled, both_label),
                ("rebuild from the stream, the fleet console's first catch-up (`dlq console`)", console, cpu_console, bus_and_sled, both_label),
            ]
            .map(|(figure, secs, cpu_us, ceiling, against)| {
                let rate = events as f64 / secs;
                suite::SuiteRow::new("7 consumers", figure, rate, "events/s")
                    .against(ceiling, against)
                    .target(">= 100000 events/s", rate >= 100_000.0)
                    .above_ceiling(ceiling < 100_000.0)
                    .note(with_cpu(cpu_us))
            });
            let halves = [
                ("rebuild from the stream: the bus alone, fetch every message, decode nothing", read_only, cpu_read_only),
                ("rebuild from the stream: our CPU alone, decode + fold payloads already in memory", fold_only, cpu_fold_only),
                ("rebuild from the stream: our CPU alone, encode every item as a durable consumer's store writes it", encode_only, cpu_encode_only),
                ("rebuild from the stream: sled alone, the same items written as a durable consumer's store writes them", sled_only, cpu_sled_only),
            ]
            .map(|(figure, secs, cpu_us)| {
                suite::SuiteRow::new("7 consumers", figure, events as f64 / secs, "events/s").note(with_cpu(cpu_us))
            });
            let cores_row = suite::SuiteRow::new(
                "7 consumers",
                "rebuild from the stream: the cores over the CPU per event of the bus alone + sled alone",
                cores_ceiling,
                "events/s",
            )
            .note(format!("{note}; {cores} cores, {:.1} µs/event", cpu_read_only + cpu_sled_only));
            let rows: Vec<_> = rows.into_iter().chain(halves).chain([cores_row]).collect();
            let mode = if benching { "full" } else { "smoke" };
            suite::write(path, "consumer_rebuild", mode, suite::machine(), started.elapsed().as_secs_f64(), &rows);
        }
    });
}
