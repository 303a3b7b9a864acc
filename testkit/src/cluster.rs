//! A private three-node NATS JetStream cluster, from `deploy/nats-cluster/`.
//!
//! [`NatsCluster::start`] picks nine free loopback ports, lets `deploy/nats-cluster/cluster.sh
//! render` write the three node configs into a base dir (so the cluster runs the deployed
//! configs), then spawns each `nats-server -c nN.conf` itself with [`spawn_tied`]: `Drop`
//! kills every node, and a node also dies if this process is killed. Nodes can be SIGKILLed
//! and restarted on the same ports and store.
//!
//! [`NatsCluster::start`] runs the nodes without TLS or users (`DLQ_CLUSTER_SECURITY=none`),
//! for tests of failover; [`NatsCluster::start_secure`] runs the deployed default: TLS for
//! clients, mutual TLS between the nodes, and the users of `deploy/nats-permissions.conf`.
//!
//! [`ScriptCluster`] drives `cluster.sh start|status|kill|restart|stop` itself (the script
//! daemonizes the nodes); its `Drop` runs `cluster.sh stop` and then kills any node left in
//! a pid file.

use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use tempfile::TempDir;

use crate::nats::{find_binary, healthz_ok};
use crate::net::{http_get, try_free_port};
use crate::process::{read_from, spawn_tied, tail};
use crate::wait::poll_until;
use crate::Error;

/// Longest wait of [`NatsCluster::start`] for the whole cluster (or one restarted node) to
/// become healthy.
pub const READY_TIMEOUT: Duration = Duration::from_secs(30);
/// How often starting the cluster is tried on new ports when one was taken meanwhile.
const START_ATTEMPTS: usize = 3;
/// How long a restarted node may wait for its ports to be released.
const RESTART_WINDOW: Duration = Duration::from_secs(10);
/// Longest wait for a started node to listen.
const LISTEN_TIMEOUT: Duration = Duration::from_secs(20);
/// The nodes' `server_name`s, as in `deploy/nats-cluster/nN.conf`.
pub const NODES: [&str; 3] = ["n1", "n2", "n3"];

/// `deploy/nats-cluster/cluster.sh` of this repository.
pub fn script() -> PathBuf {
    crate::workspace_root().join("deploy/nats-cluster/cluster.sh")
}

/// Nine distinct free loopback ports: client, cluster (route) and monitoring, three each.
#[derive(Debug, Clone)]
pub struct Ports {
    /// Client ports of n1, n2, n3.
    pub client: [u16; 3],
    /// Cluster (route) ports.
    pub route: [u16; 3],
    /// HTTP monitoring ports.
    pub http: [u16; 3],
}

impl Ports {
    /// [`Ports::try_pick`], panicking if no port can be bound.
    pub fn pick() -> Ports {
        Ports::try_pick().expect("pick nine free loopback ports")
    }

    /// Nine distinct free ports (see [`try_free_port`]).
    pub fn try_pick() -> std::io::Result<Ports> {
        let mut taken: Vec<u16> = Vec::new();
        let mut next = || loop {
            let port = try_free_port(0)?;
            if !taken.contains(&port) {
                taken.push(port);
                return Ok::<u16, std::io::Error>(port);
            }
        };
        let mut three = || Ok::<[u16; 3], std::io::Error>([next()?, next()?, next()?]);
        Ok(Ports {
            client: three()?,
            route: three()?,
            http: three()?,
        })
    }

    /// Sets the environment `cluster.sh` reads: base dir, ports, timeout, nats-server binary.
    pub fn apply(&self, cmd: &mut Command, base: &Path) {
        let list = |ports: &[u16; 3]| {
            ports
                .iter()
                .map(u16::to_string)
                .collect::<Vec<_>>()
                .join(" ")
        };
        cmd.env("DLQ_CLUSTER_DIR", base)
            .env("DLQ_CLUSTER_CLIENT_PORTS", list(&self.client))
            .env("DLQ_CLUSTER_ROUTE_PORTS", list(&self.route))
            .env("DLQ_CLUSTER_HTTP_PORTS", list(&self.http))
            .env("DLQ_CLUSTER_TIMEOUT", READY_TIMEOUT.as_secs().to_string());
        if let Ok(bin) = find_binary() {
            cmd.env("NATS_SERVER_BIN", bin);
        }
    }
}

/// The JetStream meta leader this node knows of (`/jsz` → `meta_cluster.leader`).
pub fn meta_leader(http_port: u16) -> Option<String> {
    let (status, body) = http_get(http_port, "/jsz")?;
    if status != 200 {
        return None;
    }
    let jsz: serde_json::Value = serde_json::from_str(&body).ok()?;
    let leader = jsz["meta_cluster"]["leader"].as_str()?;
    (!leader.is_empty()).then(|| leader.to_owned())
}

