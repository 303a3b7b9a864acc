//! `dlq clear` and `dlq purge`: removals, each an `item_removed` event that the emitter's
//! reconciler publishes; confirmed on a terminal, refused without `--yes` otherwise.
//!
//! The removals themselves ([`clear_job`], [`purge_items`]) run on an emitter, the CLI's own or
//! that of `dlq serve`; when a server holds the data directory the CLI asks first, then sends
//! the removal to its API (which asks nothing: it is the script interface).

use std::io::{BufRead, IsTerminal, Write};
use std::time::Duration;

use chrono::{DateTime, Utc};
use clap::Args;

use super::forward::{self, Local, Target};
use super::open;
use super::{Cli, CliError, Format, EXIT_OK};
use crate::query::QueryError;
use crate::render::removal::write_removal;
use crate::request::reason::{removed_by, LOCAL};
use crate::request::{params, PurgeRequest};
use crate::serve::client::ApiClient;
use dlq::emitter::NodeEmitter;
use dlq::removal::{
    clear_job, count_purgeable, nothing_to_purge, purge_cutoff, purge_items, scope_of, Removal,
};
use dlq::sink::{LocalSink, Sink};

/// Options of `dlq clear`.
#[derive(Debug, Args)]
pub struct ClearArgs {
    /// The job whose items are all removed.
    pub job_id: String,
    /// Do not ask for confirmation (required without a terminal).
    #[arg(long, short = 'y')]
    pub yes: bool,
    /// After removing, wait up to this long for the removal events to be published.
    #[arg(long, default_value = "5s", value_parser = humantime::parse_duration)]
    pub drain_timeout: Duration,
    /// Why: named with who cleared on each removal event (`dlq events`, the page's audit view).
    #[arg(long)]
    pub reason: Option<String>,
}

/// Options of `dlq purge`.
#[derive(Debug, Args)]
pub struct PurgeArgs {
    /// Remove items first failed more than this many days ago.
    #[arg(long)]
    pub older_than_days: u32,
    /// Only items of this job.
    #[arg(long)]
    pub job_id: Option<String>,
    /// Do not ask for confirmation (required without a terminal).
    #[arg(long, short = 'y')]
    pub yes: bool,
    /// After removing, wait up to this long for the removal events to be published.
    #[arg(long, default_value = "5s", value_parser = humantime::parse_duration)]
    pub drain_timeout: Duration,
    /// Why: named with who purged on each removal event (`dlq events`, the page's audit view).
    #[arg(long)]
    pub reason: Option<String>,
}

/// Asks on the terminal, or refuses (exit 2) without `--yes` when there is none. Nothing has
/// been changed when this returns an error.
pub fn confirm(yes: bool, question: &str) -> Result<(), CliError> {
    if yes {
        return Ok(());
    }
    if !std::io::stdin().is_terminal() {
        return Err(CliError::usage(format!(
            "refusing to {question} without --yes: there is no terminal to confirm on; nothing was changed"
        )));
    }
    let mut stderr = std::io::stderr();
    write!(stderr, "{question}? [y/N] ")?;
    stderr.flush()?;
    let mut answer = String::new();
    std::io::stdin().lock().read_line(&mut answer)?;
    match answer.trim().to_ascii_lowercase().as_str() {
        "y" | "yes" => Ok(()),
        _ => Err(CliError::usage("not confirmed; nothing was changed")),
    }
}

/// Counts what would be removed in the local sink, asks, and only then opens the bus. The sink
/// is closed again on refusal.
pub(super) async fn prepare(
    local: Box<Local>,
    count: impl FnOnce(&LocalSink) -> Result<u64, CliError>,
    question: impl FnOnce(u64) -> Option<String>,
    yes: bool,
) -> Result<Option<(u64, NodeEmitter)>, CliError> {
    let (config, sink) = local.into_parts();
    let asked = count(&sink).and_then(|n| match question(n) {
        Some(text) => confirm(yes, &text).map(|()| Some(n)),
        None => Ok(None),
    });
    match asked {
        Ok(Some(n)) => Ok(Some((
            n,
            open::emitter_with_sink(&config, sink, false).await?,
        ))),
        other => {
            sink.close().await?;
            other.map(|_| None)
        }
    }
}

fn clear_question(job: &str, n: u64) -> Option<String> {
    Some(format!("remove all {n} items of job '{job}'")).filter(|_| n > 0)
}

