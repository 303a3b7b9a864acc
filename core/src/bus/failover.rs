//! Riding out a cluster failover: a JetStream API request sent while the cluster elects a new
//! stream or meta leader gets no answer and times out, though the same request succeeds a few
//! seconds later.

use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;

/// How long a request that keeps timing out is sent again before its timeout is the answer.
pub const FAILOVER_WAIT: Duration = Duration::from_secs(30);

/// The pause between two tries.
const PAUSE: Duration = Duration::from_millis(500);

/// Sends `request` again while its error `timed_out` and [`FAILOVER_WAIT`] has not passed since
/// the first try; any other error, and the last timeout, is returned as it is.
pub async fn through_failover<T, E, Fut>(
    mut request: impl FnMut() -> Fut,
    timed_out: impl Fn(&E) -> bool,
) -> Result<T, E>
where
    Fut: Future<Output = Result<T, E>>,
{
    let deadline = Instant::now() + FAILOVER_WAIT;
    loop {
        match request().await {
            Err(err) if timed_out(&err) && Instant::now() + PAUSE < deadline => {
                tracing::debug!("a JetStream request timed out; trying again (cluster failover?)");
                tokio::time::sleep(PAUSE).await;
            }
            done => return done,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;

    use super::*;

    #[derive(Debug, PartialEq)]
    enum Fails {
        TimedOut,
        Denied,
    }

    #[tokio::test(start_paused = true)]
    async fn timeouts_are_tried_again_until_an_answer() {
        let tries = Cell::new(0);
        let got = through_failover(
            || {
                tries.set(tries.get() + 1);
                let n = tries.get();
                async move {
                    if n < 4 {
                        Err(Fails::TimedOut)
                    } else {
                        Ok(n)
                    }
                }
            },
            |e| *e == Fails::TimedOut,
        )
        .await;
        assert_eq!(got, Ok(4));
    }

    #[tokio::test(start_paused = true)]
    async fn other_errors_are_returned_at_once() {
        let tries = Cell::new(0);
        let got: Result<(), Fails> = through_failover(
            || {
                tries.set(tries.get() + 1);
                async { Err(Fails::Denied) }
            },
            |e| *e == Fails::TimedOut,
        )
        .await;
        assert_eq!(got, Err(Fails::Denied));
        assert_eq!(tries.get(), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn a_request_that_keeps_timing_out_gives_up_after_the_wait() {
        let start = Instant::now();
        let tries = Cell::new(0u32);
        let got: Result<(), Fails> = through_failover(
            || {
                tries.set(tries.get() + 1);
                async { Err(Fails::TimedOut) }
            },
            |e| *e == Fails::TimedOut,
        )
        .await;
        assert_eq!(got, Err(Fails::TimedOut));
        assert!(start.elapsed() <= FAILOVER_WAIT, "{:?}", start.elapsed());
        assert!(tries.get() > 10, "tried {} times", tries.get());
    }
}
