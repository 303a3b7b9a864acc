//! `dlq console`: the fleet console (see [`crate::serve::console`]) until SIGINT or SIGTERM.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use serde_json::json;

use super::{open, Cli, CliError, Format, EXIT_OK};
use crate::serve::console::{follow, serve_console, Console, ControlClient};
use crate::serve::{check_listen, Exposure, Listener, TlsConfig};
use dlq::consumer::{ConsumerStore, DurableConfig};

/// Options of `dlq console`.
#[derive(Debug, Args)]
pub struct ConsoleArgs {
    /// Directory of the console's own consumer store (not a node's data directory).
    #[arg(long)]
    pub store: PathBuf,
    /// Name of the console's durable consumer on the stream.
    #[arg(long, default_value = "dlq-console")]
    pub durable: String,
    /// JetStream stream to read.
    #[arg(long, default_value = "DLQ")]
    pub stream: String,
    /// Address of the console's page and API; port 0 picks one.
    #[arg(long, default_value = "127.0.0.1:9466")]
    pub listen: SocketAddr,
    /// Allow a non-loopback --listen address; needs a token and TLS (or --insecure).
    #[arg(long)]
    pub allow_remote: bool,
    /// PEM certificate chain to serve over TLS; with --tls-key.
    #[arg(long, value_name = "FILE", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// PEM private key of --tls-cert.
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// With --allow-remote, serve plain HTTP.
    #[arg(long)]
    pub insecure: bool,
    /// File of named tokens with roles, as for `dlq serve` (an operator may delete; the nodes
    /// record the deletes as `console:<name>`).
    #[arg(long, env = "DLQ_API_TOKENS_FILE", value_name = "FILE")]
    pub tokens_file: Option<PathBuf>,
    /// The prefix of the nodes' control subjects (`dlq serve --control-prefix`).
    #[arg(long, env = "DLQ_CONTROL_PREFIX", default_value = crate::serve::control::DEFAULT_PREFIX, value_name = "PREFIX")]
    pub control_prefix: String,
}

/// Runs the console until a signal asks it to stop.
pub async fn run_console(cli: &Cli, args: &ConsoleArgs) -> Result<u8, CliError> {
    let tokens = super::serve::api_tokens(cli, args.tokens_file.as_deref())?;
    let tls_files = args.tls_cert.as_deref().zip(args.tls_key.as_deref());
    check_listen(
        args.listen,
        Exposure {
            allow_remote: args.allow_remote,
            token: !tokens.is_empty(),
            tls: tls_files.is_some(),
            insecure: args.insecure,
        },
    )?;
    let tls = tls_files
        .map(|(cert, key)| TlsConfig::load(cert, key))
        .transpose()?;
    let config = open::config(cli)?;
    let store = ConsumerStore::open(&args.store)?;
    let client = dlq::bus::connect_client(&config.bus.0, Duration::from_secs(5)).await?;
    let console = Console::new(ControlClient::new(client, args.control_prefix.clone()));
    let listener = Listener::bind(args.listen, tls).await?;
    let url = listener.url().to_owned();
    match cli.format {
        Format::Table => println!(
            "dlq console: page and API at {url} for every node of stream {} (pid {}); SIGINT or SIGTERM stops it",
            args.stream,
            std::process::id()
        ),
        _ => println!(
            "{}",
            json!({ "url": url, "pid": std::process::id(), "token_required": !tokens.is_empty() })
        ),
    }
    let stop = super::signals::cancel_on_signal();
    let consumer = tokio::spawn(follow(
        DurableConfig {
            bus: config.bus.0.clone(),
            stream: args.stream.clone(),
            name: args.durable.clone(),
            from_start: false,
            follow: true,
            accept_gaps: Vec::new(),
        },
        store,
        console.clone(),
        stop.clone(),
    ));
    let shutdown = stop.clone().cancelled_owned();
    let served = serve_console(listener, console, tokens, shutdown).await;
    stop.cancel();
    let _ = consumer.await;
    served?;
    Ok(EXIT_OK)
}
