//! Where an operator command runs: on the data directory itself, or through the API of the
//! `dlq serve` that holds it.
//!
//! The rule ([`target`]): `--api URL` always forwards. Otherwise, when `<data_dir>/serve.json`
//! names a live process whose `/healthz` answers, the command goes to that API (the server holds
//! the sled lock, so opening the directory could only fail). Otherwise the directory is opened;
//! while another process holds it (a short command, or a job not yet announcing its API) both
//! are tried again for up to `--lock-wait`, then the error names that process and what to do
//! ([`super::open::sink`]). A forwarded command asks the server to render its answer in the
//! command's `--format` with the same code the CLI uses, and prints the body as it is.

use std::io::Write;

use super::{open, Cli, CliError, EXIT_OK};
use crate::serve::client::discovery::ServeFile;
use crate::serve::client::token::token_text;
use crate::serve::client::{Answer, ApiClient};
use crate::serve::ServeError;
use dlq::config::Config;
use dlq::sink::{LocalSink, Sink};

/// The data directory, opened here.
pub struct Local {
    config: Config,
    sink: LocalSink,
}

impl Local {
    /// Runs `f` on the sink, then closes it whatever `f` returned.
    pub async fn run<T>(
        self: Box<Self>,
        f: impl FnOnce(&LocalSink) -> Result<T, CliError>,
    ) -> Result<T, CliError> {
        let result = f(&self.sink);
        self.sink.close().await?;
        result
    }

    /// The configuration and the open sink.
    pub fn into_parts(self: Box<Self>) -> (Config, LocalSink) {
        (self.config, self.sink)
    }
}

/// Where a command runs.
pub enum Target {
    /// On the data directory, opened by this process.
    Local(Box<Local>),
    /// Through the API of the server holding the data directory.
    Api(ApiClient),
}

/// Chooses where the command runs (see the module documentation).
pub async fn target(cli: &Cli) -> Result<Target, CliError> {
    target_with(cli, |config| config).await
}

/// [`target`] for a command that reads every item once: opened here, the sink's cache is
/// capped ([`open::one_pass`]).
pub async fn one_pass_target(cli: &Cli) -> Result<Target, CliError> {
    target_with(cli, open::one_pass).await
}

async fn target_with(cli: &Cli, adjust: fn(Config) -> Config) -> Result<Target, CliError> {
    if let Some(url) = &cli.api {
        return Ok(Target::Api(client(cli, url)?));
    }
    let config = adjust(open::config(cli)?);
    let mut wait = open::LockWait::new(cli);
    loop {
        if let Some(api) = announced_api(cli).await? {
            return Ok(Target::Api(api));
        }
        if let Some(sink) = open::try_sink(cli, &config)? {
            return Ok(Target::Local(Box::new(Local { config, sink })));
        }
        // Held by a short command, or by a job that has not announced its API yet.
        wait.pause(cli).await?;
    }
}

/// The API announced in `serve.json` by a live process, if it answers.
pub async fn announced_api(cli: &Cli) -> Result<Option<ApiClient>, CliError> {
    let Some(file) = ServeFile::read_live(&cli.data_dir) else {
        return Ok(None);
    };
    let api = client(cli, &file.url)?;
    Ok(api.healthy().await.then_some(api))
}

/// A client of `url` with the token of `--token-file` or `DLQ_API_TOKEN`.
fn client(cli: &Cli, url: &str) -> Result<ApiClient, CliError> {
    let token = token_text(cli.token_file.as_deref())?;
    Ok(ApiClient::new(url, token, cli.api_ca.as_deref())?)
}

/// Prints an answer's body as it is.
pub fn print(answer: Answer) -> Result<u8, CliError> {
    let mut out = std::io::stdout().lock();
    out.write_all(&answer.body)?;
    out.flush()?;
    Ok(EXIT_OK)
}

/// A number field of a JSON answer.
pub fn json_field(api: &ApiClient, answer: &Answer, name: &str) -> Result<u64, CliError> {
    serde_json::from_slice::<serde_json::Value>(&answer.body)
        .ok()
        .and_then(|value| value.get(name).and_then(serde_json::Value::as_u64))
        .ok_or_else(|| {
            ServeError::Protocol {
                url: api.url().to_owned(),
                reason: format!("the answer has no number `{name}`"),
            }
            .into()
        })
}
