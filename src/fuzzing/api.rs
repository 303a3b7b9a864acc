//! The admin API: query strings and JSON bodies as `dlq serve` reads them, and answers as the
//! forwarding CLI reads them.

use axum::extract::Query;
use axum::http::Uri;

use super::Outcome;
use crate::render::items::{check_inspect_format, check_list_format};
use crate::render::report::check_report_format;
use crate::request::params::{list_args, Params};
use crate::request::{PurgeRequest, RequestError, RetryRequest};

/// The routes whose query strings are read, in the order the first input byte selects them.
const ROUTES: &[&str] = &[
    "/v1/items",
    "/v1/items/item-1",
    "/v1/stats",
    "/v1/analyze",
    "/v1/jobs/job-1/clear",
    "/v1/purge",
    "/v1/jobs/job-1/retry",
];

/// A query string (the bytes after the first) of the route the first byte selects (mod 7),
/// decoded as axum decodes it and read as that route's handler reads it, before any data is
/// touched.
pub fn api_query(data: &[u8]) -> Outcome {
    let Some((&selector, rest)) = data.split_first() else {
        return Ok(());
    };
    let Ok(query) = std::str::from_utf8(rest) else {
        return Ok(());
    };
    let route = ROUTES[usize::from(selector) % ROUTES.len()];
    let Ok(uri) = format!("{route}?{query}").parse::<Uri>() else {
        return Ok(()); // hyper refuses the request line
    };
    let Ok(Query(pairs)) = Query::<Vec<(String, String)>>::try_from_uri(&uri) else {
        return Ok(()); // a 400
    };
    let _ = read_params(route, Params::new(pairs));
    Ok(())
}

/// What the handler of `route` reads from its parameters.
fn read_params(route: &str, mut params: Params) -> Result<(), RequestError> {
    match route {
        "/v1/items" => {
            let (args, format) = list_args(params)?;
            check_list_format(format)?;
            args.query()?;
        }
        "/v1/items/item-1" => {
            let format = params.format()?;
            params.finish(route)?;
            check_inspect_format(format)?;
        }
        "/v1/stats" | "/v1/analyze" => {
            params.take("job_id")?;
            let format = params.format()?;
            params.finish(route)?;
            check_report_format(format, route)?;
        }
        "/v1/jobs/job-1/clear" => {
            params.duration("drain_timeout")?;
            params.format()?;
            params.finish(route)?;
        }
        _ => {
            params.format()?;
            params.finish(route)?;
        }
    }
    Ok(())
}

/// A JSON body (the bytes after the first) of `POST /v1/jobs/{job_id}/retry` (first byte even)
/// or `POST /v1/purge` (odd), decoded and checked as the handler does before it acts.
pub fn api_body(data: &[u8]) -> Outcome {
    let Some((&selector, body)) = data.split_first() else {
        return Ok(());
    };
    if selector % 2 == 0 {
        if let Ok(body) = serde_json::from_slice::<RetryRequest>(body) {
            let _ = body.options();
        }
    } else if let Ok(body) = serde_json::from_slice::<PurgeRequest>(body) {
        let _ = dlq::removal::purge_cutoff(body.older_than_days);
    }
    Ok(())
}

/// A raw HTTP/1.1 answer, as the forwarding CLI splits it into status and body.
pub fn api_response(data: &[u8]) -> Outcome {
    let _ = crate::serve::client::parse_response(data);
    Ok(())
}
