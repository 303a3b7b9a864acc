//! The options of `dlq list`, as flags on the command line and as the query string of
//! `GET /v1/items`: one struct, so the two cannot drift apart.

use chrono::Utc;

use super::RequestError;
use crate::query::cel::CelFilter;
use crate::query::list::{Cursor, ListRequest};
use crate::query::{parse_error_type, parse_time, Criteria, QueryError};

/// Items per page when `--limit` is not given.
pub const DEFAULT_LIMIT: usize = 50;

/// Options of `dlq list`.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "cli", derive(clap::Args))]
pub struct ListArgs {
    /// Only items of this job.
    #[cfg_attr(feature = "cli", arg(long))]
    pub job_id: Option<String>,
    /// Only items that may be retried automatically (`reprocess_eligible`).
    #[cfg_attr(feature = "cli", arg(long))]
    pub eligible: bool,
    /// Only items whose most recent failure has this error type (e.g. Timeout, CommandFailed).
    #[cfg_attr(feature = "cli", arg(long))]
    pub error_type: Option<String>,
    /// Only items with this error signature (16 hex characters, see `dlq analyze`).
    #[cfg_attr(feature = "cli", arg(long))]
    pub signature: Option<String>,
    /// Only items that last failed at or after this time (RFC 3339, a date, or a duration ago: 2h).
    #[cfg_attr(feature = "cli", arg(long))]
    pub since: Option<String>,
    /// Only items that last failed before this time (same forms as --since).
    #[cfg_attr(feature = "cli", arg(long))]
    pub until: Option<String>,
    /// Items per page.
    #[cfg_attr(feature = "cli", arg(long, default_value_t = DEFAULT_LIMIT))]
    pub limit: usize,
    /// Items to skip before the page (offset + limit at most 100000; page further with --after).
    #[cfg_attr(
        feature = "cli",
        arg(long, default_value_t = 0, conflicts_with = "after")
    )]
    pub offset: usize,
    /// Start after this cursor (the next_cursor of the previous page).
    #[cfg_attr(feature = "cli", arg(long))]
    pub after: Option<String>,
    /// Only items this CEL expression selects (its help lists the variables).
    #[cfg_attr(feature = "cli", arg(long, help = crate::query::cel::filter_help("Only items")))]
    pub filter: Option<String>,
    /// Count every matching item (`matched`), even when that means reading all of them; without
    /// it, `matched` is left out (null) when only a full walk could tell.
    #[cfg_attr(feature = "cli", arg(long))]
    pub count: bool,
}

impl Default for ListArgs {
    fn default() -> Self {
        ListArgs {
            job_id: None,
            eligible: false,
            error_type: None,
            signature: None,
            since: None,
            until: None,
            limit: DEFAULT_LIMIT,
            offset: 0,
            after: None,
            filter: None,
            count: false,
        }
    }
}

/// A checked `dlq list` request: the page and the compiled `--filter` expression.
#[derive(Debug, Clone)]
pub struct ListQuery {
    /// Which page of which items.
    pub request: ListRequest,
    /// The `--filter` expression, applied before paging.
    pub expr: Option<CelFilter>,
}

impl ListArgs {
    /// Checks every option and compiles the filter; a malformed one is a usage error.
    pub fn query(&self) -> Result<ListQuery, RequestError> {
        if self.offset > 0 && self.after.is_some() {
            return Err(RequestError::Usage(
                "--offset and --after cannot be combined: page with one of them".into(),
            ));
        }
        let request = self.request()?;
        let expr = self
            .filter
            .as_deref()
            .map(CelFilter::parse)
            .transpose()
            .map_err(|err| RequestError::Usage(err.to_string()))?;
        Ok(ListQuery { request, expr })
    }

    fn request(&self) -> Result<ListRequest, QueryError> {
        let now = Utc::now();
        let time = |text: &Option<String>| text.as_deref().map(|t| parse_time(t, now)).transpose();
        Ok(ListRequest {
            filter: Criteria {
                job_id: self.job_id.clone(),
                eligible_only: self.eligible,
                error_type: self
                    .error_type
                    .as_deref()
                    .map(parse_error_type)
                    .transpose()?,
                signature: self.signature.clone(),
                since: time(&self.since)?,
                until: time(&self.until)?,
            },
            limit: self.limit,
            offset: self.offset,
            after: self.after.as_deref().map(Cursor::decode).transpose()?,
            count: self.count,
        })
    }
}
