//! The read-only operator commands and export/import, end to end through the `dlq` binary:
//! list (filters, paging, order, formats), inspect, stats, analyze, export in every format and
//! import back, import of the legacy layout (one JSON file per item), and malformed input.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use dlq_testkit::cli::{failure, listed_ids, Env};
use dlq_testkit::reference::{reference_item, write_reference_job};
use dlq_testkit::DEAD_BUS_URL;
use serde_json::Value;

/// The `dlq` binary under test.
const DLQ: &str = env!("CARGO_BIN_EXE_dlq");

fn no_bus() -> String {
    DEAD_BUS_URL.to_owned()
}

#[tokio::test]
async fn list_filters_pages_newest_first_in_every_format() {
    let env = Env::new(DLQ, &no_bus());
    env.demo("j1", 12);
    env.demo("j2", 3);

    let first = env.json(&["list", "--limit", "5"]);
    assert_eq!(first["matched"], 15);
    let ids = listed_ids(&first);
    assert_eq!(
        ids,
        [
            "j2/item-2",
            "j2/item-1",
            "j2/item-0",
            "j1/item-11",
            "j1/item-10"
        ]
    );
    let times: Vec<&str> = first["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["last_attempt"].as_str().unwrap())
        .collect();
    assert!(
        times.windows(2).all(|w| w[0] >= w[1]),
        "newest first: {times:?}"
    );

    let cursor = first["next_cursor"].as_str().unwrap();
    let second = env.json(&["list", "--limit", "5", "--after", cursor]);
    let by_offset = env.json(&["list", "--limit", "5", "--offset", "5"]);
    assert_eq!(listed_ids(&second), listed_ids(&by_offset));
    assert_eq!(listed_ids(&second)[0], "j1/item-9");
    let last = env.json(&["list", "--limit", "5", "--offset", "10"]);
    assert_eq!(listed_ids(&last).len(), 5);
    assert!(last["next_cursor"].is_null());
    assert_eq!(listed_ids(&env.json(&["list", "--limit", "100"])).len(), 15);

    // Filters. Demo cycles 5 templates: item n has template n % 5 (1 = timeout).
    assert_eq!(
        listed_ids(&env.json(&["list", "--job-id", "j2"])),
        ["j2/item-2", "j2/item-1", "j2/item-0"]
    );
    let timeouts = env.json(&["list", "--error-type", "timeout"]);
    assert_eq!(
        listed_ids(&timeouts),
        ["j2/item-1", "j1/item-11", "j1/item-6", "j1/item-1"]
    );
    let eligible = env.json(&["list", "--eligible", "--limit", "100"]);
    assert_eq!(
        eligible["matched"], 10,
        "CommandFailed, Timeout, ResourceExhausted are eligible"
    );
    assert!(eligible["items"]
        .as_array()
        .unwrap()
        .iter()
        .all(|i| i["reprocess_eligible"] == true));
    let signature = timeouts["items"][0]["error_signature"].as_str().unwrap();
    assert_eq!(env.json(&["list", "--signature", signature])["matched"], 4);
    assert_eq!(env.json(&["list", "--since", "1h"])["matched"], 15);
    assert_eq!(env.json(&["list", "--until", "1h"])["matched"], 0);

    // `matched` comes from the per-job counters where they know it; a walk that stopped early
    // under a filter they cannot answer leaves it unknown unless --count is given.
    let eligible_page = env.json(&["list", "--eligible", "--limit", "2"]);
    assert_eq!(eligible_page["matched"], 10);
    assert_eq!(
        env.json(&["list", "--error-type", "timeout", "--limit", "1"])["matched"],
        4
    );
    let by_signature = ["list", "--signature", signature, "--limit", "1"];
    assert!(env.json(&by_signature)["matched"].is_null());
    let mut counted = by_signature.to_vec();
    counted.push("--count");
    let counted = env.json(&counted);
    assert_eq!(counted["matched"], 4);
    assert_eq!(listed_ids(&counted), ["j2/item-1"]);

    // Other formats: JSON Lines (one summary per line) and CSV (header + rows).
    let jsonl = env.run(&[
        "--format", "jsonl", "list", "--job-id", "j1", "--limit", "4",
    ]);
    let lines: Vec<Value> = String::from_utf8(jsonl.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 4);
    assert_eq!(lines[0]["item_id"], "item-11");
    let csv = env.run(&["--format", "csv", "list", "--job-id", "j2"]);
    let mut reader = csv::Reader::from_reader(&csv.stdout[..]);
    assert_eq!(reader.headers().unwrap().len(), 17);
    assert_eq!(reader.records().count(), 3);

    // Bad arguments are usage errors that say what is wrong.
    for (args, needle) in [
        (vec!["list", "--error-type", "Timeot"], "unknown error type"),
        (vec!["list", "--since", "someday"], "cannot read time"),
        (vec!["list", "--after", "zz"], "malformed cursor"),
        (vec!["list", "--offset", "100000"], "--after"),
    ] {
        let (code, stderr) = failure(&env.run(&args));
        assert_eq!(code, Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(needle), "{args:?}: {stderr}");
    }
}

#[tokio::test]
async fn inspect_finds_items_and_reports_unknown_and_ambiguous_ids() {
    let env = Env::new(DLQ, &no_bus());
    env.demo("j1", 3);
    env.demo("j2", 1);
    let item = env.json(&["inspect", "item-2"]);
    assert_eq!(item["job_id"], "j1");
    assert_eq!(
        item["failure_history"][0]["error_message"],
        "permission denied: /srv/repo/2/.git/index.lock"
    );
    assert!(item["failure_history"][0]["stack_trace"].is_string());
    let in_job = env.json(&["inspect", "item-0", "--job-id", "j2"]);
    assert_eq!(in_job["job_id"], "j2");
    let stored = env
        .items()
        .await
        .into_iter()
        .find(|i| i.job_id == "j2")
        .unwrap();
    assert_eq!(in_job, serde_json::to_value(&stored).unwrap());

    let (code, stderr) = failure(&env.run(&["inspect", "item-0"]));
    assert_eq!(code, Some(2));
    assert!(
        stderr.contains("j1, j2") && stderr.contains("--job-id"),
        "{stderr}"
    );
    let (code, stderr) = failure(&env.run(&["inspect", "item-77"]));
    assert_eq!(code, Some(3));
    assert!(stderr.contains("item 'item-77' not found"), "{stderr}");
    let (code, _) = failure(&env.run(&["inspect", "item-2", "--job-id", "j2"]));
    assert_eq!(code, Some(3));
}

#[tokio::test]
async fn stats_and_analyze_count_what_is_in_the_sink() {
    let env = Env::new(DLQ, &no_bus());
    env.demo("j1", 10);
    env.demo("j2", 2);
    let stats = env.json(&["stats", "--job-id", "j1"]);
    assert_eq!(stats["total_items"], 10);
    assert_eq!(stats["total_failures"], 10);
    assert_eq!(stats["average_failure_count"], 1.0);
    for kind in [
        "CommandFailed",
        "Timeout",
        "PermissionError",
        "ResourceExhausted",
        "MergeConflict",
    ] {
        assert_eq!(stats["by_error_type"][kind], 2, "{kind}");
    }
    assert_eq!(stats["reprocess_eligible"], 6);
    assert_eq!(stats["manual_review_required"], 4);
    assert_eq!(stats["oldest"]["item_id"], "item-0");
    assert_eq!(stats["newest"]["item_id"], "item-9");
    assert_eq!(
        stats["unpublished"], 12,
        "12 items stored without a publish attempt, no bus"
    );
    let all = env.json(&["stats"]);
    assert_eq!(all["total_items"], 12);
    assert_eq!(all["jobs"]["j2"], 2);
    assert_eq!(failure(&env.run(&["stats", "--job-id", "nope"])).0, Some(3));

    let export = env.path("analysis.json");
    let analysis = env.json(&[
        "analyze",
        "--job-id",
        "j1",
        "--export",
        export.to_str().unwrap(),
    ]);
    let exported: Value = serde_json::from_slice(&std::fs::read(&export).unwrap()).unwrap();
    assert_eq!(analysis, exported);
    let groups = analysis["pattern_groups"].as_array().unwrap();
    assert_eq!(groups.len(), 5, "one group per demo template");
    for group in groups {
        assert_eq!(group["count"], 2);
        assert_eq!(group["sample_ids"].as_array().unwrap().len(), 2);
        assert!(!group["remediation"].as_str().unwrap().is_empty());
        assert!(group["error_pattern"].as_str().unwrap().contains("::"));
        assert!(group["first_seen"].as_str().unwrap() <= group["last_seen"].as_str().unwrap());
    }
    let timeouts = groups
        .iter()
        .find(|g| g["error_type"] == "Timeout")
        .unwrap();
    assert_eq!(
        timeouts["representative_message"],
        "agent timed out after 6s"
    );
    assert_eq!(analysis["error_distribution"].as_array().unwrap().len(), 5);
    let hours = analysis["temporal_distribution"].as_array().unwrap();
    assert_eq!(
        hours
            .iter()
            .map(|h| h["failures"].as_u64().unwrap())
            .sum::<u64>(),
        10
    );
    let table = env.run(&["--format", "table", "analyze"]);
    let text = String::from_utf8(table.stdout).unwrap();
    assert!(text.contains("PATTERNS") && text.contains('#'), "{text}");
}

#[tokio::test]
async fn export_in_every_format_and_import_gives_the_same_items() {
    let env = Env::new(DLQ, &no_bus());
    env.demo("j1", 7);
    env.demo("j2", 3);
    let original = env.items().await;
    for format in ["json", "jsonl", "dir"] {
        let path = env.path(&format!("out.{format}"));
        let report = env.json(&["--format", format, "export", path.to_str().unwrap()]);
        assert_eq!(report["items"], 10);
        assert_eq!(report["jobs"], 2);
        let fresh = Env::new(DLQ, &env.url);
        let imported = fresh.json(&["import", path.to_str().unwrap(), "--drain-timeout", "0s"]);
        assert_eq!(imported["imported"], 10, "{format}");
        assert_eq!(fresh.items().await, original, "{format}");
        let again = fresh.json(&["import", path.to_str().unwrap(), "--drain-timeout", "0s"]);
        assert_eq!(
            (
                again["imported"].as_u64(),
                again["skipped_existing"].as_u64()
            ),
            (Some(0), Some(10))
        );
        let dead_lettered = fresh
            .events()
            .await
            .iter()
            .filter(|e| e.kind.name() == "dead_lettered")
            .count();
        assert_eq!(dead_lettered, 10, "each imported item is one event");
    }
    let dir = env.path("out.dir");
    let index: Value =
        serde_json::from_slice(&std::fs::read(dir.join("j2/index.json")).unwrap()).unwrap();
    assert_eq!(index["item_count"], 3);
    assert_eq!(
        index["item_ids"],
        serde_json::json!(["item-0", "item-1", "item-2"])
    );
    let item: Value =
        serde_json::from_slice(&std::fs::read(dir.join("j2/items/item-1.json")).unwrap()).unwrap();
    assert_eq!(item["failure_history"][0]["error_type"], "Timeout");

    // CSV: stable header, one row per item; the format follows the extension by default.
    let csv_path = env.path("out.csv");
    let out = env.run(&[
        "--format",
        "table",
        "export",
        csv_path.to_str().unwrap(),
        "--job-id",
        "j1",
    ]);
    assert!(out.status.success());
    let mut reader = csv::Reader::from_path(&csv_path).unwrap();
    let header: Vec<String> = reader
        .headers()
        .unwrap()
        .iter()
        .map(str::to_owned)
        .collect();
    assert_eq!(
        &header[..6],
        [
            "job_id",
            "item_id",
            "first_attempt",
            "last_attempt",
            "failure_count",
            "error_type"
        ]
    );
    let rows: Vec<csv::StringRecord> = reader.records().map(|r| r.unwrap()).collect();
    assert_eq!(rows.len(), 7);
    assert_eq!(&rows[0][0], "j1");
    assert_eq!(&rows[0][6], "101", "exit code of CommandFailed");

    // A dir export never overwrites a non-empty directory, and leaves no temporary behind.
    let (code, stderr) = failure(&env.run(&["--format", "dir", "export", dir.to_str().unwrap()]));
    assert_eq!(code, Some(2), "{stderr}");
    let leftovers = std::fs::read_dir(env.work.path())
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .file_name()
                .to_string_lossy()
                .contains(".tmp-")
        })
        .count();
    assert_eq!(leftovers, 0);
    assert_eq!(
        failure(&env.run(&[
            "export",
            env.path("x.json").to_str().unwrap(),
            "--job-id",
            "nope"
        ]))
        .0,
        Some(3)
    );
}

