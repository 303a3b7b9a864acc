//! Limits on what a request may carry: its body ([`MAX_BODY`]) and its query string
//! ([`MAX_QUERY`]). Every route's body is a small JSON object and every query a handful of
//! parameters and at most one CEL filter, so the limits are far above what the CLI sends and
//! far below what would cost the server memory.
//!
//! A declared `Content-Length` above the limit is answered 413 before the body is read; a
//! chunked body is cut off at the limit by axum's `DefaultBodyLimit` when a route reads it, and
//! the JSON extractor's rejection becomes the same 413 ([`super::routes::ApiError`]).

use axum::extract::Request;
use axum::http::header;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::routes::ApiError;

/// The largest request body accepted, in bytes.
pub const MAX_BODY: usize = 64 * 1024;
/// The longest query string accepted, in bytes.
pub const MAX_QUERY: usize = 8 * 1024;

/// Middleware: 414 for a query string over [`MAX_QUERY`], 413 for a declared body over
/// [`MAX_BODY`].
pub async fn check(request: Request, next: Next) -> Response {
    if request.uri().query().is_some_and(|q| q.len() > MAX_QUERY) {
        return ApiError::uri_too_long(MAX_QUERY).into_response();
    }
    let declared = request
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.trim().parse::<u64>().ok());
    if declared.is_some_and(|length| length > MAX_BODY as u64) {
        return ApiError::payload_too_large(MAX_BODY).into_response();
    }
    next.run(request).await
}
