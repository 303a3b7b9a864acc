//! The retry request: `dlq retry`'s flags and the body of `POST /v1/jobs/{job_id}/retry` both
//! become one [`RetryOptions`], checked here the same way.

use super::RequestError;
use crate::query::cel::CelFilter;
use crate::runner::RetryOptions;

/// Checks `options` and compiles `filter` into them; a bad number or filter is a usage error
/// (CLI exit 2, HTTP 400) and nothing is retried.
pub(crate) fn checked(
    mut options: RetryOptions,
    filter: Option<&str>,
) -> Result<RetryOptions, RequestError> {
    if options.max_retries == 0 || options.parallel == 0 {
        return Err(RequestError::Usage(
            "--max-retries and --parallel must be at least 1".into(),
        ));
    }
    if options
        .rate
        .is_some_and(|rate| !rate.is_finite() || rate <= 0.0)
    {
        return Err(RequestError::Usage(
            "--rate must be a positive number of items per second".into(),
        ));
    }
    options.filter = filter
        .map(CelFilter::parse)
        .transpose()
        .map_err(|err| RequestError::Usage(format!("bad --filter: {err}")))?;
    Ok(options)
}
