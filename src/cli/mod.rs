//! The `dlq` command line: global options and the subcommands.

pub(crate) mod admin;
mod bus_flags;
mod closed_pipe;
mod console;
mod consume;
mod data_dir;
mod delete;
mod demo;
mod drain;
mod export;
mod forward;
mod generate;
pub(crate) mod list;
pub mod logging;
pub(crate) mod open;
mod redrive;
pub(crate) mod report;
mod republish;
pub(crate) mod retry;
mod run;
mod serve;
mod shell;
mod signals;
mod status;
mod stream;
mod tour;
mod work_bar;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};

use dlq::bus::{BusError, Secret};

use crate::render::Format;
use crate::request::RequestError;
pub use bus_flags::BusModeArg;
use dlq::ErrorClass;

/// Exit code: success.
pub const EXIT_OK: u8 = 0;
/// Exit code: the command failed.
pub const EXIT_ERROR: u8 = 1;
/// Exit code: bad usage (clap uses 2 as well).
pub const EXIT_USAGE: u8 = 2;
/// Exit code: a named job or item does not exist.
pub const EXIT_NOT_FOUND: u8 = 3;
/// Exit code: work remains (e.g. events still unpublished when a wait timed out).
pub const EXIT_INCOMPLETE: u8 = 4;
/// Exit code: `dlq verify` found differences between the sink and the stream.
pub const EXIT_DIFFERENCES: u8 = 5;

/// The help heading of the options every command takes, listed after a command's own.
const HEADING_GLOBAL: &str = "Global options";
/// The help heading of the NATS connection flags, listed after a command's own options.
const HEADING_NATS: &str = "NATS connection";
/// The help heading of the flags that reach a `dlq serve` API.
const HEADING_API: &str = "Admin API";
/// The help heading of the flags of a process holding the data directory.
const HEADING_NODE: &str = "Node";

