//! Injecting a fault for the drill's duration and restoring afterwards.

use std::time::{Duration, Instant};

use serde::Serialize;

use dlq_testkit::cluster::NODES;
use dlq_testkit::{NatsCluster, NatsServer};

use crate::cluster;
use crate::fleet::Fleet;
use crate::netns::{Partition, Phase};
use crate::procs::blocking;
use crate::proxy::{Proxy, ProxyMode};
use crate::{err, CutMode, DrillArgs, Fault, Res, SinkMode};

/// Longest queueing delay of the slow-link phase of `net-partition`.
const SLOW_LATENCY_MS: u32 = 400;

/// The phases of `net-partition`, in order (each a third of the duration).
pub fn partition_phases(args: &DrillArgs) -> [Phase; 3] {
    [
        Phase::Loss { percent: args.loss },
        Phase::Slow {
            kbit: args.slow_kbit,
            latency_ms: SLOW_LATENCY_MS,
        },
        Phase::Cut,
    ]
}

/// Something that happened during the drill, at `t` seconds after the load started.
#[derive(Debug, Clone, Serialize)]
pub struct Mark {
    /// Seconds since the load started.
    pub t: f64,
    /// What happened.
    pub what: String,
}

/// The bus of a drill: one server, or the three-node cluster.
pub enum Servers {
    /// One `nats-server -js`.
    Single(Box<NatsServer>),
    /// Three nodes; `survivor` is never killed (the subscriber is connected to it).
    Cluster {
        /// The nodes.
        cluster: Box<NatsCluster>,
        /// Index of the node the drill never kills.
        survivor: usize,
    },
}

impl Servers {
    /// The URL the emitters use: the server's, or every node's, comma-separated.
    pub fn url(&self) -> String {
        match self {
            Servers::Single(server) => server.url(),
            Servers::Cluster { cluster, .. } => cluster::urls(cluster),
        }
    }

    /// The URL of the independent subscriber: the server, or the node never killed.
    pub fn subscriber_url(&self) -> String {
        match self {
            Servers::Single(server) => server.url(),
            Servers::Cluster { cluster, survivor } => cluster.url(*survivor),
        }
    }

    /// `(name, log file)` of every server.
    pub fn logs(&self) -> Vec<(String, std::path::PathBuf)> {
        match self {
            Servers::Single(server) => {
                vec![("nats-server".into(), server.log_path())]
            }
            Servers::Cluster { cluster, .. } => NODES
                .iter()
                .enumerate()
                .map(|(i, name)| (format!("nats-{name}"), cluster.log_path(i)))
                .collect(),
        }
    }

    /// SIGKILLs every server.
    pub fn kill(&mut self) {
        match self {
            Servers::Single(server) => server.kill(),
            Servers::Cluster { cluster, .. } => cluster.kill_all(),
        }
    }

    fn single(&mut self) -> Res<&mut NatsServer> {
        match self {
            Servers::Single(server) => Ok(server),
            Servers::Cluster { .. } => Err(err("this fault needs a single server")),
        }
    }
}

/// When a fault began, when the outage proper began (for `net-partition` the cut, for `cluster-kill` the second node's
/// kill, which takes the quorum away; for the others the same as `start`) and when the fault
/// ended (restored and healthy).
#[derive(Debug, Clone, Copy)]
pub struct Window {
    /// The fault began.
    pub start: Instant,
    /// The outage began.
    pub outage_start: Instant,
    /// Restored and healthy.
    pub end: Instant,
}

/// The parts a fault acts on.
pub struct Rig<'a> {
    /// The server or cluster.
    pub servers: &'a mut Servers,
    /// The proxy (net-cut only).
    pub proxy: Option<&'a Proxy>,
    /// The namespaces and their link (net-partition only).
    pub partition: Option<&'a Partition>,
    /// The emitters.
    pub fleet: &'a mut Fleet,
    /// When the load started.
    pub t0: Instant,
    /// The timeline.
    pub marks: &'a mut Vec<Mark>,
}

impl Rig<'_> {
    fn mark(&mut self, what: impl Into<String>) {
        push_mark(self.t0, self.marks, what.into());
    }
}

/// Prints `what` with its time since `t0` and adds it to the timeline.
fn push_mark(t0: Instant, marks: &mut Vec<Mark>, what: String) {
    let t = t0.elapsed().as_secs_f64();
    eprintln!("dlq-chaos: [{t:7.1}s] {what}");
    marks.push(Mark { t, what });
}

