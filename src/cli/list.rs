//! `dlq list` and `dlq inspect`: read-only views of the items (they open only the sink, or go
//! through the API of the `dlq serve` holding it). The `write_*` functions render an answer in
//! an output format; the admin API renders with them too, so a forwarded command prints exactly
//! what it would have printed itself.

use std::io::{BufWriter, Write};

use chrono::Utc;
use clap::Args;

use super::forward::{self, Target};
use super::{open, Cli, CliError, Format, EXIT_OK};
use crate::query::cel::CelFilter;
use crate::domain::model::DeadLetteredItem;
use crate::query::list::{counted_total, in_listing_order, page_in_order, Cursor, ListRequest};
use crate::query::{parse_error_type, parse_time, Criteria, QueryError};
use crate::serve::params;
use crate::sink::{Sink, SledSink};
use render::{print_item, print_page};

/// Items per page when `--limit` is not given.
pub const DEFAULT_LIMIT: usize = 50;

/// Options of `dlq list`.
#[derive(Debug, Clone, PartialEq, Eq, Args)]
pub struct ListArgs {
    /// Only items of this job.
    #[arg(long)]
    pub job_id: Option<String>,
    /// Only items that may be retried automatically (`reprocess_eligible`).
    #[arg(long)]
    pub eligible: bool,
    /// Only items whose most recent failure has this error type (e.g. Timeout, CommandFailed).
    #[arg(long)]
    pub error_type: Option<String>,
    /// Only items with this error signature (16 hex characters, see `dlq analyze`).
    #[arg(long)]
    pub signature: Option<String>,
    /// Only items that last failed at or after this time (RFC 3339, a date, or a duration ago: 2h).
    #[arg(long)]
    pub since: Option<String>,
    /// Only items that last failed before this time (same forms as --since).
    #[arg(long)]
    pub until: Option<String>,
    /// Items per page.
    #[arg(long, default_value_t = DEFAULT_LIMIT)]
    pub limit: usize,
    /// Items to skip before the page (offset + limit at most 100000; page further with --after).
    #[arg(long, default_value_t = 0, conflicts_with = "after")]
    pub offset: usize,
    /// Start after this cursor (the next_cursor of the previous page).
    #[arg(long)]
    pub after: Option<String>,
    /// Only items this CEL expression selects, e.g. `item.priority >= 5 && error_type ==
    /// "Timeout"` (variables: item, item_id, job_id, error_type, error_message, failure_count,
    /// reprocess_eligible, manual_review_required, error_signature, error_pattern,
    /// first_attempt, last_attempt, exit_code).
    #[arg(long)]
    pub filter: Option<String>,
    /// Count every matching item (`matched`), even when that means reading all of them; without
    /// it, `matched` is left out (null) when only a full walk could tell.
    #[arg(long)]
    pub count: bool,
}

impl Default for ListArgs {
    fn default() -> Self {
        ListArgs {
            job_id: None,
            eligible: false,
            error_type: None,
            signature: None,
            since: None,
            until: None,
            limit: DEFAULT_LIMIT,
            offset: 0,
            after: None,
            filter: None,
            count: false,
        }
    }
}

/// A checked `dlq list` request: the page and the compiled `--filter` expression.
#[derive(Debug, Clone)]
pub struct ListQuery {
    /// Which page of which items.
    pub request: ListRequest,
    /// The `--filter` expression, applied before paging.
    pub expr: Option<CelFilter>,
}

impl ListArgs {
    /// Checks every option and compiles the filter; a malformed one is a usage error.
    pub fn query(&self) -> Result<ListQuery, CliError> {
        if self.offset > 0 && self.after.is_some() {
            return Err(CliError::Usage(
                "--offset and --after cannot be combined: page with one of them".into(),
            ));
        }
        let request = self.request()?;
        let expr = self
            .filter
            .as_deref()
            .map(CelFilter::parse)
            .transpose()
            .map_err(|err| CliError::Usage(err.to_string()))?;
        Ok(ListQuery { request, expr })
    }

