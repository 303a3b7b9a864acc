//! The `dlq` binary.

use std::process::ExitCode;

use clap::Parser;

/// mimalloc instead of glibc's malloc: the sink's writer and applier threads allocate and free
/// a lot across threads (docs/benchmarks.md, "The allocator").
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() -> ExitCode {
    let cli = dlq_ops::cli::Cli::parse();
    dlq_ops::cli::logging::init(cli.verbose);
    dlq_ops::cli::run(cli).await
}
