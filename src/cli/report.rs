//! `dlq stats` and `dlq analyze`: read-only summaries (they open only the sink, or go through
//! the API of the `dlq serve` holding it). The admin API renders with the `write_*` functions
//! here, so a forwarded command prints what it would have printed itself.

use std::io::{BufWriter, Write};
use std::path::PathBuf;

use clap::Args;

use super::forward::{self, Target};
use super::table::{bar, cut, write_table};
use super::{Cli, CliError, Format, EXIT_OK};
use crate::query::analyze::{analyze, Analysis};
use crate::query::stats::{stats, Stats};
use crate::query::QueryError;
use crate::serve::params;

/// Width of the text histograms.
const BAR_WIDTH: usize = 40;

/// Options of `dlq stats`.
#[derive(Debug, Args)]
pub struct StatsArgs {
    /// Only items of this job (exit 3 if it has none).
    #[arg(long)]
    pub job_id: Option<String>,
}

/// Options of `dlq analyze`.
#[derive(Debug, Args)]
pub struct AnalyzeArgs {
    /// Only items of this job (exit 3 if it has none).
    #[arg(long)]
    pub job_id: Option<String>,
    /// Also write the analysis as JSON to this file (replaced atomically).
    #[arg(long)]
    pub export: Option<PathBuf>,
}

/// The formats `dlq stats` and `dlq analyze` print (`command` names the one asked).
pub fn check_report_format(format: Format, command: &str) -> Result<(), CliError> {
    match format {
        Format::Csv | Format::Dir => Err(CliError::Usage(format!(
            "{command} prints table, json or jsonl"
        ))),
        _ => Ok(()),
    }
}

/// Prints the statistics.
pub async fn run_stats(cli: &Cli, args: &StatsArgs) -> Result<u8, CliError> {
    check_report_format(cli.format, "stats")?;
    let job = args.job_id.as_deref();
    let stats = match forward::target(cli).await? {
        Target::Api(api) => {
            return forward::print(
                api.get(&params::report_path("stats", job, cli.format))
                    .await?,
            )
        }
        Target::Local(local) => local.run(|sink| Ok(stats(sink, job)?)).await?,
    };
    let mut out = BufWriter::new(std::io::stdout().lock());
    write_stats(&mut out, cli.format, &stats)?;
    out.flush()?;
    Ok(EXIT_OK)
}

/// Writes the statistics in `format` (a table, or one line of JSON).
pub fn write_stats(out: &mut impl Write, format: Format, stats: &Stats) -> Result<(), CliError> {
    match format {
        Format::Table => print_stats(out, stats)?,
        _ => {
            serde_json::to_writer(&mut *out, stats).map_err(std::io::Error::from)?;
            writeln!(out)?;
        }
    }
    Ok(())
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

/// Prints the analysis, and writes it to `--export` if asked.
pub async fn run_analyze(cli: &Cli, args: &AnalyzeArgs) -> Result<u8, CliError> {
    check_report_format(cli.format, "analyze")?;
    let job = args.job_id.as_deref();
    let analysis = match forward::one_pass_target(cli).await? {
        Target::Api(api) => return forward_analyze(cli, args, &api).await,
        Target::Local(local) => local.run(|sink| Ok(analyze(sink, job)?)).await?,
    };
    if let Some(path) = &args.export {
        write_json_atomically(path, &analysis)?;
    }
    let mut out = BufWriter::new(std::io::stdout().lock());
    write_analysis(&mut out, cli.format, &analysis)?;
    if let (Format::Table, Some(path)) = (cli.format, &args.export) {
        writeln!(out, "\nanalysis written to {}", path.display())?;
    }
    out.flush()?;
    Ok(EXIT_OK)
}

/// `dlq analyze` through the API. With `--export` the JSON answer is written to the file; a
/// table then needs a second request (the CLI cannot rebuild the table from JSON).
async fn forward_analyze(
    cli: &Cli,
    args: &AnalyzeArgs,
    api: &crate::serve::client::ApiClient,
) -> Result<u8, CliError> {
    let job = args.job_id.as_deref();
    let Some(path) = &args.export else {
        return forward::print(
            api.get(&params::report_path("analyze", job, cli.format))
                .await?,
        );
    };
    let json = api
        .get(&params::report_path("analyze", job, Format::Json))
        .await?;
    let value: serde_json::Value =
        serde_json::from_slice(&json.body).map_err(|err| crate::serve::ServeError::Protocol {
            url: api.url().to_owned(),
            reason: format!("the analysis is not JSON: {err}"),
        })?;
    write_json_atomically(path, &value)?;
    if cli.format != Format::Table {
        return forward::print(json);
    }
    forward::print(
        api.get(&params::report_path("analyze", job, cli.format))
            .await?,
    )?;
    println!("\nanalysis written to {}", path.display());
    Ok(EXIT_OK)
}

/// Writes the analysis in `format` (tables with histograms, or one line of JSON).
pub fn write_analysis(
    out: &mut impl Write,
    format: Format,
    analysis: &Analysis,
) -> Result<(), CliError> {
    match format {
        Format::Table => print_analysis(out, analysis)?,
        _ => {
            serde_json::to_writer(&mut *out, analysis).map_err(std::io::Error::from)?;
            writeln!(out)?;
        }
    }
    Ok(())
}

/// Writes `value` as pretty JSON to a temporary sibling of `path`, then renames it into place.
fn write_json_atomically(
    path: &std::path::Path,
    value: &impl serde::Serialize,
) -> Result<(), CliError> {
    let name = path
        .file_name()
        .ok_or_else(|| CliError::Usage(format!("{} is not a file name", path.display())))?;
    let temp = path.with_file_name(format!(
        ".{}.tmp-{}",
        name.to_string_lossy(),
        std::process::id()
    ));
    let write = || -> std::io::Result<()> {
        let json = serde_json::to_vec_pretty(value)?;
        let mut file = std::fs::File::create(&temp)?;
        file.write_all(&json)?;
        file.sync_all()?;
        std::fs::rename(&temp, path)
    };
    write().map_err(|source| {
        let _ = std::fs::remove_file(&temp);
        QueryError::Io {
            path: path.to_owned(),
            source,
        }
        .into()
    })
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