/// How `cluster.sh render` secures the cluster (`DLQ_CLUSTER_SECURITY`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Security {
    /// No TLS, no users.
    None,
    /// TLS for clients and routes, the least-privilege users (the deployed default).
    Tls,
}

impl Security {
    fn env_value(self) -> &'static str {
        match self {
            Security::None => "none",
            Security::Tls => "tls",
        }
    }
}

/// Three `nats-server` processes owned by this process, configured by `cluster.sh render`.
pub struct NatsCluster {
    security: Security,
    bin: PathBuf,
    script: PathBuf,
    ports: Ports,
    children: [Option<Child>; 3],
    ready_timeout: Duration,
    /// Where the node dirs (`nN/`: config, store, log) are.
    base: PathBuf,
    // Last field: a temporary `base` is removed after `Drop::drop` has killed the processes.
    _temp: Option<TempDir>,
}

impl NatsCluster {
    /// Starts the cluster in a temporary dir (see [`NatsCluster::try_start_in`]) and waits up
    /// to [`READY_TIMEOUT`]; panics with the nodes' log tails if it cannot.
    pub fn start() -> NatsCluster {
        NatsCluster::start_with(Security::None)
    }

    /// Like [`NatsCluster::start`], secured as deployed: see [`Security::Tls`].
    pub fn start_secure() -> NatsCluster {
        NatsCluster::start_with(Security::Tls)
    }

    fn start_with(security: Security) -> NatsCluster {
        let temp = tempfile::Builder::new()
            .prefix("dlq-cluster-")
            .tempdir()
            .expect("create temp dir for the cluster");
        let base = temp.path().to_path_buf();
        NatsCluster::try_start(&base, &script(), READY_TIMEOUT, security, Some(temp))
            .unwrap_or_else(|e| panic!("{e}"))
    }

    /// Renders the configs into `base` (which outlives the cluster) with `script`
    /// (`cluster.sh`), starts all three nodes and waits until each answers `/healthz` and
    /// knows the meta leader, for up to `ready_timeout`. Retries on new ports if one was taken
    /// meanwhile.
    pub fn try_start_in(
        base: &Path,
        script: &Path,
        ready_timeout: Duration,
    ) -> Result<NatsCluster, Error> {
        NatsCluster::try_start(base, script, ready_timeout, Security::None, None)
    }

    fn try_start(
        base: &Path,
        script: &Path,
        ready_timeout: Duration,
        security: Security,
        temp: Option<TempDir>,
    ) -> Result<NatsCluster, Error> {
        std::fs::create_dir_all(base)?;
        let mut cluster = NatsCluster {
            security,
            bin: find_binary()?,
            script: script.to_path_buf(),
            ports: Ports::try_pick()?,
            children: [None, None, None],
            ready_timeout,
            base: std::fs::canonicalize(base)?,
            _temp: temp,
        };
        for attempt in 1..=START_ATTEMPTS {
            if attempt > 1 {
                cluster.ports = Ports::try_pick()?;
                for name in NODES {
                    let _ = std::fs::remove_dir_all(cluster.base.join(name));
                }
            }
            cluster.render()?;
            for node in 0..3 {
                cluster.spawn(node)?;
            }
            match cluster.try_wait_ready(&[0, 1, 2]) {
                Ok(()) => return Ok(cluster),
                Err(why) if attempt < START_ATTEMPTS && cluster.port_clash(0) => {
                    eprintln!("cluster start attempt {attempt}: {why}; retrying on other ports");
                    cluster.kill_all();
                }
                Err(why) => return Err(Error::new(format!("{why}\n{}", cluster.log_tails()))),
            }
        }
        unreachable!("the last attempt returns")
    }

    /// `cluster.sh render` with this cluster's ports and base dir (bounded to 30 s).
    fn render(&self) -> Result<(), Error> {
        let mut cmd = Command::new("timeout");
        cmd.arg("30").arg("bash").arg(&self.script).arg("render");
        self.ports.apply(&mut cmd, &self.base);
        cmd.env("DLQ_CLUSTER_SECURITY", self.security.env_value());
        let out = cmd.stdin(Stdio::null()).output()?;
        if !out.status.success() {
            return Err(Error::new(format!(
                "{} render failed: {}{}",
                self.script.display(),
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            )));
        }
        Ok(())
    }

