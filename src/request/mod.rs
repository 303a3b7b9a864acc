//! What the two front ends (the `dlq` CLI and the admin API of `dlq serve`) share about an
//! operator request: the options of `list` both parse ([`ListArgs`]) and the one error a
//! request fails with ([`RequestError`]), whose [`ErrorClass`] each front end maps once.

pub mod list;
#[cfg(feature = "runner")]
pub(crate) mod retry;

pub use list::{ListArgs, DEFAULT_LIMIT};

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
