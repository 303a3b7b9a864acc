//! The bookkeeping after one attempt of the map phase: the breaker, the job's events, the
//! tally and the outcome record, and what the loop does next (retry, stop).

use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::Utc;
use tracing::warn;

use super::attempt::{Done, Final};
use super::{note_transition, Work};
use crate::runner::agent::AgentStatus;
use crate::runner::backoff::retry_delay;
use crate::runner::breaker::CircuitBreaker;
use crate::runner::context::JobContext;
use crate::runner::error_collection::ErrorCollector;
use crate::runner::job_events::JobEventKind;
use crate::runner::job_store::OutcomeRecord;
use crate::runner::job_summary::{Outcome, Tally};
use crate::runner::on_failure::final_action;
use crate::runner::progress::Progress;
use crate::runner::workflow::RetryConfig;
use dlq::bus::Bus;
use dlq::domain::model::FailureDetail;

/// The bookkeeping after one attempt.
pub(super) struct Bookkeeping<'a, B: Bus> {
    pub(super) ctx: &'a Arc<JobContext<B>>,
    pub(super) tally: &'a mut Tally,
    pub(super) progress: &'a mut Progress,
    pub(super) collector: &'a mut ErrorCollector,
}

/// What the loop does after an attempt was recorded.
#[derive(Default)]
pub(super) struct Next {
    /// Retry this work after the delay.
    pub(super) retry: Option<(Work, Duration)>,
    /// The policy stops the job.
    pub(super) stop: Option<String>,
}

impl<B: Bus> Bookkeeping<'_, B> {
    /// Records the attempt; says whether to retry the item and whether to stop.
    pub(super) fn finish(
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
                    None => (dlq::domain::model::ErrorType::Unknown, String::new()),
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
                self.collector.add(
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
            metrics::counter!(dlq::metrics::JOB_FAILURES, "job_id" => ctx.record.job_id.clone(), "error_type" => last.error_type.name())
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
