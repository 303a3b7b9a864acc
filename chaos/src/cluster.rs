//! A private three-node JetStream cluster for the `cluster-kill` drill, from the deployed
//! configs of `deploy/nats-cluster/`.
//!
//! `cluster.sh render` writes the three node configs into the drill's work dir with nine free
//! loopback ports (client, route, monitoring) and stores under that dir, so the drill runs the
//! configs that are deployed; each node is then started by [`NatsProc::start_node`] (through
//! `dlq-chaos guard`, like the single server), so it can be SIGKILLed and restarted on the same
//! ports and store, and none outlives the drill.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use async_nats::jetstream;

use crate::procs::{free_port, http_get, NatsProc};
use crate::{err, Res};

/// The nodes' `server_name`s, as in `deploy/nats-cluster/nN.conf`.
pub const NODES: [&str; 3] = ["n1", "n2", "n3"];
/// Longest wait for the cluster (or the restarted nodes) to become healthy.
const READY_TIMEOUT: Duration = Duration::from_secs(60);

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

/// Three `nats-server` processes of one cluster.
pub struct NatsCluster {
    nodes: Vec<NatsProc>,
    client: [u16; 3],
    http: [u16; 3],
    dir: PathBuf,
}

impl NatsCluster {
    /// Renders the configs into `dir` with `script` (`cluster.sh`), starts the three nodes and
    /// waits until every node answers `/healthz` and knows the JetStream meta leader.
    pub async fn start(dir: &Path, script: &Path) -> Res<NatsCluster> {
        std::fs::create_dir_all(dir)?;
        let dir = std::fs::canonicalize(dir)?;
        let mut taken = Vec::new();
        let mut pick = || -> Res<[u16; 3]> {
            let mut three = [0u16; 3];
            for slot in &mut three {
                let mut port = free_port(0)?;
                while taken.contains(&port) {
                    port = free_port(0)?;
                }
                taken.push(port);
                *slot = port;
            }
            Ok(three)
        };
        let (client, route, http) = (pick()?, pick()?, pick()?);
        render(script, &dir, &client, &route, &http).await?;
        let mut nodes = Vec::new();
        for (i, name) in NODES.iter().enumerate() {
            let node_dir = dir.join(name);
            let conf = node_dir.join(format!("{name}.conf"));
            let log = node_dir.join("nats-server.log");
            nodes.push(NatsProc::start_node(&conf, client[i], http[i], &log).await?);
        }
        let cluster = NatsCluster {
            nodes,
            client,
            http,
            dir,
        };
        cluster.wait_healthy(&[0, 1, 2]).await?;
        Ok(cluster)
    }

    /// `nats://127.0.0.1:PORT` of node `i`.
    pub fn url(&self, i: usize) -> String {
        format!(
            "nats://127.0.0.1:{}",
            self.client.get(i).copied().unwrap_or(0)
        )
    }

