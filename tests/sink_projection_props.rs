#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! Model-based property tests of the sled sink's projection. Random command sequences over a
//! small id space (2 jobs × 6 items, capacity 4 per job) run against a real sled sink; after
//! every command the sink must agree with two independent models:
//!
//! * the event-sourced model: a `MemoryProjection` fed the events the sink returned (catches
//!   a sled projection that diverges from `apply`);
//! * a hand-written model of which items exist (per-job FIFO lists, eviction at capacity,
//!   NotFound, purge by age, delete of named items, redrive generations and their outcomes,
//!   edits of the item's data), which does not use `decide` or `apply`
//!   at all (catches decision bugs the event-sourced comparison cannot see, since it replays
//!   the sink's own decisions).

use std::collections::BTreeMap;

use chrono::{DateTime, TimeDelta, Utc};
use dlq::domain::command::Command;
use dlq::domain::event::{Event, RedriveTarget, RemovalReason};
use dlq::domain::merge_patch::merge_patch;
use dlq::domain::model::{DeadLetteredItem, ErrorType, FailureDetail};
use dlq::domain::projection::{MemoryProjection, StateView, StoredItem};
use dlq::sink::{LocalSink, Sink, SinkConfig, SinkError};
use dlq_ops::query::list::{in_listing_order, page_in_order, Cursor, ListRequest};
use dlq_ops::query::stats::{stats, StatsAccumulator};
use dlq_ops::query::Criteria;
use proptest::prelude::*;
use tempfile::TempDir;

const JOBS: [&str; 2] = ["job-a", "job-b"];
const CAPACITY: usize = 4;
const RETENTION_DAYS: i64 = 30;

/// One generated step; ids are indexes into the small id space.
#[derive(Debug, Clone)]
enum Op {
    DeadLetter {
        job: usize,
        item: usize,
        days_ago: i64,
        error: usize,
        failures: u32,
    },
    Remove {
        job: usize,
        item: usize,
    },
    Flags {
        job: usize,
        item: usize,
        eligible: Option<bool>,
        review: Option<bool>,
    },
    EmitFailure {
        job: usize,
    },
    Clear {
        job: usize,
    },
    Purge {
        job: Option<usize>,
    },
    Delete {
        items: Vec<(usize, usize)>,
    },
    Redrive {
        job: usize,
        item: usize,
        expected: u32,
    },
    Outcome {
        job: usize,
        item: usize,
        generation: u32,
        ok: bool,
    },
    Edit {
        job: usize,
        item: usize,
        patch: usize,
    },
}

/// The merge patches an `Edit` op applies (by index).
fn patch(n: usize) -> serde_json::Value {
    [
        serde_json::json!({"n": null}),
        serde_json::json!({"extra": {"k": 1}}),
        serde_json::json!({"item": "renamed", "extra": null}),
        serde_json::json!({}),
    ][n % 4]
        .clone()
}

fn op() -> impl Strategy<Value = Op> {
    let (job, item) = (0..JOBS.len(), 0..6usize);
    let dead_letter = (job.clone(), item.clone(), 0..60i64, 0..4usize, 1..4u32);
    let flags = (
        job.clone(),
        item.clone(),
        any::<Option<bool>>(),
        any::<Option<bool>>(),
    );
    prop_oneof![
        6 => dead_letter.prop_map(|(job, item, days_ago, error, failures)| {
            Op::DeadLetter { job, item, days_ago, error, failures }
        }),
        2 => (job.clone(), item).prop_map(|(job, item)| Op::Remove { job, item }),
        1 => flags.prop_map(|(job, item, eligible, review)| {
            Op::Flags { job, item, eligible, review }
        }),
        1 => job.clone().prop_map(|job| Op::EmitFailure { job }),
        1 => job.clone().prop_map(|job| Op::Clear { job }),
        2 => proptest::option::of(job.clone()).prop_map(|job| Op::Purge { job }),
        2 => proptest::collection::vec((job.clone(), 0..6usize), 0..4)
            .prop_map(|items| Op::Delete { items }),
        2 => (job.clone(), 0..6usize, 0..3u32)
            .prop_map(|(job, item, expected)| Op::Redrive { job, item, expected }),
        2 => (job.clone(), 0..6usize, 0..3u32, any::<bool>())
            .prop_map(|(job, item, generation, ok)| Op::Outcome { job, item, generation, ok }),
        2 => (job, 0..6usize, 0..4usize)
            .prop_map(|(job, item, patch)| Op::Edit { job, item, patch }),
    ]
}

