//! `dlq consume` and `dlq verify`: the dead-letter state rebuilt from the stream alone.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use clap::Args;
use serde_json::json;

use super::{open, Cli, CliError, Format, EXIT_DIFFERENCES, EXIT_OK};
use dlq::consumer::{
    compare_node, explain_held, read_from_start, run_durable, ConsumeError, ConsumerStore,
    Difference, DurableConfig, Fold, ReadError, StoreError, StreamRead,
};
use dlq::sink::Sink;

/// Options of `dlq consume`.
#[derive(Debug, Args)]
pub struct ConsumeArgs {
    /// JetStream stream to read.
    #[arg(long, default_value = "DLQ")]
    pub stream: String,
    /// Run as a durable consumer with this name, keeping its state in --store (without it the
    /// stream is read from the start into memory and only summarised).
    #[arg(long, requires = "store")]
    pub durable: Option<String>,
    /// Directory of the durable consumer's own sled store (not the emitter's data directory).
    #[arg(long, requires = "durable")]
    pub store: Option<PathBuf>,
    /// Forget the durable consumer's state and rebuild it from the first message.
    #[arg(long, requires = "durable")]
    pub from_start: bool,
    /// Keep consuming until interrupted (Ctrl-C or SIGTERM) instead of stopping when caught up.
    #[arg(long, requires = "durable")]
    pub follow: bool,
    /// Give up the events missing from the stream before this node's oldest waiting event (in
    /// its epoch, or in the earlier epoch that event names), and apply what waited behind them
    /// (audited in the store and the log; with --durable only).
    /// Repair with `dlq republish` instead when the emitting node still has the events.
    #[arg(long, value_name = "NODE", requires = "durable")]
    pub accept_gap: Vec<String>,
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
    /// Compare with a durable consumer's store instead of reading the stream.
    #[arg(long)]
    pub consumer_store: Option<PathBuf>,
}

impl From<ReadError> for CliError {
    fn from(err: ReadError) -> Self {
        CliError::Consumer(err.to_string())
    }
}

impl From<StoreError> for CliError {
    fn from(err: StoreError) -> Self {
        CliError::Consumer(err.to_string())
    }
}

impl From<ConsumeError> for CliError {
    fn from(err: ConsumeError) -> Self {
        CliError::Consumer(err.to_string())
    }
}

/// Runs a durable consumer: until caught up, or with --follow until Ctrl-C / SIGTERM.
async fn consume_durable(
    cli: &Cli,
    args: &ConsumeArgs,
    name: &str,
    store_dir: &Path,
) -> Result<u8, CliError> {
    if let Some(addr) = cli.metrics_addr {
        dlq::metrics::serve_prometheus(addr)?;
    }
    let store = ConsumerStore::open(store_dir)?;
    let config = DurableConfig {
        bus: open::config(cli)?.bus.0,
        stream: args.stream.clone(),
        name: name.to_owned(),
        from_start: args.from_start,
        follow: args.follow,
        accept_gaps: args.accept_gap.clone(),
    };
    let shutdown = super::signals::cancel_on_signal();
    let run = run_durable(&config, &store, shutdown).await?;
    let report = json!({
        "consumer": name,
        "checkpoint": run.checkpoint,
        "messages_this_run": run.messages,
        "events_applied_this_run": run.applied_this_run,
        "events_applied": run.fold.stats.applied,
        "duplicates_dropped": run.fold.stats.duplicates,
        "waiting_for_predecessor": run.fold.waiting(),
        "oldest_waiting": run.fold.oldest_waiting(),
        "gaps_accepted": run.accepted,
        "items": run.fold.projection.items.len(),
        "held": held_report(&run.fold),
        "lost": run.fold.stats.lost,
    });
    match cli.format {
        Format::Table => {
            println!(
                "consumer {name} at stream sequence {}: {} events applied this run ({} in all), {} items",
                run.checkpoint,
                run.applied_this_run,
                run.fold.stats.applied,
                run.fold.projection.items.len()
            );
            if let Some(oldest) = run.fold.oldest_waiting() {
                println!(
                    "warning: {} events wait behind a gap since {oldest}: an earlier event of their node is missing from the stream (deleted, removed by the stream's limits, or lost); run `dlq republish` on that node to repair it",
                    run.fold.waiting()
                );
            }
            print_held(&run.fold);
        }
        _ => println!("{report}"),
    }
    Ok(EXIT_OK)
}

