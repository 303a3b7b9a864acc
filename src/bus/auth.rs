//! Authentication and TLS of the NATS connection: what the operator gave (`bus.auth`,
//! `bus.tls`, the `--user`/`--creds`/`--tlsca`... flags, credentials written in the URL), checked
//! before anything is sent, and turned into async-nats [`ConnectOptions`].
//!
//! The rules, each enforced here and nowhere else:
//!
//! - **One way to authenticate**: user and password, a token, an NKey seed file or a
//!   credentials file (JWT + seed). A user without a password is a token, as in the `nats` CLI.
//! - **Credentials in the URL are used, never dropped.** async-nats ignores the user info of a
//!   server URL (nats.rs issue 1623), so `nats://user:pass@host` and `nats://token@host` are
//!   parsed here ([`parse_server`]), removed from the URL handed to the client, and sent as
//!   user/password or token. Credentials both in the URL and in the options are refused, as are
//!   different credentials in two URLs of one list.
//! - **Secrets stay secret**: passwords and tokens are [`Secret`]s, whose `Debug`, `Display`
//!   and serialized form are `<redacted>`; URLs are shown through [`redact_url`]. A seed,
//!   credentials or private-key file that group or others may read gives a warning.
//! - **No plaintext credentials off the machine**: a password or token for a host other than
//!   loopback without TLS (`tls://` or any `bus.tls` setting) is refused unless
//!   `allow_insecure_credentials` says otherwise. NKeys and credentials files sign a nonce and
//!   never send the seed, so they are not refused.
//! - **Failures say what to do**: [`explain_connect_error`] turns async-nats's connect error
//!   kinds into one line naming the cause and the fix.

use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use async_nats::{ConnectError, ConnectErrorKind, ConnectOptions};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use tracing::warn;

use super::{BusConfig, BusError};

/// What a [`Secret`] shows instead of its value.
pub const REDACTED: &str = "<redacted>";

/// A password or token: shown and serialized as `<redacted>`; [`Secret::expose`] is the one
/// way to read it, used only to hand it to the client.
#[derive(Clone, PartialEq, Eq, Default)]
pub struct Secret(String);

impl Secret {
    /// Wraps a secret value.
    pub fn new(value: impl Into<String>) -> Self {
        Secret(value.into())
    }

    /// The value itself, for the connection only.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(REDACTED)
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(REDACTED)
    }
}

impl FromStr for Secret {
    type Err = std::convert::Infallible;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(Secret::new(s))
    }
}

impl Serialize for Secret {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(REDACTED)
    }
}

impl<'de> Deserialize<'de> for Secret {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        String::deserialize(deserializer).map(Secret)
    }
}

/// How dlq authenticates to NATS (`bus.auth` in the configuration file). At most one of
/// user/password, token, `nkey` and `creds`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct BusAuth {
    /// User name; without a password it is sent as a token (as the `nats` CLI does).
    pub user: Option<Secret>,
    /// Password of `user`.
    pub password: Option<Secret>,
    /// Token.
    pub token: Option<Secret>,
    /// File holding an NKey user seed (`SU...`).
    pub nkey: Option<PathBuf>,
    /// Credentials file (a user JWT and its NKey seed, as `nsc` writes it).
    pub creds: Option<PathBuf>,
    /// Send a password or token in plain text to a host other than loopback (no TLS).
    pub allow_insecure_credentials: bool,
}

/// TLS settings (`bus.tls`). Any of them, or a `tls://` URL, makes TLS required.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct BusTls {
    /// PEM file of the CA certificates to trust (besides the system's).
    pub ca: Option<PathBuf>,
    /// PEM file of the client certificate (mutual TLS); needs `key`.
    pub cert: Option<PathBuf>,
    /// PEM file of the client certificate's private key.
    pub key: Option<PathBuf>,
    /// Start TLS before the server's INFO (servers with `handshake_first`).
    pub first: bool,
}

impl BusTls {
    /// Whether any TLS setting is given.
    pub fn configured(&self) -> bool {
        self.ca.is_some() || self.cert.is_some() || self.key.is_some() || self.first
    }
}

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
    pub fn is_tls(&self) -> bool {
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

/// The way dlq authenticates, after the URL and the options were put together.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Method {
    /// No credentials.
    None,
    /// User and password.
    UserPassword(String, Secret),
    /// A token.
    Token(Secret),
    /// An NKey seed file.
    NKey(PathBuf),
    /// A credentials file.
    Creds(PathBuf),
}

