//! Group commit decides each command on the state the commands before it in the same group
//! left, exactly as if they had run one by one.
//!
//! Random commands are appended concurrently while the writer is paused, so they land in large
//! groups. Replaying them in the order of their sequence numbers through `decide` on an
//! in-memory projection must give exactly the events the sink wrote, and the sink's items must
//! equal that projection and a rebuild from the log. The writer's own count of group commits
//! (the metric `dlq_sink_group_commits_total`) shows that groups did form, and the only
//! refusals are removals of items that were gone.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use chrono::{TimeDelta, Utc};
use dlq::domain::command::{decide, Command, Limits};
use dlq::domain::event::{Event, RemovalReason};
use dlq::domain::model::{DeadLetteredItem, ErrorType, FailureDetail};
use dlq::domain::projection::{MemoryProjection, StateView};
use dlq::sink::{LocalSink, Sink, SinkConfig, SinkError};
use dlq_testkit::group_commits;
use proptest::prelude::*;

const CAPACITY: u64 = 3;

static INSTALL: std::sync::Once = std::sync::Once::new();

#[derive(Debug, Clone)]
enum Op {
    Fail { job: u8, item: u8, days_ago: i64 },
    Remove { job: u8, item: u8 },
    Clear { job: u8 },
    Purge,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (0..2u8, 0..8u8, 0..60i64).prop_map(|(job, item, days_ago)| Op::Fail { job, item, days_ago }),
        2 => (0..2u8, 0..8u8).prop_map(|(job, item)| Op::Remove { job, item }),
        1 => (0..2u8).prop_map(|job| Op::Clear { job }),
        1 => Just(Op::Purge),
    ]
}

fn command(op: &Op) -> Command {
    let job = |j: &u8| format!("job-{j}");
    match op {
        Op::Fail {
            job: j,
            item,
            days_ago,
        } => {
            let at = Utc::now() - TimeDelta::days(*days_ago);
            let failure = FailureDetail {
                attempt_number: 1,
                timestamp: at,
                error_type: ErrorType::Unknown,
                error_message: format!("failure {days_ago}"),
                stack_trace: None,
                agent_id: "a".into(),
                step_failed: "shell: false".into(),
                duration_ms: 1,
                json_log_location: None,
            };
            let item = DeadLetteredItem::new(
                &job(j),
                &format!("i{item}"),
                serde_json::Value::Null,
                vec![failure],
            )
            .unwrap();
            Command::DeadLetter {
                topic: "t".into(),
                item: item.into(),
            }
        }
        Op::Remove { job: j, item } => Command::Remove {
            job_id: job(j),
            item_id: format!("i{item}"),
            reason: RemovalReason::Resolved,
            by: None,
        },
        Op::Clear { job: j } => Command::Clear {
            job_id: job(j),
            limit: 2,
            by: None,
        },
        Op::Purge => Command::Purge {
            cutoff: Utc::now() - TimeDelta::days(30),
            job_id: None,
            limit: 2,
            by: None,
        },
    }
}

/// What an event says, without its sequence and timestamp.
fn gist(event: &Event) -> String {
    let mut value = serde_json::to_value(event).unwrap();
    let object = value.as_object_mut().unwrap();
    for volatile in [
        "event_id",
        "seq",
        "timestamp",
        "node_id",
        "epoch",
        "prev_epoch",
        "prev_seq",
    ] {
        object.remove(volatile);
    }
    value.to_string()
}

