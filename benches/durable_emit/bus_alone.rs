//! 2a. The bus alone: JetStream publish + PubAck with K in flight and nothing stored, the
//! ceiling every bus-up row is read against (issue 37), measured in the same run on the same
//! private nats-server. Each call builds the event and publishes it through `NatsBus::publish`
//! (JSON encoding included, as dlq's own publish), so the ceiling is the bus client's cost, not
//! a pre-encoded loop.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use dlq::bus::{Bus, NatsBus};
use dlq_testkit::items::{dead_lettered_event, template_item_sized};

use crate::emit::Payload;
use crate::run::{connect_bus, cpu_seconds, next_item, run_concurrent, wait_healthy, Row, TOPIC};

/// Events/s of the bus alone per (payload blob bytes, K in flight).
pub type BusLimits = HashMap<(usize, usize), f64>;

/// Measures the bus alone at every K of `payload`, adding a row each and its rate to `limits`.
pub async fn bus_alone(url: &str, payload: &Payload, limits: &mut BusLimits, rows: &mut Vec<Row>) {
    let total = payload.emits;
    for &k in &payload.ks {
        let bus = Arc::new(connect_bus(url.into(), true).await);
        wait_healthy(bus.as_ref()).await;
        bus.prepare().await.expect("stream");
        let node = format!("bench-bus-alone-{}-k{k}", payload.blob);
        let (template, seq) = (
            template_item_sized(payload.blob),
            Arc::new(AtomicU64::new(0)),
        );
        let call = {
            let bus = bus.clone();
            move |task, i| {
                let seq = seq.fetch_add(1, Ordering::Relaxed) + 1;
                let event = dead_lettered_event(&node, seq, TOPIC, next_item(&template, task + i));
                let bus: Arc<NatsBus> = bus.clone();
                async move {
                    bus.publish(&event)
                        .await
                        .map(|_| true)
                        .map_err(|e| e.to_string())
                }
            }
        };
        run_concurrent(k, (total / 10).clamp(k, 500), call.clone()).await; // warm-up
        let cpu_before = cpu_seconds();
        let run = run_concurrent(k, total, call).await;
        let cpu_us = (cpu_seconds() - cpu_before) * 1e6 / total as f64;
        let rate = total as f64 / run.secs;
        limits.insert((payload.blob, k), rate);
        let name = format!(
            "bus alone: JetStream publish + PubAck, {}, K={k} in flight, nothing stored",
            payload.name
        );
        eprintln!(
            "  bus alone {} K={k}: {rate:.0} events/s, {cpu_us:.1} us CPU per event",
            payload.name
        );
        let row = Row::new("2a bus alone", name, total).latency(&run.hist);
        let mut row = row.rates(Some(rate), Some(rate));
        row.cpu_us = Some(cpu_us);
        let note = format!(
            "the bus ceiling of the bus-up rows at this K; {cpu_us:.1} us CPU per event (this process: the NATS client and the JSON encoding); errors {}",
            run.errors.len()
        );
        rows.push(row.note(note));
    }
}

/// The serial ceiling of one call at a time that stores then publishes:
/// 1 / (1/plain + 1/bus), in events/s.
pub fn serial_ceiling(plain: f64, bus: f64) -> f64 {
    if plain <= 0.0 || bus <= 0.0 {
        return 0.0;
    }
    1.0 / (1.0 / plain + 1.0 / bus)
}
