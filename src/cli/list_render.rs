//! The output of `dlq list` and `dlq inspect` in every format (table, JSON, JSONL, CSV).

use std::io::Write;

use crate::cli::table::{cut, write_table};
use crate::cli::{CliError, Format};
use crate::domain::model::DeadLetteredItem;
use crate::query::export::{csv_record, CSV_COLUMNS};
use crate::query::list::ItemSummary;
use crate::query::QueryError;
use crate::domain::signature::remediation;

/// Writes one page: `matched` items in all, `next` the cursor of the following page.
pub(super) fn print_page(
    out: &mut impl Write,
    format: Format,
    matched: Option<u64>,
    next: Option<String>,
    items: impl Iterator<Item = Result<DeadLetteredItem, QueryError>>,
) -> Result<(), CliError> {
    match format {
        Format::Json => {
            let head = serde_json::json!({ "matched": matched, "next_cursor": next });
            let head = head.to_string();
            write!(out, "{},\"items\":[", head.trim_end_matches('}'))?;
            for (n, item) in items.enumerate() {
                if n > 0 {
                    out.write_all(b",")?;
                }
                serde_json::to_writer(&mut *out, &ItemSummary::of(item?))
                    .map_err(std::io::Error::from)?;
            }
            writeln!(out, "]}}")?;
        }
        Format::Jsonl => {
            for item in items {
                serde_json::to_writer(&mut *out, &ItemSummary::of(item?))
                    .map_err(std::io::Error::from)?;
                writeln!(out)?;
            }
        }
        Format::Csv => {
            let mut csv = csv::Writer::from_writer(out);
            csv.write_record(CSV_COLUMNS)
                .map_err(std::io::Error::from)?;
            for item in items {
                csv.write_record(csv_record(item?))
                    .map_err(std::io::Error::from)?;
            }
            csv.flush()?;
        }
        Format::Table | Format::Dir => {
            let mut rows = Vec::new();
            for item in items {
                let s = ItemSummary::of(item?);
                rows.push(vec![
                    s.last_attempt.format("%Y-%m-%d %H:%M:%S").to_string(),
                    s.job_id,
                    s.item_id,
                    s.error_type.to_owned(),
                    s.failure_count.to_string(),
                    yes_no(s.reprocess_eligible).to_owned(),
                    yes_no(s.manual_review_required).to_owned(),
                    s.error_signature,
                    cut(&s.last_error, 50),
                ]);
            }
            let headers = [
                "LAST FAILED (UTC)",
                "JOB",
                "ITEM",
                "TYPE",
                "FAILS",
                "ELIGIBLE",
                "REVIEW",
                "SIGNATURE",
                "LAST ERROR",
            ];
            write_table(out, &headers, &rows)?;
            match matched {
                Some(matched) => writeln!(out, "{} shown, {} matching", rows.len(), matched)?,
                None => writeln!(
                    out,
                    "{} shown, more match (pass --count for the total)",
                    rows.len()
                )?,
            }
            if let Some(next) = next {
                writeln!(out, "next page: dlq list ... --after {next}")?;
            }
        }
    }
    Ok(())
}

fn yes_no(flag: bool) -> &'static str {
    if flag {
        "yes"
    } else {
        "no"
    }
}

/// Writes one whole item for people: data, every failure, logs, worktree.
pub(super) fn print_item(out: &mut impl Write, item: &DeadLetteredItem) -> std::io::Result<()> {
    let kind = crate::query::error_type(item);
    writeln!(out, "item        {} (job {})", item.item_id, item.job_id)?;
    writeln!(
        out,
        "failures    {} (first {}, last {})",
        item.failure_count, item.first_attempt, item.last_attempt
    )?;
    writeln!(
        out,
        "signature   {}  {}",
        item.error_signature, item.error_pattern
    )?;
    writeln!(
        out,
        "eligible    {}   manual review: {}",
        yes_no(item.reprocess_eligible),
        yes_no(item.manual_review_required)
    )?;
    if let Some(kind) = kind {
        writeln!(
            out,
            "remediation {}",
            remediation(kind, &item.error_pattern)
        )?;
    }
    let data = serde_json::to_string_pretty(&item.item_data).unwrap_or_default();
    writeln!(out, "data")?;
    for line in data.lines() {
        writeln!(out, "  {line}")?;
    }
    if let Some(w) = &item.worktree_artifacts {
        writeln!(
            out,
            "worktree    {} (branch {})",
            w.worktree_path, w.branch_name
        )?;
        if let Some(changes) = &w.uncommitted_changes {
            writeln!(out, "  uncommitted changes: {changes}")?;
        }
        if let Some(logs) = &w.error_logs {
            writeln!(out, "  error logs:")?;
            for line in logs.lines() {
                writeln!(out, "    {line}")?;
            }
        }
    }
    writeln!(out, "history")?;
    for f in &item.failure_history {
        let kind = match &f.error_type {
            crate::domain::model::ErrorType::CommandFailed { exit_code } => {
                format!("CommandFailed (exit {exit_code})")
            }
            other => other.name().to_owned(),
        };
        writeln!(
            out,
            "  #{} {}  {kind}  agent {}  step '{}'  {} ms",
            f.attempt_number, f.timestamp, f.agent_id, f.step_failed, f.duration_ms
        )?;
        writeln!(out, "     message: {}", f.error_message)?;
        if let Some(log) = &f.json_log_location {
            writeln!(out, "     json log: {log}")?;
        }
        if let Some(trace) = &f.stack_trace {
            writeln!(out, "     stack trace:")?;
            for line in trace.lines() {
                writeln!(out, "       {line}")?;
            }
        }
    }
    Ok(())
}