    /// Every node's URL, comma-separated (the form `BusConfig::url` and `--nats-url` take).
    pub fn urls(&self) -> String {
        (0..NODES.len())
            .map(|i| self.url(i))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// The index of the node called `name`.
    pub fn index_of(name: &str) -> Option<usize> {
        NODES.iter().position(|n| *n == name)
    }

    /// Node `i`'s log file.
    pub fn log_path(&self, i: usize) -> PathBuf {
        self.dir
            .join(NODES.get(i).copied().unwrap_or("n1"))
            .join("nats-server.log")
    }

    /// SIGKILLs node `i` (store and ports are kept for the restart).
    pub async fn kill(&mut self, i: usize) -> Res<()> {
        let node = self
            .nodes
            .get_mut(i)
            .ok_or_else(|| err(format!("no node {i}")))?;
        node.kill().await;
        Ok(())
    }

    /// SIGKILLs every node.
    pub async fn kill_all(&mut self) {
        for node in &mut self.nodes {
            node.kill().await;
        }
    }

    /// Starts node `i` again on its config (same ports and store); returns once it listens.
    pub async fn restart(&mut self, i: usize) -> Res<()> {
        let node = self
            .nodes
            .get_mut(i)
            .ok_or_else(|| err(format!("no node {i}")))?;
        node.restart().await
    }

    /// Waits until each listed node runs, answers `/healthz` with 200 (in a cluster: it is
    /// current with the meta leader and its streams) and knows the meta leader.
    pub async fn wait_healthy(&self, nodes: &[usize]) -> Res<()> {
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            let mut pending = Vec::new();
            for &i in nodes {
                let port = self.http.get(i).copied().unwrap_or(0);
                let running = self.nodes.get(i).is_some_and(NatsProc::is_running);
                if !running
                    || !crate::procs::healthz(port).await
                    || meta_leader(port).await.is_none()
                {
                    pending.push(NODES.get(i).copied().unwrap_or("?"));
                }
            }
            if pending.is_empty() {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(err(format!(
                    "cluster nodes {pending:?} not healthy within {READY_TIMEOUT:?} (no /healthz 200 or no meta leader); logs under {}",
                    self.dir.display()
                )));
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// The replica group of `stream` as node `i` reports it (`None`: no answer within 3 s,
    /// e.g. while the stream has no leader).
    pub async fn stream_group(&self, i: usize, stream: &str) -> Option<StreamGroup> {
        let url = self.url(i);
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
    pub async fn wait_stream_leader(&self, stream: &str, timeout: Duration) -> Res<String> {
        let group = self.wait_stream_group(stream, timeout).await?;
        group.leader.ok_or_else(|| err("no stream leader"))
    }

    /// Waits until the stream has a leader (asked through any running node); returns its
    /// replica group (`leader` is set).
    pub async fn wait_stream_group(&self, stream: &str, timeout: Duration) -> Res<StreamGroup> {
        let deadline = Instant::now() + timeout;
        loop {
            for i in 0..NODES.len() {
                if !self.nodes.get(i).is_some_and(NatsProc::is_running) {
                    continue;
                }
                if let Some(group) = self
                    .stream_group(i, stream)
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
}

/// The JetStream meta leader node `http` knows of (`/jsz` → `meta_cluster.leader`).
async fn meta_leader(http: u16) -> Option<String> {
    let (status, body) = http_get(http, "/jsz").await?;
    if status != 200 {
        return None;
    }
    let jsz: serde_json::Value = serde_json::from_str(&body).ok()?;
    let leader = jsz["meta_cluster"]["leader"].as_str()?;
    (!leader.is_empty()).then(|| leader.to_owned())
}

/// `cluster.sh render` with the chosen ports and base dir (bounded to 30 s).
async fn render(
    script: &Path,
    dir: &Path,
    client: &[u16; 3],
    route: &[u16; 3],
    http: &[u16; 3],
) -> Res<()> {
    let list = |ports: &[u16; 3]| {
        ports
            .iter()
            .map(u16::to_string)
            .collect::<Vec<_>>()
            .join(" ")
    };
    let run = tokio::process::Command::new("bash")
        .arg(script)
        .arg("render")
        .env("DLQ_CLUSTER_DIR", dir)
        .env("DLQ_CLUSTER_CLIENT_PORTS", list(client))
        .env("DLQ_CLUSTER_ROUTE_PORTS", list(route))
        .env("DLQ_CLUSTER_HTTP_PORTS", list(http))
        .env("NATS_SERVER_BIN", crate::procs::nats_server_bin()?)
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(Duration::from_secs(30), run)
        .await
        .map_err(|_| err(format!("{} render took over 30 s", script.display())))??;
    if !out.status.success() {
        return Err(err(format!(
            "{} render failed: {}{}",
            script.display(),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )));
    }
    Ok(())
}

/// `--cluster-script`, else `deploy/nats-cluster/cluster.sh` under the current directory, else
/// under the source tree this binary was built from.
pub fn script(given: Option<&Path>) -> Res<PathBuf> {
    if let Some(path) = given {
        return Ok(path.to_path_buf());
    }
    let relative = Path::new("deploy/nats-cluster/cluster.sh");
    [
        relative.to_path_buf(),
        Path::new(env!("CARGO_MANIFEST_DIR")).join(relative),
    ]
    .into_iter()
    .find(|p| p.is_file())
    .ok_or_else(|| {
        err("deploy/nats-cluster/cluster.sh not found: run from the repository root or pass --cluster-script")
    })
}
