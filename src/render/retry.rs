//! The report of `dlq retry`.

use std::io::Write;

use super::Format;
use crate::runner::RetryReport;

/// Writes a retry report in `format` (json/jsonl: one JSON document; otherwise text).
pub(crate) fn write_retry(
    out: &mut impl Write,
    format: Format,
    r: &RetryReport,
) -> std::io::Result<()> {
    match format {
        Format::Json | Format::Jsonl => {
            serde_json::to_writer(&mut *out, r).map_err(std::io::Error::from)?;
            writeln!(out)?;
        }
        _ if r.dry_run => {
            writeln!(out, "would retry {} items of job {}:", r.selected, r.job_id)?;
            for id in &r.items {
                writeln!(out, "  {id}")?;
            }
            writeln!(
                out,
                "left out: {} not eligible (use --force), {} not matching the filter",
                r.skipped_ineligible, r.skipped_filtered
            )?;
        }
        _ => {
            writeln!(
                out,
                "job {}: {} selected, {} resolved, {} failed again, {} not started, {} not recorded",
                r.job_id, r.selected, r.resolved, r.failed_again, r.not_started, r.not_recorded
            )?;
            writeln!(
                out,
                "left out: {} not eligible (use --force), {} not matching the filter, {} busy in another retry",
                r.skipped_ineligible, r.skipped_filtered, r.skipped_busy
            )?;
        }
    }
    Ok(())
}
