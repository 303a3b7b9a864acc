//! `dlq consume` and `dlq verify`: the dead-letter state rebuilt from the stream alone.

use std::collections::BTreeMap;

use clap::Args;
use serde_json::json;

use super::{open, Cli, CliError, Format, EXIT_DIFFERENCES, EXIT_OK};
use crate::consumer::{compare, read_from_start, Difference, ReadError};
use crate::sink::Sink;

/// Options of `dlq consume`.
#[derive(Debug, Args)]
pub struct ConsumeArgs {
    /// JetStream stream to read.
    #[arg(long, default_value = "DLQ")]
    pub stream: String,
}

/// Options of `dlq verify`.
#[derive(Debug, Args)]
pub struct VerifyArgs {
    /// JetStream stream to read.
    #[arg(long, default_value = "DLQ")]
    pub stream: String,
    /// Most differences to print (all are counted).
    #[arg(long, default_value_t = 50)]
    pub show: usize,
}

impl From<ReadError> for CliError {
    fn from(err: ReadError) -> Self {
        CliError::Consumer(err.to_string())
    }
}

/// Rebuilds the projection of every node from the start of the stream and prints a summary.
pub async fn consume(cli: &Cli, args: &ConsumeArgs) -> Result<u8, CliError> {
    let read = read_from_start(&cli.nats_url, &args.stream, None).await?;
    let mut jobs: BTreeMap<&str, u64> = BTreeMap::new();
    for (job, _) in read.fold.projection.items.keys() {
        *jobs.entry(job.as_str()).or_default() += 1;
    }
    let nodes: BTreeMap<&str, u64> = read
        .fold
        .nodes
        .iter()
        .map(|(node, cursor)| (node.as_str(), cursor.applied))
        .collect();
    let report = json!({
        "stream_messages": read.messages,
        "last_stream_seq": read.last_stream_seq,
        "events_applied": read.fold.stats.applied,
        "duplicates_dropped": read.fold.stats.duplicates,
        "waiting_for_predecessor": read.fold.waiting(),
        "malformed": read.malformed,
        "items": read.fold.projection.items.len(),
        "items_per_job": jobs,
        "last_seq_per_node": nodes,
    });
    match cli.format {
        Format::Table => {
            println!(
                "read {} messages up to stream sequence {}: {} events applied, {} duplicates dropped, {} waiting",
                read.messages,
                read.last_stream_seq,
                read.fold.stats.applied,
                read.fold.stats.duplicates,
                read.fold.waiting()
            );
            println!("{} open items", read.fold.projection.items.len());
            for (job, count) in &jobs {
                println!("  {job}: {count}");
            }
        }
        _ => println!("{report}"),
    }
    Ok(EXIT_OK)
}

/// Compares the data directory's sink with the stream's projection of the same node.
pub async fn verify(cli: &Cli, args: &VerifyArgs) -> Result<u8, CliError> {
    let config = open::config(cli)?;
    let sink = open::sink(cli, &config)?;
    let node = sink.node_id().to_owned();
    let backlog = sink.backlog()?;
    let read = read_from_start(&cli.nats_url, &args.stream, Some(&node)).await?;
    let differences = compare(sink.items(), &read.fold.projection)?;
    sink.close().await?;
    let count = |f: fn(&Difference) -> bool| differences.iter().filter(|d| f(d)).count();
    let missing = count(|d| matches!(d, Difference::Missing { .. }));
    let extra = count(|d| matches!(d, Difference::Extra { .. }));
    let diverging = count(|d| matches!(d, Difference::Diverging { .. }));
    let shown: Vec<&Difference> = differences.iter().take(args.show).collect();
    let report = json!({
        "node_id": node,
        "unpublished": backlog.count,
        "events_applied": read.fold.stats.applied,
        "duplicates_dropped": read.fold.stats.duplicates,
        "waiting_for_predecessor": read.fold.waiting(),
        "missing": missing,
        "extra": extra,
        "diverging": diverging,
        "differences": shown,
    });
    match cli.format {
        Format::Table => {
            println!(
                "node {node}: {missing} missing, {extra} extra, {diverging} diverging ({} events applied, {} duplicates dropped)",
                read.fold.stats.applied, read.fold.stats.duplicates
            );
            for difference in shown {
                println!(
                    "  {}",
                    serde_json::to_string(difference).unwrap_or_default()
                );
            }
            if backlog.count > 0 {
                println!("note: {} events are still unpublished; run `dlq reconcile` first for a meaningful comparison", backlog.count);
            }
        }
        _ => println!("{report}"),
    }
    Ok(if differences.is_empty() {
        EXIT_OK
    } else {
        EXIT_DIFFERENCES
    })
}
