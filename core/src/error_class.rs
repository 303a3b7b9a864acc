//! The one classification of a failed request that both front ends map, once each: the CLI to
//! an exit code, the admin API to an HTTP status; and [`Cause`], the source errors keep.

/// The error another error was caused by, when it can be of several kinds (an `io::Error`, a
/// `sled::Error`, an async-nats error, a decode error): kept as the
/// [`source`](std::error::Error::source); walk the chain and downcast to reach it.
pub type Cause = Box<dyn std::error::Error + Send + Sync + 'static>;

/// What kind of failure an error is, as far as the one who asked is concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorClass {
    /// The request itself is wrong (bad argument, malformed filter, ambiguous id): fix it and
    /// ask again. CLI exit 2, HTTP 400.
    Usage,
    /// A named job or item does not exist. CLI exit 3, HTTP 404.
    NotFound,
    /// Anything else: the request was fine and the work failed. CLI exit 1, HTTP 500.
    Failure,
}
