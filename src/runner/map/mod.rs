//! The map phase: dispatches one agent per pending item, at most `max_parallel` at a time,
//! retries failed attempts after their backoff, applies the error policy to items that failed
//! every attempt, and records each item's outcome before moving on.
//!
//! One loop owns all decisions (dispatch, breaker, retries, stop conditions); each attempt
//! runs in its own task, which also performs the final action (dead-letter, custom handler)
//! so slow DLQ writes of several items proceed in parallel and share the sink's group commit.
//!
//! An item's outcome is recorded only after its final action succeeded, so after a crash an
//! item is either recorded or still pending; a pending item already in the DLQ (killed
//! between the DLQ write and the record) is recognised on resume and not run twice.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::sync::Arc;
use std::time::Instant;

use tokio::task::JoinSet;
use tracing::warn;

use super::breaker::{CircuitBreaker, Transition};
use super::context::JobContext;
use super::error_collection::ErrorCollector;
use super::job_events::JobEventKind;
use super::job_summary::Tally;
use super::on_failure::stop_reason;
use super::progress::Progress;
use dlq::bus::Bus;
use dlq::domain::model::FailureDetail;

mod attempt;
mod bookkeeping;

use attempt::{attempt, Done};
use bookkeeping::Bookkeeping;

/// One item on its way through the map phase.
#[derive(Debug, Clone)]
pub(super) struct Work {
    /// Index into the job's items.
    pub index: usize,
    /// Attempts made so far in this session.
    pub attempts: u32,
    /// Failures of those attempts, oldest first.
    pub history: Vec<FailureDetail>,
    /// The item is in the DLQ and re-run by `--include-dlq-items`: success resolves it.
    pub from_dlq: bool,
}

impl Work {
    /// A pending item, not attempted yet.
    pub(super) fn new(index: usize, from_dlq: bool) -> Self {
        Work {
            index,
            attempts: 0,
            history: Vec::new(),
            from_dlq,
        }
    }
}

/// How the map phase ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum MapEnd {
    /// Every pending item reached an outcome (or stays pending after a failed DLQ write).
    Completed,
    /// The policy stopped the job; the rest stays pending.
    Stopped(String),
    /// Cancelled (Ctrl-C, SIGTERM); in-flight agents were killed and stay pending.
    Interrupted,
}

