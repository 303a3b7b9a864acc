//! `dlq republish`: publish again the stored events a stream lost after acknowledging them.

use std::collections::HashSet;

use chrono::Utc;
use clap::Args;
use serde_json::json;

use super::{open, Cli, CliError, Format, EXIT_DIFFERENCES, EXIT_OK};
use dlq::bus::NatsBus;
use dlq::consumer::repair::{holding_of_node, missing_events, republish};
use dlq::sink::{LocalSink, Sink};

/// Options of `dlq republish`.
#[derive(Debug, Args)]
pub struct RepublishArgs {
    /// JetStream stream to compare with.
    #[arg(long, default_value = "DLQ")]
    pub stream: String,
    /// Only report what is missing (exit 5 if anything is); publish nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Most event ids to print (all are counted).
    #[arg(long, default_value_t = 20)]
    pub show: usize,
}

/// The log sequences still waiting for the reconciler.
fn unpublished_seqs(sink: &LocalSink) -> Result<HashSet<u64>, CliError> {
    let mut seqs = HashSet::new();
    let mut after = 0;
    loop {
        let page = sink.unpublished(after, 1000)?;
        let Some(last) = page.last() else {
            return Ok(seqs);
        };
        after = last.seq;
        seqs.extend(page.iter().map(|event| event.seq));
    }
}

/// Compares this node's log with the stream and re-publishes what the stream lacks.
pub async fn run_republish(cli: &Cli, args: &RepublishArgs) -> Result<u8, CliError> {
    let config = open::config(cli)?;
    let sink = open::sink(cli, &config).await?;
    let node = sink.node_id().to_owned();
    let found = async {
        let holding = holding_of_node(&config.bus.0, &args.stream, &node)
            .await
            .map_err(|err| CliError::Consumer(err.to_string()))?;
        let unpublished = unpublished_seqs(&sink)?;
        let missing = missing_events(
            sink.events_from(1),
            &holding.positions,
            holding.span.first_time,
            |seq| unpublished.contains(&seq),
        )?;
        Ok::<_, CliError>((holding, missing))
    }
    .await;
    sink.close().await?;
    let (holding, missing) = found?;

    let republished = if args.dry_run || missing.events.is_empty() {
        0
    } else {
        let bus = NatsBus::connect(config.bus.0.clone()).await?;
        bus.ensure_stream().await?;
        let stamp = Utc::now().format("%Y%m%dT%H%M%S%.3fZ").to_string();
        republish(&bus, &missing.events, &stamp)
            .await
            .map_err(|err| CliError::Consumer(err.to_string()))?
    };
    let shown: Vec<&str> = missing
        .events
        .iter()
        .take(args.show)
        .map(|event| event.event_id.as_str())
        .collect();
    let report = json!({
        "node_id": node,
        "stream_messages": holding.messages,
        "held": holding.positions.len(),
        "missing": missing.events.len(),
        "before_stream": missing.before_stream,
        "unpublished": missing.unpublished,
        "republished": republished,
        "dry_run": args.dry_run,
        "events": shown,
    });
    match cli.format {
        Format::Table => {
            let verb = if args.dry_run {
                "would re-publish"
            } else {
                "re-published"
            };
            let count = if args.dry_run {
                missing.events.len() as u64
            } else {
                republished
            };
            println!(
                "node {node}: the stream holds {} of this node's events; {} missing; {verb} {count}",
                holding.positions.len(),
                missing.events.len(),
            );
            for id in &shown {
                println!("  {id}");
            }
            if missing.before_stream > 0 {
                println!(
                    "note: {} events older than the stream's first message were left alone (the stream's limits may have removed them)",
                    missing.before_stream
                );
            }
            if missing.unpublished > 0 {
                println!(
                    "note: {} events are not published yet; `dlq reconcile` publishes them",
                    missing.unpublished
                );
            }
        }
        _ => println!("{report}"),
    }
    Ok(if args.dry_run && !missing.events.is_empty() {
        EXIT_DIFFERENCES
    } else {
        EXIT_OK
    })
}