/// A durable dead-letter queue: failures go to a local segment log first, then to NATS.
#[derive(Debug, Parser)]
#[command(name = "dlq", version = env!("DLQ_VERSION"), about = "A durable dead-letter queue for work that keeps failing: each failure is written to a local segment log first, then published on NATS; list, inspect, analyze, retry, export and clear them.", long_about = None)]
pub struct Cli {
    /// Data directory: the durable segment log (`log/`) and the sled projection commands query.
    #[arg(long, global = true, env = "DLQ_DATA_DIR", default_value = "dlq-data", help_heading = HEADING_GLOBAL)]
    pub data_dir: PathBuf,
    /// NATS server URL, or several separated by commas, as `nats -s` [default: env
    /// DLQ_NATS_URL, else env NATS_URL, else the --context's url, else bus.url of --config,
    /// else nats://127.0.0.1:4222].
    #[arg(
        short = 's',
        long = "server",
        visible_alias = "nats-url",
        global = true,
        env = "DLQ_NATS_URL",
        value_name = "URL"
    , help_heading = HEADING_NATS)]
    pub nats_url: Option<String>,
    /// NATS subject events are published on [default: bus.subject of --config, else
    /// sys.job.dlq].
    #[arg(long, global = true, env = "DLQ_TOPIC", help_heading = HEADING_NATS)]
    pub topic: Option<String>,
    /// JetStream (acknowledged) or core (weaker: no stream, no ack) [default: bus.mode of
    /// --config, else jetstream].
    #[arg(long, global = true, value_enum, help_heading = HEADING_NATS)]
    pub bus_mode: Option<BusModeArg>,
    /// A context of the `nats` CLI (`nats context save`): its URL, credentials and TLS files
    /// replace the config file's; each flag below overrides its own field of the context (a
    /// flag of another way to authenticate replaces the context's).
    #[arg(long, global = true, env = "NATS_CONTEXT", help_heading = HEADING_NATS)]
    pub context: Option<String>,
    /// NATS user; without --password it is sent as a token, as the `nats` CLI does
    /// [default: bus.auth of --config, or credentials in the URL].
    #[arg(long, global = true, env = "NATS_USER", hide_env_values = true, help_heading = HEADING_NATS)]
    pub user: Option<Secret>,
    /// Password of --user.
    #[arg(long, global = true, env = "NATS_PASSWORD", hide_env_values = true, help_heading = HEADING_NATS)]
    pub password: Option<Secret>,
    /// Credentials file (user JWT and NKey seed, as `nsc` writes it).
    #[arg(long, global = true, env = "NATS_CREDS", help_heading = HEADING_NATS)]
    pub creds: Option<PathBuf>,
    /// File holding an NKey user seed (`SU...`).
    #[arg(long, global = true, env = "NATS_NKEY", help_heading = HEADING_NATS)]
    pub nkey: Option<PathBuf>,
    /// Client certificate (PEM) for mutual TLS; needs --tlskey.
    #[arg(long, global = true, env = "NATS_CERT", help_heading = HEADING_NATS)]
    pub tlscert: Option<PathBuf>,
    /// Private key (PEM) of --tlscert.
    #[arg(long, global = true, env = "NATS_KEY", help_heading = HEADING_NATS)]
    pub tlskey: Option<PathBuf>,
    /// CA certificates (PEM) to trust for the server's certificate, besides the system's.
    #[arg(long, global = true, env = "NATS_CA", help_heading = HEADING_NATS)]
    pub tlsca: Option<PathBuf>,
    /// Start TLS before the server's greeting (servers with `handshake_first`).
    #[arg(long, global = true, help_heading = HEADING_NATS)]
    pub tlsfirst: bool,
    /// Send a password or token without TLS to a host other than loopback (refused otherwise:
    /// anyone on the path can read it).
    #[arg(long, global = true, help_heading = HEADING_NATS)]
    pub allow_insecure_credentials: bool,
    /// YAML configuration file (sink, bus, per-topic retries, reconciler, retention).
    #[arg(long, global = true, env = "DLQ_CONFIG", help_heading = HEADING_GLOBAL)]
    pub config: Option<PathBuf>,
    /// Node id for a new data directory (default: generated and stored).
    #[arg(long, global = true, env = "DLQ_NODE_ID", help_heading = HEADING_NODE)]
    pub node_id: Option<String>,
    /// Serve Prometheus metrics on this address (e.g. 127.0.0.1:9464).
    #[arg(long, global = true, env = "DLQ_METRICS_ADDR", help_heading = HEADING_NODE)]
    pub metrics_addr: Option<SocketAddr>,
    /// Log more on stderr: -v info, -vv debug, the NATS client's log included (RUST_LOG, when
    /// set, decides instead) [default: dlq's warnings and errors].
    #[arg(short = 'v', long, global = true, action = clap::ArgAction::Count, help_heading = HEADING_GLOBAL)]
    pub verbose: u8,
    /// Output format.
    #[arg(long, global = true, value_enum, default_value_t = Format::Table, help_heading = HEADING_GLOBAL)]
    pub format: Format,
    /// Send list, inspect, stats, analyze, clear, purge, delete, redrive and retry to the `dlq serve` API at this
    /// URL (e.g. http://127.0.0.1:9465) instead of opening the data directory. Without it they
    /// go there anyway when the directory is held by a running `dlq serve`.
    #[arg(long, global = true, env = "DLQ_API_URL", help_heading = HEADING_API)]
    pub api: Option<String>,
    /// PEM CA certificate(s) that sign the certificate of an https:// API (dlq serve
    /// --tls-cert) [default: the system's roots].
    #[arg(long, global = true, env = "DLQ_API_CA", value_name = "FILE", help_heading = HEADING_API)]
    pub api_ca: Option<PathBuf>,
    /// File holding the admin API's bearer token: `dlq serve` requires it, forwarded commands
    /// send it [default: the token in env DLQ_API_TOKEN].
    #[arg(long, global = true, env = "DLQ_API_TOKEN_FILE", help_heading = HEADING_API)]
    pub token_file: Option<PathBuf>,
    /// How long to wait for the data directory when another process without an admin API
    /// holds it (a short command such as `dlq list`, or a job still starting). A directory
    /// held by a running `dlq serve` or `dlq run` is not waited for: commands go through its
    /// API, or fail at once naming it.
    #[arg(long, global = true, env = "DLQ_LOCK_WAIT", default_value = "10s",
          value_parser = humantime::parse_duration, help_heading = HEADING_NODE)]
    pub lock_wait: Duration,
    /// Turn anti-entropy off: long-running processes then no longer check that the stream
    /// still holds the events it acknowledged (config `anti_entropy.enabled`).
    #[arg(long, global = true, help_heading = HEADING_NODE)]
    pub no_anti_entropy: bool,
    /// Time between anti-entropy passes [default: config `anti_entropy.interval`, 30s].
    #[arg(long, global = true, env = "DLQ_ANTI_ENTROPY_INTERVAL", value_parser = humantime::parse_duration, help_heading = HEADING_NODE)]
    pub anti_entropy_interval: Option<Duration>,
    /// How long after its acknowledgement an event must still be in the stream before it is
    /// no longer checked [default: config `anti_entropy.horizon`, 5m].
    #[arg(long, global = true, env = "DLQ_ANTI_ENTROPY_HORIZON", value_parser = humantime::parse_duration, help_heading = HEADING_NODE)]
    pub anti_entropy_horizon: Option<Duration>,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Show what dlq is for: run an example job whose items fail, take a private bus down in
    /// the middle, bring it back, and check from the stream that nothing was lost.
    Tour(tour::TourArgs),
    /// Emit sample failures into the data directory and publish them when the bus is reachable.
    Demo(demo::DemoArgs),
    /// Show the node id, item count and unpublished backlog of the data directory.
    Status,
    /// Publish every unpublished event, waiting up to --timeout for the bus.
    Reconcile(status::ReconcileArgs),
    /// Rebuild the projection (items and indexes) from the event log and the items kept whole
    /// in sled (older than the log's retention).
    Rebuild,
    /// Rebuild every node's items from the start of the NATS stream alone and summarise them.
    Consume(consume::ConsumeArgs),
    /// Compare this data directory's items with those rebuilt from the stream (exit 5 on any difference).
    Verify(consume::VerifyArgs),
    /// Publish again, under a new message id, this node's stored events that the stream lost
    /// after acknowledging them (--dry-run: only list them, exit 5 if any).
    Republish(republish::RepublishArgs),
    /// List items, newest failure first, filtered and paged.
    List(crate::request::ListArgs),
    /// Show one whole item: data, every failure, stack traces, log locations, worktree.
    Inspect(list::InspectArgs),
    /// Totals, by error type, failure counts, eligibility, oldest/newest, unpublished backlog.
    Stats(report::StatsArgs),
    /// Failure patterns by signature, error types and failures per hour.
    Analyze(report::AnalyzeArgs),
    /// Write the items to a file (json, jsonl, csv) or a directory (dir: one JSON file per item, a directory per job).
    Export(export::ExportArgs),
    /// Dead-letter the items of a legacy directory (one JSON file per item) (or a dlq export file).
    Import(export::ImportArgs),
    /// Remove every item of a job (asks first; --yes without a terminal).
    Clear(admin::ClearArgs),
    /// Remove items first failed more than N days ago (asks first; --yes without a terminal).
    Purge(admin::PurgeArgs),
    /// Delete items by id (JOB/ITEM) or the items a filter selects, as `dlq list` filters them
    /// (--dry-run counts; asks first; --yes without a terminal).
    Delete(delete::DeleteArgs),
    /// Hand items back to the scheduler that failed them (its registered redrive handler),
    /// by id or filter, in failure order, at a rate, behind a canary that halts on a failing
    /// error signature; --patch edits one item first (asks first; --yes without a terminal).
    Redrive(redrive::RedriveArgs),
    /// Show the JetStream stream, or create or update it on purpose (at start dlq only creates
    /// a missing stream and never changes an existing one).
    Stream(stream::StreamArgs),
    /// Run a MapReduce workflow: one agent per work item, failures dead-lettered per its error
    /// policy (exit 4 if items stay pending).
    Run(run::RunArgs),
    /// Re-run a job's dead-lettered items with its agent template; success removes them.
    Retry(retry::RetryArgs),
    /// Continue a job: its pending items, and with --include-dlq-items its dead-lettered ones.
    Resume(run::ResumeArgs),
    /// Show a job's events (attempts, retries, breaker transitions, stops, summary).
    Events(run::EventsArgs),
    /// List the jobs of the data directory with their last summary.
    Jobs,
    /// Hold the data directory and serve the admin HTTP API (list, inspect, stats, analyze,
    /// clear, purge, retry as JSON; the web page; /metrics; /healthz) on a loopback address
    /// until SIGINT/SIGTERM.
    Serve(serve::ServeArgs),
    /// The fleet console: follow the NATS stream with a durable consumer and serve the page and
    /// read API for every node (node as a column and a filter); deletes go to the owning node
    /// on its control subject. Until SIGINT/SIGTERM.
    Console(console::ConsoleArgs),
    /// Print shell completions: `dlq completions bash|zsh|fish`.
    Completions(shell::CompletionsArgs),
    /// Print the man page (roff): `dlq man > dlq.1`.
    Man,
    /// Fill the data directory with synthetic items (benchmarks).
    #[command(hide = true)]
    Generate(generate::GenerateArgs),
}

