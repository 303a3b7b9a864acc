//! A private `nats-server` process with JetStream, for one test or one chaos drill.
//!
//! Each server gets its own loopback port, monitoring port and store dir (file storage, so
//! data survives `kill()` + `restart()`): a temporary dir that goes with the server
//! ([`NatsServer::start`]) or one the caller keeps ([`NatsServer::try_start_in`]). It never
//! touches a system server on 127.0.0.1:4222. `Drop` kills and reaps the process; and since the
//! process is spawned with [`spawn_tied`], it also dies if this process itself is killed.
//!
//! [`NatsServer::try_start_in_netns`] runs it inside a network namespace instead (`ip netns
//! exec`, which execs in place: the pid, the kill and the freeze are the server's own),
//! listening on every address of that namespace and reached through one of them.

use std::net::{IpAddr, Ipv4Addr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use tempfile::TempDir;

use crate::net::{http_get, http_get_at, try_free_port};
use crate::process::{proc_state, read_from, spawn_tied, tail};
use crate::wait::poll_until;
use crate::Error;

const READY_TIMEOUT: Duration = Duration::from_secs(20);
const START_ATTEMPTS: usize = 8;
const RESTART_WINDOW: Duration = Duration::from_secs(10);
const INSTALL_HINT: &str = "install it with `scripts/install-nats-server.sh` \
     (Debian: `apt-get install nats-server`) or set NATS_SERVER_BIN to its path";

/// One `nats-server -js` on a loopback port with its own store, which can be killed, frozen,
/// thawed and restarted on the same port and store.
pub struct NatsServer {
    bin: PathBuf,
    extra: Vec<String>,
    /// Where this process reaches the server (loopback, or an address in its namespace).
    host: IpAddr,
    /// `ip netns exec NAME` when the server runs in a network namespace.
    netns: Option<String>,
    port: u16,
    monitor_port: u16,
    child: Option<Child>,
    stopped: bool,
    /// Holds the store, the log and the stderr file.
    dir: PathBuf,
    store: PathBuf,
    // Last field: a temporary `dir` is removed after `Drop::drop` has killed the process.
    _temp: Option<TempDir>,
}

impl NatsServer {
    /// Starts `nats-server -js` on a free loopback port with a temporary store and waits until
    /// it is ready; panics (with the log tail) if it cannot.
    pub fn start() -> NatsServer {
        NatsServer::start_with_args(&[])
    }

    /// Like [`NatsServer::start`], with extra command-line flags (kept for `restart`).
    pub fn start_with_args(extra: &[&str]) -> NatsServer {
        let temp = tempfile::Builder::new()
            .prefix("dlq-nats-")
            .tempdir()
            .expect("create temp dir for nats-server");
        let dir = temp.path().to_path_buf();
        NatsServer::try_start(&dir, extra, Some(temp)).unwrap_or_else(|e| panic!("{e}"))
    }

    /// Like [`NatsServer::start`], with a server configuration file holding `config` (users,
    /// accounts, `tls {}`...; written as `server.conf` beside the store and kept for
    /// `restart`). The command-line address, ports and store override the file's.
    pub fn start_with_config(config: &str) -> NatsServer {
        let bin = find_binary().unwrap_or_else(|e| panic!("{e}"));
        NatsServer::start_configured(bin, config)
    }

    /// Like [`NatsServer::start_with_config`], with the recent nats-server of
    /// [`recent_binary`] (for what Debian's 2.9.10 lacks, such as the TLS-first handshake).
    pub fn start_recent_with_config(config: &str) -> NatsServer {
        let bin = recent_binary().unwrap_or_else(|e| panic!("{e}"));
        NatsServer::start_configured(bin, config)
    }

    /// `bin` with `config` written as `server.conf` in a new temporary dir.
    fn start_configured(bin: PathBuf, config: &str) -> NatsServer {
        let temp = tempfile::Builder::new()
            .prefix("dlq-nats-")
            .tempdir()
            .expect("create temp dir for nats-server");
        let dir = temp.path().to_path_buf();
        let conf = dir.join("server.conf");
        std::fs::write(&conf, config).expect("write server.conf");
        let conf = conf.to_str().expect("a UTF-8 temp path").to_owned();
        NatsServer::try_start_with(bin, &dir, &["-c", &conf], Some(temp))
            .unwrap_or_else(|e| panic!("{e}"))
    }

    /// Starts `nats-server -js` on a free loopback port with its store (`nats-store/`), log
    /// (`nats-server.log`) and stderr (`nats-server.stderr`) in `dir`, which outlives the
    /// server; returns once it is ready.
    pub fn try_start_in(dir: &Path) -> Result<NatsServer, Error> {
        NatsServer::try_start(dir, &[], None)
    }

    /// Like [`NatsServer::try_start_in`], but inside the existing network namespace `netns`
    /// (`ip netns exec`, so it needs the rights to enter it), listening on every address there;
    /// `host` is an address of that namespace this process can reach (its URL, and where
    /// readiness and health are checked). Kill, freeze and restart work as on loopback.
    pub fn try_start_in_netns(dir: &Path, netns: &str, host: IpAddr) -> Result<NatsServer, Error> {
        let mut server = NatsServer::prepare(find_binary()?, dir, &[], None)?;
        server.host = host;
        server.netns = Some(netns.to_owned());
        server.boot(true)?;
        Ok(server)
    }

    fn try_start(dir: &Path, extra: &[&str], temp: Option<TempDir>) -> Result<NatsServer, Error> {
        NatsServer::try_start_with(find_binary()?, dir, extra, temp)
    }

    fn try_start_with(
        bin: PathBuf,
        dir: &Path,
        extra: &[&str],
        temp: Option<TempDir>,
    ) -> Result<NatsServer, Error> {
        let mut server = NatsServer::prepare(bin, dir, extra, temp)?;
        server.boot(true)?;
        Ok(server)
    }

    fn prepare(
        bin: PathBuf,
        dir: &Path,
        extra: &[&str],
        temp: Option<TempDir>,
    ) -> Result<NatsServer, Error> {
        let store = dir.join("nats-store");
        std::fs::create_dir_all(&store)?;
        Ok(NatsServer {
            bin,
            extra: extra.iter().map(|s| s.to_string()).collect(),
            host: IpAddr::V4(Ipv4Addr::LOCALHOST),
            netns: None,
            port: 0,
            monitor_port: 0,
            child: None,
            stopped: false,
            dir: dir.to_path_buf(),
            store,
            _temp: temp,
        })
    }

    /// `nats://127.0.0.1:PORT` (in a namespace: `nats://HOST:PORT`).
    pub fn url(&self) -> String {
        format!("nats://{}:{}", self.host, self.port)
    }

    /// The client port (kept across restarts).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The HTTP monitoring port (`/healthz`, `/varz`, `/jsz`); it may change on `restart`.
    pub fn monitor_port(&self) -> u16 {
        self.monitor_port
    }

    /// Pid of the current process; panics if the server was killed and not restarted.
    pub fn pid(&self) -> u32 {
        self.try_pid().unwrap_or_else(|e| panic!("{e}"))
    }

    fn try_pid(&self) -> Result<u32, Error> {
        let child = self.child.as_ref();
        child
            .map(Child::id)
            .ok_or_else(|| Error::new("nats-server is not running"))
    }

    /// The `-sd` store dir (JetStream data lives in `jetstream/` below it).
    pub fn store_dir(&self) -> &Path {
        &self.store
    }

    /// Replaces the configuration file of a server started with
    /// [`NatsServer::start_with_config`]; the next [`NatsServer::restart`] reads it (to raise
    /// `max_payload`, say).
    pub fn set_config(&self, config: &str) {
        std::fs::write(self.dir.join("server.conf"), config).expect("write server.conf");
    }

    /// The server's log file (appended to across restarts).
    pub fn log_path(&self) -> PathBuf {
        self.dir.join("nats-server.log")
    }

    /// The last `lines` lines of the log, plus anything the process wrote to stderr.
    pub fn log_tail(&self, lines: usize) -> String {
        let stderr = std::fs::read_to_string(self.stderr_path()).unwrap_or_default();
        format!(
            "--- nats-server log tail ---\n{}\n--- stderr ---\n{stderr}",
            tail(&self.log_path(), lines)
        )
    }

    /// SIGKILL (after SIGCONT if stopped) and reap. No-op if already dead. The port and store
    /// dir are kept for `restart`.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let pid = Pid::from_raw(child.id() as i32);
            if self.stopped {
                let _ = kill(pid, Signal::SIGCONT);
            }
            let _ = kill(pid, Signal::SIGKILL);
            let _ = child.wait();
        }
        self.stopped = false;
    }

    /// [`NatsServer::try_stop`], panicking on failure.
    pub fn stop(&mut self) {
        self.try_stop().unwrap_or_else(|e| panic!("{e}"));
    }

    /// SIGSTOP: the process is frozen; its port stays open (the kernel still completes TCP
    /// handshakes) but nothing is answered, so publishes hang. Returns once the kernel reports
    /// the process as stopped.
    pub fn try_stop(&mut self) -> Result<(), Error> {
        let pid = self.try_pid()?;
        kill(Pid::from_raw(pid as i32), Signal::SIGSTOP)
            .map_err(|e| Error::new(format!("SIGSTOP nats-server {pid}: {e}")))?;
        self.stopped = true;
        poll_until(Duration::from_secs(5), || {
            (proc_state(pid) == Some('T')).then_some(())
        })
        .ok_or_else(|| Error::new(format!("nats-server {pid} did not stop")))
    }

    /// [`NatsServer::try_cont`], panicking on failure.
    pub fn cont(&mut self) {
        self.try_cont().unwrap_or_else(|e| panic!("{e}"));
    }

    /// SIGCONT, then waits until the server answers `/healthz` again.
    pub fn try_cont(&mut self) -> Result<(), Error> {
        let pid = self.try_pid()?;
        kill(Pid::from_raw(pid as i32), Signal::SIGCONT)
            .map_err(|e| Error::new(format!("SIGCONT nats-server {pid}: {e}")))?;
        self.stopped = false;
        poll_until(READY_TIMEOUT, || self.healthy().then_some(())).ok_or_else(|| {
            Error::new(format!(
                "nats-server not healthy after SIGCONT\n{}",
                self.log_tail(40)
            ))
        })
    }

    /// [`NatsServer::try_restart`], panicking on failure.
    pub fn restart(&mut self) {
        self.try_restart().unwrap_or_else(|e| panic!("{e}"));
    }

    /// Starts the server again on the same port and store dir (killing it first if it is still
    /// running). Retries for up to 10 s while the port is still held.
    pub fn try_restart(&mut self) -> Result<(), Error> {
        self.kill();
        self.boot(false)
    }

    /// True while the process exists (also while stopped); reaps it if it exited by itself.
    pub fn is_running(&mut self) -> bool {
        match self.child.as_mut().map(Child::try_wait) {
            Some(Ok(None)) => true,
            Some(_) => {
                self.child = None;
                self.stopped = false;
                false
            }
            None => false,
        }
    }

    /// True while the process is frozen by [`NatsServer::stop`].
    pub fn is_stopped(&self) -> bool {
        self.stopped
    }

    /// `/healthz` answers 200, asked where this process reaches the server.
    fn healthy(&self) -> bool {
        matches!(
            http_get_at(self.host, self.monitor_port, "/healthz"),
            Some((200, _))
        )
    }

    fn stderr_path(&self) -> PathBuf {
        self.dir.join("nats-server.stderr")
    }

    /// Launches on a new port (`start`: up to 8 tries) or the same one (`restart`: for up to
    /// 10 s). The monitoring port is picked anew each try.
    fn boot(&mut self, new_port: bool) -> Result<(), Error> {
        let deadline = Instant::now() + RESTART_WINDOW;
        for attempt in 1.. {
            if new_port {
                self.port = try_free_port(0)?;
            }
            self.monitor_port = try_free_port(self.port)?;
            if let Some(child) = self.launch()? {
                self.child = Some(child);
                return Ok(());
            }
            let exhausted = if new_port {
                attempt >= START_ATTEMPTS
            } else {
                Instant::now() > deadline
            };
            if exhausted {
                return Err(Error::new(format!(
                    "nats-server: port {} still in use after {attempt} tries\n{}",
                    self.port,
                    self.log_tail(40)
                )));
            }
            std::thread::sleep(Duration::from_millis(if new_port { 10 } else { 200 }));
        }
        unreachable!("the loop above returns")
    }

    /// Spawns the process and waits until it is ready. `Ok(None)` means a port was taken (the
    /// caller may retry); any other failure is an error with the log tail.
    fn launch(&self) -> Result<Option<Child>, Error> {
        let log = self.log_path();
        let log_offset = std::fs::metadata(&log).map(|m| m.len()).unwrap_or(0);
        let stderr = std::fs::File::create(self.stderr_path())?;
        let listen = if self.netns.is_some() {
            "0.0.0.0"
        } else {
            "127.0.0.1"
        };
        let flags = format!("-js -a {listen} -p {} -m {}", self.port, self.monitor_port);
        let mut cmd = match &self.netns {
            Some(netns) => {
                let mut cmd = Command::new("ip");
                cmd.args(["netns", "exec", netns]).arg(&self.bin);
                cmd
            }
            None => Command::new(&self.bin),
        };
        cmd.args(flags.split(' '))
            .arg("-sd")
            .arg(&self.store)
            .arg("-l")
            .arg(&log)
            .args(&self.extra)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(stderr);
        let mut child = spawn_tied(cmd).map_err(|e| {
            Error::new(format!(
                "cannot run {}: {e}; {INSTALL_HINT}",
                self.bin.display()
            ))
        })?;
        // The monitor listener starts before the client one, and another process may own
        // the client port, so "Server is ready" in *our* log proves the bind succeeded.
        let outcome = poll_until(READY_TIMEOUT, || {
            if let Ok(Some(status)) = child.try_wait() {
                return Some(Err(status));
            }
            let ready = read_from(&log, log_offset).contains("Server is ready")
                && TcpStream::connect((self.host, self.port)).is_ok()
                && self.healthy();
            ready.then_some(Ok(()))
        });
        match outcome {
            Some(Ok(())) => Ok(Some(child)),
            Some(Err(_)) if read_from(&log, log_offset).contains("address already in use") => {
                Ok(None)
            }
            Some(Err(status)) => Err(Error::new(format!(
                "nats-server exited during startup ({status})\n{}",
                self.log_tail(40)
            ))),
            None => {
                let _ = child.kill();
                let _ = child.wait();
                Err(Error::new(format!(
                    "nats-server not ready within {READY_TIMEOUT:?}\n{}",
                    self.log_tail(40)
                )))
            }
        }
    }
}

