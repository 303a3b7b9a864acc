//! `dlq-chaos drill`: runs one mode (ours or the baseline) from start to report.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use dlq_testkit::cluster::NODES;
use dlq_testkit::NatsServer;

use crate::cluster;
use crate::emit::unix_ms;
use crate::faults::{self, Mark, Rig, Servers};
use crate::fleet::{copy_tail, Fleet, FleetConfig, SharedTally};
use crate::netns::Partition;
use crate::observe::{read_stream, Seen, Subscriber};
use crate::procs::blocking;
use crate::proxy::Proxy;
use crate::report::{self, DrillResult, ModeResult, Sample};
use crate::summary::{run_repair, run_verify, summarise, Times};
use crate::{err, DrillArgs, Fault, Res};

const SUBJECT: &str = "sys.job.dlq";
const STREAM: &str = "DLQ";
/// A sink counts as drained when its oldest unpublished event is younger than this.
const DRAINED_AGE_MS: u64 = 1500;

/// Runs the drill (and the baseline if asked), writes the report, returns the exit code:
/// 0 pass, 3 our mode lost an acknowledged event or the subscriber saw a duplicate after dedup.
pub async fn run_cli(args: DrillArgs) -> Res<u8> {
    if args.emitters == 0 || args.rate <= 0.0 || args.duration.is_zero() {
        return Err(err("--emitters, --rate and --duration must be above zero"));
    }
    let started = chrono::Utc::now();
    let label = humantime::format_duration(args.duration)
        .to_string()
        .replace(' ', "");
    let out = args.out.clone().unwrap_or_else(|| {
        PathBuf::from("chaos/results").join(format!(
            "{}-{label}-{}",
            args.fault.name(),
            started.format("%Y%m%dT%H%M%SZ")
        ))
    });
    std::fs::create_dir_all(&out)?;
    let nanos = started.timestamp_nanos_opt().unwrap_or(0);
    let work = std::env::temp_dir().join(format!("dlq-chaos-{}-{nanos}", std::process::id()));
    std::fs::create_dir_all(&work)?;
    crate::procs::pin_exe(&work)?;
    eprintln!(
        "dlq-chaos: work dir {}, report in {}",
        work.display(),
        out.display()
    );

    let (mut ours, mut baseline) = (None, None);
    let modes = async {
        if !args.baseline_only {
            ours = Some(run_mode(&args, false, &work.join("ours"), &out).await?);
        }
        if args.baseline_too || args.baseline_only {
            baseline = Some(run_mode(&args, true, &work.join("baseline"), &out).await?);
        }
        Ok::<(), crate::Error>(())
    };
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    let outcome = tokio::select! {
        r = modes => r,
        _ = tokio::signal::ctrl_c() => Err(err("interrupted")),
        _ = term.recv() => Err(err("terminated")),
    };
    if !args.keep {
        let _ = std::fs::remove_dir_all(&work);
    }
    outcome?;

    let pass = ours
        .as_ref()
        .map(|o: &ModeResult| o.lost == 0 && o.subscriber_duplicates_after_dedup == 0);
    let result = DrillResult {
        command: command_line(),
        started_at: started.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
        fault: args.fault,
        net_cut_mode: (args.fault == Fault::NetCut).then_some(args.mode),
        sink_mode: (args.fault == Fault::SinkFail).then_some(args.sink_mode),
        partition_phases: (args.fault == Fault::NetPartition).then(|| {
            faults::partition_phases(&args)
                .map(crate::netns::Phase::describe)
                .to_vec()
        }),
        duration_s: args.duration.as_secs_f64(),
        rate: args.rate,
        emitters: args.emitters,
        warmup_s: args.warmup.as_secs_f64(),
        after_s: args.after.as_secs_f64(),
        emit_policy: format!(
            "retry_attempts 1, retry_delay 500 ms, publish_timeout {}",
            humantime::format_duration(args.publish_timeout)
        ),
        cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
        pass,
        ours,
        baseline,
    };
    std::fs::write(
        out.join("result.json"),
        serde_json::to_string_pretty(&result)?,
    )?;
    let markdown = report::markdown(&result);
    std::fs::write(out.join("report.md"), &markdown)?;
    std::fs::write(out.join("chart.svg"), crate::svg::chart(&result))?;
    println!("{markdown}");
    println!("written: {}", out.display());
    Ok(if pass == Some(false) { 3 } else { 0 })
}

