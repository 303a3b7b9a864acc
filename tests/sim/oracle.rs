//! After the operations: bring the world to rest (bus up, faults off, the reconciler drained)
//! and check what must hold.

use std::collections::BTreeMap;
use std::time::Duration;

use dlq::bus::BusConfig;
use dlq::consumer::{compare, explain_held, read_from_start, Difference, Fold};
use dlq::domain::projection::StoredItem;
use dlq::sink::{LocalSink, Sink, SinkError};

use super::model::Expect;
use super::world::{BusState, World};

/// What the checks counted (for the figures).
#[derive(Debug, Default, Clone, Copy)]
pub struct Counts {
    pub events_in_log: u64,
    pub messages_in_stream: u64,
    pub items: u64,
    pub parked: u64,
}

/// Brings the world to rest; returns what did not settle.
pub async fn quiesce(world: &mut World) -> Vec<String> {
    world.sim.clear_faults();
    match world.bus {
        BusState::Frozen => world.server.cont(),
        BusState::Down => world.server.restart(),
        BusState::Up => {}
    }
    world.bus = BusState::Up;
    world.wait_bus(true).await;
    world.emitter().wake_reconciler();
    for _ in 0..600 {
        let backlog = world.sink().backlog().map(|b| b.count).unwrap_or(1);
        if backlog == 0 && world.emitter().unstored_waiting() == 0 {
            return Vec::new();
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let left = world.sink().backlog().map(|b| b.count);
    let waiting = world.emitter().unstored_waiting();
    vec![format!(
        "the reconciler did not drain the backlog in 60 s: {left:?} left, {waiting} volatile copies waiting for the bus"
    )]
}

/// Every check of the oracle; returns the violations.
pub async fn check(world: &mut World, rebuild_first_checkpoints: bool) -> (Vec<String>, Counts) {
    let mut wrong = Vec::new();
    let mut counts = Counts::default();
    let sink = world.sink().clone();
    counts.parked = sink.parked().map(|p| p.len() as u64).unwrap_or(0);
    // 1. Every acknowledged item is in the sink; every acknowledged removal holds.
    for ((job, id), expect) in &world.model.items {
        let held = match sink.item(job, id) {
            Ok(found) => found.is_some(),
            Err(err) => {
                wrong.push(format!("{job}/{id} cannot be read from the sink: {err}"));
                continue;
            }
        };
        match (expect, held) {
            (Expect::Present, false) => {
                wrong.push(format!("acknowledged item {job}/{id} lost by the sink"))
            }
            (Expect::Absent, true) => {
                wrong.push(format!("removed item {job}/{id} is back in the sink"))
            }
            _ => {}
        }
    }
    let items: Vec<StoredItem> = match sink.items().collect::<Result<_, _>>() {
        Ok(items) => items,
        Err(err) => {
            wrong.push(format!("the sink's items cannot be read: {err}"));
            return (wrong, counts);
        }
    };
    counts.items = items.len() as u64;
    counts.events_in_log = sink.events_from(1).count() as u64;
    // 2. No event id twice in the stream.
    let messages = dlq_testkit::stream::stream_messages(&world.server.url(), "DLQ").await;
    counts.messages_in_stream = messages.len() as u64;
    let mut seen: BTreeMap<String, Vec<&str>> = BTreeMap::new();
    for (msg_id, body) in &messages {
        let id = body["event_id"].as_str().unwrap_or_default().to_owned();
        seen.entry(id).or_default().push(msg_id);
    }
    for (id, msg_ids) in seen.iter().filter(|(_, m)| m.len() > 1) {
        wrong.push(format!(
            "event {id} is {} times in the stream (message ids {msg_ids:?})",
            msg_ids.len()
        ));
    }
    // 3. A consumer reading from the start, and the durable consumer: nothing waits, and
    // `verify` finds no difference.
    match read_from_start(&BusConfig::at(world.server.url()), "DLQ", None).await {
        Ok(read) => {
            consumer_checks("read from the start", &read.fold, &items, &mut wrong);
            // "Stored, or reported": an unconfirmed write that failed late must be somewhere.
            for ((job, id), expect) in &world.model.items {
                let key = (job.clone(), id.clone());
                let stored = items
                    .iter()
                    .any(|s| s.item.job_id == *job && s.item.item_id == *id);
                if *expect == Expect::Reported
                    && !stored
                    && !read.fold.projection.items.contains_key(&key)
                {
                    wrong.push(format!("{job}/{id} was told Unconfirmed, its late write failed, and it is neither stored nor published"));
                }
            }
        }
        Err(err) => wrong.push(format!("the stream cannot be read: {err}")),
    }
    match world.consume().await {
        Some(Ok(run)) => consumer_checks("durable consumer", &run.fold, &items, &mut wrong),
        Some(Err(err)) => wrong.push(format!("the durable consumer failed: {err}")),
        None => wrong.push("the bus is not up after quiescence".into()),
    }
    // 4. The projection equals a rebuild from the log (unless the sink refuses it: items
    // older than the log).
    if rebuild_first_checkpoints {
        if let Err(err) = sink.checkpoint().await {
            wrong.push(format!("checkpoint before the rebuild failed: {err}"));
        }
    }
    let before = comparable(&sink);
    match sink.rebuild_projection().await {
        Ok(_) => {
            let after = comparable(&sink);
            if before != after {
                wrong.push(projection_difference(&before, &after));
            }
        }
        Err(SinkError::Rejected(_)) => {}
        Err(err) => wrong.push(format!("the rebuild failed: {err}")),
    }
    (wrong, counts)
}

fn consumer_checks(who: &str, fold: &Fold, items: &[StoredItem], wrong: &mut Vec<String>) {
    let waiting = fold.waiting();
    if waiting > 0 {
        wrong.push(format!("{who}: {waiting} events wait for a predecessor"));
    }
    let ok = items.iter().cloned().map(Ok::<_, SinkError>);
    match compare(ok, &fold.projection) {
        Ok(differences) => {
            for difference in explain_held(differences, &fold.held) {
                if let Some(violation) = describe(&difference) {
                    wrong.push(format!("{who}: verify: {violation}"));
                }
            }
        }
        Err(err) => wrong.push(format!("{who}: verify failed: {err}")),
    }
}

/// A difference that breaks a promise, described; `None` for the two kinds the design allows:
/// an event the sink could not store, published as a volatile event (the caller was told
/// `NotStored`), and an item held back behind a stub of an event too large for the bus (the
/// sink holds it; the full event follows once the bus takes it).
fn describe(difference: &Difference) -> Option<String> {
    Some(match difference {
        Difference::Missing { job_id, item_id } => format!("missing {job_id}/{item_id}"),
        Difference::Extra { job_id, item_id } => format!("extra {job_id}/{item_id}"),
        Difference::Diverging {
            job_id,
            item_id,
            sink_version,
            consumer_version,
        } => format!(
            "diverging {job_id}/{item_id} (sink v{sink_version}, consumer v{consumer_version})"
        ),
        Difference::Unstored { .. } | Difference::Held { .. } => return None,
    })
}

type KeyValue = (Vec<u8>, Vec<u8>);

/// The projection as queries see it: every key (an item's value may be a pointer into the log
/// or the item kept whole; both read the same), and every item as read.
fn comparable(sink: &LocalSink) -> (Vec<KeyValue>, Vec<StoredItem>) {
    let item_prefix = dlq::sink::test_support::item_key("", "")[0];
    let keys = sink
        .projection_snapshot()
        .unwrap_or_default()
        .into_iter()
        .map(|(key, value)| match key.first() {
            Some(&first) if first == item_prefix => (key, Vec::new()),
            _ => (key, value),
        })
        .collect();
    let items = sink.items().filter_map(Result::ok).collect();
    (keys, items)
}

fn projection_difference(
    before: &(Vec<KeyValue>, Vec<StoredItem>),
    after: &(Vec<KeyValue>, Vec<StoredItem>),
) -> String {
    let ids = |items: &[StoredItem]| -> Vec<String> {
        items
            .iter()
            .map(|s| format!("{}/{}", s.item.job_id, s.item.item_id))
            .collect()
    };
    let (b, a) = (ids(&before.1), ids(&after.1));
    let lost: Vec<&String> = b.iter().filter(|id| !a.contains(id)).collect();
    format!(
        "the projection differs from a rebuild from the log ({} items before, {} after; lost by the rebuild: {lost:?}; {} keys before, {} after)",
        b.len(),
        a.len(),
        before.0.len(),
        after.0.len()
    )
}
