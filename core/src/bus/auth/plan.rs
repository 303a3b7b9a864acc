//! The checked connection [`Plan`]: servers without credentials, one [`Method`], whether TLS
//! is required; and how it is applied to async-nats's [`ConnectOptions`].

use std::path::PathBuf;

use async_nats::ConnectOptions;

use super::key_files::{read_seed, require_file, warn_if_readable_by_others};
use super::secret::Secret;
use super::url::{is_loopback, parse_server, redact_url, UrlCredentials};
use crate::bus::{BusConfig, BusError};

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
    pub(super) fn flags(&self) -> &'static str {
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
        let invalid = |message: String| BusError::config(message);
        let mut servers = Vec::new();
        let mut in_url: Option<UrlCredentials> = None;
        let mut hosts = Vec::new();
        let mut tls = config.tls.configured();
        for url in crate::bus::server_list(&config.url) {
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
            return Err(invalid(
                "no server URL given (-s/--server, NATS_URL, bus.url)".into(),
            ));
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
                    BusError::config(format!(
                        "cannot use the credentials file {}: {err} (--creds, NATS_CREDS)",
                        path.display()
                    ))
                    .caused_by(err)
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
