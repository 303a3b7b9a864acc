//! Opening the sink, the bus and the emitter from the command line's options.

use std::time::Duration;

use tokio::time::Instant;

use super::{Cli, CliError};
use crate::serve::client::discovery::ServeFile;
use crate::serve::ServeError;
use dlq::bus::{connect_client, payload_warning, BusConfig, NatsBus};
use dlq::config::Config;
use dlq::emitter::EmitterBuilder;
use dlq::sink::{LocalSink, Sink};

/// The emitter type the CLI uses.
pub use dlq::emitter::NodeEmitter;

/// The configuration file (or defaults) with command-line overrides applied.
pub fn config(cli: &Cli) -> Result<Config, CliError> {
    let mut config = match &cli.config {
        Some(path) => Config::load(path)?,
        None => Config::default(),
    };
    if cli.node_id.is_some() {
        config.node_id = cli.node_id.clone();
    }
    if cli.metrics_addr.is_some() {
        config.metrics_addr = cli.metrics_addr;
    }
    if cli.no_anti_entropy {
        config.anti_entropy.enabled = false;
    }
    if let Some(interval) = cli.anti_entropy_interval {
        config.anti_entropy.interval = interval;
    }
    if let Some(horizon) = cli.anti_entropy_horizon {
        config.anti_entropy.horizon = horizon;
    }
    super::bus_flags::apply(cli, &mut config.bus.0)?;
    Ok(config)
}

/// sled's page cache (MiB) at most for commands that read every item once (`export`,
/// `analyze`): a single pass never reads a page twice, so a larger cache only holds memory,
/// and the memory a page read in costs is several times what sled's cache counts for it (a
/// scan of a 1,000,000-item projection grows sled by 62 MiB with 8 MiB of cache, 33 MiB with
/// 1 MiB or less, docs/benchmarks.md).
pub const ONE_PASS_CACHE_MB: u64 = 1;

/// `config` for a command that reads every item once: the cache capped at
/// [`ONE_PASS_CACHE_MB`].
pub fn one_pass(mut config: Config) -> Config {
    config.sink.cache_capacity_mb = config.sink.cache_capacity_mb.min(ONE_PASS_CACHE_MB);
    config
}

/// How often a held data directory is tried again while waiting for it.
const LOCK_RETRY: Duration = Duration::from_millis(50);

/// Opens the sink of the data directory. While another process without an admin API holds
/// it, tries again for up to `--lock-wait`; then, or at once when the holder announces an API,
/// the error names that process (and its API) and says what to do.
pub async fn sink(cli: &Cli, config: &Config) -> Result<LocalSink, CliError> {
    let mut wait = LockWait::new(cli);
    loop {
        if let Some(sink) = try_sink(cli, config)? {
            return Ok(sink);
        }
        if ServeFile::read_live(&cli.data_dir).is_some() {
            return Err(ServeError::held(&cli.data_dir).into());
        }
        wait.pause(cli).await?;
    }
}

/// At the end of a command that writes (`generate`, `run` and `resume`, `retry`, `serve`),
/// once every handle of its sink is gone (the sink closed and dropped, or the emitter shut
/// down and dropped with no clone left in a task): makes sled's snapshot current, so the next
/// command's open does not replay what this one wrote ([`dlq::sink::refresh_snapshot`]). A
/// failure only costs the next open that replay, so it is logged, never returned.
pub async fn refresh_snapshot(cli: &Cli, config: &Config) {
    let sink_config = config.sink_config(&cli.data_dir);
    let refreshed =
        tokio::task::spawn_blocking(move || dlq::sink::refresh_snapshot(&sink_config)).await;
    let reason = match refreshed {
        Ok(Ok(())) => return,
        Ok(Err(err)) => err.to_string(),
        Err(err) => err.to_string(),
    };
    tracing::warn!(%reason, "could not make sled's snapshot current; the next open of the data directory replays what this process wrote (slower, nothing lost)");
}

/// Opens the sink of the data directory once: `None` when another process holds it.
pub fn try_sink(cli: &Cli, config: &Config) -> Result<Option<LocalSink>, CliError> {
    match LocalSink::open(config.sink_config(&cli.data_dir)) {
        Ok(sink) => Ok(Some(sink)),
        Err(err) if crate::serve::is_locked(&err) => Ok(None),
        Err(err) => Err(err.into()),
    }
}