/// The items a fold holds back: "held on node N, too large for the bus".
fn held_report(fold: &Fold) -> Vec<serde_json::Value> {
    fold.held
        .iter()
        .map(|((job_id, item_id), held)| {
            json!({
                "job_id": job_id,
                "item_id": item_id,
                "node": held.node,
                "size_bytes": held.size_bytes,
                "reason": held.reason,
                "status": format!("held on node {}, too large for the bus", held.node),
            })
        })
        .collect()
}

/// The held items and loss markers of a fold, for the table format.
fn print_held(fold: &Fold) {
    for ((job, item), held) in &fold.held {
        println!(
            "  {job}/{item}: held on node {}, too large for the bus ({} bytes); it follows once the node's `dlq reconcile --retry-parked` gets through",
            held.node, held.size_bytes
        );
    }
    if fold.stats.lost > 0 {
        println!(
            "{} events lost on their node (unreadable log entries, published as loss markers)",
            fold.stats.lost
        );
    }
}

/// Rebuilds the projection of every node from the start of the stream and prints a summary.
pub async fn consume(cli: &Cli, args: &ConsumeArgs) -> Result<u8, CliError> {
    if let (Some(name), Some(store)) = (&args.durable, &args.store) {
        return consume_durable(cli, args, name, store).await;
    }
    let bus = open::config(cli)?.bus.0;
    let read = read_from_start(&bus, &args.stream, None).await?;
    let mut jobs: BTreeMap<&str, u64> = BTreeMap::new();
    for (job, _) in read.fold.projection.items.keys() {
        *jobs.entry(job.as_str()).or_default() += 1;
    }
    let nodes: BTreeMap<&str, u64> = read
        .fold
        .nodes
        .iter()
        .map(|(node, cursor)| (node.as_str(), cursor.highest_applied()))
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
        "held": held_report(&read.fold),
        "lost": read.fold.stats.lost,
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
            print_held(&read.fold);
        }
        _ => println!("{report}"),
    }
    Ok(EXIT_OK)
}

/// Compares the data directory's sink with the stream's projection of the same node.
pub async fn verify(cli: &Cli, args: &VerifyArgs) -> Result<u8, CliError> {
    let config = open::config(cli)?;
    let sink = open::sink(cli, &config).await?;
    let node = sink.node_id().to_owned();
    let backlog = sink.backlog()?;
    let read = match &args.consumer_store {
        Some(path) => {
            let fold = ConsumerStore::open(path).and_then(|store| store.load())?;
            StreamRead {
                fold,
                ..StreamRead::default()
            }
        }
        None => read_from_start(&config.bus.0, &args.stream, Some(&node)).await?,
    };
    // A consumer store holds every node's items: only this node's count as extra.
    let differences = compare_node(sink.items(), &read.fold.projection, Some(&node))?;
    let differences = explain_held(differences, &read.fold.held);
    sink.close().await?;
    let count = |f: fn(&Difference) -> bool| differences.iter().filter(|d| f(d)).count();
    let missing = count(|d| matches!(d, Difference::Missing { .. }));
    let extra = count(|d| matches!(d, Difference::Extra { .. }));
    let diverging = count(|d| matches!(d, Difference::Diverging { .. }));
    let unstored = count(|d| matches!(d, Difference::Unstored { .. }));
    let held = count(|d| matches!(d, Difference::Held { .. }));
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
        "unstored": unstored,
        "held": held,
        "lost": read.fold.stats.lost,
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
            if held > 0 {
                println!("note: {held} items are held on this node, too large for the bus: raise the server's max_payload, then run `dlq reconcile --retry-parked`");
            }
            if unstored > 0 {
                println!("note: {unstored} items were published, not stored on this node (the sink failed to store them and the caller was told so); they are not a loss");
            }
            if backlog.count > 0 {
                println!("note: {} events are still unpublished; run `dlq reconcile` first for a meaningful comparison", backlog.count);
            }
        }
        _ => println!("{report}"),
    }
    Ok(if !differences.iter().any(Difference::is_disagreement) {
        EXIT_OK
    } else {
        EXIT_DIFFERENCES
    })
}
