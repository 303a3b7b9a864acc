//! Applies one operation to the world and records its outcome in the model and the trace.

use std::time::Duration;

use dlq::domain::command::Command;
use dlq::domain::event::RemovalReason;
use dlq::domain::model::DeadLetteredItem;
use dlq::emitter::{EmitError, Receipt};
use dlq::sink::log::sim::OpKind;
use dlq::sink::SinkError;
use dlq_testkit::items::failed_once;

use super::model::Expect;
use super::ops::{FaultAt, Op};
use super::world::{BusState, World, MAX_PAYLOAD, STORE_TIMEOUT};

/// What went wrong so badly that the run cannot go on (the directory does not open).
pub struct Fatal(pub String);

fn job(j: u8) -> String {
    format!("job-{j}")
}

fn item_id(n: u16) -> String {
    format!("item-{n}")
}

fn item(job: &str, id: &str, blob: usize) -> DeadLetteredItem {
    let data = serde_json::json!({ "id": id, "blob": "x".repeat(blob) });
    failed_once(
        (job, id),
        "shell: make",
        2,
        format!("step failed for {id}"),
        data,
    )
}

fn op_kind(at: FaultAt) -> OpKind {
    match at {
        FaultAt::Write => OpKind::Write,
        FaultAt::Sync => OpKind::Sync,
        FaultAt::Create => OpKind::Create,
        FaultAt::Remove => OpKind::Remove,
        FaultAt::SyncDir => OpKind::SyncDir,
        FaultAt::Rename => OpKind::Rename,
    }
}

/// Records an emit's outcome in the model; returns a short word for the trace.
fn record(
    world: &mut World,
    job: &str,
    id: &str,
    result: &Result<Receipt, EmitError>,
) -> &'static str {
    match result {
        Ok(receipt) if receipt.published => {
            world.model.set(job, id, Expect::Present);
            "pub"
        }
        Ok(_) => {
            world.model.set(job, id, Expect::Present);
            "stored"
        }
        Err(err) if err.is_not_stored() || err.is_unconfirmed() => {
            world.model.set(job, id, Expect::Doubtful);
            "FAILED"
        }
        Err(_) => "refused",
    }
}

async fn emit(world: &mut World, j: u8, first: u16, tasks: u8, blob: usize) -> String {
    let job = job(j);
    let ids: Vec<String> = (0..u16::from(tasks)).map(|k| item_id(first + k)).collect();
    let results = {
        let emitter = world.emitter();
        let calls = ids
            .iter()
            .map(|id| emitter.dead_letter("sim", item(&job, id, blob)));
        futures::future::join_all(calls).await
    };
    let words: Vec<&str> = ids
        .iter()
        .zip(&results)
        .map(|(id, result)| record(world, &job, id, result))
        .collect();
    words.join(" ")
}

