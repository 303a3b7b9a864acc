//! Concurrent load for the benches: `k` tasks sharing `total` calls of one async closure, with
//! each call's latency in a histogram.

use std::future::Future;
use std::time::Instant;

use hdrhistogram::Histogram;

/// A latency histogram in µs, 1 µs to 10 minutes, 3 significant digits.
pub fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 600_000_000, 3).expect("histogram bounds")
}

/// What a concurrent run measured.
pub struct Run {
    /// Per-call latency, µs.
    pub hist: Histogram<u64>,
    /// Wall time of the whole run.
    pub secs: f64,
    /// Calls that returned `Ok(true)`.
    pub ok: u64,
    /// The errors of the calls that failed.
    pub errors: Vec<String>,
}

impl Run {
    /// No call yet.
    pub fn empty() -> Run {
        Run {
            hist: histogram(),
            secs: 0.0,
            ok: 0,
            errors: Vec::new(),
        }
    }

    /// Records one call made one at a time: its latency since `started` and what it returned
    /// (`Ok(true)` counts in `ok`). The caller adds the wall time to `secs`.
    pub fn record(&mut self, started: Instant, result: Result<bool, String>) {
        self.hist
            .saturating_record(started.elapsed().as_micros().max(1) as u64);
        match result {
            Ok(flag) => self.ok += u64::from(flag),
            Err(err) => self.errors.push(err),
        }
    }

    /// Calls per second.
    pub fn rate(&self) -> f64 {
        self.hist.len() as f64 / self.secs
    }

    /// p99 latency in ms.
    pub fn p99_ms(&self) -> f64 {
        self.hist.value_at_quantile(0.99) as f64 / 1e3
    }

    /// `p50/p99 ms`, for notes.
    pub fn p50_p99(&self) -> String {
        let ms = |q| self.hist.value_at_quantile(q) as f64 / 1e3;
        format!("{:.2}/{:.2} ms", ms(0.5), ms(0.99))
    }
}

/// `total` calls of `call(task, i)` spread over `k` concurrent tasks. The closure's own
/// (synchronous) part, building the item, runs before the call's clock starts.
pub async fn run_concurrent<F, Fut>(k: usize, total: usize, call: F) -> Run
where
    F: Fn(usize, usize) -> Fut + Clone + Send + 'static,
    Fut: Future<Output = Result<bool, String>> + Send,
{
    let started = Instant::now();
    let tasks: Vec<_> = (0..k)
        .map(|task| {
            let call = call.clone();
            let calls = total / k + usize::from(task < total % k);
            tokio::spawn(async move {
                // Latencies in a plain vector: a histogram per task (~2 MB zeroed each) cost
                // more CPU than the calls at K = 256 in a quick run (issue 37).
                let (mut latencies, mut ok, mut errors) =
                    (Vec::with_capacity(calls), 0, Vec::new());
                for i in 0..calls {
                    let pending = call(task, i);
                    let t = Instant::now();
                    let result = pending.await;
                    latencies.push(t.elapsed().as_micros().max(1) as u64);
                    match result {
                        Ok(flag) => ok += u64::from(flag),
                        Err(err) => errors.push(err),
                    }
                }
                (latencies, ok, errors)
            })
        })
        .collect();
    let mut run = Run::empty();
    for task in tasks {
        let (latencies, ok, errors) = task.await.expect("bench task");
        for latency in latencies {
            run.hist.saturating_record(latency);
        }
        run.ok += ok;
        run.errors.extend(errors);
    }
    run.secs = started.elapsed().as_secs_f64();
    if let Some(first) = run.errors.first() {
        eprintln!("  {} calls failed; the first: {first}", run.errors.len());
    }
    run
}
