//! The export writers against fixed items: today's bytes, kept in `testdata/`, and what a
//! failure half-way leaves behind (nothing).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use super::*;
use dlq::domain::model::{DeadLetteredItem, ErrorType, FailureDetail, WorktreeArtifacts};

#[test]
fn file_names_round_trip_and_never_escape_the_directory() {
    for id in ["item-1", "a/b", "../x", ".hidden", "50%", "c:\\d", "ü.json"] {
        let name = file_name(id).unwrap();
        assert!(!name.contains('/') && !name.starts_with('.'), "{name}");
        assert_eq!(id_of_file_name(&name), id);
    }
    assert_eq!(file_name("item-123").unwrap(), "item-123");
}

fn at(text: &str) -> chrono::DateTime<Utc> {
    chrono::DateTime::parse_from_rfc3339(text)
        .unwrap()
        .with_timezone(&Utc)
}

fn failure(n: u32, time: &str, error_type: ErrorType, message: &str) -> FailureDetail {
    FailureDetail {
        attempt_number: n,
        timestamp: at(time),
        error_type,
        error_message: message.into(),
        stack_trace: (n == 2).then(|| "at main.rs:1\nat lib.rs:2".into()),
        agent_id: format!("agent-{n}"),
        step_failed: "shell: cargo test".into(),
        duration_ms: 4_500,
        json_log_location: None,
    }
}

/// Three items of two jobs, with what CSV has to quote (commas, quotes, new lines), non-ASCII
/// text, a nested `item_data`, worktree artifacts and an exit code.
fn fixture() -> Vec<DeadLetteredItem> {
    let a1 = DeadLetteredItem::new(
        "job-a",
        "item-1",
        serde_json::json!({"path": "src/a.rs", "n": 1, "tags": ["x", "y"]}),
        vec![
            failure(
                1,
                "2025-01-11T10:30:00Z",
                ErrorType::Timeout,
                "timed out after 30s",
            ),
            failure(
                2,
                "2025-01-11T10:45:12.345Z",
                ErrorType::CommandFailed { exit_code: 101 },
                "exit status 101, \"assertion failed\"\nleft: 1",
            ),
        ],
    )
    .map(|item| {
        item.with_artifacts(WorktreeArtifacts {
            worktree_path: "/tmp/wt/item-1".into(),
            branch_name: "agent-2".into(),
            uncommitted_changes: None,
            error_logs: Some("error: ü".into()),
        })
    });
    let a2 = DeadLetteredItem::new(
        "job-a",
        "item-2",
        serde_json::json!("plain"),
        vec![failure(
            1,
            "2025-01-12T00:00:00Z",
            ErrorType::Unknown,
            "crème brûlée, burnt",
        )],
    );
    let b1 = DeadLetteredItem::new(
        "job-b",
        "item,1",
        serde_json::json!(null),
        vec![failure(
            1,
            "2025-01-13T08:00:00.000000001Z",
            ErrorType::Timeout,
            "deadline",
        )],
    );
    [a1, a2, b1].into_iter().map(Result::unwrap).collect()
}

/// Exports the fixture to `dir/name` in `format` and returns the bytes written.
fn exported(dir: &Path, name: &str, format: ExportFormat) -> Vec<u8> {
    let path = dir.join(name);
    let report = write_atomically(&path, format, fixture().into_iter().map(Ok)).unwrap();
    assert_eq!((report.items, report.jobs), (3, 2));
    std::fs::read(&path).unwrap()
}

/// The files, written item by item as the sink's scan yields them, are byte for byte the
/// recorded exports (`testdata/`, written by the writers of commit 64228bf), and the streamed
/// JSON array is valid JSON (also when empty).
#[test]
fn streamed_files_are_byte_identical_to_the_recorded_exports() {
    let dir = tempfile::tempdir().unwrap();
    let cases = [
        (
            "small.json",
            ExportFormat::Json,
            &include_bytes!("testdata/small.json")[..],
        ),
        (
            "small.jsonl",
            ExportFormat::Jsonl,
            &include_bytes!("testdata/small.jsonl")[..],
        ),
        (
            "small.csv",
            ExportFormat::Csv,
            &include_bytes!("testdata/small.csv")[..],
        ),
    ];
    for (name, format, expected) in cases {
        let bytes = exported(dir.path(), name, format);
        assert!(
            bytes == expected,
            "{name} differs from the recorded export:\n{}",
            String::from_utf8_lossy(&bytes)
        );
    }
    let array: Vec<DeadLetteredItem> =
        serde_json::from_slice(include_bytes!("testdata/small.json")).unwrap();
    assert_eq!(array, fixture());
    let empty = dir.path().join("empty.json");
    write_atomically(&empty, ExportFormat::Json, std::iter::empty()).unwrap();
    let none: Vec<DeadLetteredItem> =
        serde_json::from_slice(&std::fs::read(&empty).unwrap()).unwrap();
    assert!(none.is_empty());
}

/// A failure after some items were written ends in an error that names the export, its
/// class is the cause's, and neither the target nor a temporary file is left.
#[test]
fn a_failure_mid_stream_leaves_no_file_and_says_so() {
    let dir = tempfile::tempdir().unwrap();
    for format in [
        ExportFormat::Json,
        ExportFormat::Jsonl,
        ExportFormat::Csv,
        ExportFormat::Dir,
    ] {
        let path = dir.path().join(format!("out-{format:?}"));
        let items = fixture()
            .into_iter()
            .map(Ok)
            .take(2)
            .chain([Err(QueryError::Invalid("record 3 is corrupt".into()))]);
        let err = write_atomically(&path, format, items).unwrap_err();
        let text = err.to_string();
        assert!(
            text.contains("after 2 items") && text.contains("record 3 is corrupt"),
            "{text}"
        );
        assert!(text.contains("nothing was written"), "{text}");
        assert_eq!(err.class(), dlq::ErrorClass::Usage, "the cause's class");
        assert!(!path.exists(), "{format:?}: a partial export was left");
    }
    let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
    assert!(left.is_empty(), "temporary files left: {left:?}");
}