#[tokio::test]
async fn imports_reference_000_layout_and_filters_by_time() {
    let env = Env::new(DLQ, &no_bus());
    let root = env.path("prodigy");
    let job_dir = root.join("repo/mapreduce-1/mapreduce/dlq/mapreduce-1");
    let items = [
        reference_item("item-123", 1, 0),
        reference_item("item-456", 3, 0),
        reference_item("item-789", 5, 0),
    ];
    write_reference_job(&job_dir, "mapreduce-1", &items);
    let report = env.json(&["import", root.to_str().unwrap(), "--drain-timeout", "0s"]);
    assert_eq!(report["imported"], 3);
    assert_eq!(report["jobs"]["mapreduce-1"], 3);

    let item = env.json(&["inspect", "item-123"]);
    assert_eq!(item["job_id"], "mapreduce-1");
    assert_eq!(
        item["failure_history"][0]["json_log_location"],
        "/logs/session-item-123.json"
    );
    assert_eq!(item["worktree_artifacts"]["branch_name"], "agent-1");
    assert_eq!(
        item["error_signature"].as_str().unwrap().len(),
        16,
        "our signature replaces theirs"
    );
    assert_eq!(
        item["error_pattern"],
        "CommandFailed::cargo test failed with exit code <n>"
    );

    let ids = |args: &[&str]| listed_ids(&env.json(args));
    assert_eq!(
        ids(&["list", "--since", "4h"]),
        ["mapreduce-1/item-123", "mapreduce-1/item-456"]
    );
    assert_eq!(
        ids(&["list", "--until", "2h"]),
        ["mapreduce-1/item-456", "mapreduce-1/item-789"]
    );
    assert_eq!(
        ids(&["list", "--since", "4h", "--until", "2h"]),
        ["mapreduce-1/item-456"]
    );
    let analysis = env.json(&["analyze"]);
    assert_eq!(analysis["pattern_groups"].as_array().unwrap().len(), 1);
    assert_eq!(analysis["pattern_groups"][0]["count"], 3);

    // A single job directory imports too (here: already present, so skipped).
    let again = env.json(&["import", job_dir.to_str().unwrap(), "--drain-timeout", "0s"]);
    assert_eq!(again["skipped_existing"], 3);
}

