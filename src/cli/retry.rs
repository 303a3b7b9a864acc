//! `dlq retry`: re-run a job's dead-lettered items with the job's agent template.

use std::io::{BufWriter, Write};
use std::path::PathBuf;

use clap::Args;
use tokio_util::sync::CancellationToken;

use super::open;
use super::run::{runner_options, RunnerArgs};
use super::{Cli, CliError, Format, EXIT_INCOMPLETE, EXIT_OK};
use crate::filter::Filter;
use crate::runner::error::RunError;
use crate::runner::retry::{retry_job, RetryOptions, RetryReport};

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

/// Runs the retry; exit 0 when every selected item was handled, 4 when interrupted.
pub async fn run_retry(cli: &Cli, args: &RetryArgs) -> Result<u8, CliError> {
    if args.max_retries == 0 || args.parallel == 0 {
        return Err(CliError::Usage("--max-retries and --parallel must be at least 1".into()));
    }
    if args.rate.is_some_and(|r| !r.is_finite() || r <= 0.0) {
        return Err(CliError::Usage("--rate must be a positive number of items per second".into()));
    }
    let filter = args
        .filter
        .as_deref()
        .map(Filter::parse)
        .transpose()
        .map_err(|err| CliError::Usage(format!("bad --filter: {err}")))?;
    let (options, mode) = runner_options(cli, &args.runner)?;
    let emitter = open::emitter(cli).await?;
    let (stop, kill) = two_stage_signals();
    let retry = RetryOptions {
        parallel: args.parallel,
        max_retries: args.max_retries,
        filter,
        force: args.force,
        rate: args.rate,
        dry_run: args.dry_run,
    };
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
    print(cli, &report)?;
    Ok(if report.not_started > 0 || report.not_recorded > 0 {
        EXIT_INCOMPLETE
    } else {
        EXIT_OK
    })
}

fn print(cli: &Cli, r: &RetryReport) -> Result<(), CliError> {
    let mut out = BufWriter::new(std::io::stdout().lock());
    match cli.format {
        Format::Json | Format::Jsonl => {
            serde_json::to_writer(&mut out, r).map_err(std::io::Error::from)?;
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
    out.flush()?;
    Ok(())
}

/// First Ctrl-C / SIGTERM: stop starting items, let in-flight ones finish and be recorded.
/// Second: kill in-flight agents too.
fn two_stage_signals() -> (CancellationToken, CancellationToken) {
    let (stop, kill) = (CancellationToken::new(), CancellationToken::new());
    let (s, k) = (stop.clone(), kill.clone());
    tokio::spawn(async move {
        let mut term =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
        for token in [s, k] {
            let terminated = async {
                match term.as_mut() {
                    Some(term) => {
                        term.recv().await;
                    }
                    None => std::future::pending::<()>().await,
                }
            };
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = terminated => {}
            }
            eprintln!("dlq retry: interrupted; in-flight items finish (again to kill them)");
            token.cancel();
        }
    });
    (stop, kill)
}

impl From<RunError> for CliError {
    fn from(err: RunError) -> Self {
        CliError::Run(err)
    }
}
