//! `dlq delete`: delete named items or the items a `dlq list` filter selects, each an
//! `item_removed` event with reason `deleted`; `--dry-run` only counts; confirmed on a terminal,
//! refused without `--yes` otherwise, as `dlq clear` and `dlq purge` are ([`super::admin`]).

use clap::Args;

use super::admin::{confirm, prepare, print_removal};
use super::forward::{self, Target};
use super::{Cli, CliError, Format};
use crate::query::delete::{select, Selected};
use crate::request::reason::{removed_by, LOCAL};
use crate::request::{params, DeleteRequest};
use crate::serve::client::ApiClient;
use dlq::removal::{delete_items, nothing_to_delete, DEFAULT_DRAIN};

/// Options of `dlq delete`.
#[derive(Debug, Args)]
pub struct DeleteArgs {
    /// What to delete, and how.
    #[command(flatten)]
    pub request: DeleteRequest,
    /// Do not ask for confirmation (required without a terminal).
    #[arg(long, short = 'y')]
    pub yes: bool,
}

fn delete_question(n: u64) -> Option<String> {
    Some(format!("delete {n} items")).filter(|_| n > 0)
}

/// Deletes the named or selected items (or, with `--dry-run`, counts them).
pub async fn run_delete(cli: &Cli, args: &DeleteArgs) -> Result<u8, CliError> {
    // A malformed request changes nothing and opens nothing.
    let target = args.request.target()?;
    let by = removed_by(LOCAL, args.request.reason.as_deref())?;
    let local = match forward::target(cli).await? {
        Target::Api(api) => return forward_delete(cli, args, &api).await,
        Target::Local(local) => local,
    };
    if args.request.dry_run {
        let chosen = local
            .run(|sink| {
                let chosen = select(sink, &target)?;
                chosen.check_found()?;
                Ok(chosen)
            })
            .await?;
        return print_removal(cli.format, &chosen.dry_run());
    }
    let mut chosen = Selected::default();
    let prepared = prepare(
        local,
        |sink| {
            chosen = select(sink, &target)?;
            chosen.check_found()?;
            Ok(chosen.items.len() as u64)
        },
        delete_question,
        args.yes,
    )
    .await?;
    let Some((_, emitter)) = prepared else {
        // Nothing to delete: no question, no bus, nothing changed.
        return print_removal(cli.format, &chosen.answer(nothing_to_delete()));
    };
    let drain = args.request.drain_timeout.unwrap_or(DEFAULT_DRAIN);
    let removal = delete_items(&emitter, &chosen.items, drain, Some(&by)).await;
    emitter.shutdown().await?;
    print_removal(cli.format, &chosen.answer(removal?))
}

/// `dlq delete` through the API: a dry run to count and ask, then the delete.
async fn forward_delete(cli: &Cli, args: &DeleteArgs, api: &ApiClient) -> Result<u8, CliError> {
    if !args.yes && !args.request.dry_run {
        let dry_run = DeleteRequest {
            dry_run: true,
            ..args.request.clone()
        };
        let dry = api
            .post_json(&params::delete_path(Format::Json), &dry_run)
            .await?;
        if let Some(question) = delete_question(forward::json_field(api, &dry, "would_remove")?) {
            confirm(false, &question)?;
        }
    }
    forward::print(
        api.post_json(&params::delete_path(cli.format), &args.request)
            .await?,
    )
}
