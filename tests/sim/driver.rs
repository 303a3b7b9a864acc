//! Applies one operation to the world and records its outcome in the model and the trace.

use std::time::Duration;

use dlq::domain::command::Command;
use dlq::domain::event::RemovalReason;
use dlq::domain::model::DeadLetteredItem;
use dlq::emitter::{EmitError, Receipt};
use dlq::sink::test_support::log::sim::OpKind;
use dlq::sink::SinkError;
use dlq_testkit::items::failed_once;

use super::incidents;
use super::model::Expect;
use super::ops::{FaultAt, Op};
use super::world::{BusState, World, MAX_PAYLOAD};

/// What went wrong so badly that the run cannot go on (the directory does not open).
pub struct Fatal(pub String);

pub(super) fn job(j: u8) -> String {
    format!("job-{j}")
}

pub(super) fn item_id(n: u16) -> String {
    format!("item-{n}")
}

pub(super) fn item(job: &str, id: &str, blob: usize) -> DeadLetteredItem {
    let data = serde_json::json!({ "id": id, "blob": "x".repeat(blob) });
    failed_once(
        (job, id),
        "shell: make",
        2,
        format!("step failed for {id}"),
        data,
    )
}

pub(super) fn op_kind(at: FaultAt) -> OpKind {
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
pub(super) fn record(
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
        Op::UnconfirmedThenFailed { at, job, item } => {
            incidents::unconfirmed_then_failed(world, *at, *job, *item).await
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
                by: None,
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
                by: None,
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
        } => incidents::crash_during(world, *job, *first, *tasks, *at, *pick).await?,
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
        Op::LoseMessage { job: j, item: n } => incidents::lose_message(world, *j, *n).await?,
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

pub(super) fn open_failed(reason: String) -> Fatal {
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
