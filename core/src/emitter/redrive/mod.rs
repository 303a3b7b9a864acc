//! Redrive: hand dead-lettered items back to the scheduler that failed them, in failure order,
//! at a rate, behind an optional canary.
//!
//! Each item is one [`Command::Redrive`] naming the generation the caller saw: the sink's
//! single writer writes `redriven` (generation + 1) only while the item still has that
//! generation, so a second click or a second operator never redrives one generation twice
//! (the item is reported as already redriven, nothing written). The item is then handed to
//! the [`RedriveHandler`] the scheduler registered, in-process; its answer is one
//! [`Command::RedriveOutcome`]: `item_removed` with reason `resolved`, or `redrive_failed`
//! (the item stays, its `redrive` record says failed and why; its failure history is the
//! scheduler's and is left as it was).
//!
//! With a [`Canary`], the first items go alone; once all their outcomes are in, their
//! re-failure rate is computed per error signature (the signature of the failure that
//! dead-lettered each item), and any rate above `halt_above` halts the redrive before the
//! rest is released ([`Canary`], `canary.rs`).

mod canary;
mod edit;
mod handler;
mod report;

use std::sync::Arc;
use std::time::Duration;

use thiserror::Error;
use tokio::task::JoinSet;

pub use canary::{Canary, CanarySize, SignatureRate, DEFAULT_HALT_ABOVE};
pub use handler::{RedriveFuture, RedriveHandler};
pub use report::{FailedAgain, RedriveReport};

use super::{EmitError, Emitter};
use crate::bus::Bus;
use crate::domain::command::Command;
use crate::domain::event::RemovedBy;
use crate::domain::model::DeadLetteredItem;
use crate::sink::Sink;

/// Handlers running at once, whatever the rate.
const MAX_RUNNING: usize = 16;

/// One item to redrive, with the generation the caller saw.
#[derive(Debug, Clone, PartialEq)]
pub struct RedriveItem {
    /// The item as read (its data is what the handler receives).
    pub item: DeadLetteredItem,
    /// The generation the caller saw: the redrive is written only if the item still has it.
    pub expected: u32,
}

impl From<DeadLetteredItem> for RedriveItem {
    /// The item at the generation it was read with.
    fn from(item: DeadLetteredItem) -> Self {
        let expected = item.generation();
        RedriveItem { item, expected }
    }
}

/// What to redrive and how.
#[derive(Debug, Clone, Default)]
pub struct RedrivePlan {
    items: Vec<RedriveItem>,
    rate: Option<f64>,
    canary: Option<Canary>,
    by: Option<RemovedBy>,
}

impl RedrivePlan {
    /// The items, put in failure order: the one that first failed earliest goes first (then
    /// by job and item id).
    pub fn new(items: impl IntoIterator<Item = RedriveItem>) -> Self {
        let mut items: Vec<RedriveItem> = items.into_iter().collect();
        items.sort_by(|a, b| {
            (a.item.first_attempt, &a.item.job_id, &a.item.item_id).cmp(&(
                b.item.first_attempt,
                &b.item.job_id,
                &b.item.item_id,
            ))
        });
        RedrivePlan {
            items,
            ..RedrivePlan::default()
        }
    }

    /// Start at most `per_second` items a second (unlimited unless set; non-positive is
    /// unlimited).
    pub fn rate(mut self, per_second: Option<f64>) -> Self {
        self.rate = per_second.filter(|rate| *rate > 0.0 && rate.is_finite());
        self
    }

    /// Redrive a canary first.
    pub fn canary(mut self, canary: Option<Canary>) -> Self {
        self.canary = canary;
        self
    }

    /// The operator who asked, named on each `redriven` event.
    pub fn by(mut self, by: Option<RemovedBy>) -> Self {
        self.by = by;
        self
    }

    /// The items in the order they go.
    pub fn items(&self) -> &[RedriveItem] {
        &self.items
    }
}

/// Why a redrive could not run, or stopped.
#[derive(Debug, Error)]
pub enum RedriveError {
    /// The emitter has no handler to hand items to.
    #[error("no redrive handler: the scheduler that owns this data directory must register one with EmitterBuilder::redrive_handler (for `dlq run` jobs, `dlq retry` re-runs their agents)")]
    NoHandler,
    /// Writing a redrive or its outcome failed; what was written before stays.
    #[error("redrive stopped: {0}")]
    Store(#[source] EmitError),
}

/// What one handler call ended with.
struct Outcome {
    job_id: String,
    item_id: String,
    signature: String,
    generation: u32,
    result: Result<(), String>,
}

impl<S: Sink, B: Bus> Emitter<S, B> {
    /// Redrives the plan's items to the registered [`RedriveHandler`] (see the module doc),
    /// and answers what happened. Fails with [`RedriveError::NoHandler`] before writing
    /// anything when no handler is registered.
    pub async fn redrive(&self, plan: RedrivePlan) -> Result<RedriveReport, RedriveError> {
        let handler = self.redrive_handler().ok_or(RedriveError::NoHandler)?;
        let mut report = RedriveReport::default();
        let mut pacer = Pacer::new(plan.rate);
        let mut rest = plan.items.as_slice();
        if let Some(canary) = plan.canary {
            let (first, after) = rest.split_at(canary.len(rest.len()));
            let outcomes = self
                .redrive_phase(&handler, first, &plan.by, &mut pacer, &mut report)
                .await?;
            report.canary = canary::rates(
                outcomes
                    .iter()
                    .map(|(signature, failed)| (signature.as_str(), *failed)),
            );
            report.halted_by = canary::halting(&report.canary, canary.halt_above);
            if !report.halted_by.is_empty() {
                report.not_released = after.len() as u64;
                return Ok(report);
            }
            rest = after;
        }
        self.redrive_phase(&handler, rest, &plan.by, &mut pacer, &mut report)
            .await?;
        Ok(report)
    }

