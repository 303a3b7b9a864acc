//! 2b. The durable-only promise with the bus up: `Emitter::store` (the job runner's call)
//! returns once the event is durable and publishes it in the background. Measures the calls
//! (durable events/s, latency) and, apart, how long publishing took to catch up after them.
//! 3b. The same with the bus down: the events stay for the reconciler, so the call is the
//! sink's durable append and the emitter around it, nothing else.
//! At K = 1 the calls take turns with one plain append + `fdatasync` each (`crate::turns`),
//! and the call's p50 is read against theirs (issue 37: ≤ 1.3 ×).

use std::path::Path;
use std::time::{Duration, Instant};

use dlq::emitter::TopicPolicies;
use dlq::sink::Sink;
use dlq_testkit::items::template_item_sized;

use crate::emit::Payload;
use crate::limit::{limit_for, Limits};
use crate::run::{bench_emitter, cpu_seconds, next_item, run_concurrent, Row};
use crate::turns::{in_turns, mean_secs, Probes, TURN};

/// Issue 37: `store` with the bus down reaches half the plain-file group commit at K = 64, 256.
const PLAIN_SHARE: (f64, &str) = (0.5, ">= 50 % of the plain-file limit");
/// Issue 37: at most this much CPU per durable event at K = 256, bus down.
const CPU_BUS_DOWN_US: f64 = 15.0;
/// Issue 37: a K = 1 call's p50 at most this many times one plain append + `fdatasync`.
const ONE_FSYNC_TIMES: f64 = 1.3;

/// How long publishing may take to catch up after the last call before the row says so.
const CATCH_UP_LIMIT: Duration = Duration::from_secs(60);

/// One scenario per K: a fresh sink and emitter, a warm-up, then `payload.emits` calls.
pub async fn store_scenarios(
    base: &Path,
    url: &str,
    bus_up: bool,
    payload: &Payload,
    limits: &Limits,
    rows: &mut Vec<Row>,
) {
    let mut policies = TopicPolicies::default();
    policies.default.retry_attempts = 1;
    let total = payload.emits;
    for &k in payload.ks.iter().filter(|&&k| k == 1 || k >= 64) {
        let dir = base.join(format!("store-{}-{bus_up}-k{k}", payload.blob));
        let emitter = bench_emitter(&dir, url, bus_up, policies.clone()).await;
        let (handle, template) = (emitter.clone(), template_item_sized(payload.blob));
        let call = move |task, i| {
            let (emitter, item) = (handle.clone(), next_item(&template, task + i));
            async move {
                let receipt = emitter.store(crate::run::TOPIC, item).await;
                receipt.map(|_| true).map_err(|e| e.to_string())
            }
        };
        run_concurrent(k, (total / 10).clamp(k, 500), call.clone()).await; // warm-up
        let caught_up = |sink: &dlq::sink::LocalSink| sink.backlog().is_ok_and(|b| b.count == 0);
        if bus_up {
            wait_until(|| caught_up(emitter.sink())).await;
        }
        let (started, cpu_before) = (Instant::now(), cpu_seconds());
        // One at a time, the calls take turns with one plain append + fdatasync each
        // (`crate::turns`): the K = 1 target reads the call's p50 against theirs.
        let (run, cpu_secs, plain) = if k == 1 {
            let probes = Probes {
                dir: base.to_owned(),
                record: payload.event_bytes(),
                bus_url: None,
                blob: payload.blob,
            };
            let turns = in_turns(probes, total, call).await;
            (turns.ours, turns.cpu_secs, Some(turns.plain))
        } else {
            let run = run_concurrent(k, total, call).await;
            (run, cpu_seconds() - cpu_before, None)
        };
        // The calls' CPU only: the background publishes still running are not waited for.
        let cpu_us = cpu_secs * 1e6 / total as f64;
        let done = bus_up && wait_until(|| caught_up(emitter.sink())).await;
        let published_secs = started.elapsed().as_secs_f64();
        let backlog = emitter.sink().backlog().map_or(0, |b| b.count);
        emitter.shutdown().await.expect("shutdown");
        std::fs::remove_dir_all(&dir).expect("remove sink dir");
        let rate = total as f64 / run.secs;
        let name = format!("store (durable only), {}, K={k}", payload.name);
        let section = if bus_up { "2b bus up" } else { "3b bus down" };
        let mut row = Row::new(section, name, total).latency(&run.hist);
        row = row.rates(Some(rate), Some(rate));
        row.limit = Some(limit_for(limits, payload.blob, k));
        if let Some(plain) = &plain {
            let (apart, text) = row.limit.take().unwrap_or_default();
            let text = format!("plain file, one append + fdatasync at a time, in turns of {TURN} calls with these calls; measured apart: {apart:.0}/s, {text}");
            row.limit = Some((1.0 / mean_secs(plain), text));
        }
        row.cpu_us = Some(cpu_us);
        if !bus_up {
            // Issue 37's bus-down targets: half the plain file at K = 64 and 256, p99 at K = 64,
            // the CPU per event at K = 256 (1 KiB) and one fdatasync's time at K = 1.
            row.limit_target = (k >= 64).then_some(PLAIN_SHARE);
            if k == 64 {
                let p99 = run.hist.value_at_quantile(0.99);
                row = row.target("p99 <= 5 ms", p99 <= 5_000);
            }
            if k == 256 && payload.blob == 1024 {
                row.cpu_target_us = Some(CPU_BUS_DOWN_US);
            }
        }
        if let Some(plain) = &plain {
            row = one_fsync_target(row, &run.hist, &plain.hist, limits, payload.blob);
        }
        let published = if !bus_up {
            format!("bus down: backlog {backlog} left to the reconciler")
        } else if done {
            format!("all published {published_secs:.2} s after the first call ({:.0} events/s end to end)", total as f64 / published_secs)
        } else {
            format!("backlog {backlog} still unpublished {CATCH_UP_LIMIT:?} after the calls")
        };
        let note = format!(
            "the call returns once durable; {cpu_us:.0} us CPU per event (this process, over the calls); {published}; errors {}",
            run.errors.len()
        );
        eprintln!(
            "  store {} K={k}: {rate:.0} events/s durable, p99 {} us, {cpu_us:.0} us CPU per event",
            payload.name,
            run.hist.value_at_quantile(0.99)
        );
        rows.push(row.note(note));
    }
}

