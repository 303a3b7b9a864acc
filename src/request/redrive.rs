//! The redrive request: `dlq redrive`'s flags and the JSON body of `POST /v1/redrive`, one
//! struct ([`RedriveRequest`]) so the two cannot drift apart. The selection is `dlq delete`'s
//! (named ids, or the items a `dlq list` filter selects, or `all`); the rest says how: a rate,
//! a canary, a merge patch for one item.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::{ListArgs, RequestError};
use crate::query::delete::{DeleteTarget, NamedId};
use dlq::emitter::redrive::DEFAULT_HALT_ABOVE;
use dlq::{Canary, CanarySize};

/// Options of `dlq redrive`, and the JSON body of `POST /v1/redrive`. Either `ids` or the
/// filter (the filter options of `dlq list`, or `all`). Unknown fields are refused (400).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "cli", derive(clap::Args))]
#[serde(deny_unknown_fields, default)]
pub struct RedriveRequest {
    /// The items to redrive, as JOB/ITEM (or ITEM when a single job holds it).
    #[cfg_attr(feature = "cli", arg(value_name = "JOB/ITEM"))]
    pub ids: Vec<String>,
    /// The generation the caller saw of each id (as given in `ids`); an item whose generation
    /// moved on since is reported as already redriven. Items not named here are redriven at
    /// the generation read when the request runs. (JSON body only.)
    #[cfg_attr(feature = "cli", arg(skip))]
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub generations: BTreeMap<String, u32>,
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
    /// Redrive every item (required when neither ids nor a filter are given).
    #[cfg_attr(feature = "cli", arg(long))]
    pub all: bool,
    /// Start at most this many items a second (unlimited unless given).
    #[cfg_attr(feature = "cli", arg(long))]
    pub rate: Option<f64>,
    /// Redrive the first N items (in failure order) alone first, and halt if their
    /// re-failure rate per error signature passes --halt-above.
    #[cfg_attr(
        feature = "cli",
        arg(long, value_name = "N", conflicts_with = "canary_percent")
    )]
    pub canary: Option<usize>,
    /// Like --canary, with this percentage of the items (rounded up, at least one).
    #[cfg_attr(feature = "cli", arg(long, value_name = "P"))]
    pub canary_percent: Option<f64>,
    /// The canary's re-failure rate (0 to 1) above which a signature halts the redrive
    /// (default 0.5).
    #[cfg_attr(feature = "cli", arg(long, value_name = "R"))]
    pub halt_above: Option<f64>,
    /// A JSON merge patch (RFC 7396) applied to the item's data before it is redriven, as
    /// JSON or @FILE; one item only. Recorded as an `item_edited` event with the old values.
    #[cfg_attr(feature = "cli", arg(long, value_name = "JSON|@FILE", value_parser = read_patch))]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub patch: Option<serde_json::Value>,
    /// Only count (and, in JSON, name) what would be redriven; change nothing.
    #[cfg_attr(feature = "cli", arg(long))]
    pub dry_run: bool,
    /// After redriving, wait up to this long for the events to be published (default 5s).
    #[cfg_attr(feature = "cli", arg(long, value_parser = humantime::parse_duration))]
    #[serde(with = "humantime_serde")]
    pub drain_timeout: Option<Duration>,
    /// Why: named with who redrove on each `redriven` and `item_edited` event.
    #[cfg_attr(feature = "cli", arg(long))]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// `--patch JSON` or `--patch @FILE`, read as JSON.
#[cfg(feature = "cli")]
fn read_patch(text: &str) -> Result<serde_json::Value, String> {
    let json = match text.strip_prefix('@') {
        Some(path) => std::fs::read_to_string(path)
            .map_err(|err| format!("cannot read the patch file {path}: {err}"))?,
        None => text.to_owned(),
    };
    serde_json::from_str(&json).map_err(|err| format!("the patch is not JSON: {err}"))
}

/// A checked redrive request: what to redrive and how.
#[derive(Debug, Clone)]
pub struct RedriveJob {
    /// Which items.
    pub target: DeleteTarget,
    /// The generations the caller saw, by id as given.
    pub generations: BTreeMap<String, u32>,
    /// Items started per second.
    pub rate: Option<f64>,
    /// The canary, if any.
    pub canary: Option<Canary>,
    /// The merge patch for the one item named.
    pub patch: Option<serde_json::Value>,
}

impl RedriveRequest {
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

