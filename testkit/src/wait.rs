//! Polling instead of sleeping for a fixed time.

use std::future::Future;
use std::time::{Duration, Instant};

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