fn switch(mode: SinkMode) -> &'static str {
    match mode {
        SinkMode::FailWrites => "FAIL_WRITES",
        SinkMode::FailFlush => "FAIL_FLUSH",
    }
}

/// Injects `args.fault`, keeps it for `args.duration`, restores. Returns when the fault
/// began, when the outage proper began and when the fault ended (the bus or network is back
/// and healthy).
pub async fn run(rig: &mut Rig<'_>, args: &DrillArgs) -> Res<Window> {
    let (fault, duration, cut, sink_mode) = (args.fault, args.duration, args.mode, args.sink_mode);
    let start = Instant::now();
    let mut outage_start = start;
    match fault {
        Fault::BusKill => {
            rig.servers.single()?.kill();
            rig.mark("nats-server SIGKILLed");
            tokio::time::sleep(duration).await;
            let server = rig.servers.single()?;
            blocking(|| server.try_restart())?;
            rig.mark("nats-server restarted (same port and store)");
        }
        Fault::BusFreeze => {
            let server = rig.servers.single()?;
            blocking(|| server.try_stop())?;
            rig.mark("nats-server SIGSTOPped");
            tokio::time::sleep(duration).await;
            let server = rig.servers.single()?;
            blocking(|| server.try_cont())?;
            rig.mark("nats-server SIGCONTed and healthy");
        }
        Fault::NetCut => {
            let proxy = rig.proxy.ok_or_else(|| err("net-cut needs the proxy"))?;
            let (mode, name) = match cut {
                CutMode::Blackhole => (ProxyMode::Blackhole, "blackholes"),
                CutMode::Reset => (ProxyMode::Reset, "resets"),
            };
            proxy.set(mode);
            rig.mark(format!("network cut: the proxy {name} every connection"));
            tokio::time::sleep(duration).await;
            proxy.set(ProxyMode::Pass);
            rig.mark("network restored: the proxy forwards again");
        }
        Fault::EmitterKill => {
            rig.servers.single()?.kill();
            rig.mark("nats-server SIGKILLed");
            tokio::time::sleep(duration / 3).await;
            rig.fleet.kill(0).await?;
            rig.mark("emitter chaos-0 SIGKILLed");
            tokio::time::sleep(duration / 3).await;
            rig.fleet.restart(0)?;
            rig.mark("emitter chaos-0 restarted on its data dir");
            let left = duration.saturating_sub(start.elapsed());
            tokio::time::sleep(left).await;
            let server = rig.servers.single()?;
            blocking(|| server.try_restart())?;
            rig.mark("nats-server restarted (same port and store)");
        }
        Fault::SinkFail => {
            let name = switch(sink_mode);
            rig.fleet.set_switch(name, true)?;
            rig.mark(format!("sinks failing ({name}); bus up"));
            tokio::time::sleep(duration).await;
            rig.fleet.set_switch(name, false)?;
            // The emitters poll the switch every 100 ms.
            tokio::time::sleep(Duration::from_millis(200)).await;
            rig.mark("sinks healthy again");
        }
        Fault::NetPartition => {
            let partition = rig
                .partition
                .ok_or_else(|| err("net-partition needs its namespaces"))?;
            let phases = partition_phases(args);
            for (i, phase) in (1u32..).zip(phases) {
                if phase == Phase::Cut {
                    outage_start = Instant::now();
                }
                let commands = blocking(|| partition.start(phase))?;
                rig.mark(format!("{}: {commands}", phase.describe()));
                let end = start + duration * i / phases.len() as u32;
                tokio::time::sleep_until(end.into()).await;
                let commands = blocking(|| partition.heal(phase))?;
                rig.mark(format!("healed: {commands}"));
            }
        }
        Fault::StreamLoss => {
            let url = rig.servers.url();
            rig.mark("the stream starts losing acknowledged messages (deleted by the drill)");
            let deleted = stream_loss(&url, duration).await?;
            rig.mark(format!(
                "the stream lost {deleted} acknowledged messages in all (anti-entropy should re-publish each)"
            ));
        }
        Fault::ClusterKill => {
            let Servers::Cluster { cluster, survivor } = &mut *rig.servers else {
                return Err(err("cluster-kill needs the cluster"));
            };
            let (t0, marks) = (rig.t0, &mut *rig.marks);
            let mut note = |what: String| push_mark(t0, marks, what);
            outage_start = cluster_kill(cluster, *survivor, &mut note, start, duration).await?;
        }
    }
    Ok(Window {
        start,
        outage_start,
        end: Instant::now(),
    })
}

