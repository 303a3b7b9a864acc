//! The output of `dlq list` and `dlq inspect` in every format (table, JSON, JSONL, CSV), and
//! the selection of a list page it prints.

use std::io::Write;

use super::table::{cut, write_table};
use super::Format;
use crate::query::export::{csv_record, CSV_COLUMNS};
use crate::query::list::ItemSummary;
use crate::query::list::{counted_total, in_listing_order, page_in_order, selected, Cursor};
use crate::query::QueryError;
use crate::request::list::ListQuery;
use crate::request::RequestError;
use dlq::domain::model::DeadLetteredItem;
use dlq::domain::signature::remediation;
use dlq::sink::LocalSink;

/// The formats `dlq list` prints.
pub fn check_list_format(format: Format) -> Result<(), RequestError> {
    match format {
        Format::Dir => Err(RequestError::Usage("list prints table, json, jsonl or csv; use `dlq export --format dir` for the directory layout".into())),
        _ => Ok(()),
    }
}

/// The formats `dlq inspect` prints.
pub fn check_inspect_format(format: Format) -> Result<(), RequestError> {
    match format {
        Format::Csv | Format::Dir => Err(RequestError::Usage(
            "inspect prints table, json or jsonl".into(),
        )),
        _ => Ok(()),
    }
}

/// Selects the page of `query` (the filter expression applied before paging, so a page holds
/// `limit` matching items whenever there are that many) and writes it in `format`. Walks the
/// recency index and stops once the page is full (see [`crate::query::list`]).
pub fn write_list(
    out: &mut impl Write,
    sink: &LocalSink,
    query: &ListQuery,
    format: Format,
) -> Result<(), RequestError> {
    let expr = query.expr.as_ref();
    let request = &query.request;
    let items = in_listing_order(sink, &request.filter, request.after.as_ref())?
        .filter_map(|item| selected(expr, item));
    let page = page_in_order(items, request)?;
    let matched = match page.matched {
        Some(matched) => Some(matched),
        None => counted_total(sink, request, expr.is_some())?,
    };
    let next = page.next_cursor.as_ref().map(Cursor::encode);
    print_page(out, format, matched, next, page.items.into_iter().map(Ok))
}

/// Writes one whole item in `format` (pretty JSON for json).
pub fn write_item(
    out: &mut impl Write,
    format: Format,
    item: &DeadLetteredItem,
) -> Result<(), RequestError> {
    match format {
        Format::Json => {
            serde_json::to_writer_pretty(&mut *out, item).map_err(std::io::Error::from)?;
            writeln!(out)?;
        }
        Format::Jsonl => {
            serde_json::to_writer(&mut *out, item).map_err(std::io::Error::from)?;
            writeln!(out)?;
        }
        _ => print_item(out, item)?,
    }
    Ok(())
}

/// Writes one page: `matched` items in all, `next` the cursor of the following page.
fn print_page(
    out: &mut impl Write,
    format: Format,
    matched: Option<u64>,
    next: Option<String>,
    items: impl Iterator<Item = Result<DeadLetteredItem, QueryError>>,
) -> Result<(), RequestError> {
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
fn print_item(out: &mut impl Write, item: &DeadLetteredItem) -> std::io::Result<()> {
    let kind = item.last_error_type();
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
            dlq::domain::model::ErrorType::CommandFailed { exit_code } => {
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