    /// Redrives `items` and waits for every outcome; returns `(signature, failed again)` of
    /// each item handed back.
    async fn redrive_phase(
        &self,
        handler: &Arc<dyn RedriveHandler>,
        items: &[RedriveItem],
        by: &Option<RemovedBy>,
        pacer: &mut Pacer,
        report: &mut RedriveReport,
    ) -> Result<Vec<(String, bool)>, RedriveError> {
        let mut running = JoinSet::new();
        let mut outcomes = Vec::new();
        let mut failed = None;
        for planned in items {
            while running.len() >= MAX_RUNNING {
                self.settle(
                    running.join_next().await,
                    report,
                    &mut outcomes,
                    &mut failed,
                )
                .await;
            }
            if failed.is_some() {
                break;
            }
            pacer.wait().await;
            let item = &planned.item;
            let command = Command::Redrive {
                job_id: item.job_id.clone(),
                item_id: item.item_id.clone(),
                expected: planned.expected,
                target: handler.target(),
                by: by.clone(),
            };
            let id = format!("{}/{}", item.job_id, item.item_id);
            match self.submit_stored("", command).await {
                Ok(receipt) if receipt.event_ids.is_empty() => report.already_redriven.push(id),
                Ok(_) => {
                    report.redriven += 1;
                    let generation = planned.expected.saturating_add(1);
                    let call = handler.redrive(item.clone());
                    let (job_id, item_id) = (item.job_id.clone(), item.item_id.clone());
                    let signature = item.error_signature.clone();
                    running.spawn(async move {
                        Outcome {
                            job_id,
                            item_id,
                            signature,
                            generation,
                            result: call.await,
                        }
                    });
                }
                Err(EmitError::NotFound { .. }) => report.not_found.push(id),
                Err(err) => failed = Some(err),
            }
        }
        while !running.is_empty() {
            self.settle(
                running.join_next().await,
                report,
                &mut outcomes,
                &mut failed,
            )
            .await;
        }
        match failed {
            Some(err) => Err(RedriveError::Store(err)),
            None => Ok(outcomes),
        }
    }

    /// Records one handler's answer.
    async fn settle(
        &self,
        joined: Option<Result<Outcome, tokio::task::JoinError>>,
        report: &mut RedriveReport,
        outcomes: &mut Vec<(String, bool)>,
        failed: &mut Option<EmitError>,
    ) {
        let Some(joined) = joined else { return };
        let Ok(outcome) = joined else {
            // The task panicked or was cancelled: its item stays in flight, shown as such.
            tracing::warn!("a redrive handler panicked; its item stays marked in flight");
            return;
        };
        let command = Command::RedriveOutcome {
            job_id: outcome.job_id.clone(),
            item_id: outcome.item_id.clone(),
            generation: outcome.generation,
            result: outcome.result.clone(),
        };
        if let Err(err) = self.submit_stored("", command).await {
            failed.get_or_insert(err);
            return;
        }
        outcomes.push((outcome.signature, outcome.result.is_err()));
        match outcome.result {
            Ok(()) => report.resolved += 1,
            Err(error) => report.failed_again.push(FailedAgain {
                job_id: outcome.job_id,
                item_id: outcome.item_id,
                error,
            }),
        }
    }
}

/// The longest wait between two handler calls, whatever the rate.
const MAX_PERIOD: Duration = Duration::from_secs(3600);

/// Spaces the starts of handler calls `1 / rate` apart.
struct Pacer {
    period: Option<Duration>,
    next: Option<tokio::time::Instant>,
}

impl Pacer {
    fn new(rate: Option<f64>) -> Self {
        Pacer {
            // At most an hour apart: a tiny rate neither overflows nor waits for ever.
            period: rate.map(|rate| {
                Duration::try_from_secs_f64(1.0 / rate)
                    .map_or(MAX_PERIOD, |period| period.min(MAX_PERIOD))
            }),
            next: None,
        }
    }

    async fn wait(&mut self) {
        let Some(period) = self.period else { return };
        let now = tokio::time::Instant::now();
        let at = self.next.map_or(now, |next| next.max(now));
        tokio::time::sleep_until(at).await;
        self.next = Some(at + period);
    }
}

#[cfg(test)]
mod tests;
