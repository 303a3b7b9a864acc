//! Authentication and TLS of the NATS connection: what the operator gave (`bus.auth`,
//! `bus.tls`, the `--user`/`--creds`/`--tlsca`... flags, credentials written in the URL), checked
//! before anything is sent, and turned into async-nats
//! [`ConnectOptions`](async_nats::ConnectOptions).
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
//!
//! The parts: [`Secret`] (a value never shown), the server URL taken apart (`url`), the checked
//! [`Plan`] (`plan`), the key files it reads (`key_files`) and the one-line explanation of a
//! failed connection (`explain`).

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

mod explain;
mod key_files;
mod plan;
mod secret;
mod url;

pub use explain::{explain_connect_error, is_refusal, is_unreachable};
pub use key_files::readable_by_others;
pub use plan::{Method, Plan};
pub use secret::{Secret, REDACTED};
pub use url::{is_loopback, parse_server, redact_url, ParsedServer, UrlCredentials};

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

#[cfg(test)]
mod tests;
