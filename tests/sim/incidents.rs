//! Operations made of several steps on several parts at once: a power cut in the middle of
//! concurrent appends, a message lost from the stream, a slow disk whose late write fails.

use std::time::Duration;

use dlq::emitter::Receipt;

use super::driver::{item, item_id, job, op_kind, open_failed, record, Fatal};
use super::model::Expect;
use super::ops::FaultAt;
use super::world::{BusState, World, STORE_TIMEOUT};

/// A slow disk: the writer takes the dead-letter and stalls past the store timeout (the caller
/// is told `Unconfirmed`); then its write fails at `at`. The promise: stored, or reported.
pub async fn unconfirmed_then_failed(world: &mut World, at: FaultAt, j: u8, n: u16) -> String {
    let (job, id) = (job(j), item_id(n));
    let faults = world.sink().faults().clone();
    faults.set_stall(STORE_TIMEOUT + Duration::from_millis(300));
    // Every call of that kind fails while the stalled writer writes the group.
    world.sim.inject(op_kind(at), 0, usize::MAX, 5);
    let result = world
        .emitter()
        .dead_letter("sim", item(&job, &id, 100))
        .await;
    // The writer sleeps out its stall, then fails the write: a checkpoint queued behind that
    // group returns once it is done.
    faults.set_stall(Duration::ZERO);
    let _ = world.sink().checkpoint().await;
    world.sim.clear_faults();
    // The emitter keeps the dead-letter until the sink stores it again (tried first, every
    // second) or the bus takes it: a power cut before then loses it, as the design says. With
    // the faults off the next try stores it; the operation ends then (bounded).
    if matches!(&result, Err(err) if err.is_unconfirmed()) {
        for _ in 0..100 {
            if matches!(world.sink().item(&job, &id), Ok(Some(_))) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    world.copy_sled();
    match result {
        Err(err) if err.is_unconfirmed() => {
            world.model.set(&job, &id, Expect::Reported);
            "unconfirmed, then the late write failed".into()
        }
        other => {
            let word = record(world, &job, &id, &other);
            format!("not unconfirmed: {word}")
        }
    }
}

/// The bus goes down, `tasks` dead-letters run concurrently, and the power is cut at a point of
/// the log operations they made: an emit acknowledged after that point is doubtful (it may or
/// may not have reached the disk before the cut), one acknowledged before must survive.
pub async fn crash_during(
    world: &mut World,
    j: u8,
    first: u16,
    tasks: u8,
    at: u16,
    pick: u64,
) -> Result<String, Fatal> {
    if world.bus == BusState::Frozen {
        world.server.cont();
    }
    world.server.kill();
    world.bus = BusState::Down;
    world.wait_bus(false).await;
    let job = job(j);
    let start_disk = world.sim.disk();
    let start = world.sim.trace_len();
    let ids: Vec<String> = (0..u16::from(tasks)).map(|k| item_id(first + k)).collect();
    let results = {
        let (emitter, sim) = (world.emitter(), world.sim.clone());
        let calls = ids.iter().map(|id| {
            let sim = sim.clone();
            let call = emitter.dead_letter("sim", item(&job, id, 100));
            async move {
                let result = call.await;
                (result, sim.trace_len())
            }
        });
        futures::future::join_all(calls).await
    };
    let trace = world.sim.trace();
    let made = trace.len().saturating_sub(start);
    let point = start + made * usize::from(at) / 1000;
    let mut words = Vec::new();
    for (id, (result, acked_at)) in ids.iter().zip(&results) {
        let word = record(world, &job, id, result);
        if result.is_ok() && *acked_at > point {
            world.model.set(&job, id, Expect::Doubtful);
            words.push("after-cut");
        } else {
            words.push(word);
        }
    }
    let mut disk = start_disk;
    for op in trace.get(start..point).unwrap_or_default() {
        disk.apply(op);
    }
    let opened = world.crash_into(disk, pick).await.map_err(open_failed)?;
    Ok(format!(
        "{}; cut at trace {point} of {start}..{}; {opened}",
        words.join(" "),
        trace.len()
    ))
}

/// Emits one dead-letter; once it is published and the newest message, deletes it from the
/// stream and waits (bounded) for anti-entropy to publish it again.
pub async fn lose_message(world: &mut World, j: u8, n: u16) -> Result<String, Fatal> {
    if world.bus != BusState::Up {
        return Ok("skipped: bus not up".into());
    }
    let (job, id) = (job(j), item_id(n));
    let result = world
        .emitter()
        .dead_letter("sim", item(&job, &id, 100))
        .await;
    let word = record(world, &job, &id, &result);
    let Ok(Receipt {
        event_ids,
        published: true,
    }) = result
    else {
        return Ok(format!("{word}; not published, nothing deleted"));
    };
    let client = async_nats::connect(world.server.url())
        .await
        .map_err(|e| Fatal(format!("connect: {e}")))?;
    let js = async_nats::jetstream::new(client);
    let mut stream = js
        .get_stream("DLQ")
        .await
        .map_err(|e| Fatal(format!("stream: {e}")))?;
    let last = stream
        .info()
        .await
        .map_err(|e| Fatal(format!("stream info: {e}")))?
        .state
        .last_sequence;
    let message = stream
        .get_raw_message(last)
        .await
        .map_err(|e| Fatal(format!("get {last}: {e}")))?;
    let body: serde_json::Value = serde_json::from_slice(&message.payload).unwrap_or_default();
    if body["event_id"].as_str() != event_ids.first().map(String::as_str) {
        return Ok(format!("{word}; not the newest message, nothing deleted"));
    }
    let before = world
        .emitter()
        .anti_entropy_stats()
        .unwrap_or_default()
        .republished;
    let syncs_before = world.sink().publish_mark_syncs();
    stream
        .delete_message(last)
        .await
        .map_err(|e| Fatal(format!("delete {last}: {e}")))?;
    for _ in 0..1200 {
        let now = world
            .emitter()
            .anti_entropy_stats()
            .unwrap_or_default()
            .republished;
        if now > before {
            // Anti-entropy makes the publish marks durable before a repair (a checkpoint):
            // sled as of then is what a power cut finds. Without that checkpoint, nothing.
            if world.sink().publish_mark_syncs() > syncs_before {
                world.copy_sled();
            }
            return Ok(format!(
                "{word}; message {last} deleted, anti-entropy put it back"
            ));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Err(Fatal(format!(
        "anti-entropy did not publish deleted message {last} ({job}/{id}) again within 60 s"
    )))
}
