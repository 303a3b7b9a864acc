//! What the two front ends (the `dlq` CLI and the admin API of `dlq serve`) share about an
//! operator request: the wire. The options of `list` both parse ([`ListArgs`]), the query
//! strings of every route ([`params`]), the JSON bodies of retry ([`RetryRequest`]), purge
//! ([`PurgeRequest`]), delete ([`DeleteRequest`]) and redrive ([`RedriveRequest`]), and the one error a request fails with ([`RequestError`]), whose
//! [`ErrorClass`] each front end maps once. The CLI serializes these types when it forwards to a
//! server and the server deserializes the same types, so the two cannot drift apart.
//!
//! Where one operator action lives, retry for instance: `cli/retry.rs` parses the flags into a
//! [`RetryRequest`] and runs it on the data directory or forwards it; `request/` is the wire (the body, the path,
//! the check into `RetryOptions`); `serve/retry_route.rs` routes `POST /v1/jobs/{job_id}/retry`
//! to the same code; `runner/retry/` does the retry (`removal.rs` does clear and purge);
//! `render/retry.rs` prints the report, for the CLI and as the API's answer alike.

pub mod delete;
pub mod list;
pub mod params;
pub mod purge;
pub mod reason;
pub mod redrive;
#[cfg(feature = "runner")]
pub mod retry;

pub use delete::DeleteRequest;
pub use list::{ListArgs, DEFAULT_LIMIT};
pub use params::Params;
pub use purge::PurgeRequest;
pub use redrive::RedriveRequest;
#[cfg(feature = "runner")]
pub use retry::RetryRequest;

use thiserror::Error;

use crate::query::QueryError;
use dlq::sink::SinkError;
pub use dlq::ErrorClass;

/// Why an operator request failed.
#[derive(Debug, Error)]
pub enum RequestError {
    /// The request is malformed (an option, a parameter, a filter); nothing was changed.
    #[error("{0}")]
    Usage(String),
    /// The sink failed.
    #[error(transparent)]
    Sink(#[from] SinkError),
    /// An operator query failed (not found, ambiguous, bad argument, bad input file).
    #[error(transparent)]
    Query(#[from] QueryError),
    /// The job runner failed.
    #[cfg(feature = "runner")]
    #[error(transparent)]
    Run(#[from] crate::runner::RunError),
    /// Writing the answer failed.
    #[error("cannot write output: {0}")]
    Output(#[from] std::io::Error),
}

impl RequestError {
    /// Which kind of failure this is.
    pub fn class(&self) -> ErrorClass {
        match self {
            RequestError::Usage(_) => ErrorClass::Usage,
            RequestError::Sink(err) => err.class(),
            RequestError::Query(err) => err.class(),
            #[cfg(feature = "runner")]
            RequestError::Run(err) => err.class(),
            RequestError::Output(_) => ErrorClass::Failure,
        }
    }
}