fn item_id(item: usize) -> String {
    format!("item-{item}")
}

/// A complete item with `n` failures of one kind, the first at `first`.
fn item_at(job: &str, id: &str, first: DateTime<Utc>, kind: ErrorType, n: u32) -> DeadLetteredItem {
    let message = format!("{} in step {}", kind.name(), n % 2);
    let detail = |k: u32| FailureDetail {
        attempt_number: k,
        timestamp: first + TimeDelta::minutes(i64::from(k)),
        error_type: kind.clone(),
        error_message: message.clone(),
        stack_trace: None,
        agent_id: format!("agent-{k}"),
        step_failed: "shell: cargo test".into(),
        duration_ms: 1000,
        json_log_location: None,
    };
    let failures = (0..n).map(detail).collect();
    let data = serde_json::json!({ "item": id, "n": n });
    DeadLetteredItem::new(job, id, data, failures).unwrap()
}

fn dead_letter(item: DeadLetteredItem) -> Command {
    let (topic, item) = ("mapreduce".to_owned(), std::sync::Arc::new(item));
    Command::DeadLetter { topic, item }
}

/// The command an op stands for, at time `now`.
fn command(op: &Op, now: DateTime<Utc>) -> Command {
    let job_id = |job: &usize| JOBS[*job].to_owned();
    match op {
        Op::DeadLetter {
            job,
            item,
            days_ago,
            error,
            failures,
        } => {
            let kinds = [
                ErrorType::Timeout,
                ErrorType::CommandFailed { exit_code: 101 },
                ErrorType::ValidationFailed,
                ErrorType::Unknown,
            ];
            let first = now - TimeDelta::days(*days_ago);
            let kind = kinds[*error].clone();
            dead_letter(item_at(JOBS[*job], &item_id(*item), first, kind, *failures))
        }
        Op::Remove { job, item } => Command::Remove {
            job_id: job_id(job),
            item_id: item_id(*item),
            reason: RemovalReason::Resolved,
            by: None,
        },
        Op::Flags {
            job,
            item,
            eligible,
            review,
        } => Command::UpdateFlags {
            job_id: job_id(job),
            item_id: item_id(*item),
            reprocess_eligible: *eligible,
            manual_review_required: *review,
        },
        Op::EmitFailure { job } => Command::RecordEmitFailure {
            job_id: job_id(job),
            topic: "mapreduce".into(),
            failed_event_id: "elsewhere:7".into(),
            attempts: 3,
            error: "bus unavailable".into(),
        },
        Op::Clear { job } => Command::Clear {
            job_id: job_id(job),
            limit: 2,
            by: None,
        },
        Op::Purge { job } => Command::Purge {
            cutoff: now - TimeDelta::days(RETENTION_DAYS),
            job_id: job.as_ref().map(job_id),
            limit: 3,
            by: None,
        },
        Op::Delete { items } => Command::Delete {
            items: items
                .iter()
                .map(|(job, item)| (job_id(job), item_id(*item)))
                .collect(),
            by: None,
        },
        Op::Redrive {
            job,
            item,
            expected,
        } => Command::Redrive {
            job_id: job_id(job),
            item_id: item_id(*item),
            expected: *expected,
            target: RedriveTarget::Handler,
            by: None,
        },
        Op::Outcome {
            job,
            item,
            generation,
            ok,
        } => Command::RedriveOutcome {
            job_id: job_id(job),
            item_id: item_id(*item),
            generation: *generation,
            result: if *ok { Ok(()) } else { Err("again".into()) },
        },
        Op::Edit {
            job,
            item,
            patch: n,
        } => Command::Edit {
            job_id: job_id(job),
            item_id: item_id(*item),
            patch: patch(*n),
            by: None,
        },
    }
}

