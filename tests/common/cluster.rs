//! A private three-node NATS JetStream cluster for one test, from `deploy/nats-cluster/`.
//!
//! [`NatsCluster::start`] picks nine free loopback ports, lets `deploy/nats-cluster/cluster.sh
//! render` write the three node configs into a temporary base dir (so the test runs the
//! deployed configs), then spawns each `nats-server -c nN.conf` itself with
//! [`spawn_tied_to_test`]: `Drop` kills every node, and a node also dies if the test binary is
//! killed. Nodes can be SIGKILLed and restarted on the same ports and store.
//!
//! [`ScriptCluster`] drives `cluster.sh start|status|kill|restart|stop` itself (the script
//! daemonizes the nodes); its `Drop` runs `cluster.sh stop` and then kills any node left in
//! a pid file.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use tempfile::TempDir;

use super::{free_port, http_get, poll_until, spawn_tied_to_test};

/// Longest wait for the whole cluster (or one restarted node) to become healthy.
pub const READY_TIMEOUT: Duration = Duration::from_secs(30);
const START_ATTEMPTS: usize = 3;
pub const NODES: [&str; 3] = ["n1", "n2", "n3"];

/// `deploy/nats-cluster/cluster.sh` of this crate.
pub fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/nats-cluster/cluster.sh")
}

/// Nine distinct free loopback ports: client, cluster (route) and monitoring, three each.
#[derive(Debug, Clone)]
pub struct Ports {
    pub client: [u16; 3],
    pub route: [u16; 3],
    pub http: [u16; 3],
}

impl Ports {
    pub fn pick() -> Ports {
        let mut taken: Vec<u16> = Vec::new();
        let mut next = || loop {
            let port = free_port(0);
            if !taken.contains(&port) {
                taken.push(port);
                return port;
            }
        };
        let mut three = || [next(), next(), next()];
        Ports {
            client: three(),
            route: three(),
            http: three(),
        }
    }

    /// The environment `cluster.sh` reads.
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
            .env("DLQ_CLUSTER_TIMEOUT", READY_TIMEOUT.as_secs().to_string())
            .env("NATS_SERVER_BIN", nats_server_bin());
    }
}

/// `NATS_SERVER_BIN`, else `nats-server` on PATH, else `/usr/sbin/nats-server`.
pub fn nats_server_bin() -> PathBuf {
    if let Some(bin) = std::env::var_os("NATS_SERVER_BIN").filter(|b| !b.is_empty()) {
        return PathBuf::from(bin);
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|dir| dir.join("nats-server"))
        .chain(std::iter::once(PathBuf::from("/usr/sbin/nats-server")))
        .find(|p| p.is_file())
        .unwrap_or_else(|| {
            panic!(
                "nats-server not found: run scripts/install-nats-server.sh or set NATS_SERVER_BIN"
            )
        })
}

/// `GET /healthz` answers 200.
pub fn healthz_ok(http_port: u16) -> bool {
    matches!(http_get(http_port, "/healthz"), Some((200, _)))
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

/// The last `lines` lines of a file (for failure messages).
pub fn tail(path: &Path, lines: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// Three `nats-server` processes owned by the test, configured by `cluster.sh render`.
pub struct NatsCluster {
    ports: Ports,
    children: [Option<Child>; 3],
    // Last field: removed after `Drop::drop` has killed the processes.
    dir: TempDir,
}

impl NatsCluster {
    /// Renders the configs, starts all three nodes and waits until each answers `/healthz`
    /// and knows the meta leader. Retries on new ports if one was taken meanwhile.
    pub fn start() -> NatsCluster {
        for attempt in 1..=START_ATTEMPTS {
            let dir = tempfile::Builder::new()
                .prefix("dlq-cluster-")
                .tempdir()
                .expect("create temp dir for the cluster");
            let mut cluster = NatsCluster {
                ports: Ports::pick(),
                children: [None, None, None],
                dir,
            };
            cluster.render();
            for node in 0..3 {
                cluster.spawn(node);
            }
            match cluster.wait_ready(&[0, 1, 2]) {
                Ok(()) => return cluster,
                Err(why) if attempt < START_ATTEMPTS && cluster.port_clash() => {
                    eprintln!("cluster start attempt {attempt}: {why}; retrying on other ports");
                }
                Err(why) => panic!("{why}\n{}", cluster.log_tails()),
            }
        }
        unreachable!("the last attempt returns or panics")
    }

    fn render(&self) {
        let mut cmd = Command::new("bash");
        cmd.arg(script()).arg("render");
        self.ports.apply(&mut cmd, self.dir.path());
        let out = cmd.output().expect("run cluster.sh render");
        assert!(
            out.status.success(),
            "cluster.sh render failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }

    fn spawn(&mut self, node: usize) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log_path(node))
            .expect("open node log");
        let mut cmd = Command::new(nats_server_bin());
        cmd.arg("-c")
            .arg(self.conf_path(node))
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("clone log handle"))
            .stderr(log);
        let child = spawn_tied_to_test(cmd).expect("spawn nats-server");
        self.children[node] = Some(child);
    }

    /// Waits until every listed node runs, answers `/healthz` and knows a meta leader.
    fn wait_ready(&mut self, nodes: &[usize]) -> Result<(), String> {
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            let mut pending = Vec::new();
            for &node in nodes {
                if !self.is_running(node) {
                    return Err(format!("{} exited during startup", NODES[node]));
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
                return Err(format!(
                    "not healthy within {READY_TIMEOUT:?}: {pending:?} (no /healthz 200 or no meta leader)"
                ));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn port_clash(&self) -> bool {
        (0..3).any(|node| {
            std::fs::read_to_string(self.log_path(node))
                .unwrap_or_default()
                .contains("address already in use")
        })
    }

    /// `nats://127.0.0.1:PORT` of one node.
    pub fn url(&self, node: usize) -> String {
        format!("nats://127.0.0.1:{}", self.ports.client[node])
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

    pub fn http_port(&self, node: usize) -> u16 {
        self.ports.http[node]
    }

    pub fn conf_path(&self, node: usize) -> PathBuf {
        self.dir
            .path()
            .join(NODES[node])
            .join(format!("{}.conf", NODES[node]))
    }

    pub fn log_path(&self, node: usize) -> PathBuf {
        self.dir.path().join(NODES[node]).join("nats-server.log")
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

    /// Starts a killed node again with the same config, ports and store; waits until it is
    /// healthy and knows the meta leader. Retries for a while if its ports are still held.
    pub fn restart(&mut self, node: usize) {
        self.kill(node);
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            self.spawn(node);
            match self.wait_ready(&[node]) {
                Ok(()) => return,
                Err(why) if Instant::now() < deadline && self.port_clash() => {
                    eprintln!("restart of {}: {why}; retrying", NODES[node]);
                    self.kill(node);
                    std::thread::sleep(Duration::from_millis(200));
                }
                Err(why) => panic!("restart of {}: {why}\n{}", NODES[node], self.log_tails()),
            }
        }
    }
}

impl Drop for NatsCluster {
    fn drop(&mut self) {
        for node in 0..3 {
            self.kill(node);
        }
    }
}

/// A cluster run by `cluster.sh start` in a temporary base dir on free ports.
pub struct ScriptCluster {
    pub ports: Ports,
    pub dir: TempDir,
}

impl ScriptCluster {
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
