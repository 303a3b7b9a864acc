//! Processes of a drill: the guard, nats-server, signals, ports and health checks.
//!
//! nats-server is started through `dlq-chaos guard`, which kills it when its stdin closes: if
//! the drill runner dies (even by SIGKILL) no server outlives it. Emitter children stop on
//! their own when their stdin closes.

use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};
use std::process::{ExitCode, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;
use tokio::process::{Child, Command};

use crate::{err, Res};

/// Options of `dlq-chaos guard`.
#[derive(Debug, clap::Args)]
pub struct GuardArgs {
    /// The command and its arguments.
    #[arg(trailing_var_arg = true, required = true, allow_hyphen_values = true)]
    pub command: Vec<String>,
}

/// Runs the command, prints `PID <pid>`, kills it (SIGCONT + SIGKILL) when stdin closes and
/// exits when it exits.
pub fn guard(args: &GuardArgs) -> ExitCode {
    let Some((program, rest)) = args.command.split_first() else {
        return ExitCode::from(2);
    };
    let mut child = match std::process::Command::new(program)
        .args(rest)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .spawn()
    {
        Ok(child) => child,
        Err(e) => {
            eprintln!("dlq-chaos guard: cannot run {program}: {e}");
            return ExitCode::from(1);
        }
    };
    let pid = child.id();
    let mut stdout = std::io::stdout();
    let _ = writeln!(stdout, "PID {pid}").and_then(|()| stdout.flush());
    let exited = Arc::new(AtomicBool::new(false));
    let flag = exited.clone();
    std::thread::spawn(move || {
        let mut sink = String::new();
        let stdin = std::io::stdin();
        let mut lock = stdin.lock();
        while matches!(lock.read_line(&mut sink), Ok(n) if n > 0) {
            sink.clear();
        }
        if !flag.load(Ordering::SeqCst) {
            let _ = signal(pid, "CONT");
            let _ = signal(pid, "KILL");
        }
    });
    let status = child.wait();
    exited.store(true, Ordering::SeqCst);
    match status {
        Ok(s) if s.success() => ExitCode::SUCCESS,
        _ => ExitCode::from(1),
    }
}

static EXE: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();

/// Pins this executable for the drill: a hard link (or copy) in `work`, so that children keep
/// running this very binary even if cargo rebuilds it meanwhile.
pub fn pin_exe(work: &Path) -> Res<()> {
    let exe = std::env::current_exe()?;
    let pinned = work.join("dlq-chaos");
    if std::fs::hard_link(&exe, &pinned).is_err() {
        std::fs::copy(&exe, &pinned)?;
    }
    let _ = EXE.set(pinned);
    Ok(())
}

/// The executable children are started from (pinned, else the current one).
pub fn exe() -> Res<PathBuf> {
    match EXE.get() {
        Some(path) => Ok(path.clone()),
        None => Ok(std::env::current_exe()?),
    }
}

/// Sends `SIG<name>` to `pid` with `kill(1)`.
pub fn signal(pid: u32, name: &str) -> Res<()> {
    let status = std::process::Command::new("kill")
        .arg(format!("-{name}"))
        .arg(pid.to_string())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()?;
    if status.success() {
        Ok(())
    } else {
        Err(err(format!("kill -{name} {pid} failed ({status})")))
    }
}

/// The state letter of `/proc/PID/stat` (`T` = stopped).
pub fn proc_state(pid: u32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(')')?.1.trim_start().chars().next()
}

/// A free loopback port other than `avoid`, picked below the kernel's ephemeral range so that
/// while a server is down its port cannot become some client's source port (a self-connect
/// that would block the restart). Falls back to binding port 0.
pub fn free_port(avoid: u16) -> Res<u16> {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    const BASE: u64 = 10_000;
    let low = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse::<u64>().ok())
        .unwrap_or(32768);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let count = COUNTER.fetch_add(1, Ordering::Relaxed);
    let mut x = (nanos as u64 ^ (u64::from(std::process::id()) << 32) ^ (count << 48)) | 1;
    if low > BASE + 1000 {
        for _ in 0..64 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let port = u16::try_from(BASE + x % (low - BASE)).unwrap_or(0);
            if port != avoid
                && port != 0
                && std::net::TcpListener::bind(("127.0.0.1", port)).is_ok()
            {
                return Ok(port);
            }
        }
    }
    loop {
        let port = std::net::TcpListener::bind("127.0.0.1:0")?
            .local_addr()?
            .port();
        if port != avoid {
            return Ok(port);
        }
    }
}