    /// Checks the request; a malformed one (ids and a filter together, no selection without
    /// `all`, a patch for more than one item, a canary or threshold out of range, a bad id,
    /// time or CEL expression) is a usage error.
    pub fn job(&self) -> Result<RedriveJob, RequestError> {
        let usage = |text: &str| Err(RequestError::Usage(format!("{text}; nothing was changed")));
        let has_filter = self.list_args() != ListArgs::default();
        let target = if !self.ids.is_empty() {
            if has_filter || self.all {
                return usage("redrive takes ids or a filter (or --all), not both");
            }
            let ids = self.ids.iter().map(|id| NamedId::parse(id));
            DeleteTarget::Ids(ids.collect::<Result<_, _>>()?)
        } else if has_filter || self.all {
            let query = self.list_args().query()?;
            DeleteTarget::Filter {
                criteria: query.request.filter,
                expr: query.expr,
            }
        } else {
            return usage("redrive needs ids (JOB/ITEM), a filter (--job-id, --filter, --error-type, ...) or --all to redrive every item");
        };
        if self.patch.is_some() && self.ids.len() != 1 {
            return usage("--patch edits one item: name exactly one JOB/ITEM");
        }
        if self
            .rate
            .is_some_and(|rate| !(rate > 0.0 && rate.is_finite()))
        {
            return usage("--rate is items a second and must be above 0");
        }
        let halt_above = self.halt_above.unwrap_or(DEFAULT_HALT_ABOVE);
        if !(0.0..=1.0).contains(&halt_above) {
            return usage("--halt-above is a re-failure rate from 0 to 1");
        }
        let size = match (self.canary, self.canary_percent) {
            (Some(_), Some(_)) => return usage("give --canary or --canary-percent, not both"),
            (Some(0), None) => return usage("--canary must be at least 1"),
            (Some(n), None) => Some(CanarySize::Count(n)),
            (None, Some(p)) if p > 0.0 && p <= 100.0 => Some(CanarySize::Percent(p)),
            (None, Some(_)) => return usage("--canary-percent is above 0 and at most 100"),
            (None, None) => None,
        };
        Ok(RedriveJob {
            target,
            generations: self.generations.clone(),
            rate: self.rate,
            canary: size.map(|size| Canary { size, halt_above }),
            patch: self.patch.clone(),
        })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    #[test]
    fn what_the_cli_sends_the_server_reads_back() {
        let request = RedriveRequest {
            ids: vec!["j/a".into()],
            patch: Some(serde_json::json!({"url": null})),
            canary: Some(3),
            halt_above: Some(0.2),
            rate: Some(5.0),
            reason: Some("fixed upstream".into()),
            ..RedriveRequest::default()
        };
        let sent = serde_json::to_vec(&request).unwrap();
        assert_eq!(
            serde_json::from_slice::<RedriveRequest>(&sent).unwrap(),
            request
        );
        let body: RedriveRequest =
            serde_json::from_str(r#"{"ids": ["j/a"], "generations": {"j/a": 2}}"#).unwrap();
        assert_eq!(body.generations.get("j/a"), Some(&2));
        let unknown = serde_json::from_str::<RedriveRequest>(r#"{"id": "j/a"}"#).unwrap_err();
        assert!(unknown.to_string().contains("unknown field"), "{unknown}");
    }

    #[test]
    fn malformed_requests_are_refused_and_say_why() {
        let refused = |request: RedriveRequest| match request.job() {
            Err(RequestError::Usage(text)) => text,
            other => panic!("{other:?}"),
        };
        let one = || RedriveRequest {
            ids: vec!["j/a".into()],
            ..RedriveRequest::default()
        };
        assert!(refused(RedriveRequest::default()).contains("--all"));
        assert!(refused(RedriveRequest {
            all: true,
            ids: vec!["j/a".into()],
            ..RedriveRequest::default()
        })
        .contains("not both"));
        let patched_filter = RedriveRequest {
            all: true,
            patch: Some(serde_json::json!({})),
            ..RedriveRequest::default()
        };
        assert!(refused(patched_filter).contains("one item"));
        assert!(refused(RedriveRequest {
            canary: Some(0),
            ..one()
        })
        .contains("at least 1"));
        assert!(refused(RedriveRequest {
            canary_percent: Some(150.0),
            ..one()
        })
        .contains("at most 100"));
        assert!(refused(RedriveRequest {
            halt_above: Some(2.0),
            ..one()
        })
        .contains("0 to 1"));
        assert!(refused(RedriveRequest {
            rate: Some(0.0),
            ..one()
        })
        .contains("above 0"));
        let job = RedriveRequest {
            canary_percent: Some(10.0),
            ..one()
        }
        .job()
        .unwrap();
        assert_eq!(
            job.canary,
            Some(Canary {
                size: CanarySize::Percent(10.0),
                halt_above: DEFAULT_HALT_ABOVE
            })
        );
    }
}
