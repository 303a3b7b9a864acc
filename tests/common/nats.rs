//! A private `nats-server` process with JetStream for one test.
//!
//! Each server gets its own loopback port, monitoring port and temporary store dir (file
//! storage, so data survives `kill()` + `restart()`). It never touches a system server on
//! 127.0.0.1:4222. `Drop` kills and reaps the process; and since the process is spawned with
//! `PR_SET_PDEATHSIG` from a thread that lives as long as the test binary, it also dies if the
//! test binary itself is killed.

use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use tempfile::TempDir;

use super::{free_port, http_get, poll_until, spawn_tied_to_test};

const READY_TIMEOUT: Duration = Duration::from_secs(20);
const START_ATTEMPTS: usize = 8;
const RESTART_WINDOW: Duration = Duration::from_secs(10);
const INSTALL_HINT: &str = "install it with `scripts/install-nats-server.sh` \
     (Debian: `apt-get install nats-server`) or set NATS_SERVER_BIN to its path";

pub struct NatsServer {
    bin: PathBuf,
    extra: Vec<String>,
    port: u16,
    monitor_port: u16,
    child: Option<Child>,
    stopped: bool,
    store: PathBuf,
    // Last field: dropped after `Drop::drop` has killed the process.
    dir: TempDir,
}

impl NatsServer {
    /// Starts `nats-server -js` on a free loopback port and waits until it is ready.
    pub fn start() -> NatsServer {
        NatsServer::start_with_args(&[])
    }

    /// Like [`NatsServer::start`], with extra command-line flags (kept for `restart`).
    pub fn start_with_args(extra: &[&str]) -> NatsServer {
        let bin = find_binary();
        let dir = tempfile::Builder::new()
            .prefix("dlq-nats-")
            .tempdir()
            .expect("create temp dir for nats-server");
        let store = dir.path().join("store");
        std::fs::create_dir_all(&store).expect("create store dir");
        let mut server = NatsServer {
            bin,
            extra: extra.iter().map(|s| s.to_string()).collect(),
            port: 0,
            monitor_port: 0,
            child: None,
            stopped: false,
            store,
            dir,
        };
        server.boot(true);
        server
    }

    /// `nats://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// The HTTP monitoring port (`/healthz`, `/varz`, `/jsz`); it may change on `restart`.
    pub fn monitor_port(&self) -> u16 {
        self.monitor_port
    }

    /// Pid of the current process; panics if the server was killed and not restarted.
    pub fn pid(&self) -> u32 {
        let child = self.child.as_ref().expect("nats-server is not running");
        child.id()
    }

    /// The `-sd` store dir (JetStream data lives in `jetstream/` below it).
    pub fn store_dir(&self) -> &Path {
        &self.store
    }

    /// The server's log file (appended to across restarts).
    pub fn log_path(&self) -> PathBuf {
        self.dir.path().join("nats-server.log")
    }

    /// The last `lines` lines of the log, plus anything the process wrote to stderr.
    pub fn log_tail(&self, lines: usize) -> String {
        let log = std::fs::read_to_string(self.log_path()).unwrap_or_default();
        let all: Vec<&str> = log.lines().collect();
        let tail = all[all.len().saturating_sub(lines)..].join("\n");
        let stderr = std::fs::read_to_string(self.stderr_path()).unwrap_or_default();
        format!("--- nats-server log tail ---\n{tail}\n--- stderr ---\n{stderr}")
    }

    /// SIGKILL and reap. No-op if already dead. The port and store dir are kept for `restart`.
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

    /// SIGSTOP: the process is frozen; its port stays open (the kernel still completes TCP
    /// handshakes) but nothing is answered, so publishes hang. Returns once the kernel reports
    /// the process as stopped.
    pub fn stop(&mut self) {
        let pid = self.pid();
        kill(Pid::from_raw(pid as i32), Signal::SIGSTOP).expect("SIGSTOP nats-server");
        self.stopped = true;
        poll_until(Duration::from_secs(5), || {
            (proc_state(pid) == Some('T')).then_some(())
        })
        .unwrap_or_else(|| panic!("nats-server {pid} did not stop"));
    }

    /// SIGCONT, then waits until the server answers `/healthz` again.
    pub fn cont(&mut self) {
        let pid = self.pid();
        kill(Pid::from_raw(pid as i32), Signal::SIGCONT).expect("SIGCONT nats-server");
        self.stopped = false;
        poll_until(READY_TIMEOUT, || {
            healthz_ok(self.monitor_port).then_some(())
        })
        .unwrap_or_else(|| {
            panic!(
                "nats-server not healthy after SIGCONT\n{}",
                self.log_tail(40)
            )
        });
    }

