//! `GET /v1/audit?limit=&offset=`: the operators' removals, newest first, from the sink's log:
//! each run of `item_removed` events naming the same operator ([`RemovedBy`]), reason given,
//! kind of removal and job is one action (a clear, a purge of one job, a delete).

use axum::extract::State;
use axum::response::IntoResponse;
use axum::Json;
use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::json;

use super::routes::{blocking, Answer, Pairs, Shared};
use crate::request::{Params, RequestError};
use dlq::domain::event::{Event, EventKind, RemovalReason, RemovedBy};

/// Actions answered when `limit` is not given.
const DEFAULT_LIMIT: usize = 50;
/// Most actions one answer holds.
const MAX_LIMIT: usize = 1000;

/// One operator action: who removed how many items of which job, how, when and why.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Action {
    /// The time of its first event.
    pub at: DateTime<Utc>,
    /// The token's name, or `local`.
    pub who: String,
    /// `cleared`, `purged` or `deleted`.
    pub what: RemovalReason,
    /// The job of the items.
    pub job_id: String,
    /// The operator's reason, if given.
    pub reason: Option<String>,
    /// Items removed.
    pub items: u64,
}

/// The actions of `events` (in log order), oldest first.
pub fn actions(events: impl IntoIterator<Item = Event>) -> Vec<Action> {
    let mut out: Vec<Action> = Vec::new();
    let mut last: Option<(RemovedBy, RemovalReason, String)> = None;
    for event in events {
        let EventKind::ItemRemoved {
            reason,
            removed_by: Some(by),
            ..
        } = event.kind
        else {
            continue;
        };
        let key = (by, reason, event.job_id);
        match out.last_mut() {
            Some(action) if last.as_ref() == Some(&key) => action.items += 1,
            _ => {
                out.push(Action {
                    at: event.timestamp,
                    who: key.0.name.clone(),
                    what: key.1,
                    job_id: key.2.clone(),
                    reason: key.0.reason.clone(),
                    items: 1,
                });
                last = Some(key);
            }
        }
    }
    out
}

/// `GET /v1/audit`: `{"actions": [...], "total": N}`, newest first, `limit` (default 50, at
/// most 1000) from `offset`.
pub async fn audit(State(state): Shared, pairs: Pairs) -> Answer {
    let mut params = Params::new(pairs?.0);
    let limit = params
        .parsed::<usize>("limit", "a count")?
        .unwrap_or(DEFAULT_LIMIT)
        .min(MAX_LIMIT);
    let offset = params.parsed::<usize>("offset", "a count")?.unwrap_or(0);
    params.finish("/v1/audit")?;
    let all = blocking(&state, |sink| {
        let mut events = Vec::new();
        for event in sink.events_from(1) {
            events.push(event.map_err(RequestError::from)?);
        }
        Ok(actions(events))
    })
    .await?;
    let total = all.len();
    let page: Vec<Action> = all.into_iter().rev().skip(offset).take(limit).collect();
    Ok(Json(json!({ "actions": page, "total": total })).into_response())
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    fn removed(seq: u64, job: &str, reason: RemovalReason, by: Option<(&str, &str)>) -> Event {
        Event {
            event_id: format!("n:{seq}"),
            node_id: "n".into(),
            seq,
            epoch: None,
            prev_epoch: None,
            prev_seq: None,
            timestamp: Utc::now(),
            job_id: job.into(),
            topic: String::new(),
            kind: EventKind::ItemRemoved {
                item_id: format!("i{seq}"),
                reason,
                removed_by: by.map(|(name, why)| RemovedBy {
                    name: name.into(),
                    reason: Some(why.into()).filter(|w: &String| !w.is_empty()),
                }),
                generation: None,
            },
        }
    }

    #[test]
    fn runs_of_one_operators_removals_are_one_action() {
        use RemovalReason::*;
        let events = vec![
            removed(1, "a", Cleared, Some(("boss", "retired"))),
            removed(2, "a", Cleared, Some(("boss", "retired"))),
            removed(3, "a", Resolved, None),
            removed(4, "b", Deleted, Some(("ops", ""))),
            removed(5, "b", Deleted, Some(("ops", "poison"))),
            removed(6, "b", Purged, None),
        ];
        let got: Vec<_> = actions(events)
            .into_iter()
            .map(|a| (a.who, a.what, a.job_id, a.reason, a.items))
            .collect();
        assert_eq!(
            got,
            [
                (
                    "boss".into(),
                    Cleared,
                    "a".into(),
                    Some("retired".into()),
                    2
                ),
                ("ops".into(), Deleted, "b".into(), None, 1),
                ("ops".into(), Deleted, "b".into(), Some("poison".into()), 1),
            ]
        );
    }
}