    fn request(&self) -> Result<ListRequest, QueryError> {
        let now = Utc::now();
        let time = |text: &Option<String>| text.as_deref().map(|t| parse_time(t, now)).transpose();
        Ok(ListRequest {
            filter: Criteria {
                job_id: self.job_id.clone(),
                eligible_only: self.eligible,
                error_type: self
                    .error_type
                    .as_deref()
                    .map(parse_error_type)
                    .transpose()?,
                signature: self.signature.clone(),
                since: time(&self.since)?,
                until: time(&self.until)?,
            },
            limit: self.limit,
            offset: self.offset,
            after: self.after.as_deref().map(Cursor::decode).transpose()?,
            count: self.count,
        })
    }
}

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
    f: impl FnOnce(&SledSink) -> Result<T, CliError>,
) -> Result<T, CliError> {
    let config = open::one_pass(open::config(cli)?);
    let sink = open::sink(cli, &config).await?;
    let result = f(&sink);
    sink.close().await?;
    result
}

/// The formats `dlq list` prints.
pub fn check_list_format(format: Format) -> Result<(), CliError> {
    match format {
        Format::Dir => Err(CliError::Usage("list prints table, json, jsonl or csv; use `dlq export --format dir` for the directory layout".into())),
        _ => Ok(()),
    }
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

/// Selects the page of `query` (the filter expression applied before paging, so a page holds
/// `limit` matching items whenever there are that many) and writes it in `format`. Walks the
/// recency index and stops once the page is full (see [`crate::query::list`]).
pub fn write_list(
    out: &mut impl Write,
    sink: &SledSink,
    query: &ListQuery,
    format: Format,
) -> Result<(), CliError> {
    let expr = query.expr.as_ref();
    let request = &query.request;
    let items = in_listing_order(sink, &request.filter, request.after.as_ref())?
        .filter_map(|item| selected(expr, item));
    let page = page_in_order(items, request)?;
    let matched = match page.matched {
        Some(matched) => Some(matched),
        None => counted_total(sink, request, expr.is_some())?,
    };
    let next = page.next_cursor.as_ref().map(Cursor::encode);
    print_page(out, format, matched, next, page.items.into_iter().map(Ok))
}

/// Keeps `item` if the expression (if any) selects it; an item it cannot decide about is an
/// error naming the item, never silently left out.
fn selected(
    expr: Option<&CelFilter>,
    item: Result<DeadLetteredItem, QueryError>,
) -> Option<Result<DeadLetteredItem, QueryError>> {
    let Some(expr) = expr else {
        return Some(item);
    };
    match item {
        Ok(item) => match expr.matches_item(&item) {
            Ok(true) => Some(Ok(item)),
            Ok(false) => None,
            Err(err) => Some(Err(QueryError::Invalid(format!(
                "item '{}' of job '{}': {err}; nothing was listed",
                item.item_id, item.job_id
            )))),
        },
        Err(err) => Some(Err(err)),
    }
}

/// Finds the item (in the named job, or in the only job holding it) or says why not.
pub fn find_item(
    sink: &SledSink,
    item_id: &str,
    job_id: Option<&str>,
) -> Result<DeadLetteredItem, QueryError> {
    let job = match job_id {
        Some(job) => job.to_owned(),
        None => {
            let mut jobs = sink.jobs_with_item(item_id)?;
            match jobs.len() {
                0 => None,
                1 => jobs.pop(),
                _ => {
                    return Err(QueryError::Ambiguous {
                        item_id: item_id.to_owned(),
                        jobs,
                    })
                }
            }
            .ok_or_else(|| QueryError::ItemNotFound {
                item_id: item_id.to_owned(),
                job_id: None,
            })?
        }
    };
    sink.item(&job, item_id)?
        .map(|stored| stored.item)
        .ok_or_else(|| QueryError::ItemNotFound {
            item_id: item_id.to_owned(),
            job_id: Some(job),
        })
}

/// The formats `dlq inspect` prints.
pub fn check_inspect_format(format: Format) -> Result<(), CliError> {
    match format {
        Format::Csv | Format::Dir => Err(CliError::Usage(
            "inspect prints table, json or jsonl".into(),
        )),
        _ => Ok(()),
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

/// Writes one whole item in `format` (pretty JSON for json).
pub fn write_item(
    out: &mut impl Write,
    format: Format,
    item: &DeadLetteredItem,
) -> Result<(), CliError> {
    match format {
        Format::Json => {
            serde_json::to_writer_pretty(&mut *out, item).map_err(std::io::Error::from)?;
            writeln!(out)?;
        }
        Format::Jsonl => {
            serde_json::to_writer(&mut *out, item).map_err(std::io::Error::from)?;
            writeln!(out)?;
        }
        _ => print_item(out, item)?,
    }
    Ok(())
}

#[path = "list_render.rs"]
mod render;
