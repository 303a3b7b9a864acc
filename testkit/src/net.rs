//! Loopback ports and a raw HTTP GET (no extra crates).

use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// A bus URL nothing listens on (port 1): connections are refused at once. Tests that need a
/// dead bus use it instead of a free port, which a server of a concurrent test could take.
pub const DEAD_BUS_URL: &str = "nats://127.0.0.1:1";

/// [`try_free_port`], panicking if no port can be bound at all.
pub fn free_port(avoid: u16) -> u16 {
    try_free_port(avoid).expect("bind a free loopback port")
}

/// A free loopback port other than `avoid`, for a server to listen on. Picked at random
/// *below* the kernel's ephemeral port range, so that once the server is killed its port cannot
/// be taken as the source port of some client's outgoing connection before it restarts (a
/// self-connect that would block the restart); falls back to binding port 0.
pub fn try_free_port(avoid: u16) -> std::io::Result<u16> {
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
        let port = u16::try_from(BASE + x % (low - BASE)).unwrap_or(0);
        if port != avoid && port != 0 && TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return Ok(port);
        }
    }
    loop {
        let port = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        if port != avoid {
            return Ok(port);
        }
    }
}

/// A tiny HTTP/1.0 `GET http://127.0.0.1:{port}{path}` over a std `TcpStream` (1 s timeouts).
/// Returns the status code and body, or `None` if the connection or response failed.
pub fn http_get(port: u16, path: &str) -> Option<(u16, String)> {
    http_get_at(IpAddr::from([127, 0, 0, 1]), port, path)
}

/// [`http_get`] to `http://{ip}:{port}{path}` (a server in another network namespace, reached
/// through a veth link).
pub fn http_get_at(ip: IpAddr, port: u16, path: &str) -> Option<(u16, String)> {
    let addr = SocketAddr::new(ip, port);
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_millis(500)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(1))).ok()?;
    stream
        .set_write_timeout(Some(Duration::from_secs(1)))
        .ok()?;
    let request = format!("GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n");
    stream.write_all(request.as_bytes()).ok()?;
    let mut response = Vec::new();
    stream.read_to_end(&mut response).ok()?;
    let response = String::from_utf8_lossy(&response);
    let (head, body) = response.split_once("\r\n\r\n").unwrap_or((&response, ""));
    let status = head.split_whitespace().nth(1)?.parse().ok()?;
    Some((status, body.to_string()))
}