/// Runs the command line; returns the process exit code.
pub async fn run(cli: Cli) -> ExitCode {
    closed_pipe::install();
    let result = match data_dir::check(&cli) {
        Err(err) => Err(err),
        Ok(()) => dispatch(&cli).await,
    };
    match result {
        Ok(code) => ExitCode::from(code),
        Err(err) if closed_pipe::is_closed_stdout(&err) => {
            ExitCode::from(closed_pipe::EXIT_CLOSED_PIPE)
        }
        Err(err) => {
            eprintln!("dlq: {err}");
            ExitCode::from(err.exit_code())
        }
    }
}

/// Runs the subcommand.
async fn dispatch(cli: &Cli) -> Result<u8, CliError> {
    match &cli.command {
        Command::Tour(args) => tour::run(cli, args).await,
        Command::Demo(args) => demo::run(cli, args).await,
        Command::Status => status::status(cli).await,
        Command::Reconcile(args) => status::reconcile(cli, args).await,
        Command::Rebuild => status::rebuild(cli).await,
        Command::Consume(args) => consume::consume(cli, args).await,
        Command::Verify(args) => consume::verify(cli, args).await,
        Command::Republish(args) => republish::run_republish(cli, args).await,
        Command::List(args) => list::run_list(cli, args).await,
        Command::Inspect(args) => list::run_inspect(cli, args).await,
        Command::Stats(args) => report::run_stats(cli, args).await,
        Command::Analyze(args) => report::run_analyze(cli, args).await,
        Command::Export(args) => export::run_export(cli, args).await,
        Command::Import(args) => export::run_import(cli, args).await,
        Command::Clear(args) => admin::run_clear(cli, args).await,
        Command::Purge(args) => admin::run_purge(cli, args).await,
        Command::Delete(args) => delete::run_delete(cli, args).await,
        Command::Redrive(args) => redrive::run_redrive(cli, args).await,
        Command::Stream(args) => stream::run(cli, args).await,
        Command::Run(args) => run::run_job(cli, args).await,
        Command::Resume(args) => run::resume_job(cli, args).await,
        Command::Retry(args) => retry::run_retry(cli, args).await,
        Command::Events(args) => run::run_events(cli, args).await,
        Command::Jobs => run::run_jobs(cli).await,
        Command::Serve(args) => serve::run_serve(cli, args).await,
        Command::Console(args) => console::run_console(cli, args).await,
        Command::Generate(args) => generate::run(cli, args).await,
        Command::Completions(args) => shell::completions(args),
        Command::Man => shell::man(),
    }
}