/// Applies `op`; returns what came of it.
pub async fn apply(world: &mut World, op: &Op) -> Result<String, Fatal> {
    Ok(match op {
        Op::Emit { tasks, job, first } => emit(world, *job, *first, *tasks, 100).await,
        Op::Oversized { job, item } => emit(world, *job, *item, 1, 2 * MAX_PAYLOAD).await,
        Op::FailedEmit {
            at,
            skip,
            errno,
            tasks,
            job,
            first,
        } => {
            world
                .sim
                .inject(op_kind(*at), usize::from(*skip), 1, *errno);
            let out = emit(world, *job, *first, *tasks, 100).await;
            world.sim.clear_faults();
            out
        }
        Op::UnconfirmedThenFailed {
            at,
            job: j,
            item: n,
        } => {
            let (job, id) = (job(*j), item_id(*n));
            let faults = world.sink().faults().clone();
            faults.set_stall(STORE_TIMEOUT + Duration::from_millis(500));
            // Every call of that kind fails while the stalled writer writes the group.
            world.sim.inject(op_kind(*at), 0, usize::MAX, 5);
            let result = world
                .emitter()
                .dead_letter("sim", item(&job, &id, 100))
                .await;
            // The writer sleeps out its stall, then fails the write; wait until it is idle.
            tokio::time::sleep(Duration::from_millis(800)).await;
            faults.set_stall(Duration::ZERO);
            let _ = world.sink().checkpoint().await;
            world.sim.clear_faults();
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
        Op::Store { job: j, item: n } => {
            let (job, id) = (job(*j), item_id(*n));
            let result = world.emitter().store("sim", item(&job, &id, 100)).await;
            let result = result.map(|receipt| Receipt {
                event_ids: receipt.event_ids,
                published: false,
            });
            record(world, &job, &id, &result).to_owned()
        }
        Op::Remove { job: j, item: n } => {
            let (job, id) = (job(*j), item_id(*n));
            let command = Command::Remove {
                job_id: job.clone(),
                item_id: id.clone(),
                reason: RemovalReason::Resolved,
            };
            match world.emitter().submit("sim", command).await {
                Ok(_) => {
                    world.model.set(&job, &id, Expect::Absent);
                    "removed".into()
                }
                Err(EmitError::NotFound { .. }) => {
                    if world.model.get(&job, &id) == Some(Expect::Present) {
                        return Err(Fatal(format!(
                            "{job}/{id} was acknowledged and never removed, but the sink says not found"
                        )));
                    }
                    "not found".into()
                }
                Err(err) if err.is_not_stored() || err.is_unconfirmed() => {
                    world.model.set(&job, &id, Expect::Doubtful);
                    format!("FAILED: {err}")
                }
                Err(err) => format!("refused: {err}"),
            }
        }
        Op::Clear { job: j, limit } => {
            let job = job(*j);
            let command = Command::Clear {
                job_id: job.clone(),
                limit: usize::from(*limit),
            };
            let result = world.emitter().submit("sim", command).await;
            // Which items a clear takes is the sink's choice: take its answer for the job's
            // certain items as the new promise.
            for id in world.model.certain_in(&job) {
                let held = world.sink().item(&job, &id).ok().flatten().is_some();
                let expect = if held {
                    Expect::Present
                } else {
                    Expect::Absent
                };
                if result.is_ok() || world.model.get(&job, &id) == Some(Expect::Absent) {
                    world.model.items.insert((job.clone(), id), expect);
                } else {
                    world
                        .model
                        .items
                        .insert((job.clone(), id), Expect::Doubtful);
                }
            }
            match result {
                Ok(receipt) => format!("{} events", receipt.event_ids.len()),
                Err(err) => format!("error: {err}"),
            }
        }
        Op::FailedCheckpoint { at, errno } => {
            world.sim.inject(op_kind(*at), 0, 1, *errno);
            let out = world.checkpoint().await;
            world.sim.clear_faults();
            format!("{out:?}")
        }
        Op::FailedRead => {
            world.sim.inject(OpKind::Read, 0, 1, 5);
            world.emitter().wake_reconciler();
            tokio::time::sleep(Duration::from_millis(150)).await;
            world.sim.clear_faults();
            "read fault armed 150 ms".into()
        }
        Op::Checkpoint => format!("{:?}", world.checkpoint().await),
        Op::Crash { pick } => world.crash(*pick).await.map_err(open_failed)?,
        Op::CrashDuring {
            tasks,
            job,
            first,
            at,
            pick,
        } => crash_during(world, *job, *first, *tasks, *at, *pick).await?,
        Op::Restart => restart(world).await?,
        Op::TimeJump => {
            world.retention_zero = true;
            restart(world).await?
        }
        Op::Rebuild => {
            let result = world.sink().rebuild_projection().await;
            world.copy_sled();
            match result {
                Ok(events) => format!("rebuilt from {events} events"),
                Err(SinkError::Rejected(reason)) => format!("refused: {reason}"),
                Err(err) => format!("FAILED: {err}"),
            }
        }
        Op::BusKill => {
            world.server.kill();
            world.bus = BusState::Down;
            world.wait_bus(false).await;
            "killed".into()
        }
        Op::BusRestart => {
            world.server.restart();
            world.bus = BusState::Up;
            world.wait_bus(true).await;
            "restarted".into()
        }
        Op::BusFreeze => {
            world.server.stop();
            world.bus = BusState::Frozen;
            "frozen".into()
        }
        Op::BusThaw => {
            world.server.cont();
            world.bus = BusState::Up;
            world.wait_bus(true).await;
            "thawed".into()
        }
        Op::LoseMessage { job: j, item: n } => lose_message(world, *j, *n).await?,
        Op::ConsumerCatchUp => match world.consume().await {
            None => "skipped: bus not up".into(),
            Some(Ok(run)) => format!(
                "applied {} (waiting {})",
                run.applied_this_run,
                run.fold.waiting()
            ),
            Some(Err(err)) => format!("error: {err}"),
        },
    })
}

/// The bus goes down, `tasks` dead-letters run concurrently, and the power is cut at a point of
/// the log operations they made: an emit acknowledged after that point is doubtful (it may or
/// may not have reached the disk before the cut), one acknowledged before must survive.
async fn crash_during(
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
async fn lose_message(world: &mut World, j: u8, n: u16) -> Result<String, Fatal> {
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
    stream
        .delete_message(last)
        .await
        .map_err(|e| Fatal(format!("delete {last}: {e}")))?;
    for _ in 0..300 {
        let now = world
            .emitter()
            .anti_entropy_stats()
            .unwrap_or_default()
            .republished;
        if now > before {
            return Ok(format!(
                "{word}; message {last} deleted, anti-entropy put it back"
            ));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Err(Fatal(format!(
        "anti-entropy did not publish deleted message {last} ({job}/{id}) again within 15 s"
    )))
}

fn open_failed(reason: String) -> Fatal {
    Fatal(format!("the data directory does not open: {reason}"))
}

async fn restart(world: &mut World) -> Result<String, Fatal> {
    let closed = world.shutdown().await;
    world.open().await.map_err(open_failed)?;
    Ok(match closed {
        Ok(()) => "reopened".into(),
        Err(err) => format!("close failed ({err}); reopened"),
    })
}
