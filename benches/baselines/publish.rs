//! 3. Publish-only: JetStream publish with PubAck and no sink, against our durable emit.

use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use dlq::bus::{Bus, NatsBus};
use dlq::emitter::reconciler::ReconcilerConfig;
use dlq::emitter::{EmitterBuilder, TopicPolicies};
use dlq_testkit::items::dead_lettered_event;
use dlq_testkit::NatsServer;

use crate::run::{bus_config, open_sink, run_concurrent, stream_messages, wait_healthy, Items};
use crate::{Line, Mode, IN_FLIGHT, PUBLISH_TIMEOUT, TOPIC};

pub async fn publish_section(base: &Path, mode: &Mode, lines: &mut Vec<Line>) {
    let server = NatsServer::start();
    let items = Arc::new(Items::new());
    let total = mode.emits;
    let warmup = (total / 10).clamp(1, 500);
    for k in IN_FLIGHT {
        // Baseline: NatsBus::publish (JetStream publish, wait for the PubAck), no sink.
        let bus = Arc::new(
            NatsBus::connect(bus_config(&server.url(), &format!("pub{k}")))
                .await
                .expect("bus"),
        );
        wait_healthy(bus.as_ref()).await;
        bus.prepare().await.expect("stream");
        let next = Arc::new(AtomicUsize::new(0));
        let (b, it, n) = (bus.clone(), items.clone(), next.clone());
        let publish = move |_, _| {
            let i = n.fetch_add(1, Ordering::Relaxed);
            let (bus, event) = (
                b.clone(),
                dead_lettered_event("bench-publish-only", i as u64 + 1, TOPIC, it.nth(i)),
            );
            async move {
                bus.publish(&event)
                    .await
                    .map(|_| true)
                    .map_err(|e| e.to_string())
            }
        };
        run_concurrent(k.max(1), warmup.max(k), publish.clone()).await;
        let base_run = run_concurrent(k, total, publish).await;
        let stored = stream_messages(&bus).await;
        assert_eq!(
            stored,
            (warmup.max(k) + total) as u64,
            "publish-only: every event stored once"
        );
        let bytes = dead_lettered_event("bench-publish-only", 1, TOPIC, items.nth(0))
            .to_json()
            .map_or(0, |j| j.len());

        // Ours: the emitter's dead_letter (durable sink append, then the same publish).
        let sink = open_sink(&base.join(format!("emit-k{k}")));
        let bus = NatsBus::connect(bus_config(&server.url(), &format!("emit{k}")))
            .await
            .expect("bus");
        let mut policies = TopicPolicies::default();
        policies.default.retry_attempts = 1;
        let emitter = EmitterBuilder::new(sink, bus)
            .policies(policies)
            .publish_timeout(PUBLISH_TIMEOUT)
            .reconciler(Some(ReconcilerConfig::default()))
            .build();
        wait_healthy(emitter.bus()).await;
        let next = Arc::new(AtomicUsize::new(0));
        let (em, it) = (emitter.clone(), items.clone());
        let emit = move |_, _| {
            let (emitter, item) = (em.clone(), it.nth(next.fetch_add(1, Ordering::Relaxed)));
            async move {
                let receipt = emitter
                    .dead_letter(TOPIC, item)
                    .await
                    .map_err(|e| e.to_string())?;
                match receipt.published {
                    true => Ok(true),
                    false => Err("not published".to_string()),
                }
            }
        };
        run_concurrent(k.max(1), warmup.max(k), emit.clone()).await;
        let ours_run = run_concurrent(k, total, emit).await;
        let emitted = stream_messages(emitter.bus()).await;
        emitter.shutdown().await.expect("shutdown");
        eprintln!(
            "  K={k}: publish-only {:.0}/s, durable emit {:.0}/s",
            base_run.rate(),
            ours_run.rate()
        );
        lines.push(Line {
            what: format!("durable emit vs publish-only, {k} in flight"),
            unit: "calls/s",
            ours: ours_run.rate(),
            baseline: base_run.rate(),
            higher_is_better: true,
            target: None,
            note: format!(
                "{total} calls, event {bytes} B; p50/p99 ours {}, publish-only {}; \
                 messages in the streams (incl. warm-up) {emitted} and {stored}; errors {}+{}",
                ours_run.p50_p99(),
                base_run.p50_p99(),
                ours_run.errors.len(),
                base_run.errors.len()
            ),
        });
    }
    drop(server);
}