/// `GET PATH` on a loopback monitoring port: the status code and the body, bounded to a
/// second; `None` if there was no answer.
pub async fn http_get(port: u16, path: &str) -> Option<(u16, String)> {
    let probe = async {
        let mut stream = TcpStream::connect(("127.0.0.1", port)).await.ok()?;
        let request = format!("GET {path} HTTP/1.0\r\nHost: 127.0.0.1:{port}\r\n\r\n");
        stream.write_all(request.as_bytes()).await.ok()?;
        let mut response = Vec::new();
        stream.read_to_end(&mut response).await.ok()?;
        let text = String::from_utf8_lossy(&response).into_owned();
        let status = text.split_whitespace().nth(1)?.parse().ok()?;
        let body = text
            .split_once("\r\n\r\n")
            .map_or(String::new(), |(_, body)| body.to_owned());
        Some((status, body))
    };
    tokio::time::timeout(Duration::from_secs(1), probe)
        .await
        .ok()
        .flatten()
}

/// `GET /healthz` on the monitoring port answered 200 within a second.
pub async fn healthz(port: u16) -> bool {
    matches!(http_get(port, "/healthz").await, Some((200, _)))
}

/// `NATS_SERVER_BIN`, else `nats-server` on PATH, else `/usr/sbin/nats-server`.
pub fn nats_server_bin() -> Res<PathBuf> {
    if let Some(bin) = std::env::var_os("NATS_SERVER_BIN").filter(|b| !b.is_empty()) {
        return Ok(PathBuf::from(bin));
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|dir| dir.join("nats-server"))
        .chain(std::iter::once(PathBuf::from("/usr/sbin/nats-server")))
        .find(|p| p.is_file())
        .ok_or_else(|| {
            err("nats-server not found: install it (scripts/install-nats-server.sh) or set NATS_SERVER_BIN")
        })
}

/// One `nats-server -js` on a fixed loopback port and store, which can be killed, frozen,
/// thawed and restarted; or one node of a cluster, started from its config file.
pub struct NatsProc {
    bin: PathBuf,
    /// A cluster node's rendered config (ports and store are in it); `None`: standalone.
    conf: Option<PathBuf>,
    port: u16,
    monitor_port: u16,
    store: PathBuf,
    log: PathBuf,
    stderr: PathBuf,
    guard: Option<Child>,
    pid: Option<u32>,
    frozen: bool,
}

impl NatsProc {
    /// Starts a server with its store and log in `dir`, on a new free port.
    pub async fn start(dir: &Path) -> Res<NatsProc> {
        let store = dir.join("nats-store");
        std::fs::create_dir_all(&store)?;
        let mut server = NatsProc {
            bin: nats_server_bin()?,
            conf: None,
            port: 0,
            monitor_port: 0,
            store,
            log: dir.join("nats-server.log"),
            stderr: dir.join("nats-server.stderr"),
            guard: None,
            pid: None,
            frozen: false,
        };
        server.boot(true).await?;
        Ok(server)
    }

    /// Starts one node of a cluster from its rendered config `conf`, which fixes its client
    /// port `port`, its monitoring port `monitor_port` and its store; it logs to `log`. Returns
    /// once the node listens: its health depends on the other nodes (see `crate::cluster`).
    pub async fn start_node(
        conf: &Path,
        port: u16,
        monitor_port: u16,
        log: &Path,
    ) -> Res<NatsProc> {
        let mut stderr = log.as_os_str().to_owned();
        stderr.push(".stderr");
        let mut server = NatsProc {
            bin: nats_server_bin()?,
            conf: Some(conf.to_path_buf()),
            port,
            monitor_port,
            store: PathBuf::new(),
            log: log.to_path_buf(),
            stderr: PathBuf::from(stderr),
            guard: None,
            pid: None,
            frozen: false,
        };
        server.boot(false).await?;
        Ok(server)
    }

    /// Whether the server process runs (it was started and not killed).
    pub fn is_running(&self) -> bool {
        self.pid.is_some()
    }

    /// `nats://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }

    /// The client port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The server's log file.
    pub fn log_path(&self) -> &Path {
        &self.log
    }

    /// SIGKILL (after SIGCONT if frozen) and reap. Port and store are kept for a restart.
    pub async fn kill(&mut self) {
        if let Some(pid) = self.pid.take() {
            if self.frozen {
                let _ = signal(pid, "CONT");
            }
            let _ = signal(pid, "KILL");
        }
        self.frozen = false;
        if let Some(mut guard) = self.guard.take() {
            // The guard exits when the server does; dropping it closes its stdin regardless.
            let _ = tokio::time::timeout(Duration::from_secs(5), guard.wait()).await;
        }
    }