/// Runs the map phase over `pending`, updating `tally`.
pub(super) async fn run_map<B: Bus>(
    ctx: &Arc<JobContext<B>>,
    pending: Vec<Work>,
    tally: &mut Tally,
    progress: &mut Progress,
) -> MapEnd {
    let map = &ctx.record.workflow.map;
    let policy = &ctx.record.workflow.error_policy;
    let retry = ctx.record.workflow.effective_retry();
    let max_parallel = map.max_parallel.max(1);
    let mut breaker = policy.circuit_breaker.clone().map(CircuitBreaker::new);
    let mut collector = ErrorCollector::new(policy.error_collection.clone());
    let total = ctx.record.items.len() as u64;
    let mut queue: VecDeque<Work> = pending.into();
    let mut delayed: BinaryHeap<Reverse<(Instant, u64, usize)>> = BinaryHeap::new();
    let mut waiting: Vec<Option<Work>> = Vec::new();
    let mut running: JoinSet<Done> = JoinSet::new();
    let mut stop: Option<MapEnd> = None;
    let mut seq = 0u64;
    loop {
        // Dispatch while there is room, work ready, and the breaker allows it.
        while stop.is_none() && running.len() < max_parallel {
            let now = Instant::now();
            let next = match delayed.peek() {
                Some(Reverse((at, _, slot))) if *at <= now => {
                    let slot = *slot;
                    delayed.pop();
                    waiting.get_mut(slot).and_then(Option::take)
                }
                _ => queue.pop_front(),
            };
            let Some(work) = next else { break };
            let permit = match breaker.as_mut() {
                None => None,
                Some(breaker) => {
                    let (permit, transition) = breaker.try_acquire(now);
                    note_transition(ctx, progress, transition, "");
                    match permit {
                        Some(permit) => Some(permit),
                        None => {
                            queue.push_front(work);
                            break;
                        }
                    }
                }
            };
            let final_attempt = work.attempts + 1 >= retry.max_attempts;
            running.spawn(attempt(ctx.clone(), work, permit, final_attempt));
            progress.in_flight(running.len());
        }
        let idle = queue.is_empty() && delayed.is_empty();
        if running.is_empty() && (idle || stop.is_some()) {
            break;
        }
        let wake = next_wake(&delayed, breaker.as_ref(), !queue.is_empty());
        tokio::select! {
            joined = running.join_next(), if !running.is_empty() => {
                let Some(joined) = joined else { continue };
                let done = match joined {
                    Ok(done) => done,
                    Err(err) => {
                        warn!(error = %err, "an agent task failed; its item stays pending");
                        continue;
                    }
                };
                let bookkeeping = Bookkeeping { ctx, tally, progress, collector: &mut collector };
                let next = bookkeeping.finish(done, &mut breaker, running.len(), stop.is_some(), &retry);
                if let Some((retry_work, delay)) = next.retry {
                    seq += 1;
                    waiting.push(Some(retry_work));
                    delayed.push(Reverse((Instant::now() + delay, seq, waiting.len() - 1)));
                }
                if stop.is_none() {
                    if let Some(reason) = next.stop.or_else(|| stop_reason(policy, tally, total)) {
                        progress.note(&format!("stopping: {reason}; in-flight agents finish, the rest stays pending"));
                        ctx.event(JobEventKind::JobStopped { reason: reason.clone() });
                        stop = Some(MapEnd::Stopped(reason));
                    }
                }
            }
            _ = sleep_until(wake) => {}
            _ = ctx.cancel.cancelled(), if stop.is_none() => {
                progress.note("interrupted: killing in-flight agents; their items stay pending");
                ctx.event(JobEventKind::JobStopped { reason: "interrupted".into() });
                stop = Some(MapEnd::Interrupted);
            }
        }
    }
    collector.flush(ctx, progress);
    stop.unwrap_or(MapEnd::Completed)
}

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at.into()).await,
        None => std::future::pending().await,
    }
}

/// When the loop must look again without a completion: the next retry due, or the breaker's
/// probe time when work is waiting for it.
fn next_wake(
    delayed: &BinaryHeap<Reverse<(Instant, u64, usize)>>,
    breaker: Option<&CircuitBreaker>,
    queued: bool,
) -> Option<Instant> {
    let retry_at = delayed.peek().map(|Reverse((at, _, _))| *at);
    let probe_at = breaker
        .and_then(CircuitBreaker::retry_at)
        .filter(|_| queued || retry_at.is_some());
    match (retry_at, probe_at) {
        (Some(a), Some(b)) => Some(a.max(b)),
        (a, b) => a.or(b),
    }
}

fn note_transition<B: Bus>(
    ctx: &JobContext<B>,
    progress: &Progress,
    transition: Option<Transition>,
    reason: &str,
) {
    let Some(transition) = transition else { return };
    let (kind, line) = match transition {
        Transition::Opened => (
            JobEventKind::CircuitOpen {
                reason: reason.to_owned(),
            },
            format!("circuit breaker OPEN ({reason}): dispatch paused"),
        ),
        Transition::HalfOpened => (
            JobEventKind::CircuitHalfOpen,
            "circuit breaker half-open: sending probe items".to_owned(),
        ),
        Transition::Closed => (
            JobEventKind::CircuitClosed,
            "circuit breaker closed: dispatch resumed".to_owned(),
        ),
    };
    metrics::gauge!(dlq::metrics::JOB_CIRCUIT_OPEN, "job_id" => ctx.record.job_id.clone()).set(
        if transition == Transition::Closed {
            0.0
        } else {
            1.0
        },
    );
    progress.note(&line);
    ctx.event(kind);
}
