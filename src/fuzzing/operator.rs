//! What operators hand over: import files, workflow files, CEL filters.

use super::{check, scratch, Outcome};
use crate::query::cel::CelFilter;
use crate::query::import::{ImportLimits, ImportSource};
use dlq::domain::model::{DeadLetteredItem, ErrorType, FailureDetail};

/// A `dlq import` source, selected by the first byte (mod 3): `0` the rest is a `.jsonl` file,
/// `1` a `.json` file, `2` a job directory `job/` given as `index.json`, NUL, an item file name
/// (kept only if made of `[A-Za-z0-9%._-]`), NUL, the item file. Validation reads every item;
/// every item it accepts has valid ids and fits the sink's event limit.
pub fn import_file(data: &[u8]) -> Outcome {
    let (Some((&mode, rest)), Some(dir)) = (data.split_first(), scratch("import")) else {
        return Ok(());
    };
    let _ = std::fs::remove_dir_all(dir.join("job"));
    let path = match mode % 3 {
        0 => dir.join("items.jsonl"),
        1 => dir.join("items.json"),
        _ => dir.join("job"),
    };
    let written = if mode % 3 == 2 {
        write_job_dir(&path, rest)
    } else {
        std::fs::write(&path, rest)
    };
    if written.is_err() {
        return Ok(());
    }
    let limits = ImportLimits {
        max_event_bytes: 64 * 1024,
        capacity_per_job: 100,
    };
    let Ok(source) = ImportSource::open(&path, limits) else {
        return Ok(());
    };
    let mut accepted = Vec::new();
    let read = source.for_each(&mut |found| {
        accepted.push(found.item);
        Ok(())
    });
    let validated = source.validate();
    check(read.is_ok() || validated.is_err(), || {
        "validation accepted a source that reading refused".into()
    })?;
    for item in accepted {
        let fits = serde_json::to_vec(&item).is_ok_and(|json| json.len() <= limits.max_event_bytes);
        check(!item.job_id.is_empty() && fits, || {
            format!("import accepted an item it must refuse: {item:?}")
        })?;
    }
    Ok(())
}

fn write_job_dir(job: &std::path::Path, rest: &[u8]) -> std::io::Result<()> {
    let mut parts = rest.splitn(3, |&b| b == 0);
    let index = parts.next().unwrap_or_default();
    let name = parts.next().unwrap_or_default();
    let item = parts.next().unwrap_or_default();
    let safe = !name.is_empty()
        && name
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || b"%._-".contains(b))
        && name != b"."
        && name != b"..";
    let name = if safe {
        String::from_utf8_lossy(name).into_owned()
    } else {
        "item.json".to_owned()
    };
    std::fs::create_dir_all(job.join("items"))?;
    if !index.is_empty() {
        std::fs::write(job.join("index.json"), index)?;
    }
    std::fs::write(job.join("items").join(name), item)
}

/// A `dlq run` workflow file: parsed and validated.
pub fn workflow_yaml(data: &[u8]) -> Outcome {
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = crate::runner::parse_workflow(text);
    }
    Ok(())
}

/// A CEL filter, the first line, compiled; then evaluated against the rest as a work item's
/// data (`map.filter`) and as a dead-lettered item's `item_data` (`--filter`). Runs on a thread
/// with the 2 MiB stack of a tokio worker, where the product evaluates filters.
pub fn cel_filter(data: &[u8]) -> Outcome {
    let data = data.to_vec();
    let run = std::thread::Builder::new()
        .stack_size(2 << 20)
        .spawn(move || evaluate(&data));
    match run.map(|handle| handle.join()) {
        Ok(Ok(outcome)) => outcome,
        Ok(Err(panic)) => std::panic::resume_unwind(panic),
        Err(_) => Ok(()), // no thread: nothing tested
    }
}

fn evaluate(data: &[u8]) -> Outcome {
    let (expr, rest) = match data.iter().position(|&b| b == b'\n') {
        Some(at) => (&data[..at], &data[at + 1..]),
        None => (data, &b"{}"[..]),
    };
    let Ok(expr) = std::str::from_utf8(expr) else {
        return Ok(());
    };
    let Ok(filter) = CelFilter::parse(expr) else {
        return Ok(());
    };
    let value: serde_json::Value = serde_json::from_slice(rest).unwrap_or_default();
    let _ = filter.matches_data(&value);
    let failure = FailureDetail {
        attempt_number: 1,
        timestamp: chrono::DateTime::UNIX_EPOCH,
        error_type: ErrorType::CommandFailed { exit_code: 101 },
        error_message: "exit status 101".into(),
        stack_trace: None,
        agent_id: "agent-1".into(),
        step_failed: "shell: cargo test".into(),
        duration_ms: 1,
        json_log_location: None,
    };
    if let Ok(item) = DeadLetteredItem::new("job", "item", value, vec![failure]) {
        let _ = filter.matches_item(&item);
    }
    Ok(())
}