/// What the hand-written model keeps of an item.
#[derive(Debug, Clone, PartialEq)]
struct Entry {
    id: String,
    first: DateTime<Utc>,
    failures: u32,
    eligible: bool,
    review: bool,
    generation: u32,
    in_flight: bool,
    data: serde_json::Value,
}

/// Which items exist: per job, the entries in creation (FIFO) order.
#[derive(Debug, Default)]
struct Model {
    jobs: BTreeMap<String, Vec<Entry>>,
}

impl Model {
    /// Applies `command`; returns the events it must produce (as `kind job/item`), or `None`
    /// when it must fail with NotFound.
    fn apply(&mut self, command: &Command) -> Option<Vec<String>> {
        let removed = |job: &str, id: &str| format!("item_removed {job}/{id}");
        match command {
            Command::DeadLetter { item, .. } => {
                let (job, id) = (&item.job_id, &item.item_id);
                let list = self.jobs.entry(job.clone()).or_default();
                if let Some(entry) = list.iter_mut().find(|e| &e.id == id) {
                    entry.failures += item.failure_count;
                    entry.eligible = item.reprocess_eligible;
                    entry.review = item.manual_review_required;
                    return Some(vec![format!("failure_appended {job}/{id}")]);
                }
                let over = list.len().saturating_sub(CAPACITY - 1);
                let mut events: Vec<_> = list.drain(..over).map(|e| removed(job, &e.id)).collect();
                events.push(format!("dead_lettered {job}/{id}"));
                list.push(Entry {
                    id: id.clone(),
                    first: item.first_attempt,
                    failures: item.failure_count,
                    eligible: item.reprocess_eligible,
                    review: item.manual_review_required,
                    generation: 0,
                    in_flight: false,
                    data: item.item_data.clone(),
                });
                Some(events)
            }
            Command::Remove {
                job_id: job,
                item_id: id,
                ..
            } => {
                let list = self.jobs.entry(job.clone()).or_default();
                list.remove(list.iter().position(|e| &e.id == id)?);
                Some(vec![removed(job, id)])
            }
            Command::UpdateFlags {
                job_id: job,
                item_id: id,
                reprocess_eligible: eligible,
                manual_review_required: review,
            } => {
                let list = self.jobs.entry(job.clone()).or_default();
                let entry = list.iter_mut().find(|e| &e.id == id)?;
                entry.eligible = eligible.unwrap_or(entry.eligible);
                entry.review = review.unwrap_or(entry.review);
                Some(vec![format!("flags_updated {job}/{id}")])
            }
            Command::RecordEmitFailure { job_id, .. } => {
                Some(vec![format!("emit_failed {job_id}/-")])
            }
            Command::Clear {
                job_id: job, limit, ..
            } => {
                let list = self.jobs.entry(job.clone()).or_default();
                let n = list.len().min(*limit);
                Some(list.drain(..n).map(|e| removed(job, &e.id)).collect())
            }
            Command::Purge {
                cutoff,
                job_id,
                limit,
                ..
            } => {
                // Oldest first failure first; ties by job, then item id.
                let mut old = Vec::new();
                for (job, list) in &self.jobs {
                    if job_id.as_ref().is_none_or(|wanted| wanted == job) {
                        let hits = list.iter().filter(|e| e.first < *cutoff);
                        old.extend(hits.map(|e| (e.first, job.clone(), e.id.clone())));
                    }
                }
                old.sort();
                old.truncate(*limit);
                for (_, job, id) in &old {
                    let list = self.jobs.entry(job.clone()).or_default();
                    list.retain(|e| &e.id != id);
                }
                Some(old.iter().map(|(_, job, id)| removed(job, id)).collect())
            }
            Command::Delete { items, .. } => {
                // Each named item that exists, once, in the order named; absent ones skipped.
                let mut events = Vec::new();
                for (job, id) in items {
                    let list = self.jobs.entry(job.clone()).or_default();
                    if let Some(at) = list.iter().position(|e| &e.id == id) {
                        list.remove(at);
                        events.push(removed(job, id));
                    }
                }
                Some(events)
            }
            Command::Redrive {
                job_id: job,
                item_id: id,
                expected,
                ..
            } => {
                // Only the generation the caller saw is redriven, to the next one.
                let list = self.jobs.entry(job.clone()).or_default();
                let entry = list.iter_mut().find(|e| &e.id == id)?;
                if entry.generation != *expected {
                    return Some(Vec::new());
                }
                entry.generation += 1;
                entry.in_flight = true;
                Some(vec![format!("redriven {job}/{id}")])
            }
            Command::RedriveOutcome {
                job_id: job,
                item_id: id,
                generation,
                result,
            } => {
                // Only the outcome of the redrive in flight is written.
                let list = self.jobs.entry(job.clone()).or_default();
                let Some(at) = list.iter().position(|e| &e.id == id) else {
                    return Some(Vec::new());
                };
                if list[at].generation != *generation || !list[at].in_flight {
                    return Some(Vec::new());
                }
                list[at].in_flight = false;
                if result.is_ok() {
                    list.remove(at);
                    return Some(vec![removed(job, id)]);
                }
                Some(vec![format!("redrive_failed {job}/{id}")])
            }
            Command::Edit {
                job_id: job,
                item_id: id,
                patch,
                ..
            } => {
                let list = self.jobs.entry(job.clone()).or_default();
                let entry = list.iter_mut().find(|e| &e.id == id)?;
                let edited = merge_patch(&entry.data, patch);
                if edited == entry.data {
                    return Some(Vec::new());
                }
                entry.data = edited;
                Some(vec![format!("item_edited {job}/{id}")])
            }
        }
    }

