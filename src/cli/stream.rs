//! `dlq stream show|create|update`: the JetStream stream, looked at and changed on purpose.
//!
//! At start dlq only creates a missing stream; an existing one is checked and kept as it is
//! (`bus::stream`). These commands are how an operator sees it, creates it ahead of the first
//! publish, or brings an existing stream to dlq's configured subject, duplicate window and
//! replicas (asked first; `--yes` without a terminal). None of them opens the data directory.

use std::io::Write;

use async_nats::jetstream::stream::{Config, Info};
use clap::{Args, Subcommand};
use serde_json::json;

use super::admin::confirm;
use super::{open, Cli, CliError, Format, EXIT_OK};
use dlq::bus::stream::{changes, check, human, subjects_of, updated, Change, Fit};
use dlq::bus::{BusConfig, BusMode, NatsBus};

/// Options of `dlq stream`.
#[derive(Debug, Args)]
pub struct StreamArgs {
    /// What to do with the stream.
    #[command(subcommand)]
    pub action: StreamAction,
}

/// The subcommands of `dlq stream`.
#[derive(Debug, Subcommand)]
pub enum StreamAction {
    /// Print the stream's configuration and state, and what dlq makes of it.
    ///
    /// Configuration (subjects, storage, replicas, duplicate window, retention, limits), state
    /// (messages, bytes, sequences, consumers; on a cluster the leader and replicas), then
    /// refusals (dlq will not publish to it) and warnings (weaker than configured). Table or
    /// --format json. Exit 3 when the stream does not exist.
    Show,
    /// Create the stream from the configuration when it is missing; refuse when it exists.
    ///
    /// The stream bus.stream with subjects <bus.subject> and <bus.subject>.>, file storage,
    /// bus.replicas and bus.duplicate_window, no limits. An existing stream is left as it is
    /// (exit 2).
    Create,
    /// Apply dlq's configured subject, duplicate window and replicas to the existing stream.
    ///
    /// Adds the configured subject when the stream does not take it (its own subjects kept)
    /// and sets bus.duplicate_window and bus.replicas. Limits (max age, max messages, max
    /// bytes, ...), retention and storage are kept. Prints what changes, then asks on a
    /// terminal; without one it refuses unless --yes (exit 2, nothing changed).
    Update(UpdateArgs),
}

/// Options of `dlq stream update`.
#[derive(Debug, Args)]
pub struct UpdateArgs {
    /// Do not ask for confirmation (required without a terminal).
    #[arg(long, short = 'y')]
    pub yes: bool,
}

/// Runs `dlq stream`.
pub async fn run(cli: &Cli, args: &StreamArgs) -> Result<u8, CliError> {
    if !matches!(cli.format, Format::Table | Format::Json) {
        return Err(CliError::usage(
            "dlq stream prints a table or JSON: use --format table or --format json",
        ));
    }
    let config = open::config(cli)?.bus.0;
    if config.mode != BusMode::Jetstream {
        return Err(CliError::usage(
            "bus mode is core, which uses no stream: dlq stream needs --bus-mode jetstream",
        ));
    }
    open::reach_bus(&config).await?;
    let bus = NatsBus::open(config.clone()).await?;
    match &args.action {
        StreamAction::Show => show(cli.format, &bus, &config).await,
        StreamAction::Create => create(cli.format, &bus, &config).await,
        StreamAction::Update(update) => run_update(cli.format, &bus, &config, update.yes).await,
    }
}

fn missing(config: &BusConfig) -> CliError {
    CliError::NotFound(format!(
        "stream {} does not exist: create it with `dlq stream create` (dlq also creates it \
         when it first publishes)",
        config.stream
    ))
}

async fn show(format: Format, bus: &NatsBus, config: &BusConfig) -> Result<u8, CliError> {
    let info = bus.stream_info().await?.ok_or_else(|| missing(config))?;
    print_info(format, &info, &check(&info.config, config))
}

async fn create(format: Format, bus: &NatsBus, config: &BusConfig) -> Result<u8, CliError> {
    if bus.stream_info().await?.is_some() {
        return Err(CliError::usage(format!(
            "stream {} already exists; nothing was changed: see it with `dlq stream show`, \
             apply dlq's settings to it with `dlq stream update`",
            config.stream
        )));
    }
    let info = bus.create_stream().await?;
    if format == Format::Table {
        println!("created stream {}", config.stream);
    }
    print_info(format, &info, &check(&info.config, config))
}

