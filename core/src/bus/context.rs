//! The `nats` CLI's contexts (`dlq --context NAME`): the JSON file
//! `$XDG_CONFIG_HOME/nats/context/NAME.json` (else `~/.config/nats/context/NAME.json`) that
//! `nats context save` writes, read for its server URL, credentials and TLS files. Its other
//! keys (JetStream domain, inbox prefix, colours...) are not used.

use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::auth::Secret;
use super::{BusConfig, BusError};

/// The keys of a context file dlq uses; empty strings count as not set, as in the nats CLI.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct NatsContext {
    /// Server URL(s).
    pub url: String,
    /// User, or a token when there is no password.
    pub user: String,
    /// Password.
    pub password: Secret,
    /// Token.
    pub token: Secret,
    /// Credentials file.
    pub creds: String,
    /// NKey seed file.
    pub nkey: String,
    /// Client certificate.
    pub cert: String,
    /// Client key.
    pub key: String,
    /// CA file.
    pub ca: String,
    /// TLS before the server's greeting.
    pub tls_first: bool,
}

/// Where the context `name` is stored.
pub fn context_path(name: &str) -> Result<PathBuf, BusError> {
    if name.is_empty() || name.contains(['/', '\\']) || name.starts_with('.') {
        return Err(BusError::config(format!(
            "invalid context name {name:?} (--context)"
        )));
    }
    let base = std::env::var_os("XDG_CONFIG_HOME")
        .filter(|dir| !dir.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".config")))
        .ok_or_else(|| {
            BusError::config(
                "--context needs HOME or XDG_CONFIG_HOME to find the nats CLI's contexts",
            )
        })?;
    Ok(base
        .join("nats")
        .join("context")
        .join(format!("{name}.json")))
}

impl NatsContext {
    /// Reads the context file at `path`.
    pub fn load(path: &Path) -> Result<Self, BusError> {
        let text = std::fs::read_to_string(path).map_err(|err| {
            BusError::config(format!(
                "cannot read the nats context {}: {err} (--context; `nats context ls` lists them)",
                path.display()
            ))
            .caused_by(err)
        })?;
        serde_json::from_str(&text).map_err(|err| {
            BusError::config(format!("invalid nats context {}: {err}", path.display()))
                .caused_by(err)
        })
    }

    /// Sets what the context holds on `bus`: its URL, its way to authenticate (replacing
    /// the configuration file's), its TLS files.
    pub fn apply(self, bus: &mut BusConfig) {
        let path = |text: String| (!text.is_empty()).then(|| PathBuf::from(text));
        let secret = |secret: Secret| (!secret.expose().is_empty()).then_some(secret);
        if !self.url.is_empty() {
            bus.url = self.url;
        }
        let (user, password, token) = (
            secret(Secret::new(self.user)),
            secret(self.password),
            secret(self.token),
        );
        let (creds, nkey) = (path(self.creds), path(self.nkey));
        if user.is_some() || token.is_some() || creds.is_some() || nkey.is_some() {
            bus.auth.user = user;
            bus.auth.password = password;
            bus.auth.token = token;
            bus.auth.creds = creds;
            bus.auth.nkey = nkey;
        }
        for (value, setting) in [
            (path(self.ca), &mut bus.tls.ca),
            (path(self.cert), &mut bus.tls.cert),
            (path(self.key), &mut bus.tls.key),
        ] {
            if value.is_some() {
                *setting = value;
            }
        }
        bus.tls.first |= self.tls_first;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_saved_context_sets_url_credentials_and_tls() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("prod.json");
        std::fs::write(
            &file,
            r#"{"description":"prod","url":"tls://nats.example:4222","user":"dlq","password":"pw-ctx-9","token":"","creds":"","nkey":"","cert":"/c.pem","key":"/k.pem","ca":"/ca.pem","nsc":"","jetstream_domain":"","tls_first":true}"#,
        )
        .unwrap();
        let mut bus = BusConfig::default();
        bus.auth.nkey = Some("/from-the-config-file.nk".into());
        NatsContext::load(&file).unwrap().apply(&mut bus);
        assert_eq!(bus.url, "tls://nats.example:4222");
        assert_eq!(bus.auth.user.as_ref().unwrap().expose(), "dlq");
        assert_eq!(bus.auth.password.as_ref().unwrap().expose(), "pw-ctx-9");
        assert_eq!(bus.auth.nkey, None, "the context's way replaces the file's");
        assert_eq!(bus.tls.ca.as_deref(), Some(Path::new("/ca.pem")));
        assert!(bus.tls.first);
        assert!(super::super::auth::Plan::new(&bus).is_ok());
    }

    #[test]
    fn names_cannot_leave_the_context_directory() {
        for name in ["", "../x", "a/b", ".hidden"] {
            assert!(context_path(name).is_err(), "{name}");
        }
    }
}