    /// Every item as (job, entry), sorted by job and item id.
    fn rows(&self) -> Vec<(String, Entry)> {
        let mut rows: Vec<_> = (self.jobs.iter())
            .flat_map(|(job, list)| list.iter().map(move |e| (job.clone(), e.clone())))
            .collect();
        rows.sort_by(|a, b| (&a.0, &a.1.id).cmp(&(&b.0, &b.1.id)));
        rows
    }
}

/// An event as `kind job/item`.
fn brief(e: &Event) -> String {
    let item = e.kind.item_id().unwrap_or("-");
    format!("{} {}/{item}", e.kind.name(), e.job_id)
}

fn items(sink: &LocalSink) -> Vec<StoredItem> {
    sink.items().collect::<Result<_, _>>().unwrap()
}

fn row(stored: &StoredItem) -> (String, Entry) {
    let it = &stored.item;
    let entry = Entry {
        id: it.item_id.clone(),
        first: it.first_attempt,
        failures: it.failure_count,
        eligible: it.reprocess_eligible,
        review: it.manual_review_required,
        generation: it.generation(),
        in_flight: it
            .redrive
            .as_ref()
            .is_some_and(|r| r.state == dlq::RedriveState::InFlight),
        data: it.item_data.clone(),
    };
    (it.job_id.clone(), entry)
}

/// Checks the sink against both models after a step.
fn check(sink: &LocalSink, memory: &MemoryProjection, model: &Model, step: usize) {
    let stored = items(sink);
    let projected: Vec<StoredItem> = memory.items.values().cloned().collect();
    assert_eq!(
        stored, projected,
        "step {step}: sled items != MemoryProjection"
    );
    let rows: Vec<_> = stored.iter().map(row).collect();
    assert_eq!(
        rows,
        model.rows(),
        "step {step}: sled items != hand-written model"
    );
    for job in JOBS {
        let fifo = model.jobs.get(job).map(Vec::as_slice).unwrap_or_default();
        let len = sink.job_len(job).unwrap();
        assert_eq!(len, fifo.len() as u64, "step {step}: job_len({job})");
        assert!(len <= CAPACITY as u64, "step {step}: {job} over capacity");
        let mut of_job: Vec<_> = stored.iter().filter(|s| s.item.job_id == job).collect();
        of_job.sort_by_key(|s| s.created_seq);
        let order: Vec<&str> = of_job.iter().map(|s| s.item.item_id.as_str()).collect();
        let expected: Vec<&str> = fifo.iter().map(|e| e.id.as_str()).collect();
        assert_eq!(order, expected, "step {step}: FIFO order of {job}");
    }
    check_queries(sink, &stored, step);
}

