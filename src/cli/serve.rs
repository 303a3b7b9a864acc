//! `dlq serve`: hold the data directory, keep publishing, and serve the admin API until SIGINT
//! or SIGTERM (see [`crate::serve`]).

use std::net::SocketAddr;

use clap::Args;
use serde_json::json;

use super::{open, Cli, CliError, Format, EXIT_OK};
use crate::serve::client::token::token_text;
use crate::serve::AppState;
use crate::serve::Token;
use crate::serve::{check_listen, install_metrics, Listener};

/// Options of `dlq serve`.
#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Address of the API (one listener: /healthz, /metrics and /v1/...); port 0 picks one.
    #[arg(long, env = "DLQ_LISTEN", default_value = "127.0.0.1:9465")]
    pub listen: SocketAddr,
    /// Allow a non-loopback --listen address (then also set --token-file).
    #[arg(long)]
    pub allow_remote: bool,
}

/// Runs the server until a signal asks it to stop.
pub async fn run_serve(cli: &Cli, args: &ServeArgs) -> Result<u8, CliError> {
    check_listen(args.listen, args.allow_remote)?;
    let token = token_text(cli.token_file.as_deref())?;
    if token.is_none() && !args.listen.ip().is_loopback() {
        tracing::warn!(listen = %args.listen, "serving other hosts without a token: anyone who can connect can clear and purge items; set --token-file");
    }
    let config = open::config(cli)?;
    let listener = Listener::bind(args.listen).await?;
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
    };
    let served = crate::serve::serve(
        listener,
        state,
        token.as_deref().map(Token::new),
        &cli.data_dir,
        stop_signal(),
    )
    .await;
    let closed = emitter.shutdown().await;
    served?;
    closed?;
    Ok(EXIT_OK)
}

/// Resolves on SIGINT or SIGTERM.
async fn stop_signal() {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
    super::signals::interrupted(&mut term).await;
    tracing::info!("stopping: finishing the requests in flight");
}
