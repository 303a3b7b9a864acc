//! `dlq run`, `dlq resume`, `dlq events` and `dlq jobs`: the MapReduce job runner.

use std::io::{BufWriter, Write};
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, ValueEnum};
use tokio_util::sync::CancellationToken;

use super::drain::Drained;
use super::open::{self, NodeEmitter};
use super::{Cli, CliError, Format, EXIT_ERROR, EXIT_INCOMPLETE, EXIT_OK};
use crate::render::table::{cut, write_table};
use crate::runner::DEFAULT_AGENT_COMMAND;
use crate::runner::{self, list_jobs, JobReport, JobStore, ProgressMode, RunError, RunOptions};
use dlq::config::Config;
use dlq::sink::Sink;

/// How progress is shown.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, ValueEnum)]
pub enum ProgressArg {
    /// A bar on a terminal, one line per item otherwise.
    #[default]
    Auto,
    /// One line per finished item.
    Lines,
    /// Only the summary.
    Quiet,
}

/// Options shared by `run` and `resume`.
#[derive(Debug, Args)]
pub struct RunnerArgs {
    /// Program and arguments for `claude:` steps, split on spaces; the step's prompt is
    /// appended as one argument [default: agent_command of --config, else "claude --print"].
    #[arg(long, env = "DLQ_AGENT_COMMAND")]
    pub agent_command: Option<String>,
    /// Topic the failed items are dead-lettered under (per-topic retry settings apply).
    #[arg(long, default_value = crate::runner::DEFAULT_TOPIC)]
    pub dlq_topic: String,
    /// How progress is shown.
    #[arg(long, value_enum, default_value_t)]
    pub progress: ProgressArg,
    /// At the end, wait this long for the bus to acknowledge every DLQ event (the rest is
    /// published by the next process that opens the data directory); not at all while the bus
    /// is down.
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
    pub drain_timeout: Duration,
    /// Named tokens with roles for the job's admin API, as for `dlq serve --tokens-file`.
    #[arg(long, env = "DLQ_API_TOKENS_FILE", value_name = "FILE")]
    pub tokens_file: Option<PathBuf>,
}

/// Options of `dlq run`.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// The workflow file (YAML, `mode: mapreduce`).
    pub workflow: PathBuf,
    /// Id of the new job [default: <workflow name>-<UTC time>].
    #[arg(long)]
    pub job_id: Option<String>,
    /// Runner options.
    #[command(flatten)]
    pub runner: RunnerArgs,
}

/// Options of `dlq resume`.
#[derive(Debug, Args)]
pub struct ResumeArgs {
    /// The job to continue.
    pub job_id: String,
    /// Also re-run the job's items that are in the DLQ; those that succeed leave it.
    #[arg(long)]
    pub include_dlq_items: bool,
    /// Runner options.
    #[command(flatten)]
    pub runner: RunnerArgs,
}

/// Options of `dlq events`.
#[derive(Debug, Args)]
pub struct EventsArgs {
    /// The job.
    pub job_id: String,
    /// Only events of this name (e.g. CircuitOpen, AgentFailed).
    #[arg(long)]
    pub event: Option<String>,
}

/// The emitter of a job, and the admin API it serves while the job runs (on a free loopback
/// port, announced in `serve.json`), so `dlq list` and the other operator commands work on the
/// data directory the job holds; and the configuration they were opened with.
async fn open_with_api(
    cli: &Cli,
    runner: &RunnerArgs,
) -> Result<(NodeEmitter, JobApi, Config), CliError> {
    use crate::serve::AppState;
    use crate::serve::{install_metrics, Listener};
    let config = open::config(cli)?;
    let tokens = super::serve::api_tokens(cli, runner.tokens_file.as_deref())?;
    let metrics = install_metrics(config.metrics_addr)?;
    let sink = open::sink(cli, &config).await?;
    let emitter = open::emitter_with_sink(&config, sink, true).await?;
    let stop = CancellationToken::new();
    let listener = match Listener::bind(std::net::SocketAddr::from(([127, 0, 0, 1], 0)), None).await
    {
        Ok(listener) => listener,
        Err(err) => {
            tracing::warn!(error = %err, "no admin API during this job: other commands cannot reach the data directory");
            return Ok((emitter, JobApi { stop, task: None }, config));
        }
    };
    let state = AppState {
        emitter: emitter.clone(),
        metrics,
        run: server_run_options(cli, &config),
        control_prefix: Some(crate::serve::control::DEFAULT_PREFIX.to_owned()),
    };
    let data_dir = cli.data_dir.clone();
    let stopped = stop.clone();
    let task = tokio::spawn(async move {
        let shutdown = async move { stopped.cancelled().await };
        if let Err(err) = crate::serve::serve(listener, state, tokens, &data_dir, shutdown).await {
            tracing::warn!(error = %err, "the job's admin API stopped");
        }
    });
    Ok((
        emitter,
        JobApi {
            stop,
            task: Some(task),
        },
        config,
    ))
}

