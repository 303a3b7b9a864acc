//! One server URL taken apart (scheme, host, credentials) and URLs made fit to show. Pure.

use super::secret::{Secret, REDACTED};

/// Credentials written in a server URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UrlCredentials {
    /// `nats://user:password@host`.
    UserPassword {
        /// The user (percent-decoded).
        user: String,
        /// The password (percent-decoded).
        password: Secret,
    },
    /// `nats://token@host`.
    Token(Secret),
}

/// One server URL taken apart.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParsedServer {
    /// The URL without its credentials, as handed to the client.
    pub url: String,
    /// The scheme (`nats`, `tls`, `ws`, `wss`); `nats` when none is written.
    pub scheme: String,
    /// The host, without brackets or port.
    pub host: String,
    /// The credentials the URL carried.
    pub credentials: Option<UrlCredentials>,
}

impl ParsedServer {
    /// Whether the URL itself asks for TLS.
    pub(crate) fn is_tls(&self) -> bool {
        matches!(self.scheme.as_str(), "tls" | "wss")
    }
}

/// Takes one server URL apart: scheme, host, and credentials (`user:password@` or `token@`,
/// percent-decoded), which are removed from [`ParsedServer::url`]. Pure.
pub fn parse_server(url: &str) -> Result<ParsedServer, String> {
    let url = url.trim();
    let (scheme, rest) = match url.split_once("://") {
        Some((scheme, rest)) => (scheme.to_ascii_lowercase(), rest),
        None => ("nats".to_owned(), url),
    };
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(authority_end);
    let (userinfo, hostport) = match authority.rsplit_once('@') {
        Some((userinfo, hostport)) => (Some(userinfo), hostport),
        None => (None, authority),
    };
    let host = if let Some(bracketed) = hostport.strip_prefix('[') {
        bracketed.split(']').next().unwrap_or_default().to_owned()
    } else {
        hostport
            .rsplit_once(':')
            .map_or(hostport, |(host, _port)| host)
            .to_owned()
    };
    if host.is_empty() {
        return Err(format!("no host in server URL {}", redact_url(url)));
    }
    let credentials = match userinfo {
        None => None,
        Some(userinfo) => Some(match userinfo.split_once(':') {
            Some((user, password)) => UrlCredentials::UserPassword {
                user: percent_decode(user)?,
                password: Secret::new(percent_decode(password)?),
            },
            None => UrlCredentials::Token(Secret::new(percent_decode(userinfo)?)),
        }),
    };
    let stripped = if url.contains("://") {
        format!("{scheme}://{hostport}{tail}")
    } else {
        format!("{hostport}{tail}")
    };
    Ok(ParsedServer {
        url: stripped,
        scheme,
        host,
        credentials,
    })
}

/// A URL (or a comma-separated list) fit to show: credentials replaced by `<redacted>`.
pub fn redact_url(urls: &str) -> String {
    urls.split(',')
        .map(|url| {
            let (prefix, rest) = match url.find("://") {
                Some(at) => url.split_at(at + 3),
                None => ("", url),
            };
            let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
            match rest[..authority_end].rfind('@') {
                Some(at) => format!("{prefix}{REDACTED}{}", &rest[at..]),
                None => url.to_owned(),
            }
        })
        .collect::<Vec<_>>()
        .join(",")
}

fn percent_decode(text: &str) -> Result<String, String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = text
                .get(i + 1..i + 3)
                .and_then(|hex| u8::from_str_radix(hex, 16).ok())
                .ok_or("a bad percent escape in the credentials of a server URL")?;
            out.push(hex);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| "credentials in a server URL are not UTF-8".to_owned())
}

/// Whether `host` is this machine (`localhost`, `127.0.0.0/8`, `::1`).
pub fn is_loopback(host: &str) -> bool {
    host.eq_ignore_ascii_case("localhost")
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}
