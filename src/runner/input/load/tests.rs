#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::Path;

use serde_json::json;

use super::*;

#[tokio::test]
async fn load_input_from_a_file_relative_to_base_dir() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("data")).unwrap();
    std::fs::write(
        dir.path().join("data/items.json"),
        r#"{"items": [{"id": 1}]}"#,
    )
    .unwrap();
    let doc = load_input(
        InputSource::File(Path::new("data/items.json")),
        dir.path(),
        &BTreeMap::new(),
    )
    .await
    .unwrap();
    assert_eq!(doc, json!({"items": [{"id": 1}]}));

    let missing = load_input(
        InputSource::File(Path::new("nope.json")),
        dir.path(),
        &BTreeMap::new(),
    )
    .await;
    match missing {
        Err(e @ InputError::ReadFile { .. }) => assert!(e.to_string().contains("nope.json"), "{e}"),
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn load_input_reports_where_a_file_is_not_json() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("bad.json"), "{\"items\": [1, 2,\n  oops]}").unwrap();
    match load_input(
        InputSource::File(Path::new("bad.json")),
        dir.path(),
        &BTreeMap::new(),
    )
    .await
    {
        Err(
            e @ InputError::NotJson {
                line: 2, column: 3, ..
            },
        ) => {
            let text = e.to_string();
            assert!(text.contains("bad.json"), "{text}");
            assert!(text.contains("line 2, column 3"), "{text}");
            assert!(
                text.contains(r#"starts with "{\"items\": [1, 2,\n  oops]}""#),
                "{text}"
            );
        }
        other => panic!("{other:?}"),
    }
    std::fs::write(dir.path().join("empty.json"), "  \n").unwrap();
    match load_input(
        InputSource::File(Path::new("empty.json")),
        dir.path(),
        &BTreeMap::new(),
    )
    .await
    {
        Err(e @ InputError::NotJson { .. }) => {
            assert!(e.to_string().contains("it is empty"), "{e}")
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn load_input_from_a_command_in_base_dir_with_env() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("marker"), "here").unwrap();
    let env = BTreeMap::from([("DLQ_TEST_N".to_string(), "3".to_string())]);
    let doc = load_input(
        InputSource::Command(r#"printf '[{"n": %s, "file": "%s"}]' "$DLQ_TEST_N" "$(cat marker)""#),
        dir.path(),
        &env,
    )
    .await
    .unwrap();
    assert_eq!(doc, json!([{"n": 3, "file": "here"}]));
}

#[tokio::test]
async fn failing_command_reports_exit_code_and_stderr_tail() {
    let dir = tempfile::tempdir().unwrap();
    let result = load_input(
        InputSource::Command("echo '[1]'; echo first >&2; echo 'no such table' >&2; exit 3"),
        dir.path(),
        &BTreeMap::new(),
    )
    .await;
    match result {
        Err(e @ InputError::CommandFailed { .. }) => {
            let text = e.to_string();
            assert!(text.contains("exited with code 3"), "{text}");
            assert!(text.contains("no such table"), "{text}");
        }
        other => panic!("{other:?}"),
    }
    // Only the tail of a long stderr is kept.
    let result = load_input(
        InputSource::Command(
            "i=0; while [ $i -lt 2000 ]; do echo line-$i >&2; i=$((i+1)); done; exit 1",
        ),
        dir.path(),
        &BTreeMap::new(),
    )
    .await;
    match result {
        Err(InputError::CommandFailed { stderr_tail, .. }) => {
            assert!(stderr_tail.ends_with("line-1999"), "{stderr_tail}");
            assert!(!stderr_tail.contains("line-0\n"), "{stderr_tail}");
            assert!(stderr_tail.len() <= STDERR_TAIL_BYTES);
        }
        other => panic!("{other:?}"),
    }
    let killed = load_input(
        InputSource::Command("kill -9 $$"),
        dir.path(),
        &BTreeMap::new(),
    )
    .await;
    match killed {
        Err(e @ InputError::CommandFailed { .. }) => {
            assert!(e.to_string().contains("killed by signal 9"), "{e}")
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn non_json_command_output_names_its_first_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let result = load_input(
        InputSource::Command("echo 'Error: connection refused'"),
        dir.path(),
        &BTreeMap::new(),
    )
    .await;
    match result {
        Err(
            e @ InputError::NotJson {
                line: 1, column: 1, ..
            },
        ) => {
            let text = e.to_string();
            assert!(text.contains("input command `echo"), "{text}");
            assert!(text.contains("\"Error: connection refused\\n\""), "{text}");
        }
        other => panic!("{other:?}"),
    }
    match load_input(InputSource::Command("true"), dir.path(), &BTreeMap::new()).await {
        Err(e @ InputError::NotJson { .. }) => {
            assert!(e.to_string().contains("it is empty"), "{e}")
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn background_processes_left_by_the_command_do_not_hang_the_read() {
    let dir = tempfile::tempdir().unwrap();
    // The background sleep inherits stdout; the shell exits at once. Without killing the
    // group, reading stdout to its end would wait for the sleep.
    let doc = load_input(
        InputSource::Command("sleep 1000 & echo '[1, 2]'"),
        dir.path(),
        &BTreeMap::new(),
    )
    .await
    .unwrap();
    assert_eq!(doc, json!([1, 2]));
}

#[tokio::test]
async fn read_bounded_flags_overflow() {
    let (bytes, overflow) = read_bounded(&b"abcdef"[..], 4).await.unwrap();
    assert_eq!((bytes.as_slice(), overflow), (&b"abcd"[..], true));
    let (bytes, overflow) = read_bounded(&b"abcd"[..], 4).await.unwrap();
    assert_eq!((bytes.as_slice(), overflow), (&b"abcd"[..], false));
    let tail = read_tail(&b"0123456789"[..], 3).await;
    assert_eq!(tail, b"789");
}
