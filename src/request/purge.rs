//! The purge request: the JSON body of `POST /v1/purge` ([`PurgeRequest`]), which `dlq purge`
//! builds from its flags and sends when it forwards, and the server reads.

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// The JSON body of `POST /v1/purge`. Unknown fields are refused (400), never ignored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
// `expecting`: serde names the type in its messages ("invalid type: ..., expected struct
// PurgeBody"), and the API answers them in its 400s: the name they always said stays.
#[serde(deny_unknown_fields, expecting = "struct PurgeBody")]
pub struct PurgeRequest {
    /// Remove items first failed more than this many days ago.
    pub older_than_days: u32,
    /// Only items of this job.
    #[serde(default)]
    pub job_id: Option<String>,
    /// Wait up to this long for the removal events to be published (default 5s), written like
    /// `5s` or `1s 500ms`.
    #[serde(default, with = "humantime_serde")]
    pub drain_timeout: Option<Duration>,
    /// Only count what would be removed.
    #[serde(default)]
    pub dry_run: bool,
    /// Why, named with the caller on each removal event.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    fn sample() -> PurgeRequest {
        PurgeRequest {
            older_than_days: 30,
            job_id: Some("J".into()),
            drain_timeout: Some(Duration::from_secs(5)),
            dry_run: false,
            reason: None,
        }
    }

    #[test]
    fn what_the_cli_sends_the_server_reads_back() {
        let odd = PurgeRequest {
            older_than_days: u32::MAX,
            job_id: None,
            drain_timeout: Some(Duration::from_millis(1500)),
            dry_run: true,
            reason: Some("old".into()),
        };
        for request in [sample(), odd] {
            let sent = serde_json::to_vec(&request).unwrap();
            let read: PurgeRequest = serde_json::from_slice(&sent).unwrap();
            assert_eq!(read, request);
        }
    }

    #[test]
    fn field_names_are_those_the_docs_show() {
        // docs/admin-api.md: {"older_than_days": N, "job_id": "J", "drain_timeout": "5s",
        // "dry_run": false}, and the curl example's {"older_than_days": 30}.
        let sent = serde_json::to_string(&sample()).unwrap();
        assert_eq!(
            sent,
            r#"{"older_than_days":30,"job_id":"J","drain_timeout":"5s","dry_run":false}"#
        );
        let minimal: PurgeRequest = serde_json::from_str(r#"{"older_than_days": 30}"#).unwrap();
        assert_eq!(
            minimal,
            PurgeRequest {
                job_id: None,
                drain_timeout: None,
                ..sample()
            }
        );
        let unknown = serde_json::from_str::<PurgeRequest>(r#"{"older_than_days": 1, "job": "J"}"#)
            .unwrap_err();
        assert!(unknown.to_string().contains("unknown field"), "{unknown}");
        // The API's 400 for a body that is not an object says what it always said.
        let not_object = serde_json::from_str::<PurgeRequest>("1").unwrap_err();
        assert!(
            not_object.to_string().contains("expected struct PurgeBody"),
            "{not_object}"
        );
    }
}