#[tokio::test]
async fn a_malformed_file_is_named_and_nothing_is_imported() {
    let env = Env::new(DLQ, &no_bus());
    let job = env.path("in/job-a");
    write_reference_job(
        &job,
        "job-a",
        &[reference_item("a1", 1, 0), reference_item("a2", 1, 0)],
    );
    let mut broken = reference_item("a3", 1, 0);
    broken.as_object_mut().unwrap().remove("failure_history");
    std::fs::write(job.join("items/a3.json"), broken.to_string()).unwrap();
    let (code, stderr) = failure(&env.run(&["import", env.path("in").to_str().unwrap()]));
    assert_eq!(code, Some(1));
    assert!(
        stderr.contains("a3.json") && stderr.contains("failure_history"),
        "{stderr}"
    );
    assert!(stderr.contains("nothing was imported"), "{stderr}");
    assert!(!env.data.exists(), "the sink is not even opened");

    // A file whose name disagrees with its item_id, and broken JSON Lines, are refused too.
    std::fs::write(
        job.join("items/a3.json"),
        reference_item("other", 1, 0).to_string(),
    )
    .unwrap();
    let (code, stderr) = failure(&env.run(&["import", job.to_str().unwrap()]));
    assert_eq!(code, Some(1));
    assert!(
        stderr.contains("a3.json") && stderr.contains("'other'"),
        "{stderr}"
    );
    let jsonl = env.path("bad.jsonl");
    std::fs::write(&jsonl, "{\"job_id\":\"x\"}\n").unwrap();
    let (_, stderr) = failure(&env.run(&["import", jsonl.to_str().unwrap()]));
    assert!(stderr.contains("bad.jsonl line 1"), "{stderr}");
    assert!(!env.data.exists());
}