async fn run_update(
    format: Format,
    bus: &NatsBus,
    config: &BusConfig,
    yes: bool,
) -> Result<u8, CliError> {
    let info = bus.stream_info().await?.ok_or_else(|| missing(config))?;
    let next = updated(&info.config, config);
    if let Some(refusal) = check(&next, config).refusals.first() {
        // What an update cannot fix (storage, sealed, mirror): say so, change nothing.
        return Err(CliError::usage(format!(
            "{refusal}; an update cannot change that, nothing was changed"
        )));
    }
    let changed = changes(&info.config, &next);
    let mut out = std::io::stdout().lock();
    if changed.is_empty() {
        write_changes(&mut out, format, config, &changed, false)?;
        return Ok(EXIT_OK);
    }
    if format == Format::Table {
        write_changes(&mut out, format, config, &changed, false)?;
        out.flush()?;
    }
    confirm(
        yes,
        &format!("apply these changes to stream {}", config.stream),
    )?;
    bus.update_stream(&next).await?;
    if format == Format::Table {
        writeln!(out, "updated stream {}", config.stream)?;
    } else {
        write_changes(&mut out, format, config, &changed, true)?;
    }
    out.flush()?;
    Ok(EXIT_OK)
}

fn write_changes(
    out: &mut impl Write,
    format: Format,
    config: &BusConfig,
    changed: &[Change],
    applied: bool,
) -> std::io::Result<()> {
    if format == Format::Json {
        let doc = json!({ "stream": config.stream, "changes": changed, "applied": applied });
        return writeln!(out, "{doc}");
    }
    if changed.is_empty() {
        return writeln!(
            out,
            "stream {} already has dlq's settings; nothing to change",
            config.stream
        );
    }
    writeln!(out, "stream {}:", config.stream)?;
    for change in changed {
        writeln!(
            out,
            "  {}: {} -> {}",
            change.setting, change.from, change.to
        )?;
    }
    Ok(())
}

fn print_info(format: Format, info: &Info, fit: &Fit) -> Result<u8, CliError> {
    let mut out = std::io::stdout().lock();
    if format == Format::Json {
        let doc = json_info(info, fit);
        writeln!(out, "{doc}")?;
    } else {
        write_table(&mut out, info, fit)?;
    }
    out.flush()?;
    Ok(EXIT_OK)
}

fn json_info(info: &Info, fit: &Fit) -> serde_json::Value {
    let state = &info.state;
    let cluster = info.cluster.as_ref().map(|c| {
        json!({
            "name": c.name,
            "leader": c.leader,
            "replicas": c.replicas.iter().map(|p| json!({
                "name": p.name, "current": p.current, "offline": p.offline, "lag": p.lag,
            })).collect::<Vec<_>>(),
        })
    });
    json!({
        "config": info.config,
        "state": {
            "messages": state.messages,
            "bytes": state.bytes,
            "first_sequence": state.first_sequence,
            "last_sequence": state.last_sequence,
            "consumer_count": state.consumer_count,
        },
        "cluster": cluster,
        "refusals": fit.refusals,
        "warnings": fit.warnings,
    })
}

fn limit(value: i64) -> String {
    if value <= 0 {
        "unlimited".into()
    } else {
        value.to_string()
    }
}

fn write_table(out: &mut impl Write, info: &Info, fit: &Fit) -> std::io::Result<()> {
    let c: &Config = &info.config;
    let rows = [
        ("stream", c.name.clone()),
        ("subjects", subjects_of(c)),
        ("storage", format!("{:?}", c.storage).to_lowercase()),
        ("replicas", c.num_replicas.max(1).to_string()),
        ("duplicate window", human(c.duplicate_window)),
        ("retention", format!("{:?}", c.retention).to_lowercase()),
        ("discard", format!("{:?}", c.discard).to_lowercase()),
        ("max age", human(c.max_age)),
        ("max messages", limit(c.max_messages)),
        ("max bytes", limit(c.max_bytes)),
        ("max message size", limit(c.max_message_size.into())),
        ("messages", info.state.messages.to_string()),
        ("bytes", info.state.bytes.to_string()),
        ("first sequence", info.state.first_sequence.to_string()),
        ("last sequence", info.state.last_sequence.to_string()),
        ("consumers", info.state.consumer_count.to_string()),
    ];
    for (name, value) in rows {
        writeln!(out, "{name:<18}{value}")?;
    }
    if let Some(cluster) = &info.cluster {
        let leader = cluster.leader.as_deref().unwrap_or("none");
        let peers: Vec<String> = cluster
            .replicas
            .iter()
            .map(|p| {
                let health = if p.offline {
                    "offline"
                } else if p.current {
                    "current"
                } else {
                    "behind"
                };
                format!("{} ({health})", p.name)
            })
            .collect();
        writeln!(out, "{:<18}{leader}", "leader")?;
        if !peers.is_empty() {
            writeln!(out, "{:<18}{}", "other replicas", peers.join(", "))?;
        }
    }
    if fit.refusals.is_empty() && fit.warnings.is_empty() {
        writeln!(out, "dlq can publish to it as configured")?;
    }
    for refusal in &fit.refusals {
        writeln!(out, "refused: {refusal}")?;
    }
    for warning in &fit.warnings {
        writeln!(out, "warning: {warning}")?;
    }
    Ok(())
}