impl Method {
    /// What the operator gave, for error messages (never the secret).
    pub fn describe(&self) -> String {
        match self {
            Method::None => "no credentials".into(),
            Method::UserPassword(user, _) => format!("user `{user}` and its password"),
            Method::Token(_) => "a token".into(),
            Method::NKey(path) => format!("the NKey seed in {}", path.display()),
            Method::Creds(path) => format!("the credentials file {}", path.display()),
        }
    }

    /// The options that set these credentials.
    fn flags(&self) -> &'static str {
        match self {
            Method::None => "--user/--password, --nkey or --creds (NATS_USER, NATS_PASSWORD, NATS_NKEY, NATS_CREDS; bus.auth in --config)",
            Method::UserPassword(..) => "--user/--password (NATS_USER/NATS_PASSWORD, bus.auth.user/password, or the URL)",
            Method::Token(_) => "the token (--user alone / NATS_USER, bus.auth.token, or nats://TOKEN@host)",
            Method::NKey(_) => "--nkey (NATS_NKEY, bus.auth.nkey)",
            Method::Creds(_) => "--creds (NATS_CREDS, bus.auth.creds)",
        }
    }

    fn is_plaintext(&self) -> bool {
        matches!(self, Method::UserPassword(..) | Method::Token(_))
    }
}

/// A checked connection plan: the servers without credentials, how to authenticate, whether
/// TLS is required.
#[derive(Debug, Clone)]
pub struct Plan {
    /// Server URLs as handed to the client (no credentials).
    pub servers: Vec<String>,
    /// How to authenticate.
    pub method: Method,
    /// Whether TLS is required (a `tls://` URL or any TLS setting).
    pub tls: bool,
}

impl Plan {
    /// Checks `config` (URL credentials, one method, TLS files in pairs, no plaintext
    /// credentials off loopback without TLS) without touching any file. Pure.
    pub fn new(config: &BusConfig) -> Result<Plan, BusError> {
        let invalid = |message: String| BusError::Config(message);
        let mut servers = Vec::new();
        let mut in_url: Option<UrlCredentials> = None;
        let mut hosts = Vec::new();
        let mut tls = config.tls.configured();
        for url in super::server_list(&config.url) {
            let parsed = parse_server(url).map_err(invalid)?;
            if let Some(credentials) = parsed.credentials.clone() {
                match &in_url {
                    Some(seen) if *seen != credentials => {
                        return Err(invalid(format!(
                            "the server URLs {} carry different credentials: write them once, or use --user/--password",
                            redact_url(&config.url)
                        )))
                    }
                    _ => in_url = Some(credentials),
                }
            }
            tls |= parsed.is_tls();
            hosts.push(parsed.host.clone());
            servers.push(parsed.url);
        }
        if servers.is_empty() {
            return Err(invalid("no server URL given (--nats-url, bus.url)".into()));
        }
        let auth = &config.auth;
        let mut methods = Vec::new();
        match (&auth.user, &auth.password) {
            (Some(user), Some(password)) => methods.push(Method::UserPassword(
                user.expose().to_owned(),
                password.clone(),
            )),
            (Some(user), None) => methods.push(Method::Token(user.clone())),
            (None, Some(_)) => {
                return Err(invalid(
                    "a password without a user: give --user (NATS_USER, bus.auth.user) too".into(),
                ))
            }
            (None, None) => {}
        }
        if let Some(token) = &auth.token {
            methods.push(Method::Token(token.clone()));
        }
        if let Some(path) = &auth.nkey {
            methods.push(Method::NKey(path.clone()));
        }
        if let Some(path) = &auth.creds {
            methods.push(Method::Creds(path.clone()));
        }
        if let Some(credentials) = in_url {
            if !methods.is_empty() {
                return Err(invalid(format!(
                    "credentials both in the server URL and in the options ({}): give them once",
                    methods[0].describe()
                )));
            }
            methods.push(match credentials {
                UrlCredentials::UserPassword { user, password } => {
                    Method::UserPassword(user, password)
                }
                UrlCredentials::Token(token) => Method::Token(token),
            });
        }
        if methods.len() > 1 {
            let given: Vec<String> = methods.iter().map(Method::describe).collect();
            return Err(invalid(format!(
                "more than one way to authenticate ({}): give only one",
                given.join(", ")
            )));
        }
        let method = methods.pop().unwrap_or(Method::None);
        if config.tls.cert.is_some() != config.tls.key.is_some() {
            return Err(invalid(
                "a client certificate needs both --tlscert and --tlskey (NATS_CERT/NATS_KEY, bus.tls.cert/key)".into(),
            ));
        }
        if method.is_plaintext() && !tls && !auth.allow_insecure_credentials {
            if let Some(host) = hosts.iter().find(|host| !is_loopback(host)) {
                return Err(invalid(format!(
                    "refusing to send {} in plain text to {host}: use a tls:// URL (with --tlsca if its certificate is not from a public CA), or pass --allow-insecure-credentials (bus.auth.allow_insecure_credentials) to send it anyway",
                    method.describe()
                )));
            }
        }
        Ok(Plan {
            servers,
            method,
            tls,
        })
    }

