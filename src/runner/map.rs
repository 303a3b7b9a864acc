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
use std::time::{Duration, Instant};

use chrono::Utc;
use tokio::task::JoinSet;
use tracing::warn;

use super::agent::{run_agent, AgentResult, AgentStatus};
use super::backoff::retry_delay;
use super::breaker::{CircuitBreaker, Permit, Transition};
use super::context::JobContext;
use super::convert::failure_detail;
use super::events::JobEventKind;
use super::policy::{final_action, stop_reason, FinalAction};
use super::progress::Progress;
use super::report::ErrorReporter;
use super::stats::{Outcome, Tally};
use super::store::OutcomeRecord;
use super::workflow::RetryConfig;
use crate::bus::Bus;
use crate::domain::failure::dead_lettered_item;
use crate::domain::model::FailureDetail;

/// One item on its way through the map phase.
#[derive(Debug, Clone)]
pub struct Work {
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
    pub fn new(index: usize, from_dlq: bool) -> Self {
        Work {
            index,
            attempts: 0,
            history: Vec::new(),
            from_dlq,
        }
    }
}

/// How the final action of an item went.
#[derive(Debug)]
enum Final {
    DeadLettered,
    Skipped(String),
    /// The DLQ write failed: the item stays pending so nothing is lost.
    NotRecorded(String),
}

struct Done {
    work: Work,
    result: AgentResult,
    permit: Option<Permit>,
    finished: Option<Final>,
}

/// How the map phase ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MapEnd {
    /// Every pending item reached an outcome (or stays pending after a failed DLQ write).
    Completed,
    /// The policy stopped the job; the rest stays pending.
    Stopped(String),
    /// Cancelled (Ctrl-C, SIGTERM); in-flight agents were killed and stay pending.
    Interrupted,
}

/// Runs the map phase over `pending`, updating `tally`.
pub async fn run_map<B: Bus>(
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
    let mut reporter = ErrorReporter::new(policy.error_collection.clone());
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
                let step = Step { ctx, tally, progress, reporter: &mut reporter };
                let next = step.finish(done, &mut breaker, running.len(), stop.is_some(), &retry);
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
    reporter.flush(ctx, progress);
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
    metrics::gauge!(crate::metrics::JOB_CIRCUIT_OPEN, "job_id" => ctx.record.job_id.clone()).set(
        if transition == Transition::Closed {
            0.0
        } else {
            1.0
        },
    );
    progress.note(&line);
    ctx.event(kind);
}

/// The bookkeeping after one attempt.
struct Step<'a, B: Bus> {
    ctx: &'a Arc<JobContext<B>>,
    tally: &'a mut Tally,
    progress: &'a mut Progress,
    reporter: &'a mut ErrorReporter,
}

/// What the loop does after an attempt was recorded.
#[derive(Default)]
struct Next {
    /// Retry this work after the delay.
    retry: Option<(Work, Duration)>,
    /// The policy stops the job.
    stop: Option<String>,
}

