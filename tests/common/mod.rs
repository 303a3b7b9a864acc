//! Shared helpers for the integration tests. Each test file says `mod common;`.
//!
//! * [`NatsServer`]: a private `nats-server -js` per test, on its own loopback port and store
//!   dir, which a test can kill, freeze (SIGSTOP), thaw and restart on the same port and store.
//! * [`wait_for`] (async), [`poll_until`] (sync): poll instead of sleeping for a fixed time.
//! * [`free_port`], [`http_get`]: a loopback port for a server, a raw HTTP GET (no extra crates).
//! * [`spawn_tied_to_test`]: spawn a child process that cannot outlive the test binary.
//!
//! Tests panic on failure, so the crate's `unwrap_used`/`expect_used`/`panic` lints are allowed
//! here; a test file that uses them itself needs the same `#![allow(...)]` at its top.
#![allow(
    dead_code,
    unused_imports,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic
)]

pub mod cli;
pub mod cluster;
pub mod items;
pub mod nats;
pub mod stream;

use std::future::Future;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::unix::process::CommandExt;
use std::process::{Child, Command};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Mutex, OnceLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use nix::sys::signal::Signal;

pub use nats::NatsServer;

/// A bus URL nothing listens on (port 1): connections are refused at once. Tests that need a
/// dead bus use it instead of a free port, which a server of a concurrent test could take.
pub const DEAD_BUS_URL: &str = "nats://127.0.0.1:1";

/// Polls `f` every 50 ms until it returns `true`; panics naming `what` once `timeout` has
/// passed. A single call of `f` that hangs is cut off at the deadline too.
pub async fn wait_for<F, Fut>(what: &str, timeout: Duration, mut f: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let start = tokio::time::Instant::now();
    let deadline = start + timeout;
    loop {
        let remaining = deadline.saturating_duration_since(tokio::time::Instant::now());
        match tokio::time::timeout(remaining, f()).await {
            Ok(true) => return,
            Ok(false) => {}
            Err(_) => break,
        }
        if tokio::time::Instant::now() >= deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("timed out after {:?} waiting for {what}", start.elapsed());
}

/// Sync counterpart of [`wait_for`]: calls `f` every 5 ms until it returns `Some`; `None` once
/// `timeout` has passed.
pub fn poll_until<T>(timeout: Duration, mut f: impl FnMut() -> Option<T>) -> Option<T> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(value) = f() {
            return Some(value);
        }
        if Instant::now() > deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// A free loopback port other than `avoid`, for a server a test starts. Picked at random
/// *below* the kernel's ephemeral port range, so that once the server is killed its port cannot
/// be taken as the source port of some client's outgoing connection before it restarts; falls
/// back to binding port 0.
pub fn free_port(avoid: u16) -> u16 {
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
    let tries = if low > BASE + 1000 { 64 } else { 0 };
    for _ in 0..tries {
        // xorshift64: no `rand` crate needed.
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let port = (BASE + x % (low - BASE)) as u16;
        if port != avoid && TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    loop {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
        let port = listener.local_addr().expect("local addr").port();
        if port != avoid {
            return port;
        }
    }
}

/// A tiny HTTP/1.0 `GET http://127.0.0.1:{port}{path}` over a std `TcpStream` (1 s timeouts).
/// Returns the status code and body, or `None` if the connection or response failed.
pub fn http_get(port: u16, path: &str) -> Option<(u16, String)> {
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_millis(500)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(1))).ok()?;
    stream
        .set_write_timeout(Some(Duration::from_secs(1)))
        .ok()?;
    let request = format!("GET {path} HTTP/1.0\r\nHost: 127.0.0.1:{port}\r\n\r\n");
    stream.write_all(request.as_bytes()).ok()?;
    let mut response = Vec::new();
    stream.read_to_end(&mut response).ok()?;
    let response = String::from_utf8_lossy(&response);
    let (head, body) = response.split_once("\r\n\r\n").unwrap_or((&response, ""));
    let status = head.split_whitespace().nth(1)?.parse().ok()?;
    Some((status, body.to_string()))
}

/// Spawns `cmd` so that the child gets SIGKILL if the test binary dies (even by SIGKILL or a
/// timeout, when no `Drop` runs). `PR_SET_PDEATHSIG` fires when the *thread* that forked the
/// child exits, so every child is forked by one spawner thread that lives as long as the
/// process. Use it for any long-running child, e.g. the `dlq` binary itself.
pub fn spawn_tied_to_test(mut cmd: Command) -> std::io::Result<Child> {
    type Job = (Command, mpsc::Sender<std::io::Result<Child>>);
    static SPAWNER: OnceLock<Mutex<mpsc::Sender<Job>>> = OnceLock::new();
    // SAFETY: prctl is async-signal-safe and touches no memory of the parent.
    unsafe {
        cmd.pre_exec(|| {
            nix::sys::prctl::set_pdeathsig(Signal::SIGKILL).map_err(std::io::Error::from)
        });
    }
    let spawner = SPAWNER.get_or_init(|| {
        let (tx, rx) = mpsc::channel::<Job>();
        std::thread::spawn(move || {
            rx.into_iter().for_each(|(mut c, reply)| {
                let _ = reply.send(c.spawn());
            })
        });
        Mutex::new(tx)
    });
    let (reply_tx, reply_rx) = mpsc::channel();
    spawner
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .send((cmd, reply_tx))
        .expect("spawner thread alive");
    reply_rx.recv().expect("spawner reply")
}
