#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! Anti-entropy's check rate against a real nats-server:
//! `cargo bench --bench anti_entropy_rate -- [--messages N] [--payload BYTES] [--rounds N]
//! [--emit-seconds S] [--tasks K]`.
//!
//! Publishes N messages (default 500,000, ids `bench:e:{seq}` like a node's event ids,
//! `--payload` bytes each, default 1,000, about an event) into the stream a `NatsBus` creates,
//! then reads their ids back the way an anti-entropy pass does ([`Bus::scan_ids`]: an ephemeral
//! consumer, headers only, 10,000 per fetch) and folds them into ranges of sequences, `--rounds`
//! times. A pass reads every acknowledgement still tracked, so anti-entropy keeps up with any
//! sustained emit rate below the figure printed (events checked per second); the events of a
//! horizon H at rate R take R x H / rate seconds to check.
//!
//! Then, end to end (skipped with `--emit-seconds 0`): a real sled sink and emitter with
//! anti-entropy every 5 s and a 20 s horizon, K tasks (default 64) dead-lettering ~1 KiB items
//! as fast as they can for S seconds (default 30); it prints the emit rate, the passes, events
//! checked and tracked, and how long after the last emit every acknowledgement had been checked
//! past its horizon (nothing tracked). Reports, never asserts.

use std::time::{Duration, Instant};

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use async_nats::jetstream;
use dlq::bus::{Bus, BusConfig, NatsBus, HEADER_MSG_ID};
use dlq::emitter::{AntiEntropyConfig, EmitterBuilder};
use dlq::sink::{LocalSink, SinkConfig};
use dlq_testkit::items::template_item;
use dlq_testkit::NatsServer;

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

struct Args {
    messages: u64,
    payload: usize,
    rounds: usize,
    emit_seconds: u64,
    tasks: usize,
}

fn args() -> Args {
    let mut parsed = Args {
        messages: 500_000,
        payload: 1_000,
        rounds: 3,
        emit_seconds: 30,
        tasks: 64,
    };
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut value = || {
            args.next()
                .expect("a value")
                .parse::<u64>()
                .expect("a number")
        };
        match arg.as_str() {
            "--messages" => parsed.messages = value(),
            "--payload" => parsed.payload = value() as usize,
            "--rounds" => parsed.rounds = value() as usize,
            "--emit-seconds" => parsed.emit_seconds = value(),
            "--tasks" => parsed.tasks = value() as usize,
            "--bench" => {}
            other => panic!("unknown argument {other}"),
        }
    }
    parsed
}

async fn fill(url: &str, messages: u64, payload: usize) -> Duration {
    let js = jetstream::new(async_nats::connect(url).await.unwrap());
    let body = bytes::Bytes::from(vec![b'x'; payload]);
    let started = Instant::now();
    let mut seq = 1;
    while seq <= messages {
        let mut acks = Vec::with_capacity(2_000);
        for _ in 0..2_000.min(messages - seq + 1) {
            let mut headers = async_nats::HeaderMap::new();
            headers.insert(HEADER_MSG_ID, format!("bench:e:{seq}").as_str());
            acks.push(
                js.publish_with_headers("sys.job.dlq", headers, body.clone())
                    .await
                    .unwrap(),
            );
            seq += 1;
        }
        for ack in acks {
            ack.await.unwrap();
        }
    }
    started.elapsed()
}

#[tokio::main]
async fn main() {
    let args = args();
    let server = NatsServer::start();
    let bus = NatsBus::connect(BusConfig::at(server.url())).await.unwrap();
    bus.prepare().await.unwrap();
    eprintln!(
        "publishing {} messages of {} bytes ...",
        args.messages, args.payload
    );
    let filled = fill(&server.url(), args.messages, args.payload).await;
    println!(
        "published {} messages in {:.1} s ({:.0}/s)",
        args.messages,
        filled.as_secs_f64(),
        args.messages as f64 / filled.as_secs_f64()
    );
    println!("| round | ids read | ranges | seconds | checked/s |");
    println!("|---|---|---|---|---|");
    for round in 1..=args.rounds {
        let (mut read, mut ranges, mut last) = (0u64, 0u64, 0u64);
        let mut visit = |_stream_seq: u64, msg_id: &str| {
            let seq: u64 = msg_id.rsplit_once(':').unwrap().1.parse().unwrap();
            read += 1;
            if read == 1 || seq != last + 1 {
                ranges += 1;
            }
            last = seq;
        };
        let started = Instant::now();
        bus.scan_ids(1, args.messages, &mut visit).await.unwrap();
        let took = started.elapsed().as_secs_f64();
        assert_eq!(read, args.messages, "every message read");
        println!(
            "| {round} | {read} | {ranges} | {took:.2} | {:.0} |",
            read as f64 / took
        );
    }
    drop(server);
    if args.emit_seconds > 0 {
        end_to_end(args.emit_seconds, args.tasks).await;
    }
}

async fn end_to_end(seconds: u64, tasks: usize) {
    let server = NatsServer::start();
    let dir = tempfile::tempdir().unwrap();
    let sink = LocalSink::open(SinkConfig::new(dir.path())).unwrap();
    let bus = NatsBus::connect(BusConfig::at(server.url())).await.unwrap();
    let config = AntiEntropyConfig {
        interval: Duration::from_secs(5),
        horizon: Duration::from_secs(20),
        ..AntiEntropyConfig::default()
    };
    let emitter = EmitterBuilder::new(sink, bus)
        .anti_entropy(Some(config))
        .build();
    while !emitter.bus().is_healthy() {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    eprintln!("emitting for {seconds} s with {tasks} tasks ...");
    let acked = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let stop = started + Duration::from_secs(seconds);
    let workers: Vec<_> = (0..tasks)
        .map(|task| {
            let (emitter, acked) = (emitter.clone(), acked.clone());
            tokio::spawn(async move {
                let mut n = 0;
                while Instant::now() < stop {
                    let mut item = template_item();
                    item.item_id = format!("t{task}-{n}");
                    n += 1;
                    if emitter.dead_letter("bench", item).await.unwrap().published {
                        acked.fetch_add(1, Ordering::Relaxed);
                    }
                }
            })
        })
        .collect();
    let mut most_tracked = 0;
    while workers.iter().any(|w| !w.is_finished()) {
        tokio::time::sleep(Duration::from_millis(500)).await;
        most_tracked = most_tracked.max(emitter.anti_entropy_stats().unwrap().tracked);
    }
    let emitting = started.elapsed().as_secs_f64();
    let acked = acked.load(Ordering::Relaxed);
    let stopped = Instant::now();
    let limit = stopped + Duration::from_secs(600);
    while emitter.anti_entropy_stats().unwrap().tracked > 0 && Instant::now() < limit {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let settled = stopped.elapsed().as_secs_f64();
    let stats = emitter.anti_entropy_stats().unwrap();
    println!();
    println!("| emitted and acknowledged | emit rate | passes | checked | missing | most tracked | left tracked | every ack checked past the 20 s horizon, s after the last emit |");
    println!("|---|---|---|---|---|---|---|---|");
    println!(
        "| {acked} | {:.0}/s | {} | {} | {} | {most_tracked} | {} | {settled:.1} |",
        acked as f64 / emitting,
        stats.passes,
        stats.checked,
        stats.missing,
        stats.tracked
    );
    emitter.shutdown().await.unwrap();
}
