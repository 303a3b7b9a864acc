//! `dlq tour`: the first run that shows what dlq is for.
//!
//! It runs the example MapReduce job (12 items, 3 of which keep failing) against a private
//! `nats-server`, takes that server down, runs the job again while the bus is gone (the
//! failures wait in the sink), brings the bus back, waits for the reconciler to publish the
//! backlog, and then rebuilds the tour's items from the stream alone to show that nothing was
//! lost. Without `nats-server` it says how to get one and shows the durable side only; with
//! `--nats-url` it uses that server and skips the outage (it cannot take someone's server down).

mod example;
mod private_bus;

use std::collections::BTreeSet;
use std::io::Write;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use clap::Args;
use serde_json::json;
use tokio_util::sync::CancellationToken;

use super::open::{self, NodeEmitter};
use super::{Cli, CliError, Format, EXIT_DIFFERENCES, EXIT_OK};
use crate::runner::{self, ProgressMode, RunOptions};
use dlq::consumer::{compare_node, read_from_start, Difference};
use dlq::domain::projection::MemoryProjection;
use dlq::sink::Sink;
use private_bus::PrivateBus;

/// Options of `dlq tour`.
#[derive(Debug, Args)]
pub struct TourArgs {
    /// How long the bus stays down after the second run's failures are stored.
    #[arg(long, default_value = "3s", value_parser = humantime::parse_duration)]
    pub outage: Duration,
    /// How long to wait for the reconciler to publish the backlog once the bus is back.
    #[arg(long, default_value = "60s", value_parser = humantime::parse_duration)]
    pub drain_timeout: Duration,
}

