//! `dlq export` (read-only: opens only the sink) and `dlq import` (dead-letters each item
//! through the sink, then lets the reconciler publish the events).

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use futures::StreamExt;
use serde_json::json;

use super::list::with_sink;
use super::work_bar::WorkBar;
use super::{open, Cli, CliError, Format, EXIT_OK};
use crate::query::export::{export, ExportFormat};
use crate::query::import::{ImportLimits, ImportSource};
use crate::query::QueryError;
use dlq::domain::command::Command;
use dlq::emitter::NodeEmitter;
use dlq::emitter::Published;
use dlq::sink::Sink;

/// Scheduler topic recorded on imported items' events.
pub const IMPORT_TOPIC: &str = "import";
/// Appends in flight during an import (they share the sink's group commits).
const IMPORT_CONCURRENCY: usize = 32;

/// Options of `dlq export`.
#[derive(Debug, Args)]
pub struct ExportArgs {
    /// Where to write: a file (json, jsonl, csv) or a new directory (dir). With the default
    /// --format table the format follows the extension: .csv, .jsonl/.ndjson, else json.
    pub path: PathBuf,
    /// Only items of this job (exit 3 if it has none).
    #[arg(long)]
    pub job_id: Option<String>,
}

/// Options of `dlq import`.
#[derive(Debug, Args)]
pub struct ImportArgs {
    /// A directory in the legacy layout (one job directory, or a tree of them), or a
    /// .json / .jsonl file written by `dlq export`.
    pub path: PathBuf,
    /// After importing, wait up to this long for the events to be published.
    #[arg(long, default_value = "5s", value_parser = humantime::parse_duration)]
    pub drain_timeout: Duration,
}

/// Exports the items.
pub async fn run_export(cli: &Cli, args: &ExportArgs) -> Result<u8, CliError> {
    let format = match cli.format {
        Format::Table => ExportFormat::infer(&args.path),
        Format::Json => ExportFormat::Json,
        Format::Jsonl => ExportFormat::Jsonl,
        Format::Csv => ExportFormat::Csv,
        Format::Dir => ExportFormat::Dir,
    };
    let report = with_sink(cli, |sink| {
        Ok(export(sink, args.job_id.as_deref(), format, &args.path)?)
    })
    .await?;
    // Progress and summary go to stderr: stdout may be the export itself in a pipeline.
    eprintln!(
        "exported {} items of {} jobs to {} ({})",
        report.items,
        report.jobs,
        report.path.display(),
        format_name(report.format)
    );
    if cli.format != Format::Table {
        println!("{}", json!(report));
    }
    Ok(EXIT_OK)
}

/// The name of `format` as `--format` takes it (`jsonl`, not `Jsonl`).
fn format_name(format: ExportFormat) -> &'static str {
    match format {
        ExportFormat::Json => "json",
        ExportFormat::Jsonl => "jsonl",
        ExportFormat::Csv => "csv",
        ExportFormat::Dir => "dir",
    }
}

/// Validates the whole source, then dead-letters every item not already in the sink.
pub async fn run_import(cli: &Cli, args: &ImportArgs) -> Result<u8, CliError> {
    let config = open::config(cli)?;
    let limits = ImportLimits {
        max_event_bytes: config.sink.max_event_bytes,
        capacity_per_job: config.sink.capacity_per_job,
    };
    let source = ImportSource::open(&args.path, limits)?;
    let reading = WorkBar::spinner("reading and checking every item before importing");
    let plan = source.validate();
    reading.finish();
    let plan = plan?;
    for warning in &plan.warnings {
        eprintln!("dlq import: warning: {warning}");
    }
    let sink = open::sink(cli, &config).await?;
    let emitter = open::emitter_with_sink(&config, sink, false).await?;
    let outcome = append_all(&emitter, source, plan.items).await;
    let published = emitter.finish_publishing(args.drain_timeout).await;
    emitter.shutdown().await?;
    let (imported, skipped) = outcome?;
    let published: Published = published?;
    let report = json!({
        "path": args.path,
        "found": plan.items,
        "jobs": plan.jobs,
        "imported": imported,
        "skipped_existing": skipped,
        "warnings": plan.warnings,
        "unpublished": published.unpublished,
        "drained": published.drained,
    });
    match cli.format {
        Format::Table => {
            println!(
                "imported {imported} items of {} jobs ({skipped} already present, skipped)",
                plan.jobs.len()
            );
            println!("{}", published.describe());
        }
        _ => println!("{report}"),
    }
    Ok(EXIT_OK)
}

/// Reads the source on a blocking thread and appends its items with bounded concurrency.
/// Returns (imported, skipped because already present).
async fn append_all(
    emitter: &NodeEmitter,
    source: ImportSource,
    found: u64,
) -> Result<(u64, u64), CliError> {
    let (tx, mut rx) = tokio::sync::mpsc::channel(IMPORT_CONCURRENCY * 2);
    let reader = tokio::task::spawn_blocking(move || {
        source.for_each(&mut |found| {
            tx.blocking_send(found.item)
                .map_err(|_| QueryError::Invalid("import stopped".into()))
        })
    });
    let sink = emitter.sink();
    let items = futures::stream::poll_fn(|cx| rx.poll_recv(cx));
    let mut results = items
        .map(|item| async move {
            if sink.item(&item.job_id, &item.item_id)?.is_some() {
                return Ok::<bool, CliError>(false);
            }
            let topic = IMPORT_TOPIC.to_owned();
            let item = std::sync::Arc::new(item);
            sink.append(Command::DeadLetter { topic, item }).await?;
            Ok(true)
        })
        .buffer_unordered(IMPORT_CONCURRENCY);
    let (mut imported, mut skipped) = (0u64, 0u64);
    let mut failure = None;
    let bar = WorkBar::new(found, "items");
    while let Some(result) = results.next().await {
        bar.add(1);
        match result {
            Ok(true) => imported += 1,
            Ok(false) => skipped += 1,
            Err(err) => {
                failure = Some(err);
                break;
            }
        }
    }
    bar.finish();
    drop(results);
    rx.close();
    let read = reader
        .await
        .map_err(|err| CliError::usage(format!("the import reader stopped: {err}")))?;
    if let Some(err) = failure {
        eprintln!("dlq import: stopped after {imported} items; run it again to import the rest (items already present are skipped)");
        return Err(err);
    }
    read?;
    Ok((imported, skipped))
}
