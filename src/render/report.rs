//! The output of `dlq stats` and `dlq analyze`: tables with text histograms, or one line of
//! JSON.

use std::io::Write;

use super::table::{bar, cut, write_table};
use super::Format;
use crate::query::analyze::Analysis;
use crate::query::stats::Stats;
use crate::request::RequestError;

/// Width of the text histograms.
const BAR_WIDTH: usize = 40;

/// The formats `dlq stats` and `dlq analyze` print (`command` names the one asked).
pub fn check_report_format(format: Format, command: &str) -> Result<(), RequestError> {
    match format {
        Format::Csv | Format::Dir => Err(RequestError::Usage(format!(
            "{command} prints table, json or jsonl"
        ))),
        _ => Ok(()),
    }
}

/// Writes `report` with `table` for the table format, else as one line of JSON.
fn table_or_json<W: Write, T: serde::Serialize>(
    out: &mut W,
    format: Format,
    report: &T,
    table: fn(&mut W, &T) -> std::io::Result<()>,
) -> Result<(), RequestError> {
    match format {
        Format::Table => table(out, report)?,
        _ => {
            serde_json::to_writer(&mut *out, report).map_err(std::io::Error::from)?;
            writeln!(out)?;
        }
    }
    Ok(())
}

/// Writes the statistics in `format` (a table, or one line of JSON).
pub fn write_stats(
    out: &mut impl Write,
    format: Format,
    stats: &Stats,
) -> Result<(), RequestError> {
    table_or_json(out, format, stats, print_stats)
}

fn print_stats(out: &mut impl Write, s: &Stats) -> std::io::Result<()> {
    let scope = s
        .job_id
        .as_deref()
        .map_or("all jobs".to_owned(), |j| format!("job {j}"));
    writeln!(out, "items ({scope}):   {}", s.total_items)?;
    writeln!(
        out,
        "failures:          {} (average {:.2} per item)",
        s.total_failures, s.average_failure_count
    )?;
    writeln!(out, "eligible:          {}", s.reprocess_eligible)?;
    writeln!(out, "manual review:     {}", s.manual_review_required)?;
    if let Some(oldest) = &s.oldest {
        writeln!(
            out,
            "oldest (first failed): {}  {}/{}",
            oldest.at, oldest.item.job_id, oldest.item.item_id
        )?;
    }
    if let Some(newest) = &s.newest {
        writeln!(
            out,
            "newest (last failed):  {}  {}/{}",
            newest.at, newest.item.job_id, newest.item.item_id
        )?;
    }
    writeln!(
        out,
        "unpublished events (whole data directory): {}",
        s.unpublished
    )?;
    if let Some(at) = s.oldest_unpublished {
        writeln!(
            out,
            "  oldest written at {at}; the reconciler publishes them once the bus is reachable"
        )?;
    }
    let max = s.by_error_type.values().copied().max().unwrap_or(0);
    let rows: Vec<Vec<String>> = s
        .by_error_type
        .iter()
        .map(|(kind, count)| vec![kind.clone(), count.to_string(), bar(*count, max, BAR_WIDTH)])
        .collect();
    writeln!(out)?;
    write_table(out, &["ERROR TYPE", "ITEMS", ""], &rows)?;
    if s.job_id.is_none() && !s.jobs.is_empty() {
        let rows: Vec<Vec<String>> = s
            .jobs
            .iter()
            .map(|(job, n)| vec![job.clone(), n.to_string()])
            .collect();
        writeln!(out)?;
        write_table(out, &["JOB", "ITEMS"], &rows)?;
    }
    Ok(())
}

/// Writes the analysis in `format` (tables with histograms, or one line of JSON).
pub fn write_analysis(
    out: &mut impl Write,
    format: Format,
    analysis: &Analysis,
) -> Result<(), RequestError> {
    table_or_json(out, format, analysis, print_analysis)
}

fn print_analysis(out: &mut impl Write, a: &Analysis) -> std::io::Result<()> {
    let scope = a
        .job_id
        .as_deref()
        .map_or("all jobs".to_owned(), |j| format!("job {j}"));
    writeln!(
        out,
        "{} items, {} failures ({scope}), {} patterns",
        a.total_items,
        a.total_failures,
        a.pattern_groups.len()
    )?;
    writeln!(out, "\nPATTERNS (by error signature)")?;
    for (n, g) in a.pattern_groups.iter().enumerate() {
        let samples: Vec<&str> = g.sample_ids.iter().map(|s| s.item_id.as_str()).collect();
        writeln!(
            out,
            "{:>3}. {}  {} items, {} failures  [{}]",
            n + 1,
            g.error_signature,
            g.count,
            g.failures,
            g.error_type
        )?;
        writeln!(out, "     pattern:     {}", cut(&g.error_pattern, 100))?;
        writeln!(
            out,
            "     example:     {}",
            cut(&g.representative_message, 100)
        )?;
        writeln!(
            out,
            "     seen:        {} .. {}",
            g.first_seen.format("%Y-%m-%d %H:%M:%S"),
            g.last_seen.format("%Y-%m-%d %H:%M:%S")
        )?;
        writeln!(out, "     samples:     {}", samples.join(", "))?;
        writeln!(out, "     remediation: {}", g.remediation)?;
    }
    writeln!(out, "\nERROR TYPES")?;
    let max = a
        .error_distribution
        .iter()
        .map(|t| t.count)
        .max()
        .unwrap_or(0);
    let rows: Vec<Vec<String>> = a
        .error_distribution
        .iter()
        .map(|t| {
            vec![
                t.error_type.clone(),
                t.count.to_string(),
                format!("{:.1}%", t.percent),
                bar(t.count, max, BAR_WIDTH),
            ]
        })
        .collect();
    write_table(out, &["TYPE", "ITEMS", "SHARE", ""], &rows)?;
    writeln!(out, "\nFAILURES PER HOUR (UTC)")?;
    let max = a
        .temporal_distribution
        .iter()
        .map(|h| h.failures)
        .max()
        .unwrap_or(0);
    let rows: Vec<Vec<String>> = a
        .temporal_distribution
        .iter()
        .map(|h| {
            vec![
                h.hour.format("%Y-%m-%d %H:00").to_string(),
                h.failures.to_string(),
                bar(h.failures, max, BAR_WIDTH),
            ]
        })
        .collect();
    write_table(out, &["HOUR", "FAILURES", ""], &rows)
}