/// Why the tour could not run.
#[derive(Debug, thiserror::Error)]
pub enum TourError {
    /// No free loopback port for the private server.
    #[error("cannot find a free loopback port for the tour's nats-server: {0}")]
    Port(#[source] std::io::Error),
    /// Starting or stopping the private server failed.
    #[error("cannot run the tour's nats-server: {0}")]
    Server(#[source] std::io::Error),
    /// The private server did not listen in time.
    #[error("the tour's nats-server did not start listening; its log is {}", .0.display())]
    NotReady(PathBuf),
    /// Writing the example workflow failed.
    #[error("cannot write the example workflow into {}: {source}", .dir.display())]
    Example {
        /// Where it was written.
        dir: PathBuf,
        /// Why it failed.
        source: std::io::Error,
    },
}

/// Where the bus of the tour comes from.
enum BusSource {
    /// A `nats-server` the tour starts, stops and starts again.
    Private(Box<PrivateBus>),
    /// The server of `--nats-url`: used as it is, never taken down.
    External,
    /// No `nats-server` found: the durable side only.
    None,
}

/// Runs the tour.
pub async fn run(cli: &Cli, args: &TourArgs) -> Result<u8, CliError> {
    let json_output = !matches!(cli.format, Format::Table);
    let say = |line: String| {
        if json_output {
            eprintln!("{line}");
        } else {
            println!("{line}");
        }
    };
    let mut config = open::config(cli)?;
    let tour_dir = cli.data_dir.join("tour");
    let mut source = if super::bus_flags::server_url(cli).is_some() {
        BusSource::External
    } else if let Some(bin) = private_bus::find_binary() {
        let bus = PrivateBus::start(bin, &tour_dir.join("nats")).await?;
        config.bus.0.url = bus.url();
        BusSource::Private(Box::new(bus))
    } else {
        say("nats-server was not found (NATS_SERVER_BIN, PATH, /usr/sbin): this tour shows the durable side only.".into());
        say("Get it with `apt-get install nats-server` (Debian) or `scripts/install-nats-server.sh`, then run `dlq tour` again.".into());
        BusSource::None
    };
    // Short waits, so that the outage shows at once; the reconciler takes over from there.
    config.bus.0.publish_timeout = Duration::from_millis(500);
    config.bus.0.reconnect_max_delay = Duration::from_millis(200);
    config.topics.default.retry_attempts = 0;
    config.reconciler.interval = Duration::from_millis(200);
    say(format!(
        "bus: {}",
        dlq::bus::auth::redact_url(&config.bus.0.url)
    ));

    let workflow = example::write(&tour_dir.join("workflow"))?;
    let sink = open::sink(cli, &config).await?;
    let emitter = open::emitter_with_sink(&config, sink, false).await?;
    let stamp = chrono::Utc::now().format("%Y%m%dT%H%M%S");
    let mut jobs = Vec::new();

    let first = format!("tour-{stamp}-a");
    let report = run_job(cli, &emitter, &workflow, &first).await?;
    jobs.push(first.clone());
    let published = emitter.wait_for_drain(Duration::from_secs(10)).await?;
    say(format!(
        "1. job {first}: {} of {} items succeeded, {} kept failing and were dead-lettered: stored in {} first, {}",
        report.summary.successful,
        report.summary.total,
        report.summary.failed,
        cli.data_dir.display(),
        if published { "then published to the bus" } else { "not yet published (no bus)" }
    ));

    let mut stored_while_down = 0;
    if let BusSource::Private(bus) = &mut source {
        bus.stop().await?;
        say("2. the bus is down (nats-server killed)".into());
        let second = format!("tour-{stamp}-b");
        let report = run_job(cli, &emitter, &workflow, &second).await?;
        jobs.push(second.clone());
        stored_while_down = emitter.sink().backlog()?.count;
        say(format!(
            "   job {second} ran meanwhile: its {} failures are durable; {stored_while_down} events wait in the sink to be published",
            report.summary.failed
        ));
        tokio::time::sleep(args.outage).await;
        bus.resume().await?;
        say(format!(
            "3. the bus is back after {}; the reconciler publishes the backlog...",
            humantime::format_duration(args.outage)
        ));
    }
    let started = Instant::now();
    let drained = match source {
        BusSource::None => false,
        _ => emitter.wait_for_drain(args.drain_timeout).await?,
    };
    let unpublished = emitter.sink().backlog()?.count;
    if drained && stored_while_down > 0 {
        say(format!(
            "   published in {:.1} s",
            started.elapsed().as_secs_f64()
        ));
    }

    let check = match source {
        BusSource::None => None,
        _ => Some(compare_with_stream(&config, &emitter, &jobs).await?),
    };
    let node = emitter.sink().node_id().to_owned();
    emitter.shutdown().await?;
    if let BusSource::Private(bus) = &mut source {
        bus.stop().await?;
    }
    let lost = check.as_ref().map(|c| c.missing + c.diverging);
    if let Some(check) = &check {
        say(format!(
            "4. from the stream alone: {} of the tour's {} dead-lettered items rebuilt, {} missing, {} diverging: {}",
            check.rebuilt,
            check.in_sink,
            check.missing,
            check.diverging,
            if check.missing + check.diverging == 0 { "nothing was lost" } else { "SOMETHING WAS LOST" }
        ));
    } else {
        say(format!(
            "   {unpublished} events are waiting in the sink; with a NATS server on the configured URL, `dlq --data-dir {} reconcile` publishes them",
            cli.data_dir.display()
        ));
    }
    let dir = cli.data_dir.display();
    say(format!("Look at them: `dlq --data-dir {dir} list`, `dlq --data-dir {dir} analyze`, or the web page: `dlq --data-dir {dir} serve`, then open http://127.0.0.1:9465/"));
    if json_output {
        let summary = json!({
            "node_id": node,
            "bus": match source { BusSource::Private(_) => "private", BusSource::External => "external", BusSource::None => "none" },
            "jobs": jobs,
            "stored_while_bus_down": stored_while_down,
            "drained": drained,
            "unpublished": unpublished,
            "in_sink": check.as_ref().map(|c| c.in_sink),
            "rebuilt_from_stream": check.as_ref().map(|c| c.rebuilt),
            "missing": check.as_ref().map(|c| c.missing),
            "diverging": check.as_ref().map(|c| c.diverging),
        });
        let mut out = std::io::stdout();
        writeln!(out, "{summary}")?;
    }
    Ok(if lost.unwrap_or(0) == 0 {
        EXIT_OK
    } else {
        EXIT_DIFFERENCES
    })
}

/// Runs the example workflow once as `job_id`, quietly.
async fn run_job(
    cli: &Cli,
    emitter: &NodeEmitter,
    workflow: &std::path::Path,
    job_id: &str,
) -> Result<runner::JobReport, CliError> {
    let options = RunOptions::new(&cli.data_dir);
    let report = runner::start(
        emitter.clone(),
        workflow,
        Some(job_id.to_owned()),
        options,
        CancellationToken::new(),
        ProgressMode::Quiet,
    )
    .await
    .map_err(crate::request::RequestError::from)?;
    Ok(report)
}

/// The tour's items in the sink against the same items rebuilt from the stream.
struct StreamCheck {
    in_sink: usize,
    rebuilt: usize,
    missing: usize,
    diverging: usize,
}

async fn compare_with_stream(
    config: &dlq::config::Config,
    emitter: &NodeEmitter,
    jobs: &[String],
) -> Result<StreamCheck, CliError> {
    let node = emitter.sink().node_id().to_owned();
    let read = read_from_start(&config.bus.0, &config.bus.0.stream, Some(&node))
        .await
        .map_err(|err| CliError::Consumer(err.to_string()))?;
    let ours: BTreeSet<&str> = jobs.iter().map(String::as_str).collect();
    let rebuilt = MemoryProjection {
        items: read
            .fold
            .projection
            .items
            .into_iter()
            .filter(|((job, _), _)| ours.contains(job.as_str()))
            .collect(),
    };
    let sink_items: Vec<_> = emitter
        .sink()
        .items()
        .filter(|item| {
            item.as_ref()
                .map_or(true, |i| ours.contains(i.item.job_id.as_str()))
        })
        .collect();
    let in_sink = sink_items.len();
    let differences = compare_node(sink_items, &rebuilt, Some(&node))?;
    let count = |f: fn(&Difference) -> bool| differences.iter().filter(|d| f(d)).count();
    Ok(StreamCheck {
        in_sink,
        rebuilt: rebuilt.items.len(),
        missing: count(|d| matches!(d, Difference::Missing { .. })),
        diverging: count(|d| matches!(d, Difference::Diverging { .. })),
    })
}
