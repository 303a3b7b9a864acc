//! `GET /v1/items/{job_id}/{item_id}/events`: one item's job events, for the item page.

use axum::extract::rejection::PathRejection;
use axum::extract::{Path, State};
use axum::response::IntoResponse;
use axum::Json;
use serde_json::json;

use super::routes::{Answer, ApiError, Pairs, Shared};
use crate::request::{Params, RequestError};

/// `GET /v1/items/{job_id}/{item_id}/events`: the item's job events (agent attempts, failures,
/// dead-lettering, success), as `dlq events JOB` prints them, in order.
pub async fn item_events(
    State(state): Shared,
    path: Result<Path<(String, String)>, PathRejection>,
    pairs: Pairs,
) -> Answer {
    let Path((job, item)) = path?;
    Params::new(pairs?.0).finish("/v1/items/{job_id}/{item_id}/events")?;
    let data_dir = state.run.data_dir.clone();
    let events =
        tokio::task::spawn_blocking(move || crate::runner::item_events(&data_dir, &job, &item))
            .await
            .map_err(|err| ApiError::internal(format!("the query task failed: {err}")))?
            .map_err(RequestError::Run)?;
    Ok(Json(json!({ "events": events })).into_response())
}
