//! `dlq clear` and `dlq purge`: removals, each an `item_removed` event that the emitter's
//! reconciler publishes; confirmed on a terminal, refused without `--yes` otherwise.

use std::io::{BufRead, IsTerminal, Write};
use std::time::Duration;

use chrono::Utc;
use clap::Args;
use serde_json::json;

use super::{open, Cli, CliError, Format, EXIT_OK};
use crate::decide::Command;
use crate::query::QueryError;
use crate::retention::PURGE_CHUNK;
use crate::sink::{Sink, SledSink};

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
}

/// Whether the events of a change reached the bus.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Published {
    /// Events still unpublished when the wait ended.
    pub unpublished: u64,
    /// Whether the backlog emptied.
    pub drained: bool,
}

impl Published {
    /// One line for people.
    pub fn describe(&self) -> String {
        if self.drained {
            "all events published".to_owned()
        } else {
            format!("{} events not yet published (the bus is unreachable or slow): they are kept in the sink and published by the reconciler later (`dlq reconcile`, or any dlq process that runs one)", self.unpublished)
        }
    }
}

/// Wakes the reconciler and waits up to `timeout` for the backlog to drain.
pub async fn finish_publishing(
    emitter: &open::CliEmitter,
    timeout: Duration,
) -> Result<Published, CliError> {
    emitter.wake_reconciler();
    let drained = open::wait_for_drain(emitter, timeout).await?;
    let unpublished = emitter.sink().backlog()?.count;
    Ok(Published {
        unpublished,
        drained,
    })
}

/// Asks on the terminal, or refuses (exit 2) without `--yes` when there is none. Nothing has
/// been changed when this returns an error.
pub fn confirm(yes: bool, question: &str) -> Result<(), CliError> {
    if yes {
        return Ok(());
    }
    if !std::io::stdin().is_terminal() {
        return Err(CliError::Usage(format!(
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
        _ => Err(CliError::Usage("not confirmed; nothing was changed".into())),
    }
}

/// Opens the sink, counts what would be removed, asks, and only then opens the bus. The sink is
/// closed again on refusal.
async fn prepare(
    cli: &Cli,
    count: impl FnOnce(&SledSink) -> Result<u64, CliError>,
    question: impl FnOnce(u64) -> Option<String>,
    yes: bool,
) -> Result<Option<(u64, open::CliEmitter)>, CliError> {
    let config = open::config(cli)?;
    let sink = open::sink(cli, &config)?;
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

/// Removes every item of a job.
pub async fn run_clear(cli: &Cli, args: &ClearArgs) -> Result<u8, CliError> {
    let job = args.job_id.clone();
    let prepared = prepare(
        cli,
        |sink| Ok(sink.job_len(&job)?),
        |n| Some(format!("remove all {n} items of job '{job}'")).filter(|_| n > 0),
        args.yes,
    )
    .await?;
    let Some((_, emitter)) = prepared else {
        return Err(QueryError::JobNotFound(job).into());
    };
    let mut removed = 0u64;
    let cleared = loop {
        let command = Command::Clear {
            job_id: job.clone(),
            limit: PURGE_CHUNK,
        };
        match emitter.sink().append(command).await {
            Ok(events) if events.is_empty() => break Ok(()),
            Ok(events) => removed += events.len() as u64,
            Err(err) => break Err(err),
        }
    };
    report(
        cli,
        emitter,
        cleared,
        args.drain_timeout,
        json!({ "job_id": job, "removed": removed }),
        format!("removed {removed} items of job {job}"),
    )
    .await
}

/// Removes the items first failed more than N days ago.
pub async fn run_purge(cli: &Cli, args: &PurgeArgs) -> Result<u8, CliError> {
    let cutoff = Utc::now() - chrono::Duration::days(i64::from(args.older_than_days));
    let job = args.job_id.clone();
    let scope = job
        .as_deref()
        .map_or("any job".to_owned(), |j| format!("job '{j}'"));
    let prepared = prepare(
        cli,
        |sink| {
            let mut n = 0u64;
            for stored in sink.scan_items(job.as_deref()) {
                n += u64::from(stored?.item.first_attempt < cutoff);
            }
            Ok(n)
        },
        |n| {
            Some(format!(
                "remove {n} items of {scope} first failed before {cutoff}"
            ))
            .filter(|_| n > 0)
        },
        args.yes,
    )
    .await?;
    let Some((_, emitter)) = prepared else {
        // Nothing to remove: no question, no bus, nothing changed.
        match cli.format {
            Format::Table => println!("no items of {scope} first failed before {cutoff}"),
            _ => println!(
                "{}",
                json!({ "job_id": job, "cutoff": cutoff, "removed": 0 })
            ),
        }
        return Ok(EXIT_OK);
    };
    let purged = crate::retention::purge(emitter.sink(), cutoff, job.as_deref()).await;
    let removed = *purged.as_ref().unwrap_or(&0);
    let summary = json!({ "job_id": job, "cutoff": cutoff, "removed": removed });
    report(
        cli,
        emitter,
        purged.map(|_| ()),
        args.drain_timeout,
        summary,
        format!("purged {removed} items of {scope} first failed before {cutoff}"),
    )
    .await
}

/// Publishes, shuts the emitter down and prints the outcome of a removal.
async fn report(
    cli: &Cli,
    emitter: open::CliEmitter,
    outcome: Result<(), crate::sink::SinkError>,
    drain_timeout: Duration,
    mut summary: serde_json::Value,
    line: String,
) -> Result<u8, CliError> {
    let published = finish_publishing(&emitter, drain_timeout).await;
    emitter.shutdown().await?;
    outcome?;
    let published = published?;
    summary["unpublished"] = json!(published.unpublished);
    summary["drained"] = json!(published.drained);
    match cli.format {
        Format::Table => println!("{line}\n{}", published.describe()),
        _ => println!("{summary}"),
    }
    Ok(EXIT_OK)
}