    /// Applies the plan to `options`: credentials (reading the seed or credentials file) and
    /// TLS. Warns about key files that group or others may read.
    pub async fn apply(
        &self,
        config: &BusConfig,
        options: ConnectOptions,
    ) -> Result<ConnectOptions, BusError> {
        let mut options = match &self.method {
            Method::None => options,
            Method::UserPassword(user, password) => {
                options.user_and_password(user.clone(), password.expose().to_owned())
            }
            Method::Token(token) => options.token(token.expose().to_owned()),
            Method::NKey(path) => options.nkey(read_seed(path)?),
            Method::Creds(path) => {
                warn_if_readable_by_others(path);
                options.credentials_file(path).await.map_err(|err| {
                    BusError::Config(format!(
                        "cannot use the credentials file {}: {err} (--creds, NATS_CREDS)",
                        path.display()
                    ))
                })?
            }
        };
        let tls = &config.tls;
        if let Some(ca) = &tls.ca {
            require_file(ca, "CA file (--tlsca, NATS_CA)")?;
            options = options.add_root_certificates(ca.clone());
        }
        if let (Some(cert), Some(key)) = (&tls.cert, &tls.key) {
            require_file(cert, "client certificate (--tlscert, NATS_CERT)")?;
            require_file(key, "client key (--tlskey, NATS_KEY)")?;
            warn_if_readable_by_others(key);
            options = options.add_client_certificate(cert.clone(), key.clone());
        }
        if tls.first {
            options = options.tls_first();
        }
        if self.tls {
            options = options.require_tls(true);
        }
        Ok(options)
    }
}

fn require_file(path: &Path, what: &str) -> Result<(), BusError> {
    std::fs::metadata(path).map(|_| ()).map_err(|err| {
        BusError::Config(format!("cannot read the {what} {}: {err}", path.display()))
    })
}

/// The NKey seed in `path`: the first line that starts with `S` (a seed file may also hold
/// the public key or comments).
fn read_seed(path: &Path) -> Result<String, BusError> {
    warn_if_readable_by_others(path);
    let text = std::fs::read_to_string(path).map_err(|err| {
        BusError::Config(format!(
            "cannot read the NKey seed file {}: {err} (--nkey, NATS_NKEY)",
            path.display()
        ))
    })?;
    text.lines()
        .map(str::trim)
        .find(|line| line.starts_with('S'))
        .map(str::to_owned)
        .ok_or_else(|| {
            BusError::Config(format!(
                "no NKey seed (a line starting with `S`) in {} (--nkey, NATS_NKEY)",
                path.display()
            ))
        })
}

/// Whether group or others may read the file at `path` (Unix mode bits `0o077`).
pub fn readable_by_others(path: &Path) -> bool {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::metadata(path).is_ok_and(|meta| meta.permissions().mode() & 0o077 != 0)
    }
    #[cfg(not(unix))]
    {
        let _ = path;
        false
    }
}

fn warn_if_readable_by_others(path: &Path) {
    if readable_by_others(path) {
        warn!(
            "{} holds a secret key but group or others may read it: chmod 600 {}",
            path.display(),
            path.display()
        );
    }
}