/// An error of a CLI command: one line for the user and an exit code.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// The request failed (bad usage, not found, the sink, a query, the runner, output).
    #[error(transparent)]
    Request(#[from] RequestError),
    /// Configuration problem.
    #[error(transparent)]
    Config(#[from] dlq::config::ConfigError),
    /// Bus problem.
    #[error(transparent)]
    Bus(#[from] dlq::bus::BusError),
    /// Metrics exporter problem.
    #[error(transparent)]
    Metrics(#[from] dlq::metrics::MetricsError),
    /// Reading the stream failed.
    #[error("{0}")]
    Consumer(String),
    /// Something named does not exist (the stream of `dlq stream show`).
    #[error("{0}")]
    NotFound(String),
    /// The admin API: serving it, reaching it, its answer, or the process holding the data
    /// directory.
    #[error(transparent)]
    Serve(#[from] crate::serve::ServeError),
    /// `dlq tour` could not run its own bus or example.
    #[error(transparent)]
    Tour(#[from] tour::TourError),
}

impl CliError {
    /// A usage error: the command line is wrong; nothing was changed.
    pub fn usage(message: impl Into<String>) -> Self {
        CliError::Request(RequestError::Usage(message.into()))
    }

    /// Which kind of failure this is.
    pub fn class(&self) -> ErrorClass {
        match self {
            CliError::Request(err) => err.class(),
            CliError::Serve(err) => err.class(),
            CliError::Config(_) | CliError::Bus(BusError::Config { .. }) => ErrorClass::Usage,
            CliError::NotFound(_) => ErrorClass::NotFound,
            CliError::Bus(_) | CliError::Metrics(_) | CliError::Consumer(_) | CliError::Tour(_) => {
                ErrorClass::Failure
            }
        }
    }

    /// The process exit code for this error: the one mapping of an error class to exit codes.
    pub fn exit_code(&self) -> u8 {
        match self.class() {
            ErrorClass::Usage => EXIT_USAGE,
            ErrorClass::NotFound => EXIT_NOT_FOUND,
            ErrorClass::Failure => EXIT_ERROR,
        }
    }
}

macro_rules! request_error_from {
    ($($source:ty),*) => {$(
        impl From<$source> for CliError {
            fn from(err: $source) -> Self {
                CliError::Request(RequestError::from(err))
            }
        }
    )*};
}

request_error_from!(
    dlq::sink::SinkError,
    crate::query::QueryError,
    crate::runner::RunError,
    std::io::Error
);