/// The index- and counter-based queries equal brute force over the stored items: `stats`
/// (per-job counters, age and recency indexes) equals a fold of every item, and the listing
/// (the merged recency index) equals sorting every item, also when paged by cursor.
fn check_queries(sink: &LocalSink, stored: &[StoredItem], step: usize) {
    for job in [None, Some(JOBS[0]), Some(JOBS[1])] {
        let selected: Vec<&DeadLetteredItem> = stored
            .iter()
            .map(|s| &*s.item)
            .filter(|item| job.is_none_or(|j| item.job_id == j))
            .collect();
        let mut scan = StatsAccumulator::default();
        selected.iter().for_each(|item| scan.add(item));
        let mut want = scan.finish(job.map(str::to_owned));
        match stats(sink, job) {
            Ok(got) => {
                want.unpublished = got.unpublished;
                want.oldest_unpublished = got.oldest_unpublished;
                assert_eq!(got, want, "step {step}: stats of {job:?}");
            }
            Err(err) => {
                assert!(
                    err.is_not_found() && selected.is_empty(),
                    "step {step}: {err}"
                )
            }
        }
        let mut sorted: Vec<Cursor> = selected.iter().map(|item| Cursor::of(item)).collect();
        sorted.sort();
        let filter = Criteria {
            job_id: job.map(str::to_owned),
            ..Criteria::default()
        };
        let listed: Vec<Cursor> = in_listing_order(sink, &filter, None)
            .unwrap()
            .map(|item| Cursor::of(&item.unwrap()))
            .collect();
        assert_eq!(listed, sorted, "step {step}: listing order of {job:?}");
        let mut paged = Vec::new();
        let mut after = None;
        loop {
            let request = ListRequest {
                filter: filter.clone(),
                limit: 2,
                offset: 0,
                after: after.clone(),
                count: false,
            };
            let items = in_listing_order(sink, &filter, after.as_ref()).unwrap();
            let page = page_in_order(items, &request).unwrap();
            paged.extend(page.items.iter().map(Cursor::of));
            match page.next_cursor {
                Some(next) => after = Some(next),
                None => break,
            }
        }
        assert_eq!(paged, sorted, "step {step}: cursor paging of {job:?}");
    }
}