async fn run(ops: Vec<Op>) {
    let dir = tempfile::tempdir().unwrap();
    let config = SinkConfig {
        capacity_per_job: CAPACITY,
        ..SinkConfig::new(dir.path())
    };
    let sink = LocalSink::open(config).unwrap();
    // Every append is sent while the writer is paused (one poll of all of them, back to back,
    // so no timing decides the groups): the first group holds what the writer took before it
    // saw the pause, the second all the rest.
    sink.faults().set_paused(true);
    let appends: Vec<_> = ops
        .iter()
        .map(|op| {
            let (sink, command) = (sink.clone(), command(op));
            async move { (command.clone(), sink.append(command).await) }
        })
        .collect();
    let groups_before = group_commits::count();
    let mut all = Box::pin(futures::future::join_all(appends));
    assert!(
        futures::poll!(&mut all).is_pending(),
        "an append answered while the writer was paused"
    );
    sink.faults().set_paused(false);
    let mut done = Vec::new();
    for (command, result) in all.await {
        match result {
            Ok(events) if events.is_empty() => {}
            Ok(events) => done.push((command, events)),
            // Removing an item that an earlier command removed or evicted is refused.
            Err(SinkError::NotFound { .. }) if matches!(command, Command::Remove { .. }) => {}
            Err(err) => panic!("{command:?} failed: {err}"),
        }
    }
    let groups = group_commits::count() - groups_before;
    // Every command that stored events needed a group commit: fewer commits means groups. At
    // most two groups hold them, so from three such commands on, fewer commits is certain.
    // Commands that stored nothing (removals of absent items, clears and purges of empty
    // jobs: about one case in 3,000 holds only those) commit nothing.
    if done.is_empty() {
        assert_eq!(groups, 0, "group commits for commands that stored nothing");
    } else {
        assert!(
            groups > 0 && (done.len() < 3 || groups < done.len() as u64),
            "no group formed: {groups} group commits for {} commands that stored events",
            done.len()
        );
    }

    // Sequential replay in the order the writer chose.
    done.sort_by_key(|(_, events)| events[0].seq);
    let mut memory = MemoryProjection::default();
    let limits = Limits {
        capacity_per_job: CAPACITY,
    };
    for (command, events) in &done {
        let drafts = decide(&memory, command.clone(), limits).unwrap();
        let expected: Vec<String> = drafts
            .into_iter()
            .map(|d| {
                let probe = Event {
                    event_id: String::new(),
                    node_id: String::new(),
                    seq: 0,
                    epoch: None,
                    prev_epoch: None,
                    prev_seq: None,
                    timestamp: Utc::now(),
                    job_id: d.job_id,
                    topic: d.topic,
                    kind: d.kind,
                };
                gist(&probe)
            })
            .collect();
        let got: Vec<String> = events.iter().map(gist).collect();
        assert_eq!(
            got, expected,
            "group commit decided {command:?} differently"
        );
        events.iter().for_each(|e| memory.apply(e));
    }
    let stored: Vec<_> = sink.items().map(|i| i.unwrap()).collect();
    let modelled: Vec<_> = memory.items.values().cloned().collect();
    assert_eq!(stored, modelled);
    for job in ["job-0", "job-1"] {
        assert!(sink.job_len(job).unwrap() <= CAPACITY);
        assert_eq!(sink.job_len(job).unwrap(), memory.job_len(job).unwrap());
    }
    let live = sink.projection_snapshot().unwrap();
    sink.rebuild_projection().await.unwrap();
    assert!(
        live == sink.projection_snapshot().unwrap(),
        "rebuild differs"
    );
    sink.close().await.unwrap();
}

/// The group commit counter counts every sink of the process: the tests of this file run
/// one at a time.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn block_on(ops: Vec<Op>) {
    let _alone = ONE_AT_A_TIME
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    INSTALL.call_once(group_commits::install);
    runtime.block_on(run(ops));
}

/// Found by the property below (CI loop, 2026-11-27): commands that store nothing commit no
/// group, and that is no failure of group commit.
#[test]
fn commands_that_store_nothing_commit_no_group() {
    let mut ops = vec![Op::Remove { job: 0, item: 0 }; 5];
    ops.extend([Op::Clear { job: 1 }, Op::Purge]);
    block_on(ops);
}

/// `dlq_sink_group_commits_total` counts one per group made durable: appends awaited one by
/// one are one group each, and an append the sink refuses (nothing to store) commits none.
#[test]
fn the_metric_counts_each_durable_group_once() {
    let _alone = ONE_AT_A_TIME
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    INSTALL.call_once(group_commits::install);
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let sink = LocalSink::open(SinkConfig::new(dir.path())).unwrap();
        let before = group_commits::count();
        for item in 0..4 {
            let op = Op::Fail {
                job: 0,
                item,
                days_ago: 0,
            };
            sink.append(command(&op)).await.unwrap();
        }
        let absent = Op::Remove { job: 1, item: 0 };
        assert!(sink.append(command(&absent)).await.is_err());
        assert_eq!(group_commits::count() - before, 4);
        sink.close().await.unwrap();
    });
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn concurrent_groups_equal_sequential_decisions(ops in prop::collection::vec(op(), 5..60)) {
        block_on(ops);
    }
}
