//! `dlq retry`: re-run a job's dead-lettered items with the job's agent template.

use std::io::{BufWriter, Write};
use std::path::PathBuf;

use clap::Args;

use serde_json::json;

use super::forward::{self, Target};
use super::open;
use super::run::{runner_options, RunnerArgs};
use super::{Cli, CliError, EXIT_INCOMPLETE, EXIT_OK};
use crate::render::retry::write_retry;
use crate::runner::{retry_job, RetryOptions};
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
    /// Only items this CEL expression selects (its help lists the variables).
    #[arg(long, help = crate::query::cel::filter_help("Only items"))]
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

/// Runs the retry here, or through the API of the `dlq serve` holding the data directory;
/// exit 0 when every selected item was handled, 4 when interrupted or not recorded.
pub async fn run_retry(cli: &Cli, args: &RetryArgs) -> Result<u8, CliError> {
    let requested = RetryOptions {
        parallel: args.parallel,
        max_retries: args.max_retries,
        filter: None,
        force: args.force,
        rate: args.rate,
        dry_run: args.dry_run,
    };
    let retry = crate::request::retry::checked(requested, args.filter.as_deref())?;
    let (options, mode) = runner_options(cli, &args.runner)?;
    let report = match forward::target(cli).await? {
        Target::Api(api) => {
            let workflow = args
                .workflow
                .as_deref()
                .map(|p| std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf()));
            let body = json!({
                "parallel": args.parallel,
                "max_retries": args.max_retries,
                "filter": args.filter,
                "force": args.force,
                "rate": args.rate,
                "dry_run": args.dry_run,
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
            let drained = super::drain::drain(&emitter, args.runner.drain_timeout).await;
            emitter.shutdown().await?;
            // The retry joined every task it started: this emitter is the last handle.
            drop(emitter);
            open::refresh_snapshot(cli, &config).await;
            let report = result.map_err(CliError::from)?;
            let drained = drained?;
            if let (super::drain::Drained::BusDown { .. }, Some(line)) = (&drained, drained.line())
            {
                eprintln!("dlq: {line}");
            }
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
