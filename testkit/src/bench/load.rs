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
                let (mut hist, mut ok, mut errors) = (histogram(), 0, Vec::new());
                for i in 0..calls {
                    let pending = call(task, i);
                    let t = Instant::now();
                    let result = pending.await;
                    hist.saturating_record(t.elapsed().as_micros().max(1) as u64);
                    match result {
                        Ok(flag) => ok += u64::from(flag),
                        Err(err) => errors.push(err),
                    }
                }
                (hist, ok, errors)
            })
        })
        .collect();
    let mut run = Run {
        hist: histogram(),
        secs: 0.0,
        ok: 0,
        errors: Vec::new(),
    };
    for task in tasks {
        let (hist, ok, errors) = task.await.expect("bench task");
        run.hist.add(&hist).expect("same histogram bounds");
        run.ok += ok;
        run.errors.extend(errors);
    }
    run.secs = started.elapsed().as_secs_f64();
    if let Some(first) = run.errors.first() {
        eprintln!("  {} calls failed; the first: {first}", run.errors.len());
    }
    run
}