/// Removes every item of a job.
pub async fn run_clear(cli: &Cli, args: &ClearArgs) -> Result<u8, CliError> {
    let job = args.job_id.clone();
    let by = removed_by(LOCAL, args.reason.as_deref())?;
    let local = match forward::target(cli).await? {
        Target::Api(api) => return forward_clear(cli, args, &api).await,
        Target::Local(local) => local,
    };
    let prepared = prepare(
        local,
        |sink| Ok(sink.job_len(&job)?),
        |n| clear_question(&job, n),
        args.yes,
    )
    .await?;
    let Some((_, emitter)) = prepared else {
        return Err(QueryError::JobNotFound(job).into());
    };
    let removal = clear_job(&emitter, &job, args.drain_timeout, Some(&by)).await;
    emitter.shutdown().await?;
    print_removal(cli.format, &removal?)
}

/// `dlq clear` through the API: asks here (the count from `/v1/stats`), then removes there.
async fn forward_clear(cli: &Cli, args: &ClearArgs, api: &ApiClient) -> Result<u8, CliError> {
    let job = &args.job_id;
    if !args.yes {
        let stats = api
            .get(&params::report_path("stats", Some(job), Format::Json))
            .await?;
        let n = forward::json_field(api, &stats, "total_items")?;
        if let Some(question) = clear_question(job, n) {
            confirm(false, &question)?;
        }
    }
    forward::print(
        api.post(&params::clear_path(
            job,
            args.drain_timeout,
            args.reason.as_deref(),
            cli.format,
        ))
        .await?,
    )
}

/// Removes the items first failed more than N days ago.
pub async fn run_purge(cli: &Cli, args: &PurgeArgs) -> Result<u8, CliError> {
    let by = removed_by(LOCAL, args.reason.as_deref())?;
    let local = match forward::target(cli).await? {
        Target::Api(api) => return forward_purge(cli, args, &api).await,
        Target::Local(local) => local,
    };
    let cutoff = purge_cutoff(args.older_than_days);
    let job = args.job_id.as_deref();
    let prepared = prepare(
        local,
        |sink| Ok(count_purgeable(sink, cutoff, job)?),
        |n| purge_question(job, cutoff, n),
        args.yes,
    )
    .await?;
    let Some((_, emitter)) = prepared else {
        // Nothing to remove: no question, no bus, nothing changed.
        return print_removal(cli.format, &nothing_to_purge(job, cutoff));
    };
    let removal = purge_items(&emitter, cutoff, job, args.drain_timeout, Some(&by)).await;
    emitter.shutdown().await?;
    print_removal(cli.format, &removal?)
}

fn purge_question(job: Option<&str>, cutoff: DateTime<Utc>, n: u64) -> Option<String> {
    Some(format!(
        "remove {n} items of {} first failed before {cutoff}",
        scope_of(job)
    ))
    .filter(|_| n > 0)
}

/// `dlq purge` through the API: a dry run to count and ask, then the purge.
async fn forward_purge(cli: &Cli, args: &PurgeArgs, api: &ApiClient) -> Result<u8, CliError> {
    let body = |dry_run: bool| PurgeRequest {
        older_than_days: args.older_than_days,
        job_id: args.job_id.clone(),
        drain_timeout: Some(args.drain_timeout),
        dry_run,
        reason: args.reason.clone(),
    };
    if !args.yes {
        let dry = api
            .post_json(&params::purge_path(Format::Json), &body(true))
            .await?;
        let n = forward::json_field(api, &dry, "would_remove")?;
        let cutoff: serde_json::Value = serde_json::from_slice(&dry.body).unwrap_or_default();
        let cutoff = cutoff["cutoff"].as_str().unwrap_or("the cutoff").to_owned();
        if n > 0 {
            confirm(
                false,
                &format!(
                    "remove {n} items of {} first failed before {cutoff}",
                    scope_of(args.job_id.as_deref())
                ),
            )?;
        }
    }
    forward::print(
        api.post_json(&params::purge_path(cli.format), &body(false))
            .await?,
    )
}

pub(super) fn print_removal(format: Format, removal: &Removal) -> Result<u8, CliError> {
    let mut out = std::io::stdout().lock();
    write_removal(&mut out, format, removal)?;
    out.flush()?;
    Ok(EXIT_OK)
}
