//! `dlq status`, `dlq reconcile` and `dlq rebuild`: looking after the data directory.

use std::time::Duration;

use clap::Args;
use serde_json::json;

use super::{open, Cli, CliError, Format, EXIT_INCOMPLETE, EXIT_OK};
use dlq::bus::BusError;
use dlq::sink::Sink;

/// Options of `dlq reconcile`.
#[derive(Debug, Args)]
pub struct ReconcileArgs {
    /// Give up (exit 4) if events are still unpublished after this long.
    #[arg(long, default_value = "60s", value_parser = humantime::parse_duration)]
    pub timeout: Duration,
    /// First move the parked events (listed by `dlq status`) back into the unpublished set, so
    /// they are tried again; exit 4 if any is parked again.
    #[arg(long)]
    pub retry_parked: bool,
}

/// Prints node id, item count and backlog.
pub async fn status(cli: &Cli) -> Result<u8, CliError> {
    let config = open::config(cli)?;
    let sink = open::sink(cli, &config).await?;
    // From the per-job counters: no item is read.
    let items: u64 = sink
        .jobs()?
        .iter()
        .map(|(_, counters)| counters.items)
        .sum();
    let backlog = sink.backlog()?;
    let parked = sink.parked()?;
    let report = json!({
        "node_id": sink.node_id(),
        "data_dir": cli.data_dir,
        "items": items,
        "unpublished": backlog.count,
        "oldest_unpublished": backlog.oldest,
        "parked": parked,
    });
    sink.close().await?;
    match cli.format {
        Format::Json | Format::Jsonl | Format::Csv | Format::Dir => println!("{report}"),
        Format::Table => {
            println!("node:        {}", report["node_id"].as_str().unwrap_or(""));
            println!("data dir:    {}", cli.data_dir.display());
            println!("items:       {items}");
            println!("unpublished: {}", backlog.count);
            if let Some(oldest) = backlog.oldest {
                println!("oldest unpublished event written at {oldest}");
            }
            println!("parked:      {}", parked.len());
            for event in &parked {
                let id = event.event_id.as_deref().unwrap_or("(unreadable)");
                println!(
                    "  seq {} {id}, parked at {}: {}",
                    event.seq, event.parked_at, event.reason
                );
            }
            if !parked.is_empty() {
                println!("retry the parked events with `dlq reconcile --retry-parked`");
            }
        }
    }
    Ok(EXIT_OK)
}

/// Publishes the backlog and waits for it to drain.
pub async fn reconcile(cli: &Cli, args: &ReconcileArgs) -> Result<u8, CliError> {
    let config = open::config(cli)?;
    if let Some(addr) = config.metrics_addr {
        dlq::metrics::serve_prometheus(addr)?;
    }
    // The backlog is counted before the reconciler starts: it may publish all of it at once.
    let sink = open::sink(cli, &config).await?;
    let counted = (|| {
        let unparked = if args.retry_parked {
            sink.unpark_all()?
        } else {
            0
        };
        Ok::<_, CliError>((unparked, sink.backlog()?.count))
    })();
    let (unparked, before) = match counted {
        Ok(counted) => counted,
        Err(err) => {
            sink.close().await?;
            return Err(err);
        }
    };
    // A bus that refuses the settings (or whose host does not resolve) is said at once:
    // waiting cannot help. One that does not answer is waited for, up to --timeout.
    if before > 0 {
        match open::reach_bus(&config.bus.0).await {
            Ok(()) | Err(CliError::Bus(BusError::Unreachable { .. })) => {}
            Err(err) => {
                let parked = sink.parked().map(|parked| parked.len());
                sink.close().await?;
                say_unpublished(&err, before);
                let outcome = Outcome {
                    before,
                    after: before,
                    drained: false,
                    unparked,
                    parked: parked?,
                };
                return outcome.report(cli, args);
            }
        }
    }
    let emitter = open::emitter_with_sink(&config, sink, true).await?;
    emitter.wake_reconciler();
    let drained = emitter.wait_for_drain(args.timeout).await?;
    let after = emitter.sink().backlog()?.count;
    let parked = emitter.sink().parked()?.len();
    emitter.shutdown().await?;
    if after > 0 {
        // Name the bus and why it did not take the events, when it is the cause.
        if let Err(err) = open::reach_bus(&config.bus.0).await {
            say_unpublished(&err, after);
        }
    }
    Outcome {
        before,
        after,
        drained,
        unparked,
        parked,
    }
    .report(cli, args)
}

/// One line on stderr: why the bus did not take the `count` unpublished events, which stay
/// stored.
fn say_unpublished(err: &CliError, count: u64) {
    eprintln!(
        "dlq: {err}; the {count} unpublished events stay stored: run `dlq reconcile` again once \
         the bus answers"
    );
}

/// What `dlq reconcile` did.
struct Outcome {
    before: u64,
    after: u64,
    drained: bool,
    unparked: u64,
    parked: usize,
}

impl Outcome {
    /// Prints the outcome; exit 4 while events remain unpublished (or parked again).
    fn report(&self, cli: &Cli, args: &ReconcileArgs) -> Result<u8, CliError> {
        let Outcome {
            before,
            after,
            drained,
            unparked,
            parked,
        } = *self;
        let report = json!({
            "unpublished_before": before,
            "unpublished_after": after,
            "drained": drained,
            "unparked": unparked,
            "parked": parked,
        });
        match cli.format {
            Format::Json | Format::Jsonl | Format::Csv | Format::Dir => println!("{report}"),
            Format::Table => {
                println!(
                    "published {} events; {after} still unpublished",
                    before.saturating_sub(after)
                );
                if parked > 0 {
                    println!("{parked} events parked: see `dlq status`");
                }
            }
        }
        let parked_again = args.retry_parked && parked > 0;
        Ok(if drained && !parked_again {
            EXIT_OK
        } else {
            EXIT_INCOMPLETE
        })
    }
}

/// Rebuilds the projection from the log.
pub async fn rebuild(cli: &Cli) -> Result<u8, CliError> {
    let config = open::config(cli)?;
    let sink = open::sink(cli, &config).await?;
    let replayed = sink.rebuild_projection().await?;
    sink.close().await?;
    match cli.format {
        Format::Json | Format::Jsonl | Format::Csv | Format::Dir => {
            println!("{}", json!({ "events_replayed": replayed }))
        }
        Format::Table => println!("projection rebuilt from {replayed} events"),
    }
    Ok(EXIT_OK)
}