fn command_line() -> String {
    let mut args: Vec<String> = std::env::args().collect();
    if let Some(first) = args.first_mut() {
        *first = "dlq-chaos".into();
    }
    args.join(" ")
}

async fn run_mode(args: &DrillArgs, baseline: bool, work: &Path, out: &Path) -> Res<ModeResult> {
    let mode = if baseline { "baseline" } else { "ours" };
    eprintln!("dlq-chaos: === {} / {mode} ===", args.fault.name());
    std::fs::create_dir_all(work)?;
    // Declared first, dropped last: its namespaces go once everything in them is stopped.
    let partition = match args.fault {
        Fault::NetPartition => Some(blocking(Partition::create)?),
        _ => None,
    };
    let mut servers = start_servers(args, work, partition.as_ref()).await?;
    let proxy = match (&servers, args.fault) {
        (Servers::Single(server), Fault::NetCut) => Some(Proxy::start(server.port()).await?),
        _ => None,
    };
    let emit_url = match (&servers, &proxy, &partition) {
        (_, Some(proxy), _) => proxy.url(),
        (Servers::Single(server), None, Some(partition)) => partition.emit_url(server.port()),
        _ => servers.url(),
    };
    let subscriber = Subscriber::start(&servers.subscriber_url(), SUBJECT).await?;
    let (t0, t0_ms) = (Instant::now(), unix_ms());
    let fleet_config = FleetConfig {
        work: work.to_path_buf(),
        url: emit_url,
        rate_each: args.rate / args.emitters as f64,
        baseline,
        publish_timeout: args.publish_timeout,
        replicas: if matches!(servers, Servers::Cluster { .. }) {
            3
        } else {
            1
        },
        netns: partition.as_ref().map(|p| p.emit_ns().to_owned()),
        drain_timeout: if baseline {
            Duration::ZERO
        } else {
            args.drain_timeout
        },
    };
    let mut fleet = Fleet::start(fleet_config, args.emitters).await?;
    let tally = fleet.tally();
    let samples = Arc::new(Mutex::new(Vec::<Sample>::new()));
    let sampler = tokio::spawn(sample_loop(
        t0,
        tally.clone(),
        subscriber.handle(),
        samples.clone(),
    ));
    let mut marks = vec![Mark {
        t: 0.0,
        what: format!("load started ({mode})"),
    }];

    tokio::time::sleep(args.warmup).await;
    let window = {
        let mut rig = Rig {
            servers: &mut servers,
            proxy: proxy.as_ref(),
            partition: partition.as_ref(),
            fleet: &mut fleet,
            t0,
            marks: &mut marks,
        };
        faults::run(&mut rig, args).await?
    };
    let ms_at = |i: Instant| t0_ms + u64::try_from((i - t0).as_millis()).unwrap_or(0);
    let fault_end_ms = ms_at(window.end);
    let after_deadline = Instant::now() + args.after;
    let mut drained_at = None;
    while Instant::now() < after_deadline {
        if drained_at.is_none() && is_drained(&tally, fault_end_ms, args.emitters) {
            let now = Instant::now();
            drained_at = Some(now);
            marks.push(mark(t0, "backlog drained on every sink"));
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let stop = Instant::now();
    marks.push(mark(t0, "load stopped; emitters drain and exit"));
    fleet
        .stop(args.drain_timeout + Duration::from_secs(60))
        .await?;
    marks.push(mark(t0, "emitters exited"));
    sampler.abort();
    // Our mode repairs what the bus lost after acknowledging it, as an operator would after a
    // failover; the subscriber is still listening, so it receives the repairs too.
    // After stream-loss it finds nothing: anti-entropy re-published what the stream lost.
    let repaired = if baseline {
        Vec::new()
    } else {
        run_repair(args, &fleet.data_dirs(), &servers.url()).await
    };
    let seen_by_subscriber = subscriber.finish(Duration::from_secs(2)).await;
    let stream = read_stream(&servers.url(), STREAM).await?;
    let verify = run_verify(args, &fleet.data_dirs(), &servers.url(), &repaired).await;
    let logs = out.join("logs").join(mode);
    std::fs::create_dir_all(&logs)?;
    for (name, log) in servers.logs() {
        copy_tail(&log, &logs.join(format!("{name}.log")), 32 * 1024);
    }
    for (node, _) in fleet.data_dirs() {
        copy_tail(
            &fleet.log_path(&node),
            &logs.join(format!("{node}.stderr")),
            32 * 1024,
        );
    }
    servers.kill();
    drop(proxy);
    drop(partition);

    let samples = samples.lock().map(|s| s.clone()).unwrap_or_default();
    let times = Times {
        t0,
        t0_ms,
        fault_start: window.start,
        outage_start: window.outage_start,
        fault_end: window.end,
        stop,
        drained_at,
    };
    let result = summarise(
        mode,
        !baseline,
        &tally,
        &seen_by_subscriber,
        &stream,
        &times,
        samples,
        marks,
        verify,
    );
    eprintln!(
        "dlq-chaos: {mode}: acknowledged {}, in stream {}, LOST {}",
        result.acknowledged, result.acked_in_stream, result.lost
    );
    Ok(result)
}

/// The single server (for `net-partition` in the bus namespace, reached by the drill through
/// the control link), or for `cluster-kill` the three-node cluster with the `DLQ` stream
/// created with three replicas (by the library, as the emitters would) and the node the drill
/// never kills: one that does not lead the stream, so the subscriber keeps its connection.
async fn start_servers(
    args: &DrillArgs,
    work: &Path,
    partition: Option<&Partition>,
) -> Res<Servers> {
    if let Some(partition) = partition {
        let host = std::net::IpAddr::V4(partition.plan().bus_ctl_ip);
        let server = blocking(|| NatsServer::try_start_in_netns(work, partition.bus_ns(), host))?;
        return Ok(Servers::Single(Box::new(server)));
    }
    if args.fault != Fault::ClusterKill {
        let server = blocking(|| NatsServer::try_start_in(work))?;
        return Ok(Servers::Single(Box::new(server)));
    }
    let script = cluster::script(args.cluster_script.as_deref())?;
    let mut cluster = cluster::start(&work.join("cluster"), &script)?;
    let config = dlq::bus::BusConfig {
        url: cluster::urls(&cluster),
        replicas: 3,
        publish_timeout: Duration::from_secs(5),
        ..dlq::bus::BusConfig::default()
    };
    let bus = dlq::bus::NatsBus::connect(config).await?;
    let deadline = Instant::now() + Duration::from_secs(60);
    while let Err(e) = bus.ensure_stream().await {
        if Instant::now() > deadline {
            return Err(err(format!(
                "cannot create stream {STREAM} with 3 replicas: {e}"
            )));
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    drop(bus);
    let leader = cluster::wait_stream_leader(&mut cluster, STREAM, Duration::from_secs(60)).await?;
    let survivor = (0..NODES.len())
        .rev()
        .find(|&i| NODES.get(i).copied() != Some(leader.as_str()))
        .unwrap_or(0);
    eprintln!(
        "dlq-chaos: cluster up ({}), stream {STREAM} (3 replicas) led by {leader}; the subscriber uses {}",
        cluster::urls(&cluster),
        NODES.get(survivor).copied().unwrap_or("?")
    );
    Ok(Servers::Cluster {
        cluster: Box::new(cluster),
        survivor,
    })
}

fn mark(t0: Instant, what: &str) -> Mark {
    let t = t0.elapsed().as_secs_f64();
    eprintln!("dlq-chaos: [{t:7.1}s] {what}");
    Mark {
        t,
        what: what.into(),
    }
}

/// Every emitter reported after `since_ms`, and none has an unpublished event older than
/// [`DRAINED_AGE_MS`].
fn is_drained(tally: &SharedTally, since_ms: u64, emitters: usize) -> bool {
    let Ok(t) = tally.lock() else {
        return false;
    };
    t.stats.len() == emitters
        && t.stats
            .values()
            .all(|s| s.t > since_ms && (s.backlog == 0 || s.oldest_age_ms < DRAINED_AGE_MS))
}

async fn sample_loop(
    t0: Instant,
    tally: SharedTally,
    seen: Arc<Mutex<Seen>>,
    samples: Arc<Mutex<Vec<Sample>>>,
) {
    let mut ticks = tokio::time::interval(Duration::from_millis(500));
    loop {
        ticks.tick().await;
        let received = seen.lock().map_or(0, |s| s.items);
        let sample = match tally.lock() {
            Ok(t) => Sample {
                t: t0.elapsed().as_secs_f64(),
                emitted: t.emits.len() as u64,
                acked: t.acked.len() as u64,
                received,
                backlog: t.stats.values().map(|s| s.backlog).sum(),
            },
            Err(_) => return,
        };
        if let Ok(mut samples) = samples.lock() {
            samples.push(sample);
        }
    }
}