/// Runs one generated sequence against a fresh sink, checking after every step, then checks
/// that rebuild and reopen leave the projection byte-identical.
async fn run(ops: Vec<Op>) {
    let now = DateTime::<Utc>::from_timestamp(Utc::now().timestamp(), 0).unwrap();
    let dir = TempDir::new().unwrap();
    let mut config = SinkConfig::new(dir.path());
    config.capacity_per_job = CAPACITY as u64;
    let sink = LocalSink::open(config).unwrap();
    let (mut memory, mut model, mut next_seq) = (MemoryProjection::default(), Model::default(), 1);
    for (step, op) in ops.iter().enumerate() {
        let command = command(op, now);
        let expected = model.apply(&command);
        match (sink.append(command).await, expected) {
            (Ok(events), Some(want)) => {
                let got: Vec<String> = events.iter().map(brief).collect();
                assert_eq!(got, want, "step {step} ({op:?}): events");
                let seqs = next_seq..next_seq + events.len() as u64;
                assert!(events.iter().map(|e| e.seq).eq(seqs), "step {step}: seqs");
                next_seq += events.len() as u64;
                events.iter().for_each(|e| memory.apply(e));
            }
            (Err(SinkError::NotFound { .. }), None) => {}
            (got, want) => panic!("step {step} ({op:?}): got {got:?}, model says {want:?}"),
        }
        check(&sink, &memory, &model, step);
    }
    let log: Vec<Event> = sink.events_from(1).collect::<Result<_, _>>().unwrap();
    assert_eq!(log.len() as u64, next_seq - 1);
    let live = sink.projection_snapshot().unwrap();
    assert_eq!(sink.rebuild_projection().await.unwrap(), next_seq - 1);
    assert!(
        sink.projection_snapshot().unwrap() == live,
        "rebuild changed the projection"
    );
    sink.close().await.unwrap();
    drop(sink); // releases sled's directory lock
    let sink = LocalSink::open(SinkConfig::new(dir.path())).unwrap();
    assert!(
        sink.projection_snapshot().unwrap() == live,
        "reopen changed the projection"
    );
    check(&sink, &memory, &model, ops.len());
    sink.close().await.unwrap();
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 24,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    /// The sled sink agrees with the event-sourced and the hand-written model after every
    /// command; rebuild and reopen leave the projection byte-identical.
    #[test]
    fn local_sink_matches_both_models(ops in proptest::collection::vec(op(), 1..40)) {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        runtime.block_on(run(ops));
    }
}

/// A default sink in a new temporary directory.
fn fresh() -> (TempDir, LocalSink) {
    let dir = TempDir::new().unwrap();
    let sink = LocalSink::open(SinkConfig::new(dir.path())).unwrap();
    (dir, sink)
}

/// Floats in `item_data` survive storage exactly: the stored item equals the event-sourced
/// one, the log holds the event that append returned (and the emitter published), and a
/// rebuild is byte-identical to the live projection.
#[tokio::test]
async fn item_data_floats_survive_storage_exactly() {
    let (_dir, sink) = fresh();
    let mut item = item_at("job-a", "f", Utc::now(), ErrorType::Unknown, 1);
    item.item_data = serde_json::json!({ "weight": 985.6906946328695 });
    let events = sink.append(dead_letter(item)).await.unwrap();
    let mut memory = MemoryProjection::default();
    events.iter().for_each(|e| memory.apply(e));
    assert_eq!(items(&sink), memory.items.into_values().collect::<Vec<_>>());
    let log: Vec<Event> = sink.events_from(1).collect::<Result<_, _>>().unwrap();
    assert_eq!(log, events);
    let live = sink.projection_snapshot().unwrap();
    sink.rebuild_projection().await.unwrap();
    assert!(
        sink.projection_snapshot().unwrap() == live,
        "rebuild changed the projection"
    );
    sink.close().await.unwrap();
}

/// Both `StateView`s pick the same items to purge, at the age index's millisecond precision:
/// an item first failed in the cutoff's own millisecond is kept by both, one a millisecond
/// earlier is purged by both.
#[tokio::test]
async fn purge_cutoff_compares_whole_milliseconds_in_both_views() {
    let (_dir, sink) = fresh();
    let ms = DateTime::<Utc>::from_timestamp_millis(1_700_000_000_000).unwrap();
    let cutoff = ms + TimeDelta::microseconds(900);
    let same_ms = item_at(
        "job-a",
        "x",
        ms + TimeDelta::microseconds(100),
        ErrorType::Unknown,
        1,
    );
    let earlier = item_at(
        "job-a",
        "y",
        ms - TimeDelta::milliseconds(1),
        ErrorType::Unknown,
        1,
    );
    let mut memory = MemoryProjection::default();
    for item in [same_ms, earlier] {
        let events = sink.append(dead_letter(item)).await.unwrap();
        events.iter().for_each(|e| memory.apply(e));
    }
    let by_memory = memory.first_failed_before(cutoff, None, 10).unwrap();
    assert_eq!(by_memory, [("job-a".to_owned(), "y".to_owned())]);
    let (job_id, limit) = (None, 10);
    let purged = sink
        .append(Command::Purge {
            cutoff,
            job_id,
            limit,
            by: None,
        })
        .await
        .unwrap();
    assert_eq!(
        purged.iter().map(brief).collect::<Vec<_>>(),
        ["item_removed job-a/y"]
    );
    sink.close().await.unwrap();
}

