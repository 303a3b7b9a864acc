//! Opening the sink, the bus and the emitter from the command line's options.

use super::{Cli, CliError};
use crate::bus::{BusConfig, NatsBus};
use crate::config::Config;
use crate::emitter::{Emitter, EmitterBuilder};
use crate::sink::SledSink;

/// The emitter type the CLI uses.
pub type CliEmitter = Emitter<SledSink, NatsBus>;

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
    let bus: &mut BusConfig = &mut config.bus.0;
    bus.url = cli.nats_url.clone();
    bus.subject = cli.topic.clone();
    bus.mode = cli.bus_mode;
    Ok(config)
}

/// Opens the sink of the data directory.
pub fn sink(cli: &Cli, config: &Config) -> Result<SledSink, CliError> {
    Ok(SledSink::open(config.sink_config(&cli.data_dir))?)
}

/// Opens sink and bus, starts metrics if asked, and builds an emitter with its reconciler.
pub async fn emitter(cli: &Cli) -> Result<CliEmitter, CliError> {
    let config = config(cli)?;
    if let Some(addr) = config.metrics_addr {
        crate::metrics::serve_prometheus(addr)?;
    }
    let sink = sink(cli, &config)?;
    let bus = NatsBus::connect(config.bus.0.clone()).await?;
    Ok(EmitterBuilder::new(sink, bus)
        .policies(config.topics.clone())
        .publish_timeout(config.bus.0.publish_timeout)
        .store_timeout(config.sink.store_timeout)
        .reconciler(Some(config.reconciler))
        .retention(Some(config.retention))
        .build())
}
