//! `dlq serve`: hold the data directory, keep publishing, and serve the admin API until SIGINT
//! or SIGTERM (see [`crate::serve`]).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use clap::Args;
use serde_json::json;

use super::{open, Cli, CliError, Format, EXIT_OK};
use crate::serve::client::token::token_text;
use crate::serve::AppState;
use crate::serve::{check_listen, install_metrics, Exposure, Listener, TlsConfig};
use crate::serve::{Token, Tokens};

/// Options of `dlq serve`.
#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Address of the API (one listener: /healthz, /metrics and /v1/...); port 0 picks one.
    #[arg(long, env = "DLQ_LISTEN", default_value = "127.0.0.1:9465")]
    pub listen: SocketAddr,
    /// Allow a non-loopback --listen address; needs a token (--token-file or DLQ_API_TOKEN)
    /// and TLS (--tls-cert and --tls-key), or --insecure.
    #[arg(long)]
    pub allow_remote: bool,
    /// PEM certificate chain (leaf first) to serve the API over TLS (https); with --tls-key.
    #[arg(long, value_name = "FILE", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// PEM private key of --tls-cert.
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// With --allow-remote, serve plain HTTP without TLS: the token and the items cross the
    /// network readable by anyone on the path. Only behind a TLS proxy or on a trusted network.
    #[arg(long)]
    pub insecure: bool,
    /// File of named tokens with roles, one `NAME [ROLE] TOKEN` a line (ROLE: read-only, the
    /// default; operator: also retry and delete; admin: also clear and purge). With
    /// --token-file, whose token is the admin named `default`.
    #[arg(long, env = "DLQ_API_TOKENS_FILE", value_name = "FILE")]
    pub tokens_file: Option<PathBuf>,
    /// Answer a fleet console (`dlq console`) on the NATS subject PREFIX.<node id>: its deletes
    /// (and redrives) of this node's items run here, as `console:<name>`.
    #[arg(long, env = "DLQ_CONTROL_PREFIX", default_value = crate::serve::control::DEFAULT_PREFIX, value_name = "PREFIX")]
    pub control_prefix: String,
    /// Do not answer a fleet console on the control subject.
    #[arg(long)]
    pub no_control: bool,
}

/// The tokens an API started by this command accepts: the admin `default` of --token-file (or
/// `DLQ_API_TOKEN`) and the named tokens of `tokens_file`. Logs their names and roles, never a
/// token.
pub(crate) fn api_tokens(cli: &Cli, tokens_file: Option<&Path>) -> Result<Tokens, CliError> {
    let token = token_text(cli.token_file.as_deref())?;
    let mut tokens = Tokens::from(token.as_deref().map(Token::new));
    if let Some(file) = tokens_file {
        tokens.load(file)?;
        let names: Vec<String> = tokens
            .names()
            .map(|(name, role)| format!("{name} ({role})"))
            .collect();
        tracing::info!(tokens = %names.join(", "), "API tokens");
    }
    Ok(tokens)
}

/// Runs the server until a signal asks it to stop.
pub async fn run_serve(cli: &Cli, args: &ServeArgs) -> Result<u8, CliError> {
    let tokens = api_tokens(cli, args.tokens_file.as_deref())?;
    let token = (!tokens.is_empty()).then_some(());
    let tls_files = args.tls_cert.as_deref().zip(args.tls_key.as_deref());
    check_listen(
        args.listen,
        Exposure {
            allow_remote: args.allow_remote,
            token: token.is_some(),
            tls: tls_files.is_some(),
            insecure: args.insecure,
        },
    )?;
    let tls = tls_files
        .map(|(cert, key)| TlsConfig::load(cert, key))
        .transpose()?;
    if args.allow_remote && tls.is_none() {
        tracing::warn!(listen = %args.listen, "--insecure: serving the API over plain HTTP; the token and the items can be read by anyone on the network path");
    }
    let config = open::config(cli)?;
    let listener = Listener::bind(args.listen, tls).await?;
    let metrics = install_metrics(config.metrics_addr)?;
    let sink = open::sink(cli, &config).await?;
    let emitter = open::emitter_with_sink(&config, sink, true).await?;
    let url = listener.url().to_owned();
    match cli.format {
        Format::Table => println!(
            "dlq serve: API at {url} for {} (pid {}, token {}); SIGINT or SIGTERM stops it",
            cli.data_dir.display(),
            std::process::id(),
            if token.is_some() {
                "required"
            } else {
                "not required"
            }
        ),
        _ => println!(
            "{}",
            json!({ "url": url, "pid": std::process::id(), "token_required": token.is_some() })
        ),
    }
    let state = AppState {
        emitter: emitter.clone(),
        metrics,
        run: super::run::server_run_options(cli, &config),
        control_prefix: (!args.no_control).then(|| args.control_prefix.clone()),
    };
    let served = crate::serve::serve(listener, state, tokens, &cli.data_dir, stop_signal()).await;
    // `serve` returned once no connection or query held the state; the shutdown waits for the
    // emitter's own tasks and closes the sink. This emitter is then the last handle.
    let closed = emitter.shutdown().await;
    drop(emitter);
    if closed.is_ok() {
        open::refresh_snapshot(cli, &config).await;
    }
    served?;
    closed?;
    Ok(EXIT_OK)
}

/// Resolves on SIGINT or SIGTERM, whose handlers are installed when this is called: before
/// `serve` announces the server, so a signal sent once `serve.json` names it is always caught.
fn stop_signal() -> impl std::future::Future<Output = ()> + Send + 'static {
    let mut signals = super::signals::StopSignals::install();
    async move {
        signals.next().await;
        tracing::info!("stopping: finishing the requests in flight");
    }
}
