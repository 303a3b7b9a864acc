#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::io::Write;

use serde_json::json;

use super::*;

fn record(job_id: &str) -> JobRecord {
    let workflow = Workflow::parse(
        "name: t\nmode: mapreduce\nmap:\n  input: items.json\n  agent_template:\n    - shell: \"true\"\n",
    )
    .unwrap();
    JobRecord {
        job_id: job_id.into(),
        workflow,
        workflow_path: "/w/flow.yml".into(),
        base_dir: "/w".into(),
        created_at: Utc::now(),
        items: vec![WorkItem {
            id: "a".into(),
            data: json!({"id": "a"}),
        }],
    }
}

fn outcome(item: &str, outcome: Outcome) -> OutcomeRecord {
    OutcomeRecord {
        item_id: item.into(),
        outcome,
        attempts: 1,
        at: Utc::now(),
        error_type: None,
        error: None,
    }
}

#[test]
fn create_open_and_outcomes_round_trip() {
    let dir = tempfile::tempdir().unwrap();
    let store = JobStore::create(dir.path(), &record("job-1")).unwrap();
    store
        .append_outcome(&outcome("a", Outcome::Succeeded))
        .unwrap();
    store.append_event(JobEventKind::SetupCompleted).unwrap();
    drop(store);
    let (store, back) = JobStore::open(dir.path(), "job-1").unwrap();
    assert_eq!(back, record_with_time(&back));
    assert_eq!(
        store.outcomes().unwrap(),
        vec![outcome_at("a", Outcome::Succeeded, &store)]
    );
    assert_eq!(store.events().unwrap().len(), 1);
    assert_eq!(list_jobs(dir.path()).unwrap(), ["job-1"]);
}

fn record_with_time(back: &JobRecord) -> JobRecord {
    JobRecord {
        created_at: back.created_at,
        ..record("job-1")
    }
}

fn outcome_at(item: &str, kind: Outcome, store: &JobStore) -> OutcomeRecord {
    OutcomeRecord {
        at: store.outcomes().unwrap()[0].at,
        ..outcome(item, kind)
    }
}

#[test]
fn creating_an_existing_job_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    JobStore::create(dir.path(), &record("job-1")).unwrap();
    let err = JobStore::create(dir.path(), &record("job-1")).unwrap_err();
    assert!(matches!(err, RunError::JobExists(_)), "{err}");
}

#[test]
fn unknown_and_hostile_job_ids_are_errors() {
    let dir = tempfile::tempdir().unwrap();
    assert!(matches!(
        JobStore::open(dir.path(), "nope").unwrap_err(),
        RunError::JobNotFound { .. }
    ));
    for bad in ["", "../x", ".hidden", "a/b", "a b", &"x".repeat(129)] {
        assert!(
            matches!(
                JobStore::open(dir.path(), bad).unwrap_err(),
                RunError::BadJobId(_)
            ),
            "{bad:?}"
        );
    }
}

#[test]
fn a_torn_last_line_is_cut_and_appends_continue() {
    let dir = tempfile::tempdir().unwrap();
    let store = JobStore::create(dir.path(), &record("job-1")).unwrap();
    store
        .append_outcome(&outcome("a", Outcome::Succeeded))
        .unwrap();
    let path = store.dir().join("outcomes.jsonl");
    drop(store);
    let mut file = OpenOptions::new().append(true).open(&path).unwrap();
    file.write_all(b"{\"item_id\":\"b\",\"outc").unwrap();
    drop(file);
    let (store, _) = JobStore::open(dir.path(), "job-1").unwrap();
    store
        .append_outcome(&outcome("c", Outcome::Skipped))
        .unwrap();
    let ids: Vec<String> = store
        .outcomes()
        .unwrap()
        .into_iter()
        .map(|o| o.item_id)
        .collect();
    assert_eq!(ids, ["a", "c"]);
}

#[test]
fn a_corrupt_complete_line_is_an_error_not_a_skip() {
    let dir = tempfile::tempdir().unwrap();
    let store = JobStore::create(dir.path(), &record("job-1")).unwrap();
    let path = store.dir().join("outcomes.jsonl");
    fs::write(&path, b"not json\n").unwrap();
    let err = store.outcomes().unwrap_err();
    assert!(matches!(err, RunError::Corrupt { .. }), "{err}");
    assert!(err.to_string().contains("line 1"), "{err}");
}

#[test]
fn agent_dirs_are_safe_and_distinct() {
    let a = agent_dir_name("../../etc/passwd");
    let b = agent_dir_name("__.._etc_passwd");
    assert!(!a.contains('/') && !a.contains(".."), "{a}");
    assert_ne!(a, b);
    assert_eq!(agent_dir_name("item-1"), agent_dir_name("item-1"));
}
