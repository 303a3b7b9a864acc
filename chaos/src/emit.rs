//! `dlq-chaos emit`: one emitter process of a drill.
//!
//! It embeds the library exactly as `dlq` does (the sink's segment log first, then NATS
//! JetStream) and dead-letters items at a fixed rate, each emit in its own task, as a
//! scheduler's workers would. On stdout, one line per fact:
//!
//! * `ACK <event_id>`: the event is durable in the sink (the emit returned `Ok`);
//! * `NOTSTORED <event_id> <published 0|1>`: the sink refused it (published anyway or not);
//! * `EMIT <start_unix_ms> <latency_us> <ok|ok-unpublished|notstored|unconfirmed|error>`: one emit call;
//! * `STAT {json}` every 500 ms: counters, unpublished backlog, memory;
//! * `FINAL {json}` once, after stopping.
//!
//! It stops when stdin closes (or reads `STOP`) or on SIGTERM/SIGINT: no new emits, waits for
//! the emits in flight, then (unless `--baseline`) waits up to `--drain-timeout` for the
//! reconciler to publish the backlog, prints `FINAL` and exits. Fault switches are files in
//! `--control-dir`: `FAIL_WRITES`, `FAIL_FLUSH` (checked every 100 ms).

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use chrono::Utc;
use dlq::bus::{BusConfig, NatsBus};
use dlq::domain::model::{DeadLetteredItem, ErrorType, FailureDetail};
use dlq::emitter::reconciler::ReconcilerConfig;
use dlq::emitter::{
    AntiEntropyConfig, EmitError, Emitter, EmitterBuilder, RetryBackoff, TopicPolicies, TopicPolicy,
};
use dlq::sink::{LocalSink, Sink, SinkConfig};
use serde_json::json;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::sync::{mpsc, Semaphore};

use crate::emit_side::{memory_kb, stat_loop, terminated, watch_switches, write_lines};
use crate::{err, Res};

/// Options of `dlq-chaos emit`.
#[derive(Debug, clap::Args)]
pub struct EmitArgs {
    /// The sink's data directory.
    #[arg(long)]
    pub data_dir: PathBuf,
    /// Directory watched for fault switch files (default: `<data-dir>.control`).
    #[arg(long)]
    pub control_dir: Option<PathBuf>,
    /// Node id of the sink.
    #[arg(long)]
    pub node_id: String,
    /// NATS URL, or a cluster's URLs separated by commas.
    #[arg(long)]
    pub nats_url: String,
    /// Replicas of the stream (3 on a three-node cluster).
    #[arg(long, default_value_t = 1)]
    pub replicas: usize,
    /// Emits per second.
    #[arg(long)]
    pub rate: f64,
    /// Incarnation number (item ids stay unique across restarts of one data dir).
    #[arg(long, default_value_t = 0)]
    pub incarnation: u32,
    /// Baseline: no reconciler (a plain sink-then-publish emitter).
    #[arg(long)]
    pub baseline: bool,
    /// Per-attempt publish timeout.
    #[arg(long, default_value = "1s", value_parser = humantime::parse_duration)]
    pub publish_timeout: Duration,
    /// Longest wait for the backlog to drain after stopping.
    #[arg(long, default_value = "120s", value_parser = humantime::parse_duration)]
    pub drain_timeout: Duration,
    /// Most emits in flight at once (a scheduler's worker pool).
    #[arg(long, default_value_t = 2000)]
    pub max_in_flight: usize,
    /// Time between anti-entropy passes (ours only; the baseline runs none). Shorter than the
    /// library's 30 s default so that a drill sees repairs within its `--after`.
    #[arg(long, default_value = "1s", value_parser = humantime::parse_duration)]
    pub anti_entropy_interval: Duration,
    /// How long an acknowledged event is checked (ours only).
    #[arg(long, default_value = "30s", value_parser = humantime::parse_duration)]
    pub anti_entropy_horizon: Duration,
}

/// The emitter as the drill builds it.
pub(crate) type ChaosEmitter = Emitter<LocalSink, NatsBus>;

/// What an emitter counted.
#[derive(Default)]
pub(crate) struct Counters {
    pub(crate) started: AtomicU64,
    pub(crate) done: AtomicU64,
    pub(crate) acked: AtomicU64,
    pub(crate) not_stored: AtomicU64,
    /// Emits the sink's writer took but confirmed too late (stored late, published by the
    /// reconciler; not counted as acknowledged).
    pub(crate) unconfirmed: AtomicU64,
    pub(crate) errors: AtomicU64,
    pub(crate) peak_backlog: AtomicU64,
}

