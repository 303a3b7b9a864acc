//! What dlq's integration tests, benches and chaos drills share, so that none of them keeps its
//! own copy of how to start a server or run the binary.
//!
//! # Layout
//!
//! * [`nats`]: [`NatsServer`], a private `nats-server -js` on its own loopback port and store
//!   dir, which can be killed, frozen (SIGSTOP), thawed and restarted on the same port and store.
//! * [`cluster`]: [`NatsCluster`], the three-node JetStream cluster of `deploy/nats-cluster/`
//!   on nine free ports, nodes killed and restarted one by one; [`cluster::ScriptCluster`]
//!   drives `cluster.sh` itself.
//! * [`process`]: [`spawn_tied`], a child process that cannot outlive this one.
//! * [`net`]: [`free_port`], [`http_get`], [`DEAD_BUS_URL`].
//! * [`wait`]: [`wait_for`] (async) and [`poll_until`] (sync): poll instead of sleeping.
//! * [`cli`]: the `dlq` binary on a data directory ([`cli::Env`], [`cli::dlq_command`]);
//!   [`flow`]: a workflow directory run by `dlq run`; [`reference`]: the legacy layout (one JSON file per item).
//! * [`serve`]: `dlq serve` with a token ([`serve::Serve`]) and a job whose items fail until fixed.
//! * [`items`]: realistic items and events; [`stream`]: what reached the stream, and metrics.
//! * [`browser`]: a headless Chromium driven through chromedriver ([`browser::Browser`]).
//! * [`fail_sync`]: an `LD_PRELOAD` library failing chosen `fdatasync` calls of a real `dlq`
//!   process on its log segments.
//! * [`sled_db`]: a sink's sled database opened directly, waiting out a just-closed sink's lock.
//! * [`bench`]: concurrent load ([`bench::load`]) and the suite's row format
//!   ([`bench::suite`]).
//!
//! Servers and clusters have a panicking API for tests (`NatsServer::start`, `restart`, ...)
//! and a fallible one (`try_*`, returning [`Error`]) for `dlq-chaos`, which reports instead of
//! panicking. A test harness fails by panicking, so the workspace's `unwrap_used`,
//! `expect_used` and `panic` lints are allowed in this crate.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
#![warn(missing_docs)]

pub mod bench;
pub mod browser;
pub mod cli;
pub mod cluster;
pub mod fail_sync;
pub mod flow;
pub mod group_commits;
pub mod http;
pub mod items;
pub mod nats;
pub mod net;
pub mod node;
pub mod process;
pub mod reference;
pub mod serve;
pub mod sled_db;
pub mod stream;
pub mod tls;
pub mod wait;

use std::fmt;
use std::path::{Path, PathBuf};

pub use cluster::NatsCluster;
pub use nats::NatsServer;
pub use net::{free_port, http_get, DEAD_BUS_URL};
pub use process::spawn_tied;
pub use wait::{poll_until, wait_for};

/// Why a server or cluster could not be started or driven, for a person to read (with the
/// tail of the server's log where there is one).
#[derive(Debug)]
pub struct Error(String);

impl Error {
    /// An error with this message.
    pub fn new(message: impl Into<String>) -> Error {
        Error(message.into())
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Error {}

impl From<std::io::Error> for Error {
    fn from(err: std::io::Error) -> Error {
        Error(err.to_string())
    }
}

/// The repository root (the workspace this crate was built in): where `deploy/`,
/// `examples/` and `benches/results/` are.
pub fn workspace_root() -> PathBuf {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    manifest.parent().unwrap_or(manifest).to_path_buf()
}
