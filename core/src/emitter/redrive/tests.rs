//! Redrive on an emitter over the in-memory sink and a scripted bus: order, generations,
//! the canary's halt, and the missing handler.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::{Arc, Mutex};

use chrono::{Duration, Utc};

use super::*;
use crate::domain::event::{EventKind, RedriveTarget, RemovalReason};
use crate::domain::model::RedriveState;
use crate::emitter::EmitterBuilder;
use crate::testing::{item, FakeBus, MemorySink};

type Seen = Arc<Mutex<Vec<String>>>;

/// An emitter whose handler records each item id and fails those whose data says `"fail"`.
fn emitter(handler: bool) -> (Emitter<MemorySink, FakeBus>, Seen) {
    let seen = Seen::default();
    let mut builder =
        EmitterBuilder::new(MemorySink::default(), FakeBus::default()).reconciler(None);
    if handler {
        let record = seen.clone();
        builder = builder.redrive_handler(move |item: DeadLetteredItem| {
            record.lock().unwrap().push(item.item_id.clone());
            async move {
                match item.item_data.get("fail") {
                    Some(_) => Err(format!("{} failed again", item.item_id)),
                    None => Ok(()),
                }
            }
        });
    }
    (builder.build(), seen)
}

/// Dead-letters `id` with `signature`, first failed `age` minutes ago, failing on redrive if
/// `fails`.
async fn put(
    emitter: &Emitter<MemorySink, FakeBus>,
    id: &str,
    signature: &str,
    age: i64,
    fails: bool,
) -> DeadLetteredItem {
    let mut it = item("j", id);
    it.first_attempt = Utc::now() - Duration::minutes(age);
    it.error_signature = signature.to_owned();
    if fails {
        it.item_data = serde_json::json!({"fail": true});
    }
    emitter.dead_letter("t", it.clone()).await.unwrap();
    it
}

fn kinds(emitter: &Emitter<MemorySink, FakeBus>) -> Vec<(String, &'static str)> {
    emitter
        .sink()
        .log()
        .into_iter()
        .filter(|e| !matches!(e.kind, EventKind::DeadLettered { .. }))
        .map(|e| (e.kind.item_id().unwrap_or("").to_owned(), e.kind.name()))
        .collect()
}

#[tokio::test]
async fn without_a_handler_the_redrive_is_refused_and_writes_nothing() {
    let (emitter, _) = emitter(false);
    let it = put(&emitter, "a", "s", 1, false).await;
    let err = emitter
        .redrive(RedrivePlan::new([RedriveItem::from(it)]))
        .await
        .unwrap_err();
    assert!(matches!(err, RedriveError::NoHandler));
    assert!(
        err.to_string().contains("EmitterBuilder::redrive_handler"),
        "{err}"
    );
    assert!(kinds(&emitter).is_empty());
    assert!(!emitter.can_redrive());
}

#[tokio::test]
async fn items_go_in_failure_order_and_each_outcome_is_recorded_with_its_generation() {
    let (emitter, seen) = emitter(true);
    let young = put(&emitter, "young", "s", 1, false).await;
    let old = put(&emitter, "old", "s", 30, true).await;
    let plan = RedrivePlan::new([young, old].map(RedriveItem::from)).rate(Some(1000.0));
    let report = emitter.redrive(plan).await.unwrap();
    assert_eq!(
        *seen.lock().unwrap(),
        vec!["old", "young"],
        "oldest first failure first"
    );
    assert_eq!((report.redriven, report.resolved), (2, 1));
    assert_eq!(report.failed_again.len(), 1);
    assert_eq!(report.failed_again[0].error, "old failed again");
    let log = emitter.sink().log();
    let resolved = log.iter().find_map(|e| match &e.kind {
        EventKind::ItemRemoved {
            item_id,
            reason,
            generation,
            ..
        } if item_id == "young" => Some((*reason, *generation)),
        _ => None,
    });
    assert_eq!(resolved, Some((RemovalReason::Resolved, Some(1))));
    assert!(log.iter().any(|e| matches!(&e.kind,
        EventKind::Redriven { item_id, generation: 1, target: RedriveTarget::Handler, .. } if item_id == "old")));
    let projection = crate::testing::in_order(&log);
    let stays = &projection.items[&("j".to_owned(), "old".to_owned())].item;
    let record = stays.redrive.as_ref().unwrap();
    assert_eq!((record.generation, record.state), (1, RedriveState::Failed));
    assert_eq!(record.error.as_deref(), Some("old failed again"));
    assert_eq!(projection.items.len(), 1, "the resolved item left");
}

