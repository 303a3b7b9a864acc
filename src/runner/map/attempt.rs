//! One attempt of an item in its own task, and on a final failure the error policy's action
//! (dead-letter, skip, custom handler), so that slow DLQ writes of several items proceed in
//! parallel.

use std::sync::Arc;

use chrono::Utc;
use tracing::warn;

use super::Work;
use crate::runner::agent::{run_agent, AgentResult, AgentStatus};
use crate::runner::breaker::Permit;
use crate::runner::context::JobContext;
use crate::runner::convert::failure_detail;
use crate::runner::job_events::JobEventKind;
use crate::runner::on_failure::{final_action, FinalAction};
use dlq::bus::Bus;
use dlq::domain::model::DeadLetteredItem;

/// How the final action of an item went.
#[derive(Debug)]
pub(super) enum Final {
    DeadLettered,
    Skipped(String),
    /// The DLQ write failed: the item stays pending so nothing is lost.
    NotRecorded(String),
}

/// One finished attempt, handed back to the loop.
pub(super) struct Done {
    pub(super) work: Work,
    pub(super) result: AgentResult,
    pub(super) permit: Option<Permit>,
    pub(super) finished: Option<Final>,
}

/// Runs one attempt of `work`; on a final failure also performs the policy's action.
pub(super) async fn attempt<B: Bus>(
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
            finished = Some(perform_final_action(&ctx, &work, &result).await);
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
async fn perform_final_action<B: Bus>(
    ctx: &JobContext<B>,
    work: &Work,
    result: &AgentResult,
) -> Final {
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
    let Ok(dlq_item) = DeadLetteredItem::new(
        &ctx.record.job_id,
        &item.id,
        item.data.clone(),
        work.history.clone(),
    )
    .map(|item| item.with_artifacts(result.worktree.clone())) else {
        return Final::NotRecorded("no failure recorded".into());
    };
    // Durable-only: the publish goes on in the background (or is left to the reconciler while
    // the bus is down), so a bus outage does not hold the agent's slot.
    match ctx.emitter.store(&ctx.options.topic, dlq_item).await {
        Ok(receipt) => {
            ctx.event(JobEventKind::ItemDeadLettered {
                item_id: item.id.clone(),
                event_ids: receipt.event_ids,
            });
            Final::DeadLettered
        }
        // The sink's writer has the item and stores it late: keeping the item pending would
        // dead-letter it a second time on resume.
        Err(err) if err.is_unconfirmed() => {
            warn!(error = %err, item_id = %item.id, "dead-letter not confirmed in time; counted as dead-lettered");
            ctx.event(JobEventKind::ItemDeadLettered {
                item_id: item.id.clone(),
                event_ids: Vec::new(),
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
    if let Err(err) = ctx.remove_resolved(item_id, None).await {
        warn!(error = %err, item_id, "could not remove the resolved item from the DLQ");
    }
}
