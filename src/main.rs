//! The `dlq` binary.

use std::process::ExitCode;

use clap::Parser;
use tracing_subscriber::EnvFilter;

/// mimalloc instead of glibc's malloc: the sink's writer and applier threads allocate and free
/// a lot across threads (docs/benchmarks.md, "The allocator").
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .init();
    dlq::cli::run(dlq::cli::Cli::parse()).await
}
