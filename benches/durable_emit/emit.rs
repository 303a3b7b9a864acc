//! 2-3. Durable emit with the bus up and down, per payload size and K concurrent emitters.

use std::path::Path;

use dlq::emitter::TopicPolicies;
use dlq::sink::Sink;
use dlq_testkit::items::template_item_sized;

use crate::bus_alone::{serial_ceiling, BusLimits};
use crate::limit::{event_bytes, limit_for, Limits};
use crate::run::{bench_emitter, cpu_seconds, disk_bytes_written, next_item, run_concurrent, Row};
use crate::turns::{in_turns, mean_secs, InTurns, Probes, TURN};
use dlq_testkit::bench::load::Run;
use dlq_testkit::group_commits as flushes;

/// A payload size: its name, the `blob` letters in `item_data`, the K measured, emits per K.
pub struct Payload {
    pub name: &'static str,
    pub blob: usize,
    pub ks: Vec<usize>,
    pub emits: usize,
}

impl Payload {
    /// Bytes of one stored `DeadLettered` event of this payload.
    pub fn event_bytes(&self) -> usize {
        event_bytes(&template_item_sized(self.blob))
    }
}

/// Issue 37's targets for `dead_letter` with the bus up: a share of the bus alone at K = 64
/// and 256, of the serial ceiling at K = 1, and the CPU per event at K = 256 (1 KiB).
const BUS_SHARE: (f64, &str) = (0.6, ">= 60 % of the bus-alone ceiling");
const SERIAL_SHARE: (f64, &str) = (0.9, ">= 90 % of the serial ceiling");
const CPU_BUS_UP_US: f64 = 25.0;

/// One scenario per K: a fresh sink and emitter, a warm-up, then `payload.emits` calls.
pub async fn emit_scenarios(
    base: &Path,
    url: &str,
    bus_up: bool,
    payload: &Payload,
    limits: &Limits,
    bus_limits: &BusLimits,
    rows: &mut Vec<Row>,
) {
    let (section, per_call) = [("3 bus down", 2.0), ("2 bus up", 1.0)][usize::from(bus_up)];
    // Bus down: no retry, so an emit is a durable write, an immediate "disconnected" and an
    // `EmitFailed` audit event appended after it.
    let mut policies = TopicPolicies::default();
    policies.default.retry_attempts = if bus_up { 1 } else { 0 };
    let total = payload.emits;
    for &k in &payload.ks {
        let dir = base.join(format!("emit-{}-{}-k{k}", payload.blob, bus_up));
        let emitter = bench_emitter(&dir, url, bus_up, policies.clone()).await;
        let (handle, template) = (emitter.clone(), template_item_sized(payload.blob));
        let call = move |task, i| {
            let (emitter, item) = (handle.clone(), next_item(&template, task + i));
            async move {
                let receipt = emitter.dead_letter(crate::run::TOPIC, item).await;
                receipt.map(|r| r.published).map_err(|e| e.to_string())
            }
        };
        run_concurrent(k, (total / 10).clamp(k, 500), call.clone()).await; // warm-up
        let (disk_before, flushes_before) = (disk_bytes_written(), flushes::count());
        let (checkpoints_before, cpu_before) = (flushes::checkpoints(), cpu_seconds());
        // One at a time, the calls take turns with their ceilings (`crate::turns`).
        let (run, cpu_secs, disk_bytes, turns) = if k == 1 {
            let probes = Probes {
                dir: base.to_owned(),
                record: payload.event_bytes(),
                bus_url: bus_up.then(|| url.to_owned()),
                blob: payload.blob,
            };
            let turns = in_turns(probes, total, call).await;
            let InTurns {
                ours,
                cpu_secs,
                disk_bytes,
                plain,
                bus,
            } = turns;
            (ours, cpu_secs, disk_bytes, Some((plain, bus)))
        } else {
            let run = run_concurrent(k, total, call).await;
            let disk = disk_bytes_written() - disk_before;
            (run, cpu_seconds() - cpu_before, disk, None)
        };
        let (hist, secs, published, errors) = (run.hist, run.secs, run.ok, run.errors);
        let events = total as f64 * per_call;
        let cpu_us = cpu_secs * 1e6 / events;
        let kib = disk_bytes as f64 / 1024.0 / events;
        let per_flush = events / (flushes::count() - flushes_before).max(1) as f64;
        let checkpoints = flushes::checkpoints() - checkpoints_before;
        let event = emitter.sink().event(1).ok().flatten();
        let bytes = event.and_then(|e| e.to_json().ok()).map_or(0, |j| j.len());
        let backlog = emitter.sink().backlog().map_or(0, |b| b.count);
        emitter.shutdown().await.expect("shutdown");
        std::fs::remove_dir_all(&dir).expect("remove sink dir");
        let (p99, rate) = (hist.value_at_quantile(0.99), events / secs);
        let name = format!("durable emit, {}, K={k}", payload.name);
        let mut row = Row::new(section, name, total).latency(&hist);
        row = row.rates(Some(total as f64 / secs), Some(rate));
        row.cpu_us = Some(cpu_us);
        if bus_up {
            read_against_the_bus(&mut row, limits, bus_limits, payload.blob, k);
        } else {
            row.limit = Some(limit_for(limits, payload.blob, k));
        }
        if let Some((plain, bus)) = &turns {
            read_against_the_turns(&mut row, plain, bus.as_ref());
        }
        let mut note = format!("event {bytes} B, {kib:.1} KiB to disk per event; ");
        note += &format!("{cpu_us:.0} us CPU per event (this process); ");
        note += &format!("{per_flush:.1} events per group commit; {checkpoints} checkpoints; ");
        note += &format!("published {published}/{total}; backlog after {backlog}");
        note += &format!("; errors {}", errors.len());
        if !bus_up {
            note += "; 2 events per emit (item + EmitFailed audit), 2 serial commits";
        }
        eprintln!(
            "  {} K={k}: {:.0} emits/s, {rate:.0} events/s, p99 {p99} us, {cpu_us:.0} us CPU per event",
            payload.name,
            total as f64 / secs
        );
        rows.push(row.note(note));
    }
}

