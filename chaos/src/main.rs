//! `dlq-chaos`: chaos drills for the dead-letter queue.
//!
//! `dlq-chaos drill` starts its own nats-server, K emitter processes (`dlq-chaos emit`, which
//! embed the `dlq` library) and an independent subscriber, injects one fault for a duration,
//! restores, waits for the reconcilers to drain and reports what was lost. With
//! `--baseline-too` it runs the same drill again with the reconciler disabled (the plain sink-then-publish design:
//! one retry after 500 ms, then give up) so both loss figures sit in one table.
//! See `chaos/README.md`.

mod cluster;
mod drill;
mod emit;
mod emit_side;
mod faults;
mod fleet;
mod netns;
mod observe;
mod procs;
mod proxy;
mod report;
mod summary;
mod svg;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand, ValueEnum};
use tracing_subscriber::EnvFilter;

/// Errors of the drill runner: a message for the operator.
pub type Error = Box<dyn std::error::Error + Send + Sync>;
/// Result with [`Error`].
pub type Res<T> = Result<T, Error>;

/// Builds an [`Error`] from a message.
pub fn err(message: impl Into<String>) -> Error {
    message.into().into()
}

#[derive(Debug, Parser)]
#[command(
    name = "dlq-chaos",
    about = "Chaos drills for the dlq dead-letter queue"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run one drill (and optionally the baseline) and write result.json, report.md, chart.svg.
    Drill(Box<DrillArgs>),
    /// Internal: one emitter process (started by `drill`).
    Emit(emit::EmitArgs),
}

/// The fault a drill injects.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Fault {
    /// SIGKILL nats-server, restart it after the duration on the same port and store.
    BusKill,
    /// SIGSTOP nats-server, SIGCONT after the duration: publishes hang instead of failing.
    BusFreeze,
    /// A loopback TCP proxy between emitters and server blackholes or resets connections.
    NetCut,
    /// Bus killed, and one emitter SIGKILLed during the outage and restarted before it returns.
    EmitterKill,
    /// The bus stays up; the emitters' sinks refuse every write for the duration.
    SinkFail,
    /// A three-node cluster and a stream with three replicas: the stream leader SIGKILLed,
    /// at half the duration a second node (no quorum); both restart after the duration.
    ClusterKill,
    /// nats-server in one network namespace, the emitters in another, joined by a veth link;
    /// a third of the duration each: random packet loss (nftables), a slow link (`tc tbf`),
    /// the link down; then healed.
    NetPartition,
    /// The bus stays up; every second the drill deletes a few of the newest messages from the
    /// stream (JetStream's delete-message API), as a server crash before its fsync would lose
    /// them: anti-entropy must bring them back.
    StreamLoss,
}

impl Fault {
    /// The kebab-case name.
    pub fn name(self) -> &'static str {
        match self {
            Fault::BusKill => "bus-kill",
            Fault::BusFreeze => "bus-freeze",
            Fault::NetCut => "net-cut",
            Fault::EmitterKill => "emitter-kill",
            Fault::SinkFail => "sink-fail",
            Fault::ClusterKill => "cluster-kill",
            Fault::NetPartition => "net-partition",
            Fault::StreamLoss => "stream-loss",
        }
    }
}

/// How the net-cut proxy misbehaves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum CutMode {
    /// Accept, read and drop; never forward (connections that lost bytes are closed on restore).
    Blackhole,
    /// Reset every connection (RST) and every new one.
    Reset,
}

/// How the sink fails in `sink-fail`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum SinkMode {
    /// Every write is refused with an I/O error (a full or broken disk).
    FailWrites,
    /// Writes are applied but the flush fails (not durable).
    FailFlush,
}

/// Options of `dlq-chaos drill`.
#[derive(Debug, Clone, clap::Args)]
pub struct DrillArgs {
    /// The fault to inject.
    #[arg(long, value_enum)]
    pub fault: Fault,
    /// How long the fault lasts (e.g. 20s, 5m).
    #[arg(long, default_value = "5m", value_parser = humantime::parse_duration)]
    pub duration: Duration,
    /// Failures per second over all emitters.
    #[arg(long, default_value_t = 200.0)]
    pub rate: f64,
    /// Emitter processes.
    #[arg(long, default_value_t = 4)]
    pub emitters: usize,
    /// Also run the baseline (reconciler off: one retry after 500 ms, as a plain sink-then-publish emitter does).
    #[arg(long)]
    pub baseline_too: bool,
    /// Run only the baseline (for comparisons; the exit code then ignores loss).
    #[arg(long, conflicts_with = "baseline_too")]
    pub baseline_only: bool,
    /// Output directory (default chaos/results/<fault>-<duration>-<timestamp>/).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// net-cut: blackhole or reset.
    #[arg(long, value_enum, default_value = "blackhole")]
    pub mode: CutMode,
    /// sink-fail: refuse writes or fail flushes.
    #[arg(long, value_enum, default_value = "fail-writes")]
    pub sink_mode: SinkMode,
    /// net-partition: percent of the packets dropped each way during the loss phase.
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u8).range(1..=100))]
    pub loss: u8,
    /// net-partition: rate of the slow-link phase, kbit/s each way.
    #[arg(long, default_value_t = 256, value_parser = clap::value_parser!(u32).range(8..))]
    pub slow_kbit: u32,
    /// The `dlq` binary, used for `dlq verify` after the drill (default: next to this one).
    #[arg(long)]
    pub dlq_bin: Option<PathBuf>,
    /// Load before the fault starts.
    #[arg(long, default_value = "5s", value_parser = humantime::parse_duration)]
    pub warmup: Duration,
    /// Load after the fault ends, before the load stops.
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
    pub after: Duration,
    /// Longest wait for the backlog to drain once the load stopped.
    #[arg(long, default_value = "120s", value_parser = humantime::parse_duration)]
    pub drain_timeout: Duration,
    /// Per-attempt publish timeout of the emitters.
    #[arg(long, default_value = "1s", value_parser = humantime::parse_duration)]
    pub publish_timeout: Duration,
    /// cluster-kill: `deploy/nats-cluster/cluster.sh`, which renders the node configs (default:
    /// under the current directory, else under the source tree of this build).
    #[arg(long)]
    pub cluster_script: Option<PathBuf>,
    /// Keep the temporary data directories (printed) instead of deleting them.
    #[arg(long)]
    pub keep: bool,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    match cli.command {
        Command::Emit(args) => run_async(emit::run(args)),
        Command::Drill(args) => run_async(drill::run_cli(*args)),
    }
}

fn run_async(future: impl std::future::Future<Output = Res<u8>>) -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("dlq-chaos: cannot start the runtime: {e}");
            return ExitCode::from(1);
        }
    };
    let code = match runtime.block_on(future) {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            eprintln!("dlq-chaos: {e}");
            ExitCode::from(1)
        }
    };
    // A blocking stdin read may still be pending: do not wait for it.
    runtime.shutdown_timeout(Duration::from_millis(200));
    code
}