/// One line naming why the connection failed and what to change.
pub fn explain_connect_error(err: &ConnectError, plan: &Plan, url: &str) -> String {
    let url = redact_url(url);
    let detail = source_chain(err);
    match err.kind() {
        ConnectErrorKind::AuthorizationViolation => match plan.method {
            Method::None => format!(
                "{url} requires authentication (authorization violation): give {}",
                plan.method.flags()
            ),
            _ => format!(
                "{url} refused {} (authorization violation): check {}",
                plan.method.describe(),
                plan.method.flags()
            ),
        },
        ConnectErrorKind::Authentication => format!(
            "cannot authenticate to {url} with {} ({detail}): check {}",
            plan.method.describe(),
            plan.method.flags()
        ),
        ConnectErrorKind::Tls => explain_tls(&url, &detail),
        // async-nats reports a failed handshake (an untrusted certificate...) as I/O.
        ConnectErrorKind::Io if looks_like_tls(&detail) => explain_tls(&url, &detail),
        ConnectErrorKind::TimedOut => format!(
            "no answer from {url} in time: is nats-server running there? (if it sets handshake_first, pass --tlsfirst)"
        ),
        ConnectErrorKind::ServerParse | ConnectErrorKind::Dns => {
            format!("cannot resolve the server address {url}: {detail} (check --nats-url, bus.url)")
        }
        ConnectErrorKind::Io | ConnectErrorKind::MaxReconnects => format!(
            "cannot reach {url}: {detail} (is nats-server running? check --nats-url, bus.url)"
        ),
    }
}

/// Whether the server refused this connection (credentials, TLS): trying again with the same
/// settings cannot help, unlike a server that is down.
pub fn is_refusal(err: &ConnectError) -> bool {
    match err.kind() {
        ConnectErrorKind::AuthorizationViolation
        | ConnectErrorKind::Authentication
        | ConnectErrorKind::Tls => true,
        ConnectErrorKind::Io => looks_like_tls(&source_chain(err)),
        _ => false,
    }
}

fn looks_like_tls(detail: &str) -> bool {
    let lower = detail.to_ascii_lowercase();
    ["certificate", "tls", "handshake", "alert"]
        .iter()
        .any(|word| lower.contains(word))
}

fn explain_tls(url: &str, detail: &str) -> String {
    let lower = detail.to_ascii_lowercase();
    if lower.contains("unknownissuer")
        || lower.contains("unknown issuer")
        || lower.contains("badsignature")
    {
        format!("the server certificate of {url} is not trusted ({detail}): pass the CA that signed it with --tlsca (NATS_CA, bus.tls.ca)")
    } else if lower.contains("notvalidforname") || lower.contains("not valid for name") {
        format!("the server certificate of {url} does not name that host ({detail}): connect by a name the certificate holds")
    } else if lower.contains("expired") {
        format!("the server certificate of {url} has expired ({detail}): the server needs a new certificate")
    } else if lower.contains("certificaterequired") || lower.contains("certificate required") {
        format!("{url} requires a client certificate ({detail}): give --tlscert and --tlskey (NATS_CERT/NATS_KEY, bus.tls.cert/key)")
    } else if lower.contains("tls not required") || lower.contains("not support tls") {
        format!("{url} does not offer TLS ({detail}): use a nats:// URL and no TLS options, or enable TLS on the server")
    } else {
        format!("TLS with {url} failed ({detail}): check --tlsca, --tlscert/--tlskey and --tlsfirst (NATS_CA, NATS_CERT, NATS_KEY; bus.tls)")
    }
}

