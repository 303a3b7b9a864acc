//! Running the `dlq` binary the way the end-to-end tests do.

use std::path::Path;
use std::process::{Command, Output};

/// `dlq --data-dir DIR --nats-url URL --format json ARGS...`, with `DLQ_CONFIG` pointing at
/// `DIR.yml` (each test writes its config beside its data directory).
pub fn dlq_command(data_dir: &Path, url: &str, args: &[&str]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_dlq"));
    cmd.arg("--data-dir")
        .arg(data_dir)
        .args(["--nats-url", url, "--format", "json"])
        .args(args)
        .env("DLQ_CONFIG", data_dir.with_extension("yml"));
    cmd
}

/// Runs [`dlq_command`] to completion.
pub fn dlq_output(data_dir: &Path, url: &str, args: &[&str]) -> Output {
    dlq_command(data_dir, url, args)
        .output()
        .expect("run the dlq binary")
}
