//! `dlq stats` and `dlq analyze`: read-only summaries (they open only the sink, or go through
//! the API of the `dlq serve` holding it), rendered by [`crate::render::report`].

use std::io::{BufWriter, Write};
use std::path::PathBuf;

use clap::Args;

use super::forward::{self, Target};
use super::{Cli, CliError, EXIT_OK};
use crate::query::analyze::analyze;
use crate::query::stats::stats;
use crate::query::QueryError;
use crate::render::report::{check_report_format, write_analysis, write_stats};
use crate::render::Format;
use crate::request::params;

/// Options of `dlq stats`.
#[derive(Debug, Args)]
pub struct StatsArgs {
    /// Only items of this job (exit 3 if it has none).
    #[arg(long)]
    pub job_id: Option<String>,
}

/// Options of `dlq analyze`.
#[derive(Debug, Args)]
pub struct AnalyzeArgs {
    /// Only items of this job (exit 3 if it has none).
    #[arg(long)]
    pub job_id: Option<String>,
    /// Also write the analysis as JSON to this file (replaced atomically).
    #[arg(long)]
    pub export: Option<PathBuf>,
}

/// Prints the statistics.
pub async fn run_stats(cli: &Cli, args: &StatsArgs) -> Result<u8, CliError> {
    check_report_format(cli.format, "stats")?;
    let job = args.job_id.as_deref();
    let stats = match forward::target(cli).await? {
        Target::Api(api) => {
            return forward::print(
                api.get(&params::report_path("stats", job, cli.format))
                    .await?,
            )
        }
        Target::Local(local) => local.run(|sink| Ok(stats(sink, job)?)).await?,
    };
    let mut out = BufWriter::new(std::io::stdout().lock());
    write_stats(&mut out, cli.format, &stats)?;
    out.flush()?;
    Ok(EXIT_OK)
}

/// Prints the analysis, and writes it to `--export` if asked.
pub async fn run_analyze(cli: &Cli, args: &AnalyzeArgs) -> Result<u8, CliError> {
    check_report_format(cli.format, "analyze")?;
    let job = args.job_id.as_deref();
    let analysis = match forward::one_pass_target(cli).await? {
        Target::Api(api) => return forward_analyze(cli, args, &api).await,
        Target::Local(local) => local.run(|sink| Ok(analyze(sink, job)?)).await?,
    };
    if let Some(path) = &args.export {
        write_json_atomically(path, &analysis)?;
    }
    let mut out = BufWriter::new(std::io::stdout().lock());
    write_analysis(&mut out, cli.format, &analysis)?;
    if let (Format::Table, Some(path)) = (cli.format, &args.export) {
        writeln!(out, "\nanalysis written to {}", path.display())?;
    }
    out.flush()?;
    Ok(EXIT_OK)
}

/// `dlq analyze` through the API. With `--export` the JSON answer is written to the file; a
/// table then needs a second request (the CLI cannot rebuild the table from JSON).
async fn forward_analyze(
    cli: &Cli,
    args: &AnalyzeArgs,
    api: &crate::serve::client::ApiClient,
) -> Result<u8, CliError> {
    let job = args.job_id.as_deref();
    let Some(path) = &args.export else {
        return forward::print(
            api.get(&params::report_path("analyze", job, cli.format))
                .await?,
        );
    };
    let json = api
        .get(&params::report_path("analyze", job, Format::Json))
        .await?;
    let value: serde_json::Value =
        serde_json::from_slice(&json.body).map_err(|err| crate::serve::ServeError::Protocol {
            url: api.url().to_owned(),
            reason: format!("the analysis is not JSON: {err}"),
        })?;
    write_json_atomically(path, &value)?;
    if cli.format != Format::Table {
        return forward::print(json);
    }
    forward::print(
        api.get(&params::report_path("analyze", job, cli.format))
            .await?,
    )?;
    println!("\nanalysis written to {}", path.display());
    Ok(EXIT_OK)
}

/// Writes `value` as pretty JSON to a temporary sibling of `path`, then renames it into place.
fn write_json_atomically(
    path: &std::path::Path,
    value: &impl serde::Serialize,
) -> Result<(), CliError> {
    let name = path
        .file_name()
        .ok_or_else(|| CliError::usage(format!("{} is not a file name", path.display())))?;
    let temp = path.with_file_name(format!(
        ".{}.tmp-{}",
        name.to_string_lossy(),
        std::process::id()
    ));
    let write = || -> std::io::Result<()> {
        let json = serde_json::to_vec_pretty(value)?;
        let mut file = std::fs::File::create(&temp)?;
        file.write_all(&json)?;
        file.sync_all()?;
        std::fs::rename(&temp, path)
    };
    write().map_err(|source| {
        let _ = std::fs::remove_file(&temp);
        QueryError::Io {
            path: path.to_owned(),
            source,
        }
        .into()
    })
}