/// Reads a K = 1 call's p50 against the p50 of one plain append + `fdatasync` of the same
/// record made in turns with the calls (`plain`): target ≤ [`ONE_FSYNC_TIMES`] ×. Beside it,
/// the mean of one made apart (the plain-file limit at batch 1, section 1) and the same append
/// handed to another thread ([`crate::handoff`]): the least a call that can stop waiting for a
/// stalled disk takes, so a target below it is above that ceiling.
fn one_fsync_target(
    row: Row,
    hist: &hdrhistogram::Histogram<u64>,
    plain: &hdrhistogram::Histogram<u64>,
    limits: &Limits,
    blob: usize,
) -> Row {
    let (p50, one_fsync_us) = (
        hist.value_at_quantile(0.5) as f64,
        plain.value_at_quantile(0.5) as f64,
    );
    let mut text = format!(
        "p50 <= {ONE_FSYNC_TIMES} x one plain append + fdatasync (its p50 in turns with the calls, {one_fsync_us:.0} us): {:.2} x",
        p50 / one_fsync_us
    );
    if let Some(apart) = limits.one_fsync_us(blob) {
        text.push_str(&format!(
            "; against one measured apart (section 1, mean {apart:.0} us) {:.2} x",
            p50 / apart
        ));
    }
    if let Some(&ratio) = limits.handoff_ratio.get(&blob) {
        text.push_str(&format!(
            "; handed to a thread (1b) {ratio:.2} x{}",
            if ratio > ONE_FSYNC_TIMES {
                ": the target is above this ceiling"
            } else {
                ""
            }
        ));
    }
    row.target(&text, p50 <= ONE_FSYNC_TIMES * one_fsync_us)
}

/// Polls `done` every millisecond; false when it is still not true after [`CATCH_UP_LIMIT`].
async fn wait_until(done: impl Fn() -> bool) -> bool {
    let deadline = Instant::now() + CATCH_UP_LIMIT;
    while !done() {
        if Instant::now() > deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    true
}
