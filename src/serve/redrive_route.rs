//! `POST /v1/redrive`: `dlq redrive`. The items are read and checked first (a dry run stops
//! there); a patch edits the one item named (`item_edited`); then the server's emitter hands
//! the items to the redrive handler its embedder registered ([`dlq::Emitter::redrive`]) and
//! the answer is its report. Without a handler (`dlq serve`, or a scheduler that registered
//! none) the answer is 409, naming what to do.

use axum::extract::rejection::JsonRejection;
use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;

use super::routes::{blocking, rendered, Answer, ApiError, Called, Pairs, Shared};
use crate::query::list::find_item;
use crate::query::redrive::choose;
use crate::render::removal::write_removal;
use crate::request::params::Params;
use crate::request::reason::removed_by;
use crate::request::RedriveRequest;
use dlq::emitter::{EmitError, RedriveError, RedrivePlan};
use dlq::removal::DEFAULT_DRAIN;

/// `POST /v1/redrive`: `dlq redrive (JOB/ITEM... | FILTER | --all) [--canary N] ... --yes`.
pub async fn redrive(
    State(state): Shared,
    caller: Called,
    pairs: Pairs,
    body: Result<Json<RedriveRequest>, JsonRejection>,
) -> Answer {
    let mut params = Params::new(pairs?.0);
    let format = params.format()?;
    params.finish("/v1/redrive")?;
    let Json(body) = body?;
    let job = body.job()?;
    let by = removed_by(&caller.name, body.reason.as_deref())?;
    if !state.emitter.can_redrive() {
        return Err(no_handler(&RedriveError::NoHandler));
    }
    let wanted = job.clone();
    let mut chosen = blocking(&state, move |sink| {
        let chosen = choose(sink, &wanted)?;
        chosen.selected.check_found()?;
        Ok(chosen)
    })
    .await?;
    if body.dry_run {
        return rendered(format, |out| {
            Ok(write_removal(out, format, &chosen.dry_run())?)
        });
    }
    if let (Some(patch), Some(first)) = (job.patch.clone(), chosen.items.first_mut()) {
        let (job_id, item_id) = (first.item.job_id.clone(), first.item.item_id.clone());
        state
            .emitter
            .edit(&job_id, &item_id, patch, Some(by.clone()))
            .await
            .map_err(emit_error)?;
        let edited = blocking(&state, move |sink| {
            Ok(find_item(sink, &item_id, Some(&job_id))?)
        });
        first.item = edited.await?;
    }
    let plan = RedrivePlan::new(chosen.items.clone())
        .rate(job.rate)
        .canary(job.canary)
        .by(Some(by));
    let report = state.emitter.redrive(plan).await.map_err(|err| match err {
        RedriveError::NoHandler => no_handler(&err),
        RedriveError::Store(err) => emit_error(err),
    })?;
    let drain = body.drain_timeout.unwrap_or(DEFAULT_DRAIN);
    let published = state.emitter.finish_publishing(drain).await?;
    let answer = chosen.answer(&report, published);
    rendered(format, |out| Ok(write_removal(out, format, &answer)?))
}

/// 409: nobody here can take items back.
fn no_handler(err: &RedriveError) -> ApiError {
    ApiError::new(StatusCode::CONFLICT, "no_redrive_handler", err.to_string())
}

/// An emitter's refusal as an answer: 404 for an item gone, 400 for a refused change (an
/// edit past the sink's value limit), else 500.
fn emit_error(err: EmitError) -> ApiError {
    match err {
        EmitError::NotFound { .. } => {
            ApiError::new(StatusCode::NOT_FOUND, "not_found", err.to_string())
        }
        EmitError::Rejected(_) => ApiError::bad_request(format!("{err}; nothing was changed")),
        other => ApiError::internal(format!("redrive stopped: {other}")),
    }
}