/// The admin API a job serves; [`JobApi::stop`] ends it, removes `serve.json`, and returns
/// once none of its connections or queries holds the emitter (see `crate::serve::serve`).
struct JobApi {
    stop: CancellationToken,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl JobApi {
    async fn stop(self) {
        self.stop.cancel();
        if let Some(task) = self.task {
            let _ = task.await;
        }
    }
}

/// Runs a new job.
pub async fn run_job(cli: &Cli, args: &RunArgs) -> Result<u8, CliError> {
    // A workflow that cannot run fails before the data directory is opened (and created).
    runner::check_workflow(&args.workflow).await?;
    session(cli, &args.runner, |emitter, options, cancel, mode| {
        runner::start(
            emitter,
            &args.workflow,
            args.job_id.clone(),
            options,
            cancel,
            mode,
        )
    })
    .await
}

/// Continues a job.
pub async fn resume_job(cli: &Cli, args: &ResumeArgs) -> Result<u8, CliError> {
    session(cli, &args.runner, |emitter, options, cancel, mode| {
        runner::resume(
            emitter,
            &args.job_id,
            args.include_dlq_items,
            options,
            cancel,
            mode,
        )
    })
    .await
}

/// One runner session: open the emitter and the job's API, run `job` until it ends or a
/// signal cancels it, stop the API, drain and report.
///
/// Every other handle of the emitter is gone before [`finish`] shuts it down: `job`'s ended
/// with it (the runner joins every task it spawned before returning), and the API's with
/// [`JobApi::stop`].
async fn session<F, Fut>(cli: &Cli, runner: &RunnerArgs, job: F) -> Result<u8, CliError>
where
    F: FnOnce(NodeEmitter, RunOptions, CancellationToken, ProgressMode) -> Fut,
    Fut: std::future::Future<Output = Result<JobReport, RunError>>,
{
    let (options, mode) = runner_options(cli, runner)?;
    let (emitter, api, config) = open_with_api(cli, runner).await?;
    let cancel = super::signals::cancel_on_signal();
    let result = job(emitter.clone(), options, cancel, mode).await;
    api.stop().await;
    finish(cli, &config, emitter, runner, result).await
}

/// Run options for a server (`dlq serve`): the agent command of `DLQ_AGENT_COMMAND`, else of
/// the config file, else the default.
pub(crate) fn server_run_options(cli: &Cli, config: &Config) -> RunOptions {
    let command = std::env::var("DLQ_AGENT_COMMAND")
        .ok()
        .or_else(|| config.agent_command.clone())
        .unwrap_or_else(|| DEFAULT_AGENT_COMMAND.to_owned());
    let mut options = RunOptions::new(&cli.data_dir);
    options.agent_command = command.split_whitespace().map(str::to_owned).collect();
    options
}

pub(super) fn runner_options(
    cli: &Cli,
    args: &RunnerArgs,
) -> Result<(RunOptions, ProgressMode), CliError> {
    let config = open::config(cli)?;
    let command = args
        .agent_command
        .clone()
        .or(config.agent_command)
        .unwrap_or_else(|| DEFAULT_AGENT_COMMAND.to_owned());
    let mut options = RunOptions::new(&cli.data_dir);
    options.agent_command = command.split_whitespace().map(str::to_owned).collect();
    if options.agent_command.is_empty() {
        return Err(CliError::usage(
            "the agent command is empty: set --agent-command",
        ));
    }
    options.topic = args.dlq_topic.clone();
    let mode = match args.progress {
        ProgressArg::Auto => ProgressMode::Auto,
        ProgressArg::Lines => ProgressMode::Lines,
        ProgressArg::Quiet => ProgressMode::Quiet,
    };
    Ok((options, mode))
}

/// Drains, shuts the emitter (the last handle, see [`session`]) down and drops it, makes sled's
/// snapshot current, and reports.
async fn finish(
    cli: &Cli,
    config: &Config,
    emitter: NodeEmitter,
    args: &RunnerArgs,
    result: Result<JobReport, RunError>,
) -> Result<u8, CliError> {
    let drained = super::drain::drain(&emitter, args.drain_timeout).await;
    emitter.shutdown().await?;
    drop(emitter);
    open::refresh_snapshot(cli, config).await;
    let report = result.map_err(CliError::from)?;
    let drained = drained?;
    let mut out = BufWriter::new(std::io::stdout().lock());
    match cli.format {
        Format::Json | Format::Jsonl => {
            serde_json::to_writer(&mut out, &report).map_err(std::io::Error::from)?;
            writeln!(out)?;
            if let Some(line) = drained.line() {
                eprintln!("dlq: {line}");
            }
        }
        _ => print_report(&mut out, &report, &drained)?,
    }
    out.flush()?;
    Ok(if matches!(report.reduce, Some(Err(_))) {
        EXIT_ERROR
    } else if report.complete() {
        EXIT_OK
    } else {
        EXIT_INCOMPLETE
    })
}

fn print_report(out: &mut impl Write, r: &JobReport, drained: &Drained) -> std::io::Result<()> {
    let s = &r.summary;
    writeln!(out, "job {}", r.job_id)?;
    writeln!(
        out,
        "items {}: {} succeeded, {} dead-lettered, {} skipped, {} pending (failure rate {:.1}%)",
        s.total,
        s.successful,
        s.failed,
        s.skipped,
        s.pending,
        s.failure_rate * 100.0
    )?;
    if r.recovered > 0 {
        writeln!(
            out,
            "recovered {} dead-lettered items without a recorded outcome",
            r.recovered
        )?;
    }
    if !s.error_types.is_empty() {
        let types: Vec<String> = s
            .error_types
            .iter()
            .map(|(t, n)| format!("{t} {n}"))
            .collect();
        writeln!(out, "error types: {}", types.join(", "))?;
    }
    if !s.failure_patterns.is_empty() {
        writeln!(out, "failure patterns (3 or more):")?;
        let rows: Vec<Vec<String>> = s
            .failure_patterns
            .iter()
            .map(|p| {
                vec![
                    p.count.to_string(),
                    p.pattern.clone(),
                    p.remediation.clone(),
                ]
            })
            .collect();
        write_table(out, &["count", "pattern", "suggestion"], &rows)?;
    }
    if let Some(reason) = &r.stopped {
        writeln!(
            out,
            "stopped: {reason}; continue with `dlq resume {}`",
            r.job_id
        )?;
    }
    match &r.reduce {
        Some(Ok(())) => writeln!(out, "reduce: succeeded")?,
        Some(Err(err)) => writeln!(out, "reduce: FAILED: {err}")?,
        None => {}
    }
    if let Some(output) = r.reduce_output.as_deref().filter(|o| !o.trim().is_empty()) {
        for line in output.lines() {
            writeln!(out, "  | {line}")?;
        }
    }
    if let Some(line) = drained.line() {
        writeln!(out, "{line}")?;
    }
    Ok(())
}

/// Prints a job's events.
pub async fn run_events(cli: &Cli, args: &EventsArgs) -> Result<u8, CliError> {
    let (store, _) = JobStore::open(&cli.data_dir, &args.job_id).map_err(CliError::from)?;
    let events = store.events().map_err(CliError::from)?;
    let events = events.into_iter().filter(|e| {
        args.event
            .as_deref()
            .is_none_or(|name| e.kind.name() == name)
    });
    let mut out = BufWriter::new(std::io::stdout().lock());
    match cli.format {
        Format::Json | Format::Jsonl => {
            for event in events {
                serde_json::to_writer(&mut out, &event).map_err(std::io::Error::from)?;
                writeln!(out)?;
            }
        }
        _ => {
            let rows: Vec<Vec<String>> = events
                .map(|e| {
                    let mut details = serde_json::to_value(&e.kind).unwrap_or_default();
                    if let Some(map) = details.as_object_mut() {
                        map.remove("event");
                    }
                    vec![
                        e.at.format("%Y-%m-%d %H:%M:%S%.3f").to_string(),
                        e.kind.name().to_owned(),
                        cut(&details.to_string(), 100),
                    ]
                })
                .collect();
            write_table(&mut out, &["time", "event", "details"], &rows)?;
        }
    }
    out.flush()?;
    Ok(EXIT_OK)
}

/// Lists the jobs of the data directory with their counts as of now (see
/// `crate::runner::current_summary`).
pub async fn run_jobs(cli: &Cli) -> Result<u8, CliError> {
    let ids = list_jobs(&cli.data_dir).map_err(CliError::from)?;
    let in_dlq = in_dlq_now(cli).await?;
    let mut rows = Vec::new();
    let mut docs = Vec::new();
    for id in ids {
        // What the DLQ holds of the job now (after retries, clears and purges); unknown while
        // another process holds the data directory.
        let now = in_dlq
            .as_ref()
            .map(|counts| counts.get(&id).copied().unwrap_or(0));
        // Counts as of now: items a retry resolved count as succeeded.
        let summary = crate::runner::current_summary(&cli.data_dir, &id).map_err(CliError::from)?;
        let cells = match &summary {
            Some(s) => vec![
                id.clone(),
                s.total.to_string(),
                s.successful.to_string(),
                s.failed.to_string(),
                s.skipped.to_string(),
                s.pending.to_string(),
            ],
            None => vec![
                id.clone(),
                "?".into(),
                "".into(),
                "".into(),
                "".into(),
                "".into(),
            ],
        };
        let mut cells = cells;
        cells.push(now.map_or_else(|| "?".into(), |n| n.to_string()));
        rows.push(cells);
        docs.push(serde_json::json!({"job_id": id, "summary": summary, "in_dlq": now}));
    }
    let mut out = BufWriter::new(std::io::stdout().lock());
    match cli.format {
        Format::Json | Format::Jsonl => {
            for doc in docs {
                writeln!(out, "{doc}")?;
            }
        }
        _ => write_table(
            &mut out,
            &[
                "job",
                "total",
                "succeeded",
                "dead-lettered",
                "skipped",
                "pending",
                "in DLQ now",
            ],
            &rows,
        )?,
    }
    if in_dlq.is_none() && !matches!(cli.format, Format::Json | Format::Jsonl) {
        writeln!(out, "(\"in DLQ now\" is unknown while another process holds the data directory: see its admin page or `dlq list`)")?;
    }
    out.flush()?;
    Ok(EXIT_OK)
}

/// Items in the DLQ now, per job, from the sink's counters; `None` when another process holds
/// the data directory (a running job or `dlq serve`).
async fn in_dlq_now(cli: &Cli) -> Result<Option<std::collections::HashMap<String, u64>>, CliError> {
    let config = open::config(cli)?;
    let Some(sink) = open::try_sink(cli, &config)? else {
        // Held by a process that serves its API (`dlq serve`, a job): ask it.
        return in_dlq_from_api(cli).await;
    };
    let counts = sink.jobs().map(|jobs| {
        jobs.into_iter()
            .map(|(job, counters)| (job, counters.items))
            .collect()
    });
    sink.close().await?;
    Ok(Some(counts?))
}

/// Items per job from `GET /v1/stats` of the API the holder of the data directory announces;
/// `None` when none answers (a short command holds it).
async fn in_dlq_from_api(
    cli: &Cli,
) -> Result<Option<std::collections::HashMap<String, u64>>, CliError> {
    let Some(api) = super::forward::announced_api(cli).await? else {
        return Ok(None);
    };
    let answer = api.get("/v1/stats").await?;
    let stats: serde_json::Value = serde_json::from_slice(&answer.body).unwrap_or_default();
    Ok(stats["jobs"].as_object().map(|jobs| {
        jobs.iter()
            .filter_map(|(job, n)| Some((job.clone(), n.as_u64()?)))
            .collect()
    }))
}