    fn spawn(&mut self, node: usize) -> Result<(), Error> {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log_path(node))?;
        let mut cmd = Command::new(&self.bin);
        cmd.arg("-c")
            .arg(self.conf_path(node))
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log);
        let child = spawn_tied(cmd)
            .map_err(|e| Error::new(format!("cannot run {}: {e}", self.bin.display())))?;
        self.children[node] = Some(child);
        Ok(())
    }

    /// [`NatsCluster::try_wait_ready`], panicking with the nodes' log tails on failure.
    pub fn wait_ready(&mut self, nodes: &[usize]) {
        if let Err(why) = self.try_wait_ready(nodes) {
            panic!("{why}\n{}", self.log_tails());
        }
    }

    /// Waits until every listed node runs, answers `/healthz` and knows a meta leader, for up
    /// to the cluster's ready timeout. Fails at once if a node is not running.
    pub fn try_wait_ready(&mut self, nodes: &[usize]) -> Result<(), Error> {
        let deadline = Instant::now() + self.ready_timeout;
        loop {
            let mut pending = Vec::new();
            for &node in nodes {
                if !self.is_running(node) {
                    return Err(Error::new(format!("{} is not running", NODES[node])));
                }
                let http = self.ports.http[node];
                if !healthz_ok(http) || meta_leader(http).is_none() {
                    pending.push(NODES[node]);
                }
            }
            if pending.is_empty() {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(Error::new(format!(
                    "not healthy within {:?}: {pending:?} (no /healthz 200 or no meta leader); logs under {}",
                    self.ready_timeout,
                    self.base.display()
                )));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Whether a node's log says its ports were taken, from byte `offset` of the log on.
    fn port_clash(&self, offset: u64) -> bool {
        (0..3)
            .any(|node| read_from(&self.log_path(node), offset).contains("address already in use"))
    }

    /// `nats://127.0.0.1:PORT` of one node (`tls://` when secured).
    pub fn url(&self, node: usize) -> String {
        let scheme = match self.security {
            Security::None => "nats",
            Security::Tls => "tls",
        };
        format!("{scheme}://127.0.0.1:{}", self.ports.client[node])
    }

    /// The cluster's CA certificate (made by `cluster.sh render` when secured).
    pub fn ca_path(&self) -> PathBuf {
        self.base.join("pki/ca.pem")
    }

    /// The password `cluster.sh render` made for one of the users of
    /// `deploy/nats-permissions.conf` (`dlq-emitter`, `dlq-consumer`, `dlq-operator`).
    pub fn password(&self, user: &str) -> String {
        let path = self.base.join("secrets").join(format!("{user}.password"));
        std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
            .trim()
            .to_owned()
    }

    /// Every node's URL.
    pub fn urls(&self) -> Vec<String> {
        (0..3).map(|node| self.url(node)).collect()
    }

    /// The node's `server_name` (`n1`, `n2`, `n3`), as stream info reports peers.
    pub fn name(&self, node: usize) -> &'static str {
        NODES[node]
    }

    /// Index of the node called `name`.
    pub fn index_of(&self, name: &str) -> Option<usize> {
        NODES.iter().position(|n| *n == name)
    }

    /// The node's HTTP monitoring port.
    pub fn http_port(&self, node: usize) -> u16 {
        self.ports.http[node]
    }

    /// The node's rendered config file.
    pub fn conf_path(&self, node: usize) -> PathBuf {
        self.base
            .join(NODES[node])
            .join(format!("{}.conf", NODES[node]))
    }

    /// The node's log file (its stdout and stderr, appended to across restarts).
    pub fn log_path(&self, node: usize) -> PathBuf {
        self.base.join(NODES[node]).join("nats-server.log")
    }

    /// The last lines of every node's log.
    pub fn log_tails(&self) -> String {
        (0..3)
            .map(|node| {
                format!(
                    "--- {} log tail ---\n{}",
                    NODES[node],
                    tail(&self.log_path(node), 25)
                )
            })
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// True while the node's process exists; reaps it if it exited by itself.
    pub fn is_running(&mut self, node: usize) -> bool {
        match self.children[node].as_mut().map(Child::try_wait) {
            Some(Ok(None)) => true,
            Some(_) => {
                self.children[node] = None;
                false
            }
            None => false,
        }
    }

    /// SIGKILL and reap one node (a crash). No-op if it is not running.
    pub fn kill(&mut self, node: usize) {
        if let Some(mut child) = self.children[node].take() {
            let _ = kill(Pid::from_raw(child.id() as i32), Signal::SIGKILL);
            let _ = child.wait();
        }
    }

    /// SIGKILL and reap every node.
    pub fn kill_all(&mut self) {
        for node in 0..3 {
            self.kill(node);
        }
    }

    /// Starts a killed node again with the same config, ports and store; waits until it is
    /// healthy and knows the meta leader. Panics if it does not come back.
    pub fn restart(&mut self, node: usize) {
        let restarted = self
            .try_respawn(node)
            .and_then(|()| self.try_wait_ready(&[node]));
        if let Err(why) = restarted {
            panic!("restart of {}: {why}\n{}", NODES[node], self.log_tails());
        }
    }

    /// Starts a node again with the same config, ports and store (killing it first if it
    /// runs) and returns once it listens, without waiting for it to be healthy: that depends
    /// on the other nodes ([`NatsCluster::try_wait_ready`]). Retries for up to 10 s while its
    /// ports are still held.
    pub fn try_respawn(&mut self, node: usize) -> Result<(), Error> {
        self.kill(node);
        let deadline = Instant::now() + RESTART_WINDOW;
        loop {
            let offset = std::fs::metadata(self.log_path(node)).map_or(0, |m| m.len());
            self.spawn(node)?;
            let listening = poll_until(LISTEN_TIMEOUT, || {
                if !self.is_running(node) {
                    return Some(false);
                }
                let ready = read_from(&self.log_path(node), offset).contains("Server is ready")
                    && TcpStream::connect(("127.0.0.1", self.ports.client[node])).is_ok();
                ready.then_some(true)
            });
            match listening {
                Some(true) => return Ok(()),
                Some(false) if Instant::now() < deadline && self.port_clash(offset) => {
                    eprintln!(
                        "restart of {}: its ports are still held; retrying",
                        NODES[node]
                    );
                    std::thread::sleep(Duration::from_millis(200));
                }
                Some(false) => {
                    return Err(Error::new(format!(
                        "{} exited during startup:\n{}",
                        NODES[node],
                        tail(&self.log_path(node), 20)
                    )))
                }
                None => {
                    self.kill(node);
                    return Err(Error::new(format!(
                        "{} not listening within {LISTEN_TIMEOUT:?}",
                        NODES[node]
                    )));
                }
            }
        }
    }
}

impl Drop for NatsCluster {
    fn drop(&mut self) {
        self.kill_all();
    }
}

/// A cluster run by `cluster.sh start` in a temporary base dir on free ports.
pub struct ScriptCluster {
    /// The ports `cluster.sh` is given.
    pub ports: Ports,
    /// The base dir (removed on drop).
    pub dir: TempDir,
}

impl ScriptCluster {
    /// New ports and a new base dir; nothing is started yet.
    pub fn new() -> ScriptCluster {
        ScriptCluster {
            ports: Ports::pick(),
            dir: tempfile::Builder::new()
                .prefix("dlq-cluster-sh-")
                .tempdir()
                .expect("create temp dir for cluster.sh"),
        }
    }

    /// Runs `cluster.sh ARGS...` with this cluster's environment, bounded to 60 s.
    pub fn run(&self, args: &[&str]) -> Output {
        let mut cmd = Command::new("timeout");
        cmd.arg("60").arg("bash").arg(script()).args(args);
        self.ports.apply(&mut cmd, self.dir.path());
        cmd.stdin(Stdio::null());
        cmd.output().expect("run cluster.sh")
    }

    /// The pid recorded for a node, if any.
    pub fn pid(&self, node: usize) -> Option<i32> {
        let path = self.dir.path().join(NODES[node]).join("nats-server.pid");
        std::fs::read_to_string(path).ok()?.trim().parse().ok()
    }

    /// The last lines of every node's log.
    pub fn log_tails(&self) -> String {
        (0..3)
            .map(|node| {
                let log = self.dir.path().join(NODES[node]).join("nats-server.log");
                format!("--- {} log tail ---\n{}", NODES[node], tail(&log, 25))
            })
            .collect::<Vec<_>>()
            .join("\n")
    }
}

impl Default for ScriptCluster {
    fn default() -> ScriptCluster {
        ScriptCluster::new()
    }
}

impl Drop for ScriptCluster {
    fn drop(&mut self) {
        let _ = self.run(&["stop"]);
        // Whatever `stop` could not stop: kill it if it is still our nats-server.
        for (node, name) in NODES.iter().enumerate() {
            let Some(pid) = self.pid(node) else { continue };
            let conf = self.dir.path().join(name).to_string_lossy().into_owned();
            // A zombie's cmdline is empty, so this is false once the process is dead.
            let ours = || {
                let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
                String::from_utf8_lossy(&cmdline).contains(&conf)
            };
            if ours() {
                let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
                let _ = poll_until(Duration::from_secs(5), || (!ours()).then_some(()));
            }
        }
    }
}
