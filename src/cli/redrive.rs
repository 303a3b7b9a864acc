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
/// Once asked, only the generations the dry run showed are redriven: an item another operator
/// redrove in between is reported as already redriven.
async fn forward_redrive(cli: &Cli, args: &RedriveArgs, api: &ApiClient) -> Result<u8, CliError> {
    let mut request = args.request.clone();
    if !args.yes && !request.dry_run {
        let dry_run = RedriveRequest {
            dry_run: true,
            ..request.clone()
        };
        let dry = api
            .post_json(&params::redrive_path(Format::Json), &dry_run)
            .await?;
        let n = forward::json_field(api, &dry, "would_redrive")?;
        if n > 0 {
            confirm(false, &format!("redrive {n} items"))?;
        }
        request.generations.extend(seen_generations(&dry.body));
    }
    forward::print(
        api.post_json(&params::redrive_path(cli.format), &request)
            .await?,
    )
}

/// `JOB/ITEM` → generation of each item a dry run's JSON answer lists.
fn seen_generations(body: &[u8]) -> Vec<(String, u32)> {
    let answer: serde_json::Value = serde_json::from_slice(body).unwrap_or_default();
    let items = answer["items"].as_array().cloned().unwrap_or_default();
    items
        .iter()
        .filter_map(|item| {
            let (job, id) = (item["job_id"].as_str()?, item["item_id"].as_str()?);
            let generation = u32::try_from(item["generation"].as_u64()?).ok()?;
            Some((format!("{job}/{id}"), generation))
        })
        .collect()
}
