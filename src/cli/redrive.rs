//! `dlq redrive`: hand named or selected items back to the scheduler that failed them. The
//! redrive runs in the process that holds the data directory and its redrive handler (a
//! scheduler serving its API through `serve_emitter`, or `dlq serve`), so the command is always
//! forwarded: asked first from a dry run (unless `--yes` or `--dry-run`), then sent. On a
//! directory nobody serves it changes nothing and says who must run.

use clap::Args;

use super::admin::confirm;
use super::forward::{self, Target};
use super::{Cli, CliError, Format};
use crate::request::{params, RedriveRequest};
use crate::serve::client::ApiClient;

/// Options of `dlq redrive`.
#[derive(Debug, Args)]
pub struct RedriveArgs {
    /// What to redrive, and how.
    #[command(flatten)]
    pub request: RedriveRequest,
    /// Do not ask for confirmation (required without a terminal).
    #[arg(long, short = 'y')]
    pub yes: bool,
}

/// Forwards the redrive to the process serving the data directory.
pub async fn run_redrive(cli: &Cli, args: &RedriveArgs) -> Result<u8, CliError> {
    // A malformed request changes nothing and opens nothing.
    args.request.job()?;
    let api = match forward::target(cli).await? {
        Target::Api(api) => api,
        Target::Local(local) => {
            local.run(|_| Ok(())).await?;
            return Err(CliError::usage(format!(
                "nothing serves {}: a redrive hands items back to the scheduler that owns them, so that scheduler must run and serve its API (dlq_ops::serve::serve_emitter) for dlq to forward to; `dlq retry JOB` re-runs `dlq run`'s own jobs; nothing was changed",
                cli.data_dir.display()
            )));
        }
    };
    forward_redrive(cli, args, &api).await
}

/// A dry run to count and ask, then the redrive.
async fn forward_redrive(cli: &Cli, args: &RedriveArgs, api: &ApiClient) -> Result<u8, CliError> {
    if !args.yes && !args.request.dry_run {
        let dry_run = RedriveRequest {
            dry_run: true,
            ..args.request.clone()
        };
        let dry = api
            .post_json(&params::redrive_path(Format::Json), &dry_run)
            .await?;
        let n = forward::json_field(api, &dry, "would_redrive")?;
        if n > 0 {
            confirm(false, &format!("redrive {n} items"))?;
        }
    }
    forward::print(
        api.post_json(&params::redrive_path(cli.format), &args.request)
            .await?,
    )
}
