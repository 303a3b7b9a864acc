//! The query strings of the admin API: [`Params`] as the server reads them and the `*_path`
//! functions as the forwarding CLI writes them, side by side so that they cannot drift apart.
//!
//! Every route takes `format` (`table`, `json`, `jsonl`, `csv`; default `json`): the answer is
//! rendered as `dlq --format <format> <command>` prints it. Parameters are named like the
//! command's flags, with `_` for `-`; an unknown or repeated parameter is a 400, never ignored.

use std::time::Duration;

use crate::render::Format;
use crate::request::{ListArgs, RequestError};

/// The parameters of one request, consumed one by one.
#[derive(Debug)]
pub struct Params {
    pairs: Vec<(String, String)>,
}

impl Params {
    /// The decoded `name=value` pairs of a query string.
    pub fn new(pairs: Vec<(String, String)>) -> Self {
        Params { pairs }
    }

    /// Removes and returns parameter `name`; given twice is an error.
    pub fn take(&mut self, name: &str) -> Result<Option<String>, RequestError> {
        let mut found = None;
        let mut error = None;
        self.pairs.retain(|(key, value)| {
            if key != name {
                return true;
            }
            if found.replace(value.clone()).is_some() {
                error = Some(RequestError::Usage(format!(
                    "parameter '{name}' is given twice"
                )));
            }
            false
        });
        error.map_or(Ok(found), Err)
    }

    /// Parameter `name` parsed as `T` (`what` describes the expected form).
    pub fn parsed<T: std::str::FromStr>(
        &mut self,
        name: &str,
        what: &str,
    ) -> Result<Option<T>, RequestError> {
        self.take(name)?
            .map(|text| {
                text.parse().map_err(|_| {
                    RequestError::Usage(format!("parameter '{name}': '{text}' is not {what}"))
                })
            })
            .transpose()
    }

    /// A duration parameter (`500ms`, `5s`).
    pub fn duration(&mut self, name: &str) -> Result<Option<Duration>, RequestError> {
        self.take(name)?
            .map(|text| {
                humantime::parse_duration(&text).map_err(|err| {
                    RequestError::Usage(format!(
                        "parameter '{name}': '{text}' is not a duration ({err})"
                    ))
                })
            })
            .transpose()
    }

    /// The `format` parameter (default json).
    pub fn format(&mut self) -> Result<Format, RequestError> {
        match self.take("format")? {
            None => Ok(Format::Json),
            Some(text) => Format::from_name(&text).ok_or_else(|| {
                RequestError::Usage(format!(
                    "parameter 'format': '{text}' is not one of table, json, jsonl, csv"
                ))
            }),
        }
    }

    /// Fails on any parameter not taken; `route` names the route for the message.
    pub fn finish(self, route: &str) -> Result<(), RequestError> {
        match self.pairs.first() {
            None => Ok(()),
            Some((name, _)) => Err(RequestError::Usage(format!(
                "unknown parameter '{name}' for {route}"
            ))),
        }
    }
}

