//! `GET /v1/audit?limit=&offset=`: the operators' actions, newest first, from the sink's log:
//! each run of events naming the same operator ([`RemovedBy`]), reason given, kind of action
//! and job is one action (a clear, a purge of one job, a delete, a retry's resolved items, a
//! redrive); an edit is an action of its own, with its patch and the values it replaced.

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

/// One operator action: who did what to how many items of which job, when and why.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Action {
    /// The time of its first event.
    pub at: DateTime<Utc>,
    /// The token's name, or `local`.
    pub who: String,
    /// `cleared`, `purged`, `deleted`, `retried` (the items a retry resolved), `redriven` or
    /// `edited`.
    pub what: &'static str,
    /// The job of the items.
    pub job_id: String,
    /// The operator's reason, if given.
    pub reason: Option<String>,
    /// Items removed, redriven or edited.
    pub items: u64,
    /// An edit's item, merge patch and the values it replaced (as a patch that undoes it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub edit: Option<serde_json::Value>,
}

/// The operator behind `kind`, and what it did, if an operator caused it; with the edit's
/// details for an edit.
fn operated(kind: EventKind) -> Option<(RemovedBy, &'static str, Option<serde_json::Value>)> {
    match kind {
        EventKind::ItemRemoved {
            reason,
            removed_by: Some(by),
            ..
        } => Some((by, removal_name(reason), None)),
        EventKind::Redriven { by: Some(by), .. } => Some((by, "redriven", None)),
        EventKind::ItemEdited {
            item_id,
            patch,
            previous,
            by: Some(by),
        } => {
            let edit = json!({ "item_id": item_id, "patch": patch, "previous": previous });
            Some((by, "edited", Some(edit)))
        }
        _ => None,
    }
}

fn removal_name(reason: RemovalReason) -> &'static str {
    match reason {
        // Only a retry names an operator on a resolved removal (a redrive's outcome names none).
        RemovalReason::Resolved => "retried",
        RemovalReason::Cleared => "cleared",
        RemovalReason::Purged => "purged",
        RemovalReason::Evicted => "evicted",
        RemovalReason::Deleted => "deleted",
    }
}

/// The actions of `events` (in log order), oldest first.
pub fn actions(events: impl IntoIterator<Item = Event>) -> Vec<Action> {
    let mut out: Vec<Action> = Vec::new();
    let mut last: Option<(RemovedBy, &'static str, String)> = None;
    for event in events {
        let Some((by, what, edit)) = operated(event.kind) else {
            continue;
        };
        let key = (by, what, event.job_id);
        match out.last_mut() {
            Some(action) if edit.is_none() && last.as_ref() == Some(&key) => action.items += 1,
            _ => {
                out.push(Action {
                    at: event.timestamp,
                    who: key.0.name.clone(),
                    what: key.1,
                    job_id: key.2.clone(),
                    reason: key.0.reason.clone(),
                    items: 1,
                    edit,
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
            removed(7, "b", Resolved, Some(("ops", "upstream fixed"))),
            removed(8, "b", Resolved, Some(("ops", "upstream fixed"))),
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
                    "cleared",
                    "a".into(),
                    Some("retired".into()),
                    2
                ),
                ("ops".into(), "deleted", "b".into(), None, 1),
                (
                    "ops".into(),
                    "deleted",
                    "b".into(),
                    Some("poison".into()),
                    1
                ),
                (
                    "ops".into(),
                    "retried",
                    "b".into(),
                    Some("upstream fixed".into()),
                    2
                ),
            ]
        );
    }

    fn with_kind(seq: u64, kind: EventKind) -> Event {
        Event {
            kind,
            ..removed(seq, "j", RemovalReason::Resolved, None)
        }
    }

    fn ops(reason: &str) -> Option<RemovedBy> {
        Some(RemovedBy {
            name: "ops".into(),
            reason: Some(reason.into()),
        })
    }

    #[test]
    fn redrives_are_runs_and_each_edit_is_an_action_with_its_diff() {
        use dlq::domain::event::RedriveTarget;
        let redriven = |seq: u64, by: Option<RemovedBy>| {
            with_kind(
                seq,
                EventKind::Redriven {
                    item_id: format!("i{seq}"),
                    generation: 1,
                    target: RedriveTarget::Handler,
                    by,
                },
            )
        };
        let events = vec![
            with_kind(
                1,
                EventKind::ItemEdited {
                    item_id: "i1".into(),
                    patch: json!({"url": "https://new"}),
                    previous: json!({"url": "https://old"}),
                    by: ops("fix url"),
                },
            ),
            redriven(2, ops("db back")),
            redriven(3, ops("db back")),
            redriven(4, None),
            removed(5, "j", RemovalReason::Resolved, None),
        ];
        let got = actions(events);
        assert_eq!(got.len(), 2, "{got:?}");
        assert_eq!((got[0].what, got[0].items), ("edited", 1));
        assert_eq!(
            got[0].edit,
            Some(json!({"item_id": "i1", "patch": {"url": "https://new"},
                        "previous": {"url": "https://old"}}))
        );
        assert_eq!((got[1].what, got[1].items), ("redriven", 2));
        assert_eq!(got[1].reason.as_deref(), Some("db back"));
    }
}