    /// Starts the server again on the same port and store dir (killing it first if it is still
    /// running). Retries for up to 10 s while the port is still held.
    pub fn restart(&mut self) {
        self.kill();
        self.boot(false);
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

    pub fn is_stopped(&self) -> bool {
        self.stopped
    }

    fn stderr_path(&self) -> PathBuf {
        self.dir.path().join("nats-server.stderr")
    }

    /// Launches on a new port (`start`: up to 8 tries) or the same one (`restart`: for up to
    /// 10 s). The monitoring port is picked anew each try.
    fn boot(&mut self, new_port: bool) {
        let deadline = Instant::now() + RESTART_WINDOW;
        for attempt in 1.. {
            if new_port {
                self.port = free_port(0);
            }
            self.monitor_port = free_port(self.port);
            if let Ok(child) = self.launch() {
                self.child = Some(child);
                return;
            }
            let exhausted = if new_port {
                attempt >= START_ATTEMPTS
            } else {
                Instant::now() > deadline
            };
            assert!(
                !exhausted,
                "nats-server: port {} still in use after {attempt} tries\n{}",
                self.port,
                self.log_tail(40)
            );
            std::thread::sleep(Duration::from_millis(if new_port { 10 } else { 200 }));
        }
    }

    /// Spawns the process and waits until it is ready. `Err(())` means a port was taken (the
    /// caller may retry); any other failure panics with the log tail.
    fn launch(&self) -> Result<Child, ()> {
        let log = self.log_path();
        let log_offset = std::fs::metadata(&log).map(|m| m.len()).unwrap_or(0);
        let stderr = std::fs::File::create(self.stderr_path()).expect("create stderr file");
        let flags = format!("-js -a 127.0.0.1 -p {} -m {}", self.port, self.monitor_port);
        let mut cmd = Command::new(&self.bin);
        cmd.args(flags.split(' '))
            .arg("-sd")
            .arg(&self.store)
            .arg("-l")
            .arg(&log)
            .args(&self.extra)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(stderr);
        let mut child = spawn_tied_to_test(cmd)
            .unwrap_or_else(|e| panic!("cannot run {}: {e}; {INSTALL_HINT}", self.bin.display()));
        // The monitor listener starts before the client one, and another process may own
        // the client port, so "Server is ready" in *our* log proves the bind succeeded.
        let outcome = poll_until(READY_TIMEOUT, || {
            if let Ok(Some(status)) = child.try_wait() {
                return Some(Err(status));
            }
            let ready = read_from(&log, log_offset).contains("Server is ready")
                && TcpStream::connect(("127.0.0.1", self.port)).is_ok()
                && healthz_ok(self.monitor_port);
            ready.then_some(Ok(()))
        });
        match outcome {
            Some(Ok(())) => Ok(child),
            Some(Err(_)) if read_from(&log, log_offset).contains("address already in use") => {
                Err(())
            }
            Some(Err(status)) => panic!(
                "nats-server exited during startup ({status})\n{}",
                self.log_tail(40)
            ),
            None => {
                let _ = child.kill();
                let _ = child.wait();
                panic!(
                    "nats-server not ready within {READY_TIMEOUT:?}\n{}",
                    self.log_tail(40)
                )
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

/// [`installed_binary`], or a panic saying how to install it.
fn find_binary() -> PathBuf {
    let bin = installed_binary().unwrap_or_else(|| panic!("nats-server not found; {INSTALL_HINT}"));
    assert!(
        bin.is_file(),
        "NATS_SERVER_BIN={} does not exist; {INSTALL_HINT}",
        bin.display()
    );
    bin
}

/// `GET /healthz` on the monitoring port returns 200.
fn healthz_ok(monitor_port: u16) -> bool {
    matches!(http_get(monitor_port, "/healthz"), Some((200, _)))
}

fn read_from(path: &Path, offset: u64) -> String {
    let bytes = std::fs::read(path).unwrap_or_default();
    let start = (offset as usize).min(bytes.len());
    String::from_utf8_lossy(&bytes[start..]).into_owned()
}

/// The state letter from `/proc/PID/stat` (`R`, `S`, `T` stopped, `Z` zombie, ...).
fn proc_state(pid: u32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(')')?.1.trim_start().chars().next()
}
