//! 4. The reconciler draining a backlog built with the bus down.

use std::path::Path;
use std::time::{Duration, Instant};

use dlq::bus::Bus;
use dlq::domain::command::Command;
use dlq::emitter::reconciler::ReconcilerConfig;
use dlq::emitter::EmitterBuilder;
use dlq::sink::{LocalSink, Sink, SinkConfig};
use dlq_testkit::items::{dead_lettered_event, template_item};
use dlq_testkit::NatsServer;
use futures::StreamExt;

use crate::run::{connect_bus, cpu_seconds, disk_bytes_written, next_item, run_concurrent};
use crate::run::{wait_healthy, Row, PUBLISH_TIMEOUT, TOPIC};

/// Issue 37: the reconciler drains at least this share of the bus alone (measured after it).
const BUS_SHARE: (f64, &str) = (0.8, ">= 80 % of the bus alone");

/// Builds a backlog of `n` events with the bus down (256 tasks appending dead-letters
/// straight to the sink), then starts a server and times the reconciler until it is empty.
pub async fn drain(base: &Path, n: usize, rows: &mut Vec<Row>) {
    const APPENDERS: usize = 256;
    let dir = base.join(format!("drain-{n}"));
    // 256 appenders queue far more than one group: on a busy machine some wait longer than the
    // default 2 s store timeout (their events are stored anyway); here they keep waiting.
    let mut config = SinkConfig::new(&dir);
    (config.capacity_per_job, config.store_timeout) = (10_000_000, Duration::from_secs(120));
    let (sink, template) = (LocalSink::open(config).expect("open sink"), template_item());
    let (appender, disk_before) = (sink.clone(), disk_bytes_written());
    let run = run_concurrent(APPENDERS, n, move |task, i| {
        let item = std::sync::Arc::new(next_item(&template, task + i));
        let (sink, topic) = (appender.clone(), TOPIC.to_owned());
        async move {
            let appended = sink.append(Command::DeadLetter { topic, item }).await;
            appended.map(|_| false).map_err(|e| e.to_string())
        }
    })
    .await;
    let kib = (disk_bytes_written() - disk_before) as f64 / 1024.0 / n as f64;
    let name = format!("backlog build: Sink::append x{APPENDERS} concurrent, {n} events");
    let note = format!(
        "sink only, no emitter or bus, store timeout 120 s; {kib:.1} KiB to disk per event"
    );
    let (secs, errors) = (run.secs, run.errors.len());
    let row = Row::new("4 drain", name, n).latency(&run.hist);
    let row = row.rates(Some(n as f64 / secs), Some(n as f64 / secs));
    rows.push(row.note(format!("{note}; errors {errors}")));
    eprintln!("  backlog of {n} built in {secs:.1} s");

    let backlog = sink.backlog().expect("backlog").count;
    assert_eq!(backlog, n as u64, "backlog size");
    let server = NatsServer::start();
    let bus = connect_bus(server.url(), true).await;
    wait_healthy(&bus).await;
    bus.ensure_stream().await.expect("stream");
    let config = ReconcilerConfig {
        max_in_flight: 256,
        ..ReconcilerConfig::default()
    };
    let (started, cpu_before) = (Instant::now(), cpu_seconds());
    let emitter = EmitterBuilder::new(sink, bus)
        .publish_timeout(PUBLISH_TIMEOUT)
        .reconciler(Some(config))
        .build();
    let deadline = started + Duration::from_secs(600.max(n as u64 / 1000));
    let mut left = backlog;
    while left > 0 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(5)).await;
        left = emitter.sink().backlog().expect("backlog").count;
    }
    let (secs, cpu) = (started.elapsed().as_secs_f64(), cpu_seconds() - cpu_before);
    emitter.shutdown().await.expect("shutdown");
    drop(server);
    std::fs::remove_dir_all(&dir).expect("remove drain sink");
    let rate = (backlog - left) as f64 / secs;
    let name = format!("reconciler drain of {n} events, max_in_flight 256");
    let mut row = Row::new("4 drain", name, n).rates(None, Some(rate));
    let ceiling = bus_ceiling(n, config.max_in_flight).await;
    row.limit = Some((
        ceiling.events_per_sec.unwrap_or(0.0),
        "bus alone, same window".into(),
    ));
    row.limit_target = Some(BUS_SHARE);
    if left > 0 {
        row = row.target("every event published", false);
    }
    let note = format!(
        "{} published in {secs:.2} s; {left} left; {:.1} µs CPU per event in this process",
        backlog - left,
        cpu * 1e6 / (backlog - left).max(1) as f64
    );
    eprintln!("  drained {} in {secs:.1} s", backlog - left);
    rows.push(row.note(note));
    rows.push(ceiling);
}

/// The bus alone: `n` events like the drained ones, published by one client with `window`
/// publishes awaiting their acks and no sink, to a fresh server: the most a drain could reach
/// on this machine.
async fn bus_ceiling(n: usize, window: usize) -> Row {
    let server = NatsServer::start();
    let bus = connect_bus(server.url(), true).await;
    wait_healthy(&bus).await;
    bus.ensure_stream().await.expect("stream");
    let template = template_item();
    let (started, cpu_before) = (Instant::now(), cpu_seconds());
    let acked = futures::stream::iter(1..=n as u64)
        .map(|seq| {
            let item = next_item(&template, seq as usize);
            let event = dead_lettered_event("bench-ceiling", seq, TOPIC, item);
            let bus = &bus;
            async move { bus.publish(&event).await.is_ok() }
        })
        .buffered(window)
        .filter(|ok| std::future::ready(*ok))
        .count()
        .await;
    let (secs, cpu) = (started.elapsed().as_secs_f64(), cpu_seconds() - cpu_before);
    drop(server);
    let rate = acked as f64 / secs;
    let name = format!("bus alone: publish {n} events, {window} awaiting acks, no sink");
    let row = Row::new("4 drain", name, n).rates(None, Some(rate));
    eprintln!("  bus alone: {acked} acked in {secs:.1} s");
    let per_event = cpu * 1e6 / acked.max(1) as f64;
    row.note(format!(
        "{acked} acked in {secs:.2} s: the drain's ceiling here; {per_event:.1} µs CPU per event in this process"
    ))
}