/// A K = 1 row's ceiling from the probes made in turns with its calls (`crate::turns`): the
/// plain file alone with the bus down, the serial ceiling with it up. The ceiling measured
/// apart (sections 1 and 2a) stays in the text.
fn read_against_the_turns(row: &mut Row, plain: &Run, bus: Option<&Run>) {
    let plain_rate = 1.0 / mean_secs(plain);
    let apart = row.limit.take().map_or_else(String::new, |(rate, text)| {
        format!("; measured apart: {rate:.0}/s, {text}")
    });
    let (ceiling, text) = match bus {
        Some(bus) => {
            let bus_rate = 1.0 / mean_secs(bus);
            let serial = serial_ceiling(plain_rate, bus_rate);
            let text = format!("serial ceiling 1/(1/plain + 1/bus) in turns of {TURN} calls with these calls: plain {plain_rate:.0}/s, bus {bus_rate:.0}/s{apart}");
            (serial, text)
        }
        None => {
            let text = format!("plain file, one append + fdatasync at a time, in turns of {TURN} calls with these calls{apart}");
            (plain_rate, text)
        }
    };
    row.limit = Some((ceiling, text));
}

/// A bus-up row's ceiling: at K = 1 the serial one (store, then publish), above it the bus
/// alone at the same K; the 1 KiB rows at K = 256 carry the CPU target too.
fn read_against_the_bus(row: &mut Row, limits: &Limits, bus: &BusLimits, blob: usize, k: usize) {
    let bus_alone = bus.get(&(blob, k)).copied().unwrap_or_default();
    if k == 1 {
        let (plain, _) = limit_for(limits, blob, 1);
        let ceiling = serial_ceiling(plain, bus_alone);
        let mut text = format!(
            "serial ceiling 1/(1/plain + 1/bus) of plain {plain:.0}/s and bus {bus_alone:.0}/s"
        );
        // The same with the append handed to a thread, as a call that can stop waiting needs.
        if let Some(&ratio) = limits.handoff_ratio.get(&blob) {
            let handed = serial_ceiling(plain / ratio, bus_alone);
            text += &format!(
                "; with the append handed to a thread {handed:.0}/s ({:.1} % of the serial ceiling)",
                100.0 * handed / ceiling
            );
        }
        row.limit = Some((ceiling, text));
        row.limit_target = Some(SERIAL_SHARE);
    } else {
        row.limit = Some((bus_alone, format!("bus alone, K={k} in flight")));
        row.limit_target = (k >= 64).then_some(BUS_SHARE);
    }
    if k == 256 && blob == 1024 {
        row.cpu_target_us = Some(CPU_BUS_UP_US);
    }
}
