//! `dlq generate` (hidden): fills a data directory with synthetic items for benchmarks.
//!
//! Items are the demo's samples spread over `--jobs` jobs (`bench-0`, `bench-1`, ...), with
//! failure times spread over the past `--spread-hours` hours. They go through the sink like any
//! failure (events, projections, group commit), many appends in flight; the events are then
//! marked published, since this synthetic data must never reach a bus.

use chrono::{Duration, Utc};
use clap::Args;
use futures::StreamExt;
use serde_json::json;

use super::demo::sample_item;
use super::work_bar::WorkBar;
use super::{open, Cli, CliError, Format, EXIT_OK};
use dlq::domain::command::Command;
use dlq::sink::{LocalSink, Sink};

/// Appends in flight while generating.
const CONCURRENCY: usize = 64;

/// Options of `dlq generate`.
#[derive(Debug, Args)]
pub struct GenerateArgs {
    /// How many items.
    #[arg(long, default_value_t = 1000)]
    pub items: u64,
    /// Over how many jobs (items per job must stay within capacity_per_job).
    #[arg(long, default_value_t = 100)]
    pub jobs: u64,
    /// Failure times are spread over this many past hours.
    #[arg(long, default_value_t = 720)]
    pub spread_hours: u64,
}

/// Generates the items.
pub async fn run(cli: &Cli, args: &GenerateArgs) -> Result<u8, CliError> {
    let config = open::config(cli)?;
    let jobs = args.jobs.max(1);
    if args.items.div_ceil(jobs) > config.sink.capacity_per_job {
        return Err(CliError::usage(format!(
            "{} items over {jobs} jobs exceed capacity_per_job {}: use more --jobs",
            args.items, config.sink.capacity_per_job
        )));
    }
    let sink = open::sink(cli, &config).await?;
    let started = std::time::Instant::now();
    let (written, failure) = append_generated(&sink, args.items, jobs, args.spread_hours).await;
    sink.close().await?;
    drop(sink);
    open::refresh_snapshot(cli, &config).await;
    if let Some(err) = failure {
        return Err(err);
    }
    let seconds = started.elapsed().as_secs_f64();
    let report = json!({ "items": written, "jobs": jobs, "seconds": seconds });
    match cli.format {
        Format::Table => println!("generated {written} items over {jobs} jobs in {seconds:.1} s"),
        _ => println!("{report}"),
    }
    Ok(EXIT_OK)
}

/// Appends `items` generated items over `jobs` jobs, `CONCURRENCY` in flight, each marked
/// published; returns how many were written and the first failure, which stops the rest.
async fn append_generated(
    sink: &LocalSink,
    items: u64,
    jobs: u64,
    spread_hours: u64,
) -> (u64, Option<CliError>) {
    let now = Utc::now();
    let spread = spread_hours.max(1);
    let appends = futures::stream::iter(0..items)
        .filter_map(|n| {
            let job = format!("bench-{}", n % jobs);
            let mut item = sample_item(&job, n / jobs);
            if let Some(item) = item.as_mut() {
                // Spread times deterministically: minutes ago in [0, spread hours).
                let minutes = (n.wrapping_mul(7919) % (spread * 60)) as i64;
                let at = now - Duration::minutes(minutes);
                item.first_attempt = at;
                item.last_attempt = at;
                for failure in &mut item.failure_history {
                    failure.timestamp = at;
                }
            }
            std::future::ready(item)
        })
        .map(|item| async move {
            let topic = "generate".to_owned();
            let item = std::sync::Arc::new(item);
            let events = sink.append(Command::DeadLetter { topic, item }).await?;
            for event in &events {
                sink.mark_published(event.seq)?;
            }
            Ok::<u64, CliError>(1)
        })
        .buffer_unordered(CONCURRENCY);
    futures::pin_mut!(appends);
    let bar = WorkBar::new(items, "items");
    let mut written = 0u64;
    let mut failure = None;
    while let Some(result) = appends.next().await {
        match result {
            Ok(n) => {
                written += n;
                bar.add(n);
            }
            Err(err) => {
                failure = Some(err);
                break;
            }
        }
    }
    bar.finish();
    (written, failure)
}
