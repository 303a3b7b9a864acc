//! `POST /v1/jobs/{job_id}/retry`: `dlq retry` run by the server that holds the data directory.
//!
//! The request waits until the retry finished and answers its report, rendered like `dlq
//! retry` prints it. Two requests for one job at the same time never run one item twice: each
//! item is claimed by the retry running it (see `crate::runner::retry`).

use std::path::PathBuf;

use axum::extract::rejection::{JsonRejection, PathRejection};
use axum::extract::{Path, State};
use axum::Json;
use serde::Deserialize;
use tokio_util::sync::CancellationToken;

use super::client::params::Params;
use super::routes::{rendered, Answer, Pairs, Shared};
use crate::render::retry::write_retry;
use crate::request::RequestError;
use crate::runner::{retry_job, ProgressMode, RetryOptions};

/// The JSON body of `POST /v1/jobs/{job_id}/retry` (`{}` for the defaults of the CLI).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RetryBody {
    /// Items retried at once (10).
    pub parallel: Option<usize>,
    /// Attempts per item (3).
    pub max_retries: Option<u32>,
    /// CEL filter.
    pub filter: Option<String>,
    /// Retry items not marked eligible too.
    #[serde(default)]
    pub force: bool,
    /// Items started per second at most.
    pub rate: Option<f64>,
    /// Only list what would be retried.
    #[serde(default)]
    pub dry_run: bool,
    /// A workflow file (on the server) whose agent template to use.
    pub workflow: Option<PathBuf>,
}

impl RetryBody {
    /// The retry options the body asks for, checked like `dlq retry`'s flags.
    pub(crate) fn options(&self) -> Result<RetryOptions, RequestError> {
        let defaults = RetryOptions::default();
        let requested = RetryOptions {
            parallel: self.parallel.unwrap_or(defaults.parallel),
            max_retries: self.max_retries.unwrap_or(defaults.max_retries),
            filter: None,
            force: self.force,
            rate: self.rate,
            dry_run: self.dry_run,
        };
        crate::request::retry::checked(requested, self.filter.as_deref())
    }
}

/// Runs the retry and answers its report.
pub async fn retry(
    State(state): Shared,
    path: Result<Path<String>, PathRejection>,
    pairs: Pairs,
    body: Result<Json<RetryBody>, JsonRejection>,
) -> Answer {
    let Path(job) = path?;
    let mut params = Params::new(pairs?.0);
    let format = params.format()?;
    params.finish("/v1/jobs/{job_id}/retry")?;
    let Json(body) = body?;
    let options = body.options()?;
    let report = retry_job(
        state.emitter.clone(),
        state.run.clone(),
        &job,
        body.workflow.as_deref(),
        options,
        CancellationToken::new(),
        CancellationToken::new(),
        ProgressMode::Quiet,
    )
    .await
    .map_err(RequestError::Run)?;
    rendered(format, |out| Ok(write_retry(out, format, &report)?))
}
