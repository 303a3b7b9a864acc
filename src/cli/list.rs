//! `dlq list` and `dlq inspect`: read-only views of the items (they open only the sink, or go
//! through the API of the `dlq serve` holding it). The `write_*` functions render an answer in
//! an output format; the admin API renders with them too, so a forwarded command prints exactly
//! what it would have printed itself.

use std::io::{BufWriter, Write};

use clap::Args;

use super::forward::{self, Target};
use super::{open, Cli, CliError, EXIT_OK};
use crate::query::list::find_item;
use crate::render::items::{check_inspect_format, check_list_format, write_item, write_list};
use crate::request::params;
use crate::request::ListArgs;
use dlq::sink::{LocalSink, Sink};

/// Options of `dlq inspect`.
#[derive(Debug, Args)]
pub struct InspectArgs {
    /// The item's id.
    pub item_id: String,
    /// The item's job (needed when the id exists in several jobs).
    #[arg(long)]
    pub job_id: Option<String>,
}

/// Opens the sink read-only for one pass over the items (its cache capped, see
/// [`open::one_pass`]), runs `f`, and closes the sink whatever `f` returned.
pub async fn with_sink<T>(
    cli: &Cli,
    f: impl FnOnce(&LocalSink) -> Result<T, CliError>,
) -> Result<T, CliError> {
    let config = open::one_pass(open::config(cli)?);
    let sink = open::sink(cli, &config).await?;
    let result = f(&sink);
    sink.close().await?;
    result
}

/// Prints one page of items.
pub async fn run_list(cli: &Cli, args: &ListArgs) -> Result<u8, CliError> {
    check_list_format(cli.format)?;
    let query = args.query()?;
    match forward::target(cli).await? {
        Target::Api(api) => forward::print(api.get(&params::list_path(args, cli.format)).await?),
        Target::Local(local) => {
            local
                .run(|sink| {
                    let mut out = BufWriter::new(std::io::stdout().lock());
                    write_list(&mut out, sink, &query, cli.format)?;
                    out.flush()?;
                    Ok(EXIT_OK)
                })
                .await
        }
    }
}

/// Prints one whole item.
pub async fn run_inspect(cli: &Cli, args: &InspectArgs) -> Result<u8, CliError> {
    check_inspect_format(cli.format)?;
    let item = match forward::target(cli).await? {
        Target::Api(api) => {
            let path = params::inspect_path(&args.item_id, args.job_id.as_deref(), cli.format);
            return forward::print(api.get(&path).await?);
        }
        Target::Local(local) => {
            local
                .run(|sink| Ok(find_item(sink, &args.item_id, args.job_id.as_deref())?))
                .await?
        }
    };
    let mut out = BufWriter::new(std::io::stdout().lock());
    write_item(&mut out, cli.format, &item)?;
    out.flush()?;
    Ok(EXIT_OK)
}
