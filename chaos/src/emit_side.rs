//! The side tasks of an emitter process: stdout writer, fault switches, `STAT` lines, signals.

use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use chrono::Utc;
use dlq::sink::Sink;
use serde_json::json;
use tokio::io::AsyncWriteExt;
use tokio::sync::mpsc;

use crate::emit::{unix_ms, ChaosEmitter, Counters};

/// `(VmRSS, VmHWM)` of this process in KiB.
pub fn memory_kb() -> (u64, u64) {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|rest| rest.split_whitespace().next()?.parse::<u64>().ok())
            .unwrap_or(0)
    };
    (field("VmRSS:"), field("VmHWM:"))
}

/// Resolves on SIGTERM or SIGINT.
pub async fn terminated() {
    use tokio::signal::unix::{signal, SignalKind};
    match signal(SignalKind::terminate()) {
        Ok(mut term) => tokio::select! {
            _ = term.recv() => {}
            _ = tokio::signal::ctrl_c() => {}
        },
        Err(_) => {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}

/// Writes lines to stdout, flushing whenever the queue is empty (an ACK is never held back);
/// notifies `broken` if stdout fails.
pub async fn write_lines(
    mut rx: mpsc::UnboundedReceiver<String>,
    broken: Arc<tokio::sync::Notify>,
) {
    let mut stdout = tokio::io::BufWriter::new(tokio::io::stdout());
    while let Some(line) = rx.recv().await {
        let mut ok = stdout.write_all(line.as_bytes()).await.is_ok();
        ok &= stdout.write_all(b"\n").await.is_ok();
        while let Ok(line) = rx.try_recv() {
            ok &= stdout.write_all(line.as_bytes()).await.is_ok();
            ok &= stdout.write_all(b"\n").await.is_ok();
        }
        if !ok || stdout.flush().await.is_err() {
            broken.notify_one();
            return;
        }
    }
    let _ = stdout.flush().await;
}

/// Toggles the sink's fault switches from files in `dir`, every 100 ms.
pub async fn watch_switches(dir: PathBuf, faults: dlq::sink::Faults) {
    let (mut writes, mut flush) = (false, false);
    loop {
        let w = dir.join("FAIL_WRITES").exists();
        let f = dir.join("FAIL_FLUSH").exists();
        if w != writes {
            faults.set_fail_writes(w);
            writes = w;
        }
        if f != flush {
            faults.set_fail_flush(f);
            flush = f;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Prints a `STAT` line every 500 ms.
pub async fn stat_loop(
    emitter: ChaosEmitter,
    c: Arc<Counters>,
    out: mpsc::UnboundedSender<String>,
) {
    let mut ticks = tokio::time::interval(Duration::from_millis(500));
    loop {
        ticks.tick().await;
        let (backlog, oldest_age_ms) = match emitter.sink().backlog() {
            Ok(b) => {
                let age = b.oldest.map_or(0, |t| {
                    u64::try_from((Utc::now() - t).num_milliseconds()).unwrap_or(0)
                });
                (b.count, age)
            }
            Err(_) => (0, 0),
        };
        c.peak_backlog.fetch_max(backlog, Ordering::Relaxed);
        let (rss, hwm) = memory_kb();
        let started = c.started.load(Ordering::Relaxed);
        let done = c.done.load(Ordering::Relaxed);
        let line = json!({
            "t": unix_ms(),
            "started": started,
            "done": done,
            "pending": started.saturating_sub(done),
            "acked": c.acked.load(Ordering::Relaxed),
            "backlog": backlog,
            "oldest_age_ms": oldest_age_ms,
            "rss_kb": rss,
            "hwm_kb": hwm,
        });
        if out.send(format!("STAT {line}")).is_err() {
            return;
        }
    }
}