/// Milliseconds since the Unix epoch.
pub fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// Runs the emitter until told to stop.
pub async fn run(args: EmitArgs) -> Res<u8> {
    let mut sink_config = SinkConfig::new(&args.data_dir);
    sink_config.node_id = Some(args.node_id.clone());
    let sink = LocalSink::open(sink_config)?;
    let faults = sink.faults().clone();
    let bus_config = BusConfig {
        url: args.nats_url.clone(),
        publish_timeout: args.publish_timeout,
        replicas: args.replicas,
        ..BusConfig::default()
    };
    let bus = match NatsBus::connect(bus_config).await {
        Ok(bus) => bus,
        Err(e) => {
            sink.close().await?;
            return Err(e.into());
        }
    };
    let policies = TopicPolicies {
        default: TopicPolicy {
            retry_attempts: 1,
            retry_delay: Duration::from_millis(500),
            backoff: RetryBackoff::Fixed,
        },
        topics: Default::default(),
    };
    let reconciler = ReconcilerConfig {
        enabled: !args.baseline,
        ..ReconcilerConfig::default()
    };
    let emitter = EmitterBuilder::new(sink, bus)
        .policies(policies)
        .publish_timeout(args.publish_timeout)
        .reconciler(Some(reconciler))
        .anti_entropy((!args.baseline).then_some(AntiEntropyConfig {
            interval: args.anti_entropy_interval,
            horizon: args.anti_entropy_horizon,
            ..AntiEntropyConfig::default()
        }))
        .build();

    let (out_tx, out_rx) = mpsc::unbounded_channel::<String>();
    // Set when stdout breaks: the drill runner is gone, so nobody waits for a drain.
    let orphaned = Arc::new(tokio::sync::Notify::new());
    let writer = tokio::spawn(write_lines(out_rx, orphaned.clone()));
    let counters = Arc::new(Counters::default());
    let control = args.control_dir.clone().unwrap_or_else(|| {
        let mut dir = args.data_dir.clone().into_os_string();
        dir.push(".control");
        PathBuf::from(dir)
    });
    let watcher = tokio::spawn(watch_switches(control, faults));
    let stat = tokio::spawn(stat_loop(emitter.clone(), counters.clone(), out_tx.clone()));

    let permits = Arc::new(Semaphore::new(args.max_in_flight.max(1)));
    load(&args, &emitter, &counters, &permits, &out_tx).await;

    // Stop: wait for the emits in flight (each is bounded by the emit budget).
    let all = u32::try_from(args.max_in_flight.max(1)).unwrap_or(u32::MAX);
    let budget = emitter.budget("chaos") * 2 + Duration::from_secs(5);
    let stopped = Instant::now();
    let finish = async {
        let _ = tokio::time::timeout(budget, permits.acquire_many(all)).await;
        if args.baseline {
            Ok(emitter.sink().backlog()?.count == 0)
        } else {
            wait_for_drain(&emitter, args.drain_timeout).await
        }
    };
    let drained = tokio::select! {
        drained = finish => drained?,
        _ = terminated() => {
            eprintln!("dlq-chaos emit: signalled again while draining; exiting now");
            stat.abort();
            watcher.abort();
            emitter.shutdown().await?;
            return Ok(1);
        }
        _ = orphaned.notified() => {
            stat.abort();
            watcher.abort();
            emitter.shutdown().await?;
            return Ok(1);
        }
    };
    let drain_ms = u64::try_from(stopped.elapsed().as_millis()).unwrap_or(u64::MAX);
    stat.abort();
    watcher.abort();
    let backlog = emitter.sink().backlog()?;
    let (rss, hwm) = memory_kb();
    let c = &counters;
    let ae = emitter.anti_entropy_stats().unwrap_or_default();
    let last = json!({
        "node_id": args.node_id,
        "incarnation": args.incarnation,
        "emitted": c.done.load(Ordering::SeqCst),
        "acked": c.acked.load(Ordering::SeqCst),
        "not_stored": c.not_stored.load(Ordering::SeqCst),
        "unconfirmed": c.unconfirmed.load(Ordering::SeqCst),
        "errors": c.errors.load(Ordering::SeqCst),
        "unpublished": backlog.count,
        "drained": drained,
        "drain_ms_after_stop": drain_ms,
        "peak_backlog": c.peak_backlog.load(Ordering::SeqCst).max(backlog.count),
        "rss_kb": rss,
        "hwm_kb": hwm,
        "anti_entropy_checked": ae.checked,
        "anti_entropy_missing": ae.missing,
        "anti_entropy_republished": ae.republished,
    });
    let _ = out_tx.send(format!("FINAL {last}"));
    drop(out_tx);
    let _ = writer.await;
    emitter.shutdown().await?;
    Ok(0)
}