/// Waiting for a data directory that another process holds, for up to `--lock-wait`.
pub struct LockWait {
    deadline: Instant,
    said: bool,
}

impl LockWait {
    /// Starts waiting now.
    pub fn new(cli: &Cli) -> Self {
        LockWait {
            deadline: Instant::now() + cli.lock_wait,
            said: false,
        }
    }

    /// Waits [`LOCK_RETRY`] before the next try (the first time, says who holds the
    /// directory), or says the directory stays held once `--lock-wait` has passed.
    pub async fn pause(&mut self, cli: &Cli) -> Result<(), CliError> {
        if Instant::now() >= self.deadline {
            return Err(ServeError::held(&cli.data_dir).into());
        }
        if !self.said {
            self.said = true;
            let holder = crate::serve::client::discovery::lock_holder(&cli.data_dir)
                .map_or_else(|| "another process".to_owned(), |h| h.to_string());
            tracing::warn!(
                "{} is held by {holder}; waiting up to {} for it (--lock-wait)",
                cli.data_dir.display(),
                humantime::format_duration(cli.lock_wait)
            );
        }
        tokio::time::sleep(LOCK_RETRY).await;
        Ok(())
    }
}

/// How long a command that needs the bus now waits for the server's answer (as `consume` and
/// `verify` do): only a server that accepts the connection and then stays silent takes that
/// long; one that is down, unknown or refuses the settings fails at once.
const BUS_ANSWER: Duration = Duration::from_secs(5);

/// Connects once to the bus of `bus` and lets go, for a command that needs the bus now
/// (`stream`, `reconcile`): an error is one line naming the server, the cause (unreachable,
/// unknown host, TLS trust, authentication) and the fix, instead of a client that keeps trying
/// in the background while the command times out.
pub async fn reach_bus(bus: &BusConfig) -> Result<(), CliError> {
    let client = connect_client(bus, BUS_ANSWER).await?;
    drop(client);
    Ok(())
}

/// Opens sink and bus, starts metrics if asked, and builds an emitter with its reconciler.
pub async fn emitter(cli: &Cli) -> Result<NodeEmitter, CliError> {
    let config = config(cli)?;
    if let Some(addr) = config.metrics_addr {
        dlq::metrics::serve_prometheus(addr)?;
    }
    let sink = sink(cli, &config).await?;
    emitter_with_sink(&config, sink, true).await
}

/// Builds an emitter (bus, reconciler) around an already opened sink. Operator commands pass
/// `retention: false`, so that they change only what they were asked to.
pub async fn emitter_with_sink(
    config: &Config,
    sink: LocalSink,
    retention: bool,
) -> Result<NodeEmitter, CliError> {
    let bus = match NatsBus::connect(config.bus.0.clone()).await {
        Ok(bus) => bus,
        Err(err) => {
            sink.close().await?;
            return Err(err.into());
        }
    };
    if let Some(line) = payload_warning(bus.max_payload(), config.sink.max_event_bytes) {
        tracing::warn!("{line}");
    }
    // A server that refuses the credentials or TLS is not fatal: the bus logged why (one
    // error line naming the fix), and what this command stores stays durable and unpublished
    // until the reconciler can publish it with fixed settings.
    Ok(EmitterBuilder::new(sink, bus)
        .policies(config.topics.clone())
        .publish_timeout(config.bus.0.publish_timeout)
        .store_timeout(config.sink.store_timeout)
        .reconciler(Some(config.reconciler))
        .anti_entropy(Some(config.anti_entropy))
        .retention(retention.then_some(config.retention))
        .build())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_pass_caps_the_cache() {
        let mut config = Config::default();
        config.sink.cache_capacity_mb = 64;
        assert_eq!(
            one_pass(config.clone()).sink.cache_capacity_mb,
            ONE_PASS_CACHE_MB
        );
        config.sink.cache_capacity_mb = 2;
        assert_eq!(one_pass(config).sink.cache_capacity_mb, ONE_PASS_CACHE_MB);
    }
}
