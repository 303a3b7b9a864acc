//! The legacy storage (one JSON file per item) layout (one JSON file per item and an `index.json` per job), which
//! `dlq import` reads.

use std::path::Path;

use chrono::{DateTime, Duration, Utc};
use serde_json::{json, Value};

/// An item in the legacy format of the runner dlq replaces (no `job_id`, no `error_pattern`, its own style of
/// signature) that last failed `hours_ago` hours ago and first failed `first_days_ago` days ago.
pub fn reference_item(id: &str, hours_ago: i64, first_days_ago: i64) -> Value {
    let now = Utc::now();
    let last: DateTime<Utc> = now - Duration::hours(hours_ago);
    let first = now - Duration::days(first_days_ago) - Duration::hours(hours_ago);
    json!({
        "item_id": id,
        "item_data": { "file": format!("src/{id}.rs"), "priority": 5 },
        "first_attempt": first,
        "last_attempt": last,
        "failure_count": 1,
        "failure_history": [{
            "attempt_number": 1,
            "timestamp": last,
            "error_type": { "CommandFailed": { "exit_code": 101 } },
            "error_message": "cargo test failed with exit code 101",
            "stack_trace": "thread 'main' panicked at src/main.rs:42...",
            "agent_id": "agent-1",
            "step_failed": "shell: cargo test",
            "duration_ms": 45000,
            "json_log_location": format!("/logs/session-{id}.json")
        }],
        "error_signature": "CommandFailed::cargo test failed with exit",
        "reprocess_eligible": true,
        "manual_review_required": false,
        "worktree_artifacts": {
            "worktree_path": "/worktrees/agent-1",
            "branch_name": "agent-1",
            "uncommitted_changes": "src/main.rs modified",
            "error_logs": "error.log contents..."
        }
    })
}

/// Writes a job directory in the legacy layout (`items/{id}.json` and `index.json`) at `dir`.
pub fn write_reference_job(dir: &Path, job_id: &str, items: &[Value]) {
    std::fs::create_dir_all(dir.join("items")).unwrap();
    let mut ids = Vec::new();
    for item in items {
        let id = item["item_id"].as_str().unwrap().to_owned();
        let text = serde_json::to_string_pretty(item).unwrap();
        std::fs::write(dir.join("items").join(format!("{id}.json")), text).unwrap();
        ids.push(id);
    }
    let index = json!({
        "job_id": job_id,
        "item_count": ids.len(),
        "item_ids": ids,
        "updated_at": Utc::now(),
    });
    std::fs::write(dir.join("index.json"), index.to_string()).unwrap();
}
