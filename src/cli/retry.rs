//! `dlq retry`: re-run a job's dead-lettered items with the job's agent template.

use std::io::{BufWriter, Write};
use std::path::PathBuf;

use clap::Args;

use serde_json::json;

use super::forward::{self, Target};
use super::open;
use super::run::{runner_options, RunnerArgs};
use super::{Cli, CliError, Format, EXIT_INCOMPLETE, EXIT_OK};
use crate::filter::Filter;
use crate::runner::{retry_job, RetryOptions, RetryReport, RunError};
use crate::serve::ServeError;

/// Options of `dlq retry`.
#[derive(Debug, Args)]
pub struct RetryArgs {
    /// The job whose items to retry.
    pub job_id: String,
    /// Items retried at once.
    #[arg(long, default_value_t = 10)]
    pub parallel: usize,
    /// Attempts per item (with the workflow's backoff between them).
    #[arg(long, default_value_t = 3)]
    pub max_retries: u32,
    /// Only items matching this CEL expression, e.g. `item.priority >= 5 && error_type ==
    /// "Timeout"` (variables: item, item_id, job_id, error_type, error_message,
    /// failure_count, reprocess_eligible, manual_review_required, error_signature,
    /// error_pattern, first_attempt, last_attempt, exit_code).
    #[arg(long)]
    pub filter: Option<String>,
    /// Also retry items not marked reprocess_eligible.
    #[arg(long)]
    pub force: bool,
    /// At most this many items start per second.
    #[arg(long)]
    pub rate: Option<f64>,
    /// Only list what would be retried.
    #[arg(long)]
    pub dry_run: bool,
    /// Use this workflow's agent template (required for jobs not run from this data
    /// directory, e.g. imported ones).
    #[arg(long)]
    pub workflow: Option<PathBuf>,
    /// Runner options.
    #[command(flatten)]
    pub runner: RunnerArgs,
}

/// The retry settings as given on the command line or in an API request.
#[derive(Debug, Clone)]
pub struct RetryRequest {
    /// Items retried at once.
    pub parallel: usize,
    /// Attempts per item.
    pub max_retries: u32,
    /// CEL filter text.
    pub filter: Option<String>,
    /// Retry ineligible items too.
    pub force: bool,
    /// Starts per second at most.
    pub rate: Option<f64>,
    /// Only list.
    pub dry_run: bool,
}

/// Checks a request and compiles its filter (usage errors: exit 2 / HTTP 400).
pub fn retry_options(r: &RetryRequest) -> Result<RetryOptions, CliError> {
    if r.max_retries == 0 || r.parallel == 0 {
        return Err(CliError::Usage(
            "--max-retries and --parallel must be at least 1".into(),
        ));
    }
    if r.rate.is_some_and(|rate| !rate.is_finite() || rate <= 0.0) {
        return Err(CliError::Usage(
            "--rate must be a positive number of items per second".into(),
        ));
    }
    let filter = r
        .filter
        .as_deref()
        .map(Filter::parse)
        .transpose()
        .map_err(|err| CliError::Usage(format!("bad --filter: {err}")))?;
    Ok(RetryOptions {
        parallel: r.parallel,
        max_retries: r.max_retries,
        filter,
        force: r.force,
        rate: r.rate,
        dry_run: r.dry_run,
    })
}

/// Runs the retry here, or through the API of the `dlq serve` holding the data directory;
/// exit 0 when every selected item was handled, 4 when interrupted or not recorded.
pub async fn run_retry(cli: &Cli, args: &RetryArgs) -> Result<u8, CliError> {
    let request = RetryRequest {
        parallel: args.parallel,
        max_retries: args.max_retries,
        filter: args.filter.clone(),
        force: args.force,
        rate: args.rate,
        dry_run: args.dry_run,
    };
    let retry = retry_options(&request)?;
    let (options, mode) = runner_options(cli, &args.runner)?;
    let report = match forward::target(cli).await? {
        Target::Api(api) => {
            let workflow = args
                .workflow
                .as_deref()
                .map(|p| std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf()));
            let body = json!({
                "parallel": request.parallel,
                "max_retries": request.max_retries,
                "filter": request.filter,
                "force": request.force,
                "rate": request.rate,
                "dry_run": request.dry_run,
                "workflow": workflow,
            });
            let path = format!("/v1/jobs/{}/retry?format=json", encode(&args.job_id));
            let answer = api.post(&path, Some(&body)).await?;
            serde_json::from_slice(&answer.body).map_err(|err| {
                CliError::from(ServeError::Protocol {
                    url: api.url().to_owned(),
                    reason: format!("the retry answer is not a report: {err}"),
                })
            })?
        }
        Target::Local(local) => {
            let (config, sink) = local.into_parts();
            let emitter = open::emitter_with_sink(&config, sink, true).await?;
            let (stop, kill) = super::signals::two_stage(
                "dlq retry: interrupted; in-flight items finish (again to kill them)",
            );
            let result = retry_job(
                emitter.clone(),
                options,
                &args.job_id,
                args.workflow.as_deref(),
                retry,
                stop,
                kill,
                mode,
            )
            .await;
            let drained = open::wait_for_drain(&emitter, args.runner.drain_timeout).await;
            emitter.shutdown().await?;
            let report = result.map_err(CliError::Run)?;
            drained?;
            report
        }
    };
    let mut out = BufWriter::new(std::io::stdout().lock());
    write_retry(&mut out, cli.format, &report)?;
    out.flush()?;
    Ok(if report.not_started > 0 || report.not_recorded > 0 {
        EXIT_INCOMPLETE
    } else {
        EXIT_OK
    })
}

/// A path segment, percent-encoded.
fn encode(segment: &str) -> String {
    segment
        .bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// Writes a retry report in `format` (json/jsonl: one JSON document; otherwise text).
pub fn write_retry(out: &mut impl Write, format: Format, r: &RetryReport) -> std::io::Result<()> {
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

impl From<RunError> for CliError {
    fn from(err: RunError) -> Self {
        CliError::Run(err)
    }
}