/// `stream-loss`: every second deletes messages at three recent sequences of the stream
/// (the newest, 7 and 13 before it) through JetStream's delete-message API; returns how many
/// it deleted. Nothing else about the stream changes.
async fn stream_loss(url: &str, duration: Duration) -> Res<u64> {
    const STREAM: &str = "DLQ";
    let client = async_nats::connect(url).await?;
    let js = async_nats::jetstream::new(client);
    let end = Instant::now() + duration;
    let mut deleted = 0;
    while Instant::now() < end {
        tokio::time::sleep(
            Duration::from_secs(1).min(end.saturating_duration_since(Instant::now())),
        )
        .await;
        let mut stream = js.get_stream(STREAM).await?;
        let last = stream.info().await?.state.last_sequence;
        for back in [0, 7, 13] {
            let Some(seq) = last.checked_sub(back).filter(|s| *s > 0) else {
                continue;
            };
            // A sequence already deleted (or never stored) answers an error: not counted.
            if matches!(stream.delete_message(seq).await, Ok(true)) {
                deleted += 1;
            }
        }
    }
    Ok(deleted)
}

/// `cluster-kill`: SIGKILLs the stream's leader, waits for the two others to elect a new one;
/// at half the duration SIGKILLs a second node (one of three left: no quorum, publishes fail);
/// at the end restarts both and waits until every node is healthy and the stream has a leader.
/// The `survivor` is never killed. Returns when the second kill happened.
async fn cluster_kill(
    cluster: &mut NatsCluster,
    survivor: usize,
    note: &mut impl FnMut(String),
    start: Instant,
    duration: Duration,
) -> Res<Instant> {
    const STREAM: &str = "DLQ";
    let name = |i: usize| NODES.get(i).copied().unwrap_or("?");
    let others: Vec<usize> = (0..NODES.len()).filter(|&i| i != survivor).collect();
    let (Some(&a), Some(&b)) = (others.first(), others.get(1)) else {
        return Err(err("the cluster has fewer than three nodes"));
    };
    let leader = cluster::wait_stream_leader(cluster, STREAM, Duration::from_secs(10)).await?;
    let first = cluster
        .index_of(&leader)
        .filter(|&i| i != survivor)
        .unwrap_or(a);
    let second = if first == a { b } else { a };
    let role = if name(first) == leader {
        "the stream leader"
    } else {
        "a stream replica"
    };
    cluster.kill(first);
    note(format!(
        "{} ({role}) SIGKILLed: two of three nodes left",
        name(first)
    ));
    // The survivors elect a new stream leader (bounded by the first half).
    let half = start + duration / 2;
    let elected = async {
        loop {
            let left = half.saturating_duration_since(Instant::now());
            if let Ok(now) = cluster::wait_stream_leader(cluster, STREAM, left).await {
                if now != name(first) {
                    return now;
                }
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    };
    if let Ok(leader) = tokio::time::timeout_at(half.into(), elected).await {
        note(format!("stream leader now {leader}"));
    }
    tokio::time::sleep_until(half.into()).await;
    cluster.kill(second);
    let outage_start = Instant::now();
    note(format!(
        "{} SIGKILLed: only {} left, JetStream has no quorum (publishes fail)",
        name(second),
        name(survivor)
    ));
    tokio::time::sleep_until((start + duration).into()).await;
    blocking(|| cluster.try_respawn(first))?;
    blocking(|| cluster.try_respawn(second))?;
    note(format!(
        "{} and {} restarted (same ports and stores)",
        name(first),
        name(second)
    ));
    blocking(|| cluster.try_wait_ready(&[0, 1, 2]))?;
    let group = cluster::wait_stream_group(cluster, STREAM, Duration::from_secs(60)).await?;
    note(format!(
        "cluster recovered: every node healthy, stream leader {}, {} of {} other replicas current",
        group.leader.as_deref().unwrap_or("?"),
        group.current_replicas,
        group.replicas.saturating_sub(1)
    ));
    Ok(outage_start)
}
