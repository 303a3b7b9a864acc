//! The three-node JetStream cluster of the `cluster-kill` drill, from the deployed configs of
//! `deploy/nats-cluster/`, and what the drill asks it about its stream.
//!
//! The cluster itself is [`dlq_testkit::NatsCluster`]: `cluster.sh render` writes the three
//! node configs into the drill's work dir with nine free loopback ports (client, route,
//! monitoring) and stores under that dir, so the drill runs the configs that are deployed;
//! each node is a `nats-server -c nN.conf` tied to the drill runner, so it can be SIGKILLed and
//! restarted on the same ports and store, and none outlives the drill.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use async_nats::jetstream;
use dlq_testkit::cluster::NODES;
use dlq_testkit::NatsCluster;

use crate::procs::blocking;
use crate::{err, Res};

/// Longest wait for the cluster (or the restarted nodes) to become healthy.
pub const READY_TIMEOUT: Duration = Duration::from_secs(60);

/// What the stream's replica group looks like, through one node.
#[derive(Debug, Clone, Default)]
pub struct StreamGroup {
    /// The leader's name, if one is elected.
    pub leader: Option<String>,
    /// Replicas (besides the leader) that are current and online.
    pub current_replicas: usize,
    /// Configured replicas.
    pub replicas: usize,
}

/// Renders the configs into `dir` with `script` (`cluster.sh`), starts the three nodes and
/// waits until every node answers `/healthz` and knows the JetStream meta leader.
pub fn start(dir: &Path, script: &Path) -> Res<NatsCluster> {
    Ok(blocking(|| {
        NatsCluster::try_start_in(dir, script, READY_TIMEOUT)
    })?)
}

/// Every node's URL, comma-separated (the form `BusConfig::url` and `--nats-url` take).
pub fn urls(cluster: &NatsCluster) -> String {
    cluster.urls().join(",")
}

/// The replica group of `stream` as node `i` reports it (`None`: no answer within 3 s,
/// e.g. while the stream has no leader).
pub async fn stream_group(cluster: &NatsCluster, i: usize, stream: &str) -> Option<StreamGroup> {
    let url = cluster.url(i);
    let ask = async {
        let client = async_nats::ConnectOptions::new()
            .connection_timeout(Duration::from_secs(2))
            .connect(url)
            .await
            .ok()?;
        let mut js = jetstream::new(client);
        js.set_timeout(Duration::from_secs(2));
        let mut handle = js.get_stream(stream).await.ok()?;
        let info = handle.info().await.ok()?;
        let cluster = info.cluster.as_ref();
        Some(StreamGroup {
            leader: cluster.and_then(|c| c.leader.clone()),
            current_replicas: cluster.map_or(0, |c| {
                c.replicas
                    .iter()
                    .filter(|p| p.current && !p.offline)
                    .count()
            }),
            replicas: info.config.num_replicas,
        })
    };
    tokio::time::timeout(Duration::from_secs(3), ask)
        .await
        .ok()
        .flatten()
}

/// Waits until the stream has a leader (asked through any running node); returns its name.
pub async fn wait_stream_leader(
    cluster: &mut NatsCluster,
    stream: &str,
    timeout: Duration,
) -> Res<String> {
    let group = wait_stream_group(cluster, stream, timeout).await?;
    group.leader.ok_or_else(|| err("no stream leader"))
}

/// Waits until the stream has a leader (asked through any running node); returns its
/// replica group (`leader` is set).
pub async fn wait_stream_group(
    cluster: &mut NatsCluster,
    stream: &str,
    timeout: Duration,
) -> Res<StreamGroup> {
    let deadline = Instant::now() + timeout;
    loop {
        for i in 0..NODES.len() {
            if !cluster.is_running(i) {
                continue;
            }
            if let Some(group) = stream_group(cluster, i, stream)
                .await
                .filter(|g| g.leader.is_some())
            {
                return Ok(group);
            }
        }
        if Instant::now() > deadline {
            return Err(err(format!(
                "stream {stream} has no leader after {timeout:?}"
            )));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// `--cluster-script`, else `deploy/nats-cluster/cluster.sh` under the current directory, else
/// under the source tree this binary was built from.
pub fn script(given: Option<&Path>) -> Res<PathBuf> {
    if let Some(path) = given {
        return Ok(path.to_path_buf());
    }
    [
        PathBuf::from("deploy/nats-cluster/cluster.sh"),
        dlq_testkit::cluster::script(),
    ]
    .into_iter()
    .find(|p| p.is_file())
    .ok_or_else(|| {
        err("deploy/nats-cluster/cluster.sh not found: run from the repository root or pass --cluster-script")
    })
}