#[tokio::test]
async fn a_generation_is_redriven_once_however_often_it_is_asked() {
    let (emitter, seen) = emitter(true);
    let it = put(&emitter, "a", "s", 1, true).await;
    let first = emitter
        .redrive(RedrivePlan::new([RedriveItem::from(it.clone())]))
        .await
        .unwrap();
    assert_eq!(first.redriven, 1);
    let again = emitter
        .redrive(RedrivePlan::new([RedriveItem::from(it.clone())]))
        .await
        .unwrap();
    assert_eq!(again.redriven, 0);
    assert_eq!(again.already_redriven, vec!["j/a".to_owned()]);
    assert_eq!(seen.lock().unwrap().len(), 1, "the handler ran once");
    assert_eq!(
        kinds(&emitter),
        vec![
            ("a".to_owned(), "redriven"),
            ("a".to_owned(), "redrive_failed")
        ]
    );
    // The next generation, asked for knowingly, goes.
    let next = RedriveItem {
        item: it,
        expected: 1,
    };
    let report = emitter.redrive(RedrivePlan::new([next])).await.unwrap();
    assert_eq!(report.redriven, 1);
}

#[tokio::test]
async fn the_canary_halts_on_a_failing_signature_and_releases_nothing_more() {
    let (emitter, seen) = emitter(true);
    let mut items = Vec::new();
    for n in 0..6 {
        // The two oldest (the canary) are one failing "bad" and one passing "good".
        let (signature, fails) = if n % 2 == 0 {
            ("bad", true)
        } else {
            ("good", false)
        };
        items.push(put(&emitter, &format!("i{n}"), signature, 100 - n, fails).await);
    }
    let canary = Canary {
        size: CanarySize::Count(2),
        halt_above: 0.5,
    };
    let plan = RedrivePlan::new(items.iter().cloned().map(RedriveItem::from)).canary(Some(canary));
    let report = emitter.redrive(plan).await.unwrap();
    assert_eq!(report.halted_by, vec!["bad".to_owned()]);
    assert_eq!(report.not_released, 4);
    assert_eq!(report.redriven, 2);
    assert_eq!(seen.lock().unwrap().len(), 2, "only the canary went");
    let bad = report.canary.iter().find(|r| r.signature == "bad").unwrap();
    assert_eq!((bad.redriven, bad.failed), (1, 1));
    assert!(
        report
            .line()
            .contains("canary halted: bad failed 1/1 (100%)"),
        "{}",
        report.line()
    );
    assert_eq!(report.summary()["not_released"], 4);
}

#[tokio::test]
async fn a_passing_canary_releases_the_rest() {
    let (emitter, seen) = emitter(true);
    let mut items = Vec::new();
    for n in 0..5 {
        items.push(put(&emitter, &format!("i{n}"), "good", 100 - n, n == 4).await);
    }
    let canary = Canary {
        size: CanarySize::Percent(40.0),
        halt_above: 0.5,
    };
    let plan = RedrivePlan::new(items.into_iter().map(RedriveItem::from)).canary(Some(canary));
    let report = emitter.redrive(plan).await.unwrap();
    assert!(report.halted_by.is_empty());
    assert_eq!(
        (report.redriven, report.resolved, report.not_released),
        (5, 4, 0)
    );
    assert_eq!(seen.lock().unwrap().len(), 5);
    assert_eq!(report.canary.len(), 1);
    assert_eq!(report.canary[0].redriven, 2);
}

#[tokio::test]
async fn an_edit_writes_the_patch_the_old_values_and_who_and_a_no_op_writes_nothing() {
    let (emitter, _) = emitter(true);
    let mut it = item("j", "a");
    it.item_data = serde_json::json!({"url": "https://old", "keep": 1});
    emitter.dead_letter("t", it).await.unwrap();
    let by = RemovedBy {
        name: "ops".into(),
        reason: Some("typo".into()),
    };
    let patch = serde_json::json!({"url": "https://new", "extra": true});
    assert!(emitter
        .edit("j", "a", patch.clone(), Some(by.clone()))
        .await
        .unwrap());
    assert!(
        !emitter.edit("j", "a", patch.clone(), None).await.unwrap(),
        "no change"
    );
    let edits: Vec<_> = emitter
        .sink()
        .log()
        .into_iter()
        .filter_map(|e| match e.kind {
            EventKind::ItemEdited {
                patch,
                previous,
                by,
                ..
            } => Some((patch, previous, by)),
            _ => None,
        })
        .collect();
    assert_eq!(
        edits,
        vec![(
            patch,
            serde_json::json!({"url": "https://old", "extra": null}),
            Some(by)
        )]
    );
    let projection = crate::testing::in_order(&emitter.sink().log());
    assert_eq!(
        projection.items[&("j".to_owned(), "a".to_owned())]
            .item
            .item_data,
        serde_json::json!({"url": "https://new", "keep": 1, "extra": true})
    );
    let missing = emitter.edit("j", "nope", serde_json::json!({}), None).await;
    assert!(matches!(missing, Err(EmitError::NotFound { .. })));
}

#[test]
fn a_tiny_rate_waits_at_most_an_hour_and_never_overflows() {
    // 1 / 1e-300 seconds does not fit a Duration: it used to panic.
    let pacer = super::Pacer::new(Some(1e-300));
    assert_eq!(pacer.period, Some(super::MAX_PERIOD));
    let pacer = super::Pacer::new(Some(4.0));
    assert_eq!(pacer.period, Some(std::time::Duration::from_millis(250)));
}