/// The error and its sources, joined by `: `, duplicates skipped.
fn source_chain(err: &(dyn std::error::Error + 'static)) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut next = Some(err);
    while let Some(err) = next {
        let text = err.to_string();
        if !parts.iter().any(|part| part.contains(&text)) {
            parts.push(text);
        }
        next = err.source();
    }
    parts.join(": ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(url: &str) -> BusConfig {
        BusConfig {
            url: url.into(),
            ..BusConfig::default()
        }
    }

    #[test]
    fn url_user_and_password_are_parsed_decoded_and_stripped() {
        let parsed = parse_server("nats://al%40ice:p%3Ass@nats.example:4222/x").unwrap();
        assert_eq!(parsed.url, "nats://nats.example:4222/x");
        assert_eq!(parsed.host, "nats.example");
        assert_eq!(
            parsed.credentials,
            Some(UrlCredentials::UserPassword {
                user: "al@ice".into(),
                password: Secret::new("p:ss"),
            })
        );
    }

    #[test]
    fn url_token_ipv6_and_no_scheme() {
        let parsed = parse_server("tls://s3cr3t@[::1]:4443").unwrap();
        assert_eq!(parsed.url, "tls://[::1]:4443");
        assert_eq!(parsed.host, "::1");
        assert!(parsed.is_tls());
        assert_eq!(
            parsed.credentials,
            Some(UrlCredentials::Token(Secret::new("s3cr3t")))
        );
        let bare = parse_server("localhost:4222").unwrap();
        assert_eq!(
            (bare.url.as_str(), bare.host.as_str()),
            ("localhost:4222", "localhost")
        );
        assert_eq!(bare.credentials, None);
        assert!(parse_server("nats://u:p@:4222").is_err());
        assert!(parse_server("nats://u:%zz@h").is_err());
    }

    #[test]
    fn redaction_hides_url_credentials_and_secrets() {
        assert_eq!(
            redact_url("nats://u:pw@a:1, tls://tok@b:2,nats://c:3"),
            "nats://<redacted>@a:1, tls://<redacted>@b:2,nats://c:3"
        );
        let mut config = config("nats://u:hunter2@127.0.0.1:4222");
        config.auth.token = Some(Secret::new("tok-hunter3"));
        let shown = format!("{config:?} {}", serde_json::to_string(&config).unwrap());
        assert!(
            !shown.contains("hunter2") && !shown.contains("hunter3"),
            "{shown}"
        );
    }

    #[test]
    fn url_credentials_become_the_method() {
        let plan = Plan::new(&config(
            "nats://u:pw@127.0.0.1:4222,nats://u:pw@localhost:5222",
        ))
        .unwrap();
        assert_eq!(
            plan.method,
            Method::UserPassword("u".into(), Secret::new("pw"))
        );
        assert_eq!(
            plan.servers,
            ["nats://127.0.0.1:4222", "nats://localhost:5222"]
        );
        let plan = Plan::new(&config("nats://tok@127.0.0.1")).unwrap();
        assert_eq!(plan.method, Method::Token(Secret::new("tok")));
    }

    #[test]
    fn conflicting_or_double_credentials_are_refused() {
        assert!(Plan::new(&config("nats://a:1@127.0.0.1,nats://b:2@127.0.0.1")).is_err());
        let mut both = config("nats://a:1@127.0.0.1");
        both.auth.nkey = Some("/k".into());
        assert!(Plan::new(&both).is_err());
        let mut two = config("nats://127.0.0.1");
        two.auth.creds = Some("/c".into());
        two.auth.token = Some(Secret::new("t"));
        let err = Plan::new(&two).unwrap_err().to_string();
        assert!(err.contains("more than one"), "{err}");
        let mut password_only = config("nats://127.0.0.1");
        password_only.auth.password = Some(Secret::new("p"));
        assert!(Plan::new(&password_only).is_err());
        let mut half_pair = config("nats://127.0.0.1");
        half_pair.tls.cert = Some("/c.pem".into());
        assert!(Plan::new(&half_pair).is_err());
    }

    #[test]
    fn a_user_alone_is_a_token() {
        let mut alone = config("nats://127.0.0.1");
        alone.auth.user = Some(Secret::new("tok"));
        assert_eq!(
            Plan::new(&alone).unwrap().method,
            Method::Token(Secret::new("tok"))
        );
    }

    #[test]
    fn plaintext_credentials_off_loopback_need_tls_or_the_switch() {
        let err = Plan::new(&config("nats://u:pw@nats.example:4222"))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("plain text") && err.contains("--allow-insecure-credentials"),
            "{err}"
        );
        assert!(!err.contains("pw"), "{err}");
        assert!(
            Plan::new(&config("tls://u:pw@nats.example:4222"))
                .unwrap()
                .tls
        );
        let mut with_ca = config("nats://u:pw@nats.example:4222");
        with_ca.tls.ca = Some("/ca.pem".into());
        assert!(Plan::new(&with_ca).is_ok());
        let mut allowed = config("nats://u:pw@nats.example:4222");
        allowed.auth.allow_insecure_credentials = true;
        assert!(Plan::new(&allowed).is_ok());
        let mut nkey = config("nats://nats.example:4222");
        nkey.auth.nkey = Some("/seed".into());
        assert!(Plan::new(&nkey).is_ok(), "an NKey never sends its seed");
    }

    #[test]
    fn loopback_hosts() {
        for host in ["localhost", "127.0.0.1", "127.1.2.3", "::1"] {
            assert!(is_loopback(host), "{host}");
        }
        for host in ["nats.example", "10.0.0.1", "::2"] {
            assert!(!is_loopback(host), "{host}");
        }
    }

    #[cfg(unix)]
    #[test]
    fn key_files_readable_by_others_are_noticed() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("seed");
        std::fs::write(&path, "SUAAA\n").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert!(readable_by_others(&path));
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert!(!readable_by_others(&path));
        assert_eq!(read_seed(&path).unwrap(), "SUAAA");
    }
}