    /// SIGSTOP; returns once the kernel reports the process stopped.
    pub async fn freeze(&mut self) -> Res<()> {
        let pid = self.pid.ok_or_else(|| err("nats-server is not running"))?;
        signal(pid, "STOP")?;
        self.frozen = true;
        let deadline = Instant::now() + Duration::from_secs(5);
        while proc_state(pid) != Some('T') {
            if Instant::now() > deadline {
                return Err(err(format!("nats-server {pid} did not stop")));
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        Ok(())
    }

    /// SIGCONT, then waits until `/healthz` answers.
    pub async fn thaw(&mut self) -> Res<()> {
        let pid = self.pid.ok_or_else(|| err("nats-server is not running"))?;
        signal(pid, "CONT")?;
        self.frozen = false;
        let deadline = Instant::now() + Duration::from_secs(20);
        while !healthz(self.monitor_port).await {
            if Instant::now() > deadline {
                return Err(err("nats-server not healthy 20 s after SIGCONT"));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Ok(())
    }

    /// Starts again on the same port and store (kills first if running).
    pub async fn restart(&mut self) -> Res<()> {
        self.kill().await;
        self.boot(false).await
    }

    /// Launches on a new port (up to 8 tries) or the same one (retrying for 10 s while the port
    /// is still held). A cluster node keeps the ports of its config.
    async fn boot(&mut self, new_port: bool) -> Res<()> {
        let deadline = Instant::now() + Duration::from_secs(10);
        for attempt in 1.. {
            if new_port {
                self.port = free_port(0)?;
            }
            if self.conf.is_none() {
                self.monitor_port = free_port(self.port)?;
            }
            match self.launch().await {
                Ok(()) => return Ok(()),
                Err(Launch::PortTaken) => {}
                Err(Launch::Failed(e)) => return Err(e),
            }
            if (new_port && attempt >= 8) || (!new_port && Instant::now() > deadline) {
                return Err(err(format!(
                    "nats-server: port {} still in use after {attempt} tries",
                    self.port
                )));
            }
            tokio::time::sleep(Duration::from_millis(if new_port { 10 } else { 200 })).await;
        }
        Err(err("unreachable"))
    }

    async fn launch(&mut self) -> Result<(), Launch> {
        let offset = std::fs::metadata(&self.log).map_or(0, |m| m.len());
        let stderr = std::fs::File::create(&self.stderr).map_err(|e| Launch::Failed(e.into()))?;
        let exe = exe().map_err(Launch::Failed)?;
        let mut command = Command::new(exe);
        command.arg("guard").arg("--").arg(&self.bin);
        match &self.conf {
            Some(conf) => {
                command.arg("-c").arg(conf);
            }
            None => {
                command
                    .args(["-js", "-a", "127.0.0.1", "-p", &self.port.to_string()])
                    .args(["-m", &self.monitor_port.to_string()])
                    .arg("-sd")
                    .arg(&self.store);
            }
        }
        let mut guard = command
            .arg("-l")
            .arg(&self.log)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(stderr)
            .spawn()
            .map_err(|e| Launch::Failed(format!("cannot start the guard: {e}").into()))?;
        let stdout = guard
            .stdout
            .take()
            .ok_or_else(|| Launch::Failed(err("guard has no stdout")))?;
        let mut first = String::new();
        let mut reader = BufReader::new(stdout);
        let _ = tokio::time::timeout(Duration::from_secs(5), reader.read_line(&mut first)).await;
        let pid: u32 = first
            .trim()
            .strip_prefix("PID ")
            .and_then(|p| p.parse().ok())
            .ok_or_else(|| Launch::Failed(err(format!("cannot run {}", self.bin.display()))))?;
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Ok(Some(_)) = guard.try_wait() {
                let log = read_from(&self.log, offset);
                if log.contains("address already in use") {
                    return Err(Launch::PortTaken);
                }
                return Err(Launch::Failed(err(format!(
                    "nats-server exited during startup:\n{}",
                    tail(&log, 20)
                ))));
            }
            // A cluster node is healthy only once it has found the others: its caller waits.
            let ready = read_from(&self.log, offset).contains("Server is ready")
                && TcpStream::connect(("127.0.0.1", self.port)).await.is_ok()
                && (self.conf.is_some() || healthz(self.monitor_port).await);
            if ready {
                self.guard = Some(guard);
                self.pid = Some(pid);
                return Ok(());
            }
            if Instant::now() > deadline {
                let _ = signal(pid, "KILL");
                return Err(Launch::Failed(err("nats-server not ready within 20 s")));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

impl Drop for NatsProc {
    fn drop(&mut self) {
        if let Some(pid) = self.pid.take() {
            let _ = signal(pid, "CONT");
            let _ = signal(pid, "KILL");
        }
    }
}

enum Launch {
    PortTaken,
    Failed(crate::Error),
}

fn read_from(path: &Path, offset: u64) -> String {
    let bytes = std::fs::read(path).unwrap_or_default();
    let start = usize::try_from(offset).unwrap_or(0).min(bytes.len());
    String::from_utf8_lossy(bytes.get(start..).unwrap_or_default()).into_owned()
}

/// The last `n` lines of `text`.
pub fn tail(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines
        .get(lines.len().saturating_sub(n)..)
        .unwrap_or_default()
        .join("\n")
}
