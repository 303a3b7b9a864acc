//! The retry request: the JSON body of `POST /v1/jobs/{job_id}/retry` ([`RetryRequest`]),
//! which `dlq retry` builds from its flags, sends when it forwards, and checks the same way as
//! the server into one `RetryOptions` (the runner's).

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::RequestError;
use crate::query::cel::CelFilter;
use crate::runner::RetryOptions;

/// The JSON body of `POST /v1/jobs/{job_id}/retry` (`{}` for the defaults of the CLI). Unknown
/// fields are refused (400), never ignored.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
// `expecting`: serde names the type in its messages ("invalid type: ..., expected struct
// RetryBody"), and the API answers them in its 400s: the name they always said stays.
#[serde(deny_unknown_fields, expecting = "struct RetryBody")]
pub struct RetryRequest {
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
    /// Why: named with who retried on each resolved item's removal event.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

impl RetryRequest {
    /// The retry options the request asks for; a bad number or filter is a usage error (CLI
    /// exit 2, HTTP 400) and nothing is retried.
    pub(crate) fn options(&self) -> Result<RetryOptions, RequestError> {
        let defaults = RetryOptions::default();
        let parallel = self.parallel.unwrap_or(defaults.parallel);
        let max_retries = self.max_retries.unwrap_or(defaults.max_retries);
        if max_retries == 0 || parallel == 0 {
            return Err(RequestError::Usage(
                "--max-retries and --parallel must be at least 1".into(),
            ));
        }
        if self
            .rate
            .is_some_and(|rate| !rate.is_finite() || rate <= 0.0)
        {
            return Err(RequestError::Usage(
                "--rate must be a positive number of items per second".into(),
            ));
        }
        let filter = self
            .filter
            .as_deref()
            .map(CelFilter::parse)
            .transpose()
            .map_err(|err| RequestError::Usage(format!("bad --filter: {err}")))?;
        Ok(RetryOptions {
            parallel,
            max_retries,
            filter,
            force: self.force,
            rate: self.rate,
            dry_run: self.dry_run,
        })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    fn full() -> RetryRequest {
        RetryRequest {
            parallel: Some(4),
            max_retries: Some(2),
            filter: Some(r#"error_type == "Timeout""#.into()),
            force: true,
            rate: Some(2.5),
            dry_run: true,
            workflow: Some(PathBuf::from("/srv/flows/nightly.yml")),
            reason: Some("upstream fixed".into()),
        }
    }

    #[test]
    fn what_the_cli_sends_the_server_reads_back() {
        for request in [full(), RetryRequest::default()] {
            let sent = serde_json::to_vec(&request).unwrap();
            let read: RetryRequest = serde_json::from_slice(&sent).unwrap();
            assert_eq!(read, request);
        }
    }

    #[test]
    fn field_names_are_those_the_docs_show() {
        // docs/admin-api.md: {"parallel", "max_retries", "filter", "force", "rate", "dry_run",
        // "workflow", "reason"} (all optional: `{}`).
        let sent = serde_json::to_string(&full()).unwrap();
        assert_eq!(
            sent,
            r#"{"parallel":4,"max_retries":2,"filter":"error_type == \"Timeout\"","force":true,"rate":2.5,"dry_run":true,"workflow":"/srv/flows/nightly.yml","reason":"upstream fixed"}"#
        );
        let empty: RetryRequest = serde_json::from_str("{}").unwrap();
        assert_eq!(empty, RetryRequest::default());
        let unknown = serde_json::from_str::<RetryRequest>(r#"{"paralel": 2}"#).unwrap_err();
        assert!(unknown.to_string().contains("unknown field"), "{unknown}");
        // The API's 400 for a body that is not an object says what it always said.
        let not_object = serde_json::from_str::<RetryRequest>("1").unwrap_err();
        assert!(
            not_object.to_string().contains("expected struct RetryBody"),
            "{not_object}"
        );
    }

    #[test]
    fn options_take_the_defaults_and_refuse_bad_numbers() {
        let options = RetryRequest::default().options().unwrap();
        assert_eq!((options.parallel, options.max_retries), (10, 3));
        assert!(options.filter.is_none());
        let options = full().options().unwrap();
        assert_eq!((options.parallel, options.max_retries), (4, 2));
        assert!(options.filter.is_some() && options.force && options.dry_run);
        let refused = |request: RetryRequest| request.options().unwrap_err().to_string();
        let zero = RetryRequest {
            parallel: Some(0),
            ..RetryRequest::default()
        };
        assert!(refused(zero).contains("at least 1"));
        let rate = RetryRequest {
            rate: Some(f64::NAN),
            ..RetryRequest::default()
        };
        assert!(refused(rate).contains("--rate"));
        let filter = RetryRequest {
            filter: Some("error_type ==".into()),
            ..RetryRequest::default()
        };
        assert!(refused(filter).contains("bad --filter"));
    }
}
