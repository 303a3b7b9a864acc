//! The 003 design: each failure `RPUSH`ed into Redis with `appendfsync always` (durable when
//! Redis answers), then published to JetStream with a PubAck. Redis is a `redis-server` this
//! bench starts on a free loopback port with its files in a temporary directory, spoken to in
//! RESP over one connection.

use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use dlq::bus::Bus;
use dlq_testkit::items::dead_lettered_event;
use dlq_testkit::{free_port, spawn_tied, NatsServer};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;
use tokio::sync::Mutex;

use crate::contenders::{item, ready_bus, Contender};

/// Starts Redis and a nats-server for the contender, or says why it cannot (no
/// `redis-server`).
pub async fn contender(dir: &Path) -> Result<Contender, String> {
    let bin = ["/usr/bin/redis-server", "/usr/local/bin/redis-server"]
        .into_iter()
        .find(|p| Path::new(p).is_file())
        .ok_or("no redis-server (Debian: apt-get install redis-server)")?;
    let port = free_port(0);
    let data = dir.join("redis");
    std::fs::create_dir_all(&data).map_err(|e| e.to_string())?;
    let mut cmd = Command::new(bin);
    cmd.args([
        "--port",
        &port.to_string(),
        "--bind",
        "127.0.0.1",
        "--save",
        "",
    ])
    .args(["--appendonly", "yes", "--appendfsync", "always", "--dir"])
    .arg(&data)
    .stdout(Stdio::null())
    .stderr(Stdio::null());
    let mut redis = spawn_tied(cmd).map_err(|e| e.to_string())?;
    let conn = match connect(port).await {
        Ok(conn) => Arc::new(Mutex::new(conn)),
        Err(err) => {
            let _ = redis.kill();
            let _ = redis.wait();
            return Err(err);
        }
    };
    let server = NatsServer::start();
    let bus = Arc::new(ready_bus(&server).await?);
    Ok(Contender {
        call: Box::new(move |n| {
            let event = dead_lettered_event("peers-redis", n as u64 + 1, "bench", item(n));
            let (conn, bus) = (conn.clone(), bus.clone());
            Box::pin(async move {
                let json = event.to_json().map_err(|e| e.to_string())?;
                rpush(&mut *conn.lock().await, &json).await?;
                bus.publish(&event).await.map_err(|e| e.to_string())?;
                Ok(())
            })
        }),
        keep: vec![Box::new(server)],
        close: Some(Box::pin(async move {
            let _ = redis.kill();
            let _ = redis.wait();
            Ok(())
        })),
    })
}

async fn connect(port: u16) -> Result<BufReader<TcpStream>, String> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match TcpStream::connect(("127.0.0.1", port)).await {
            Ok(stream) => return Ok(BufReader::new(stream)),
            Err(err) if Instant::now() > deadline => return Err(format!("redis-server: {err}")),
            Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
        }
    }
}

/// `RPUSH dlq <value>`; returns once Redis answered (after its fsync, with `appendfsync always`).
async fn rpush(conn: &mut BufReader<TcpStream>, value: &[u8]) -> Result<(), String> {
    let mut frame = format!("*3\r\n$5\r\nRPUSH\r\n$3\r\ndlq\r\n${}\r\n", value.len()).into_bytes();
    frame.extend_from_slice(value);
    frame.extend_from_slice(b"\r\n");
    conn.get_mut()
        .write_all(&frame)
        .await
        .map_err(|e| e.to_string())?;
    let mut reply = String::new();
    conn.read_line(&mut reply)
        .await
        .map_err(|e| e.to_string())?;
    if reply.starts_with(':') {
        Ok(())
    } else {
        Err(format!("redis answered {reply:?}"))
    }
}
