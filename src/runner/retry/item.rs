//! One item of a retry: claimed so that two retries of this process never run it at once,
//! attempted up to `max_retries` times, then resolved or its new failures recorded.

use std::collections::HashSet;
use std::sync::{Arc, Mutex, OnceLock};

use chrono::Utc;
use tokio_util::sync::CancellationToken;
use tracing::warn;

use crate::runner::agent::{run_agent, AgentStatus};
use crate::runner::backoff::retry_delay;
use crate::runner::context::JobContext;
use crate::runner::convert::failure_detail;
use crate::runner::input::WorkItem;
use crate::runner::job_events::JobEventKind;
use crate::runner::job_store::OutcomeRecord;
use crate::runner::job_summary::Outcome;
use dlq::bus::Bus;
use dlq::domain::event::RemovedBy;
use dlq::domain::model::DeadLetteredItem;
use dlq::emitter::EmitError;

/// How one item's retry ended.
pub(super) enum ItemEnd {
    Resolved,
    FailedAgain,
    Busy,
    Gone,
    NotRecorded,
    Interrupted,
}

fn claims() -> &'static Mutex<HashSet<(String, String)>> {
    static CLAIMS: OnceLock<Mutex<HashSet<(String, String)>>> = OnceLock::new();
    CLAIMS.get_or_init(Default::default)
}

/// Releases a claim when the item's retry ends, however it ends.
struct Claim(String, String);

impl Claim {
    fn take(job_id: &str, item_id: &str) -> Option<Claim> {
        let mut set = claims().lock().ok()?;
        set.insert((job_id.to_owned(), item_id.to_owned()))
            .then(|| Claim(job_id.to_owned(), item_id.to_owned()))
    }
}

impl Drop for Claim {
    fn drop(&mut self) {
        if let Ok(mut set) = claims().lock() {
            set.remove(&(std::mem::take(&mut self.0), std::mem::take(&mut self.1)));
        }
    }
}

/// Retries one item: up to `max_retries` attempts, then resolve (a removal naming `by`) or
/// record the failures.
pub(super) async fn retry_item<B: Bus>(
    ctx: Arc<JobContext<B>>,
    item_id: String,
    max_retries: u32,
    stop: CancellationToken,
    by: Arc<RemovedBy>,
) -> (String, ItemEnd) {
    let end = retry_claimed(&ctx, &item_id, max_retries, &stop, &by).await;
    (item_id, end)
}

async fn retry_claimed<B: Bus>(
    ctx: &JobContext<B>,
    item_id: &str,
    max_retries: u32,
    stop: &CancellationToken,
    by: &RemovedBy,
) -> ItemEnd {
    let job_id = &ctx.record.job_id;
    let Some(_claim) = Claim::take(job_id, item_id) else {
        return ItemEnd::Busy;
    };
    // Read the item again now that it is ours: another retry may have resolved it.
    let item = match ctx.emitter.sink().item(job_id, item_id) {
        Ok(Some(stored)) => std::sync::Arc::unwrap_or_clone(stored.item),
        Ok(None) => return ItemEnd::Gone,
        Err(err) => {
            warn!(error = %err, item_id, "cannot read the item; leaving it unchanged");
            return ItemEnd::NotRecorded;
        }
    };
    let work = WorkItem {
        id: item.item_id.clone(),
        data: item.item_data.clone(),
    };
    let spec = ctx.agent_spec(&work, &ctx.record.workflow.map.agent_template);
    let retry = ctx.record.workflow.effective_retry();
    let mut history = Vec::new();
    let mut worktree = None;
    for attempt in 1..=max_retries.max(1) {
        if attempt > 1 {
            if stop.is_cancelled() {
                break;
            }
            tokio::time::sleep(retry_delay(&retry, attempt - 1, fastrand::f64())).await;
        }
        let result = run_agent(&spec, &ctx.cancel).await;
        match result.status {
            AgentStatus::Success => return resolve(ctx, item_id, attempt, by).await,
            AgentStatus::Cancelled => break,
            AgentStatus::Failed(_) | AgentStatus::Timeout => {
                if let Some(detail) = failure_detail(&result, attempt, Utc::now()) {
                    history.push(detail);
                }
                worktree = result.worktree.clone().or(worktree);
            }
        }
    }
    if history.is_empty() {
        return ItemEnd::Interrupted;
    }
    let attempts = history.len() as u32;
    let last = history
        .last()
        .map(|f| (f.error_type.name().to_owned(), f.error_message.clone()));
    let Ok(update) = DeadLetteredItem::new(job_id, item_id, item.item_data, history)
        .map(|item| item.with_artifacts(worktree))
    else {
        return ItemEnd::NotRecorded;
    };
    // Durable-only, as the map phase: the publish goes on in the background.
    match ctx.emitter.store(&ctx.options.topic, update).await {
        // Unconfirmed: the sink's writer has the update and stores it late; recording it
        // again would count the failure twice.
        Ok(_) | Err(EmitError::Unconfirmed { .. }) => {
            let (error_type, error) = last.unwrap_or_default();
            ctx.event(JobEventKind::AgentFailed {
                item_id: item_id.to_owned(),
                attempts,
                error_type,
                error,
            });
            ItemEnd::FailedAgain
        }
        Err(err) => {
            warn!(error = %err, item_id, "could not record the failed retry; the item is unchanged");
            ItemEnd::NotRecorded
        }
    }
}

/// Removes a retried item that succeeded (naming `by`) and records it as succeeded for the job.
async fn resolve<B: Bus>(
    ctx: &JobContext<B>,
    item_id: &str,
    attempts: u32,
    by: &RemovedBy,
) -> ItemEnd {
    if let Err(err) = ctx.remove_resolved(item_id, Some(by)).await {
        warn!(error = %err, item_id, "the retry succeeded but the item could not be removed");
        return ItemEnd::NotRecorded;
    }
    let record = OutcomeRecord {
        item_id: item_id.to_owned(),
        outcome: Outcome::Succeeded,
        attempts,
        at: Utc::now(),
        error_type: None,
        error: None,
    };
    if let Err(err) = ctx.store.append_outcome(&record) {
        warn!(error = %err, item_id, "could not record the outcome in the job's state");
    }
    ctx.event(JobEventKind::ItemResolved {
        item_id: item_id.to_owned(),
    });
    let _ = std::fs::remove_dir_all(ctx.store.agent_dir(item_id));
    ItemEnd::Resolved
}