/// Emits at the rate until stdin closes, `STOP` is read, or SIGTERM/SIGINT arrives.
async fn load(
    args: &EmitArgs,
    emitter: &ChaosEmitter,
    counters: &Arc<Counters>,
    permits: &Arc<Semaphore>,
    out: &mpsc::UnboundedSender<String>,
) {
    let period = Duration::from_secs_f64(1.0 / args.rate.max(0.001));
    let mut ticks = tokio::time::interval(period);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut stdin = BufReader::new(tokio::io::stdin()).lines();
    let term = terminated();
    tokio::pin!(term);
    let mut n = 0u64;
    loop {
        tokio::select! {
            line = stdin.next_line() => match line {
                Ok(Some(l)) if l.trim() != "STOP" => continue,
                _ => return,
            },
            _ = &mut term => return,
            _ = ticks.tick() => {}
        }
        let Ok(permit) = permits.clone().acquire_owned().await else {
            return;
        };
        let Some(item) = item(&args.node_id, args.incarnation, n) else {
            continue;
        };
        n += 1;
        counters.started.fetch_add(1, Ordering::Relaxed);
        let (emitter, counters, out) = (emitter.clone(), counters.clone(), out.clone());
        tokio::spawn(async move {
            let start_ms = unix_ms();
            let started = Instant::now();
            let result = emitter.dead_letter("chaos", item).await;
            let micros = u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX);
            let outcome = match result {
                Ok(receipt) => {
                    counters.acked.fetch_add(1, Ordering::Relaxed);
                    for id in &receipt.event_ids {
                        let _ = out.send(format!("ACK {id}"));
                    }
                    if receipt.published {
                        "ok"
                    } else {
                        "ok-unpublished"
                    }
                }
                Err(EmitError::NotStored {
                    event_ids,
                    published,
                    ..
                }) => {
                    counters.not_stored.fetch_add(1, Ordering::Relaxed);
                    for id in &event_ids {
                        let _ = out.send(format!("NOTSTORED {id} {}", u8::from(published)));
                    }
                    "notstored"
                }
                Err(EmitError::Unconfirmed { .. }) => {
                    counters.unconfirmed.fetch_add(1, Ordering::Relaxed);
                    "unconfirmed"
                }
                Err(e) => {
                    counters.errors.fetch_add(1, Ordering::Relaxed);
                    eprintln!("dlq-chaos emit: emit refused: {e}");
                    "error"
                }
            };
            let _ = out.send(format!("EMIT {start_ms} {micros} {outcome}"));
            counters.done.fetch_add(1, Ordering::Relaxed);
            drop(permit);
        });
    }
}

/// The `n`-th item of this emitter: unique ids, 5,000 items per job (below the job capacity).
fn item(node: &str, incarnation: u32, n: u64) -> Option<DeadLetteredItem> {
    let job_id = format!("{node}-i{incarnation}-j{}", n / 5000);
    let message = format!("cargo test failed with exit code 101 after {n}.2s in /tmp/w{n}");
    let failure = FailureDetail {
        attempt_number: 1,
        timestamp: Utc::now(),
        error_type: ErrorType::CommandFailed { exit_code: 101 },
        error_message: message,
        stack_trace: Some(format!("thread 'main' panicked at src/lib.rs:{n}")),
        agent_id: format!("agent-{}", n % 4),
        step_failed: "shell: cargo test".into(),
        duration_ms: 1000 + n % 5000,
        json_log_location: None,
    };
    let data = json!({ "file": format!("src/module_{n}.rs"), "priority": n % 10 });
    DeadLetteredItem::new(&job_id, &format!("item-{n}"), data, vec![failure]).ok()
}

/// Waits until the backlog is empty or `timeout` passes; true if it emptied.
async fn wait_for_drain(emitter: &ChaosEmitter, timeout: Duration) -> Res<bool> {
    let deadline = Instant::now() + timeout;
    loop {
        let backlog = emitter.sink().backlog().map_err(|e| err(e.to_string()))?;
        if backlog.count == 0 {
            return Ok(true);
        }
        if Instant::now() >= deadline {
            return Ok(false);
        }
        emitter.wake_reconciler();
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
