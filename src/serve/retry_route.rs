//! `POST /v1/jobs/{job_id}/retry`: `dlq retry` run by the server that holds the data directory.
//!
//! The request waits until the retry finished and answers its report, rendered like `dlq
//! retry` prints it. Each item it resolves is removed naming the caller's token and the body's
//! `reason`. Two requests for one job at the same time never run one item twice: each
//! item is claimed by the retry running it (see `crate::runner::retry`).

use axum::extract::rejection::{JsonRejection, PathRejection};
use axum::extract::{Path, State};
use axum::Json;
use tokio_util::sync::CancellationToken;

use super::routes::{rendered, Answer, Called, Pairs, Shared};
use crate::render::retry::write_retry;
use crate::request::reason::removed_by;
use crate::request::{Params, RequestError, RetryRequest};
use crate::runner::{retry_job, ProgressMode, RetryJob};

/// Runs the retry and answers its report.
pub async fn retry(
    State(state): Shared,
    caller: Called,
    path: Result<Path<String>, PathRejection>,
    pairs: Pairs,
    body: Result<Json<RetryRequest>, JsonRejection>,
) -> Answer {
    let Path(job) = path?;
    let mut params = Params::new(pairs?.0);
    let format = params.format()?;
    params.finish("/v1/jobs/{job_id}/retry")?;
    let Json(body) = body?;
    let options = body.options()?;
    let by = removed_by(&caller.name, body.reason.as_deref())?;
    let report = retry_job(RetryJob {
        emitter: state.emitter.clone(),
        run: state.run.clone(),
        job_id: &job,
        workflow: body.workflow.as_deref(),
        options,
        stop: CancellationToken::new(),
        kill: CancellationToken::new(),
        mode: ProgressMode::Quiet,
        by,
    })
    .await
    .map_err(RequestError::Run)?;
    rendered(format, |out| Ok(write_retry(out, format, &report)?))
}