/// Percent-encodes everything but RFC 3986's unreserved characters.
pub fn encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || b"-._~".contains(&byte) {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

fn format_name(format: Format) -> String {
    format.name().to_owned()
}

fn query(pairs: &[(&str, String)]) -> String {
    let parts: Vec<String> = pairs
        .iter()
        .map(|(name, value)| format!("{name}={}", encode(value)))
        .collect();
    parts.join("&")
}

/// `GET /v1/items?...`: the request `dlq list` with `args` forwards.
pub fn list_path(args: &ListArgs, format: Format) -> String {
    let mut pairs: Vec<(&str, String)> = Vec::new();
    let mut text = |name, value: &Option<String>| {
        if let Some(value) = value {
            pairs.push((name, value.clone()));
        }
    };
    text("job_id", &args.job_id);
    text("error_type", &args.error_type);
    text("signature", &args.signature);
    text("since", &args.since);
    text("until", &args.until);
    text("after", &args.after);
    text("filter", &args.filter);
    if args.eligible {
        pairs.push(("eligible", "true".into()));
    }
    if args.count {
        pairs.push(("count", "true".into()));
    }
    pairs.push(("limit", args.limit.to_string()));
    pairs.push(("offset", args.offset.to_string()));
    pairs.push(("format", format_name(format)));
    format!("/v1/items?{}", query(&pairs))
}

/// Reads the parameters of `GET /v1/items` into the options of `dlq list`.
pub fn list_args(mut params: Params) -> Result<(ListArgs, Format), RequestError> {
    let defaults = ListArgs::default();
    let args = ListArgs {
        job_id: params.take("job_id")?,
        eligible: params.parsed("eligible", "true or false")?.unwrap_or(false),
        error_type: params.take("error_type")?,
        signature: params.take("signature")?,
        since: params.take("since")?,
        until: params.take("until")?,
        limit: params
            .parsed("limit", "a number")?
            .unwrap_or(defaults.limit),
        offset: params.parsed("offset", "a number")?.unwrap_or(0),
        after: params.take("after")?,
        filter: params.take("filter")?,
        count: params.parsed("count", "true or false")?.unwrap_or(false),
    };
    let format = params.format()?;
    params.finish("/v1/items")?;
    Ok((args, format))
}

/// `GET /v1/items/{job_id}/{item_id}`, or `/v1/items/{item_id}` searching every job.
pub fn inspect_path(item_id: &str, job_id: Option<&str>, format: Format) -> String {
    let format = format_name(format);
    match job_id {
        Some(job) => format!(
            "/v1/items/{}/{}?format={format}",
            encode(job),
            encode(item_id)
        ),
        None => format!("/v1/items/{}?format={format}", encode(item_id)),
    }
}

/// `GET /v1/stats` or `/v1/analyze` (`route`), optionally for one job.
pub fn report_path(route: &str, job_id: Option<&str>, format: Format) -> String {
    let mut pairs = Vec::new();
    if let Some(job) = job_id {
        pairs.push(("job_id", job.to_owned()));
    }
    pairs.push(("format", format_name(format)));
    format!("/v1/{route}?{}", query(&pairs))
}

/// `POST /v1/jobs/{job_id}/clear`.
pub fn clear_path(
    job_id: &str,
    drain_timeout: Duration,
    reason: Option<&str>,
    format: Format,
) -> String {
    let mut pairs = vec![(
        "drain_timeout",
        humantime::format_duration(drain_timeout).to_string(),
    )];
    if let Some(reason) = reason {
        pairs.push(("reason", reason.to_owned()));
    }
    pairs.push(("format", format_name(format)));
    format!("/v1/jobs/{}/clear?{}", encode(job_id), query(&pairs))
}

/// `POST /v1/delete` (the options travel in the JSON body, [`super::DeleteRequest`]).
pub fn delete_path(format: Format) -> String {
    format!("/v1/delete?format={}", format_name(format))
}

/// `POST /v1/redrive` (the options travel in the JSON body, [`super::RedriveRequest`]).
pub fn redrive_path(format: Format) -> String {
    format!("/v1/redrive?format={}", format_name(format))
}

/// `POST /v1/purge` (the options travel in the JSON body, [`super::PurgeRequest`]).
pub fn purge_path(format: Format) -> String {
    format!("/v1/purge?format={}", format_name(format))
}

/// `POST /v1/jobs/{job_id}/retry` (the options travel in the JSON body,
/// [`super::RetryRequest`]).
pub fn retry_path(job_id: &str, format: Format) -> String {
    format!(
        "/v1/jobs/{}/retry?format={}",
        encode(job_id),
        format_name(format)
    )
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    /// Decodes a query string the simple way (enough for what [`encode`] writes).
    fn decode_query(path: &str) -> Vec<(String, String)> {
        let query = path.split_once('?').map_or("", |(_, q)| q);
        query
            .split('&')
            .filter(|p| !p.is_empty())
            .map(|pair| {
                let (k, v) = pair.split_once('=').unwrap();
                (k.to_owned(), decode(v))
            })
            .collect()
    }

    fn decode(text: &str) -> String {
        let bytes = text.as_bytes();
        let mut out = Vec::new();
        let mut i = 0;
        while i < bytes.len() {
            if bytes[i] == b'%' {
                out.push(u8::from_str_radix(&text[i + 1..i + 3], 16).unwrap());
                i += 3;
            } else {
                out.push(bytes[i]);
                i += 1;
            }
        }
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn list_options_survive_the_trip_through_the_query_string() {
        let args = ListArgs {
            job_id: Some("job a/b".into()),
            eligible: true,
            error_type: Some("timeout".into()),
            signature: Some("0123456789abcdef".into()),
            since: Some("2h".into()),
            until: Some("2025-01-11T10:30:00+01:00".into()),
            limit: 7,
            offset: 0,
            after: Some("7b22".into()),
            filter: Some(
                r#"item.priority >= 5 && error_type == "Timeout" || job_id.contains("&=%")"#.into(),
            ),
            count: true,
        };
        let path = list_path(&args, Format::Csv);
        assert!(path.starts_with("/v1/items?"), "{path}");
        assert!(!path.contains(' ') && !path.contains('"'), "{path}");
        let (back, format) = list_args(Params::new(decode_query(&path))).unwrap();
        assert_eq!(back, args);
        assert_eq!(format, Format::Csv);
        let (plain, format) = list_args(Params::new(decode_query(&list_path(
            &ListArgs::default(),
            Format::Json,
        ))))
        .unwrap();
        assert_eq!((plain, format), (ListArgs::default(), Format::Json));
    }

    #[test]
    fn unknown_repeated_or_malformed_parameters_are_refused() {
        let pairs = |list: &[(&str, &str)]| {
            Params::new(
                list.iter()
                    .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                    .collect(),
            )
        };
        let err = |p| list_args(p).unwrap_err().to_string();
        assert!(err(pairs(&[("limt", "5")])).contains("unknown parameter 'limt'"));
        assert!(err(pairs(&[("limit", "5"), ("limit", "6")])).contains("twice"));
        assert!(err(pairs(&[("limit", "five")])).contains("not a number"));
        assert!(err(pairs(&[("eligible", "yes")])).contains("true or false"));
        assert!(err(pairs(&[("format", "xml")])).contains("'xml'"));
        let mut p = pairs(&[("drain_timeout", "soon")]);
        assert!(p.duration("drain_timeout").is_err());
    }

    #[test]
    fn paths_encode_ids_and_options() {
        assert_eq!(
            inspect_path("a b", Some("j/1"), Format::Table),
            "/v1/items/j%2F1/a%20b?format=table"
        );
        assert_eq!(
            inspect_path("x", None, Format::Json),
            "/v1/items/x?format=json"
        );
        assert_eq!(
            report_path("stats", Some("j"), Format::Jsonl),
            "/v1/stats?job_id=j&format=jsonl"
        );
        assert_eq!(
            report_path("analyze", None, Format::Json),
            "/v1/analyze?format=json"
        );
        assert_eq!(
            clear_path("j", Duration::from_millis(1500), None, Format::Json),
            "/v1/jobs/j/clear?drain_timeout=1s%20500ms&format=json"
        );
        assert_eq!(
            clear_path("j", Duration::from_secs(5), Some("bad run"), Format::Json),
            "/v1/jobs/j/clear?drain_timeout=5s&reason=bad%20run&format=json"
        );
        assert_eq!(purge_path(Format::Table), "/v1/purge?format=table");
        assert_eq!(
            retry_path("nightly 2/3", Format::Json),
            "/v1/jobs/nightly%202%2F3/retry?format=json"
        );
    }
}