impl<B: Bus> Step<'_, B> {
    /// Records the attempt; says whether to retry the item and whether to stop.
    fn finish(
        mut self,
        done: Done,
        breaker: &mut Option<CircuitBreaker>,
        in_flight: usize,
        stopping: bool,
        retry: &RetryConfig,
    ) -> Next {
        let Done {
            mut work,
            result,
            permit,
            finished,
        } = done;
        let ctx = self.ctx;
        let item_id = ctx.record.items[work.index].id.clone();
        let success = matches!(result.status, AgentStatus::Success);
        if let (Some(breaker), Some(permit)) = (breaker.as_mut(), permit) {
            if !matches!(result.status, AgentStatus::Cancelled) {
                let transition = breaker.record(permit, success, Instant::now());
                let reason = format!("item {item_id} failed");
                note_transition(ctx, self.progress, transition, &reason);
            }
        }
        match result.status {
            AgentStatus::Cancelled => Next::default(),
            AgentStatus::Success => {
                self.record(&work, Outcome::Succeeded, None);
                if work.from_dlq {
                    ctx.event(JobEventKind::ItemResolved {
                        item_id: item_id.clone(),
                    });
                }
                ctx.event(JobEventKind::AgentCompleted {
                    item_id: item_id.clone(),
                    attempts: work.attempts,
                    duration_ms: u64::try_from(result.duration.as_millis()).unwrap_or(u64::MAX),
                });
                let _ = std::fs::remove_dir_all(ctx.store.agent_dir(&item_id));
                self.progress.finished(
                    false,
                    in_flight,
                    &format!("{item_id} succeeded (attempt {})", work.attempts),
                );
                Next::default()
            }
            AgentStatus::Failed(_) | AgentStatus::Timeout => {
                let last = work.history.last().cloned();
                let Some(finished) = finished else {
                    if stopping {
                        return Next::default();
                    }
                    let error = last.map(|f| f.error_message).unwrap_or_default();
                    let delay = retry_delay(retry, work.attempts, fastrand::f64());
                    ctx.event(JobEventKind::AgentRetrying {
                        item_id,
                        attempt: work.attempts,
                        error,
                        delay_ms: u64::try_from(delay.as_millis()).unwrap_or(u64::MAX),
                    });
                    return Next {
                        retry: Some((work, delay)),
                        stop: None,
                    };
                };
                let (error_type, error) = match &last {
                    Some(f) => (f.error_type.clone(), f.error_message.clone()),
                    None => (crate::domain::model::ErrorType::Unknown, String::new()),
                };
                ctx.event(JobEventKind::AgentFailed {
                    item_id: item_id.clone(),
                    attempts: work.attempts,
                    error_type: error_type.name().to_owned(),
                    error: error.clone(),
                });
                let line = match finished {
                    Final::DeadLettered => {
                        self.record(&work, Outcome::DeadLettered, last.as_ref());
                        self.tally.record_failure(&item_id, &error_type, &error);
                        format!(
                            "{item_id} failed {} attempt(s) ({}): dead-lettered",
                            work.attempts,
                            error_type.name()
                        )
                    }
                    Final::Skipped(by) => {
                        self.record(&work, Outcome::Skipped, last.as_ref());
                        self.tally.record_failure(&item_id, &error_type, &error);
                        ctx.event(JobEventKind::ItemSkipped {
                            item_id: item_id.clone(),
                            by: by.clone(),
                        });
                        format!(
                            "{item_id} failed {} attempt(s) ({}): skipped by {by}",
                            work.attempts,
                            error_type.name()
                        )
                    }
                    Final::NotRecorded(err) => {
                        ctx.event(JobEventKind::DeadLetterFailed {
                            item_id: item_id.clone(),
                            error: err.clone(),
                        });
                        work.history.clear();
                        format!("{item_id} failed and could NOT be dead-lettered ({err}); it stays pending for `dlq resume`")
                    }
                };
                self.reporter.add(
                    ctx,
                    self.progress,
                    format!("{item_id}: {} ({error})", error_type.name()),
                );
                self.progress.finished(true, in_flight, &line);
                let (_, stop_after) = final_action(&ctx.record.workflow.error_policy);
                Next {
                    retry: None,
                    stop: stop_after.then(|| {
                        format!("item {item_id} failed and the error policy stops the job")
                    }),
                }
            }
        }
    }

    fn record(&mut self, work: &Work, outcome: Outcome, last: Option<&FailureDetail>) {
        let ctx = self.ctx;
        let item_id = &ctx.record.items[work.index].id;
        self.tally.record(item_id, outcome);
        if let Some(last) = last {
            metrics::counter!(crate::metrics::JOB_FAILURES, "job_id" => ctx.record.job_id.clone(), "error_type" => last.error_type.name())
                .increment(1);
        }
        let record = OutcomeRecord {
            item_id: item_id.clone(),
            outcome,
            attempts: work.attempts,
            at: Utc::now(),
            error_type: last.map(|f| f.error_type.clone()),
            error: last.map(|f| f.error_message.clone()),
        };
        if let Err(err) = ctx.store.append_outcome(&record) {
            warn!(error = %err, item_id, "could not record the outcome; the item will run again on resume");
        }
        ctx.export_counts(self.tally);
    }
}

