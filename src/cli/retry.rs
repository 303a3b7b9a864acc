//! `dlq retry`: re-run a job's dead-lettered items with the job's agent template.

use std::io::{BufWriter, Write};
use std::path::PathBuf;

use clap::Args;

use super::forward::{self, Target};
use super::open;
use super::run::{runner_options, RunnerArgs};
use super::{Cli, CliError, EXIT_INCOMPLETE, EXIT_OK};
use crate::render::retry::write_retry;
use crate::render::Format;
use crate::request::reason::{removed_by, LOCAL};
use crate::request::{params, RetryRequest};
use crate::runner::{retry_job, RetryJob};
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
    /// Why: named with who retried on each resolved item's removal event (`dlq events`, the
    /// audit).
    #[arg(long)]
    pub reason: Option<String>,
    /// Runner options.
    #[command(flatten)]
    pub runner: RunnerArgs,
}

impl RetryArgs {
    /// The request these flags make: what is checked here and what is sent to a server.
    pub fn request(&self) -> RetryRequest {
        RetryRequest {
            parallel: Some(self.parallel),
            max_retries: Some(self.max_retries),
            filter: self.filter.clone(),
            force: self.force,
            rate: self.rate,
            dry_run: self.dry_run,
            workflow: self.workflow.clone(),
            reason: self.reason.clone(),
        }
    }
}

/// Runs the retry here, or through the API of the `dlq serve` holding the data directory;
/// exit 0 when every selected item was handled, 4 when interrupted or not recorded.
pub async fn run_retry(cli: &Cli, args: &RetryArgs) -> Result<u8, CliError> {
    let mut request = args.request();
    let retry = request.options()?;
    // Checked here too, so a bad reason changes nothing; a server names its caller's token.
    let by = removed_by(LOCAL, request.reason.as_deref())?;
    let (options, mode) = runner_options(cli, &args.runner)?;
    let report = match forward::target(cli).await? {
        Target::Api(api) => {
            // The server resolves a relative path against its own directory, not ours.
            request.workflow = request
                .workflow
                .map(|p| std::path::absolute(&p).unwrap_or(p));
            let path = params::retry_path(&args.job_id, Format::Json);
            let answer = api.post_json(&path, &request).await?;
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
            let result = retry_job(RetryJob {
                emitter: emitter.clone(),
                run: options,
                job_id: &args.job_id,
                workflow: args.workflow.as_deref(),
                options: retry,
                stop,
                kill,
                mode,
                by,
            })
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