/// `stats` names the oldest item by its exact first failure, also when several jobs' oldest
/// items share the age index's millisecond (it reads only those jobs' items), and a job whose
/// oldest millisecond is later never wins.
#[tokio::test]
async fn stats_finds_the_oldest_item_within_a_shared_millisecond() {
    let (_dir, sink) = fresh();
    let ms = DateTime::<Utc>::from_timestamp_millis(1_700_000_000_000).unwrap();
    let at = |job: &str, id: &str, micros: i64| {
        let first = ms + TimeDelta::microseconds(micros);
        item_at(job, id, first, ErrorType::Unknown, 1)
    };
    // job-a's oldest is in the shared millisecond but later in it than job-b's; job-c's is a
    // millisecond later; job-d's is in the millisecond at job-b's exact time (a tie: job-b, the
    // first in id order, keeps it).
    let items = [
        at("job-a", "a1", 700),
        at("job-a", "a2", 5_000),
        at("job-b", "b1", 200),
        at("job-c", "c1", 1_100),
        at("job-d", "d1", 200),
    ];
    let mut scan = StatsAccumulator::default();
    for item in items {
        scan.add(&item);
        sink.append(dead_letter(item)).await.unwrap();
    }
    let got = stats(&sink, None).unwrap();
    let oldest = got.oldest.clone().unwrap();
    assert_eq!(
        (oldest.item.job_id.as_str(), oldest.item.item_id.as_str()),
        ("job-b", "b1")
    );
    assert_eq!(oldest.at, ms + TimeDelta::microseconds(200));
    let mut want = scan.finish(None);
    want.unpublished = got.unpublished;
    want.oldest_unpublished = got.oldest_unpublished;
    assert_eq!(got, want);
    sink.close().await.unwrap();
}

/// A data directory whose projection has an older layout (no recency index, plain 8-byte job
/// counts, no format marker) is rebuilt from its log when opened: queries then answer from
/// the new indexes exactly as before the upgrade.
#[tokio::test]
async fn an_older_projection_layout_is_rebuilt_on_open() {
    let dir = TempDir::new().unwrap();
    let sink = LocalSink::open(SinkConfig::new(dir.path())).unwrap();
    let now = Utc::now();
    for n in 0..5u32 {
        let job = JOBS[n as usize % 2];
        let at = now - TimeDelta::minutes(i64::from(n));
        let item = item_at(job, &format!("it-{n}"), at, ErrorType::Timeout, n + 1);
        sink.append(dead_letter(item)).await.unwrap();
    }
    let before = stats(&sink, None).unwrap();
    let live = sink.projection_snapshot().unwrap();
    sink.close().await.unwrap();
    drop(sink);
    {
        // Turn the projection into the first layout's shape, as an older binary left it.
        let db = dlq_testkit::sled_db::open(dir.path());
        db.remove("m/projection_format").unwrap();
        for entry in db.scan_prefix("r") {
            db.remove(entry.unwrap().0).unwrap();
        }
        for job in JOBS {
            let count = db.get(format!("c{job}")).unwrap().unwrap();
            db.insert(format!("c{job}"), &count[..8]).unwrap();
        }
        db.flush().unwrap();
    }
    let sink = LocalSink::open(SinkConfig::new(dir.path())).unwrap();
    assert!(sink.projection_snapshot().unwrap() == live);
    let mut after = stats(&sink, None).unwrap();
    after.unpublished = before.unpublished;
    after.oldest_unpublished = before.oldest_unpublished;
    assert_eq!(after, before);
    assert_eq!(sink.job_len(JOBS[0]).unwrap(), 3);
    sink.close().await.unwrap();
}