/// Runs one attempt of `work`; on a final failure also performs the policy's action.
async fn attempt<B: Bus>(
    ctx: Arc<JobContext<B>>,
    mut work: Work,
    permit: Option<Permit>,
    final_attempt: bool,
) -> Done {
    work.attempts += 1;
    let item = &ctx.record.items[work.index];
    let spec = ctx.agent_spec(item, &ctx.record.workflow.map.agent_template);
    let result = run_agent(&spec, &ctx.cancel).await;
    let mut finished = None;
    if let Some(detail) = failure_detail(&result, work.attempts, Utc::now()) {
        work.history.push(detail);
        if final_attempt && !ctx.cancel.is_cancelled() {
            finished = Some(final_step(&ctx, &work, &result).await);
        }
    }
    if let (AgentStatus::Success, true) = (&result.status, work.from_dlq) {
        resolve(&ctx, &item.id).await;
    }
    Done {
        work,
        result,
        permit,
        finished,
    }
}

/// The policy's action for an item that failed its last attempt.
async fn final_step<B: Bus>(ctx: &JobContext<B>, work: &Work, result: &AgentResult) -> Final {
    let (action, _) = final_action(&ctx.record.workflow.error_policy);
    match action {
        FinalAction::Skip => Final::Skipped("skip".into()),
        FinalAction::DeadLetter => dead_letter(ctx, work, result).await,
        FinalAction::Custom(name) => {
            let item = &ctx.record.items[work.index];
            let steps = ctx
                .record
                .workflow
                .handlers
                .get(&name)
                .cloned()
                .unwrap_or_default();
            let mut spec = ctx.agent_spec(item, &steps);
            if let Some(last) = work.history.last() {
                spec.env
                    .insert("DLQ_ERROR_TYPE".into(), last.error_type.name().into());
                spec.env
                    .insert("DLQ_ERROR_MESSAGE".into(), last.error_message.clone());
            }
            spec.env
                .insert("DLQ_FAILURE_COUNT".into(), work.attempts.to_string());
            spec.work_dir = spec.work_dir.join(format!("handler-{name}"));
            let handled = run_agent(&spec, &ctx.cancel).await;
            match handled.status {
                AgentStatus::Success => Final::Skipped(format!("custom:{name}")),
                _ => {
                    warn!(handler = %name, item_id = %item.id, "custom handler failed; dead-lettering the item");
                    dead_letter(ctx, work, result).await
                }
            }
        }
    }
}

async fn dead_letter<B: Bus>(ctx: &JobContext<B>, work: &Work, result: &AgentResult) -> Final {
    let item = &ctx.record.items[work.index];
    let Some(dlq_item) = dead_lettered_item(
        &ctx.record.job_id,
        &item.id,
        item.data.clone(),
        work.history.clone(),
        result.worktree.clone(),
    ) else {
        return Final::NotRecorded("no failure recorded".into());
    };
    match ctx.emitter.dead_letter(&ctx.options.topic, dlq_item).await {
        Ok(receipt) => {
            ctx.event(JobEventKind::ItemDeadLettered {
                item_id: item.id.clone(),
                event_ids: receipt.event_ids,
                published: receipt.published,
            });
            Final::DeadLettered
        }
        Err(err) => {
            warn!(error = %err, item_id = %item.id, "dead-lettering failed; the item stays pending");
            Final::NotRecorded(err.to_string())
        }
    }
}

/// Removes a re-run DLQ item that now succeeded (a `resolved` removal event).
async fn resolve<B: Bus>(ctx: &JobContext<B>, item_id: &str) {
    if let Err(err) = ctx.remove_resolved(item_id).await {
        warn!(error = %err, item_id, "could not remove the resolved item from the DLQ");
    }
}