impl Drop for NatsServer {
    fn drop(&mut self) {
        self.kill();
    }
}

/// `NATS_SERVER_BIN` when set (whether or not it exists), else `nats-server` on PATH, else
/// `/usr/sbin/nats-server`; `None` when neither is installed.
pub fn installed_binary() -> Option<PathBuf> {
    if let Some(bin) = std::env::var_os("NATS_SERVER_BIN").filter(|b| !b.is_empty()) {
        return Some(PathBuf::from(bin));
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|dir| dir.join("nats-server"))
        .chain(std::iter::once(PathBuf::from("/usr/sbin/nats-server")))
        .find(|p| p.is_file())
}

/// [`installed_binary`] if it exists, else an error saying how to install it.
pub fn find_binary() -> Result<PathBuf, Error> {
    let bin = installed_binary()
        .ok_or_else(|| Error::new(format!("nats-server not found; {INSTALL_HINT}")))?;
    if !bin.is_file() {
        return Err(Error::new(format!(
            "NATS_SERVER_BIN={} does not exist; {INSTALL_HINT}",
            bin.display()
        )));
    }
    Ok(bin)
}

/// The version `scripts/install-nats-server-recent.sh` installs by default.
pub const RECENT_VERSION: &str = "2.15.1";

/// A nats-server newer than Debian's, for tests of features 2.9.10 lacks:
/// `NATS_SERVER_RECENT_BIN`, else where `scripts/install-nats-server-recent.sh` puts it
/// (`${DLQ_TOOLS_DIR:-$HOME/.cache/dlq-tools}/nats-server-VERSION/nats-server`).
pub fn recent_binary() -> Result<PathBuf, Error> {
    let bin = match std::env::var_os("NATS_SERVER_RECENT_BIN").filter(|b| !b.is_empty()) {
        Some(bin) => PathBuf::from(bin),
        None => std::env::var_os("DLQ_TOOLS_DIR")
            .map(PathBuf::from)
            .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/dlq-tools")))
            .unwrap_or_default()
            .join(format!("nats-server-{RECENT_VERSION}"))
            .join("nats-server"),
    };
    if bin.is_file() {
        Ok(bin)
    } else {
        Err(Error::new(format!(
            "no recent nats-server at {}: run scripts/install-nats-server-recent.sh (scripts/test.sh does), or set NATS_SERVER_RECENT_BIN",
            bin.display()
        )))
    }
}

/// `GET /healthz` on a monitoring port answers 200 (in a cluster: the node is current with
/// the meta leader and its streams).
pub fn healthz_ok(monitor_port: u16) -> bool {
    matches!(http_get(monitor_port, "/healthz"), Some((200, _)))
}
