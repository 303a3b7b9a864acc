//! The delete request: `dlq delete`'s flags and the JSON body of `POST /v1/delete`, one struct
//! ([`DeleteRequest`]) so the two cannot drift apart; [`DeleteRequest::target`] checks it into
//! what to delete (named ids, or the items a `dlq list` filter selects).

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::{ListArgs, RequestError};
use crate::query::delete::{DeleteTarget, NamedId};

/// Options of `dlq delete`, and the JSON body of `POST /v1/delete`. Either `ids` or the filter
/// (the filter options of `dlq list`, or `all`). Unknown fields are refused (400), never ignored.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "cli", derive(clap::Args))]
#[serde(deny_unknown_fields, default)]
pub struct DeleteRequest {
    /// The items to delete, as JOB/ITEM (or ITEM when a single job holds it).
    #[cfg_attr(feature = "cli", arg(value_name = "JOB/ITEM"))]
    pub ids: Vec<String>,
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
    /// Only items this CEL expression selects (its help lists the variables).
    #[cfg_attr(feature = "cli", arg(long, help = crate::query::cel::filter_help("Only items")))]
    pub filter: Option<String>,
    /// Delete every item (required when neither ids nor a filter are given).
    #[cfg_attr(feature = "cli", arg(long))]
    pub all: bool,
    /// Only count (and, in JSON, name) what would be deleted; change nothing.
    #[cfg_attr(feature = "cli", arg(long))]
    pub dry_run: bool,
    /// After deleting, wait up to this long for the removal events to be published (default
    /// 5s), written like `5s` or `1s 500ms`.
    #[cfg_attr(feature = "cli", arg(long, value_parser = humantime::parse_duration))]
    #[serde(with = "humantime_serde")]
    pub drain_timeout: Option<Duration>,
    /// Why: named with who deleted on each removal event (`dlq events`, the page's audit view).
    #[cfg_attr(feature = "cli", arg(long))]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

impl DeleteRequest {
    /// The filter options as `dlq list` reads them.
    fn list_args(&self) -> ListArgs {
        ListArgs {
            job_id: self.job_id.clone(),
            eligible: self.eligible,
            error_type: self.error_type.clone(),
            signature: self.signature.clone(),
            since: self.since.clone(),
            until: self.until.clone(),
            filter: self.filter.clone(),
            ..ListArgs::default()
        }
    }

    fn has_filter(&self) -> bool {
        self.list_args() != ListArgs::default()
    }

    /// Checks the request into what to delete; a malformed one (ids and a filter together, no
    /// selection without `all`, a bad id, time or CEL expression) is a usage error.
    pub fn target(&self) -> Result<DeleteTarget, RequestError> {
        let usage = |text: &str| Err(RequestError::Usage(text.to_owned()));
        if !self.ids.is_empty() {
            if self.has_filter() || self.all {
                return usage(
                    "delete takes ids or a filter (or --all), not both; nothing was changed",
                );
            }
            let ids = self
                .ids
                .iter()
                .map(|id| NamedId::parse(id))
                .collect::<Result<_, _>>()?;
            return Ok(DeleteTarget::Ids(ids));
        }
        if !self.has_filter() && !self.all {
            return usage("delete needs ids (JOB/ITEM), a filter (--job-id, --filter, --error-type, ...) or --all to delete every item; nothing was changed");
        }
        let query = self.list_args().query()?;
        Ok(DeleteTarget::Filter {
            criteria: query.request.filter,
            expr: query.expr,
        })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    #[test]
    fn what_the_cli_sends_the_server_reads_back() {
        let request = DeleteRequest {
            ids: vec!["j/a".into()],
            filter: Some("attempts > 2".into()),
            drain_timeout: Some(Duration::from_millis(1500)),
            dry_run: true,
            ..DeleteRequest::default()
        };
        let sent = serde_json::to_vec(&request).unwrap();
        assert_eq!(
            serde_json::from_slice::<DeleteRequest>(&sent).unwrap(),
            request
        );
        let minimal: DeleteRequest = serde_json::from_str(r#"{"ids": ["j/a"]}"#).unwrap();
        assert_eq!(minimal.ids, vec!["j/a".to_owned()]);
        let unknown = serde_json::from_str::<DeleteRequest>(r#"{"id": "j/a"}"#).unwrap_err();
        assert!(unknown.to_string().contains("unknown field"), "{unknown}");
    }

    #[test]
    fn an_empty_selection_ids_with_a_filter_and_bad_cel_are_refused() {
        let refused = |request: DeleteRequest| match request.target() {
            Err(RequestError::Usage(text)) => text,
            other => panic!("{other:?}"),
        };
        assert!(refused(DeleteRequest::default()).contains("--all"));
        let both = DeleteRequest {
            ids: vec!["j/a".into()],
            job_id: Some("j".into()),
            ..DeleteRequest::default()
        };
        assert!(refused(both).contains("not both"));
        let bad = DeleteRequest {
            filter: Some("attempts >".into()),
            ..DeleteRequest::default()
        };
        refused(bad);
        let all = DeleteRequest {
            all: true,
            ..DeleteRequest::default()
        };
        assert!(matches!(all.target(), Ok(DeleteTarget::Filter { .. })));
    }
}
