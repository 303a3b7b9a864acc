//! The bus settings of the command line laid over the configuration file's `bus:`, as the
//! `nats` CLI lays its flags over a context.
//!
//! Order, each layer overriding the one before it field by field: the config file's `bus:`,
//! then the context of `--context` (`NATS_CONTEXT`; its way to authenticate replaces the
//! file's whole), then the environment and the flags. The server URL is `-s/--server`
//! (`--nats-url`), else `DLQ_NATS_URL`, else `NATS_URL`, else the context's, else `bus.url`.
//!
//! A flag overrides its own field only: `--context sec --password X` keeps the context's user
//! and sends X as its password, as `nats --context sec --password X` does. A flag of another way
//! to authenticate drops the lower layers' other ways (`--creds F` over a context with a user
//! and password uses only F), so that one way is left.

use super::{Cli, CliError};
use dlq::bus::context::{context_path, NatsContext};
use dlq::bus::{BusAuth, BusConfig};

/// The environment variable of the `nats` CLI that names the server(s); `DLQ_NATS_URL` wins
/// over it.
pub const NATS_URL_ENV: &str = "NATS_URL";

/// Lays the context and the bus flags of `cli` (and their environment variables) over `bus`.
pub fn apply(cli: &Cli, bus: &mut BusConfig) -> Result<(), CliError> {
    if let Some(name) = &cli.context {
        NatsContext::load(&context_path(name)?)?.apply(bus);
    }
    if let Some(url) = server_url(cli) {
        bus.url = url;
    }
    if let Some(subject) = &cli.topic {
        bus.subject = subject.clone();
    }
    if let Some(mode) = cli.bus_mode {
        bus.mode = mode.into();
    }
    override_auth(cli, &mut bus.auth);
    for (flag, setting) in [
        (&cli.tlsca, &mut bus.tls.ca),
        (&cli.tlscert, &mut bus.tls.cert),
        (&cli.tlskey, &mut bus.tls.key),
    ] {
        if flag.is_some() {
            setting.clone_from(flag);
        }
    }
    bus.tls.first |= cli.tlsfirst;
    Ok(())
}

/// The server URL the command line gives: `-s/--server`, else `DLQ_NATS_URL` (both in
/// `cli.nats_url`, clap reads the variable), else `NATS_URL`.
pub fn server_url(cli: &Cli) -> Option<String> {
    cli.nats_url.clone().or_else(nats_url_env)
}

/// `NATS_URL`, when set and not empty.
fn nats_url_env() -> Option<String> {
    std::env::var(NATS_URL_ENV)
        .ok()
        .filter(|url| !url.trim().is_empty())
}

/// Overrides the fields of `auth` the flags give, one by one; a flag of one way to
/// authenticate clears the other ways.
fn override_auth(cli: &Cli, auth: &mut BusAuth) {
    let user_password = cli.user.is_some() || cli.password.is_some();
    if user_password || cli.creds.is_some() || cli.nkey.is_some() {
        // A token is a way of its own, which no flag gives (`--user` alone is a token).
        auth.token = None;
    }
    if user_password {
        auth.creds = None;
        auth.nkey = None;
    }
    if cli.creds.is_some() {
        (auth.user, auth.password, auth.nkey) = (None, None, None);
    }
    if cli.nkey.is_some() {
        (auth.user, auth.password, auth.creds) = (None, None, None);
    }
    for (flag, field) in [
        (&cli.user, &mut auth.user),
        (&cli.password, &mut auth.password),
    ] {
        if flag.is_some() {
            field.clone_from(flag);
        }
    }
    for (flag, field) in [(&cli.creds, &mut auth.creds), (&cli.nkey, &mut auth.nkey)] {
        if flag.is_some() {
            field.clone_from(flag);
        }
    }
    auth.allow_insecure_credentials |= cli.allow_insecure_credentials;
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;
    use dlq::bus::Secret;

    fn cli(args: &[&str]) -> Cli {
        Cli::try_parse_from([&["dlq"], args, &["status"]].concat()).unwrap()
    }

    fn login(user: &str, password: &str) -> BusAuth {
        BusAuth {
            user: Some(Secret::new(user)),
            password: Some(Secret::new(password)),
            ..BusAuth::default()
        }
    }

    #[test]
    fn a_password_flag_keeps_the_user_below_it() {
        let mut auth = login("sec", "right");
        override_auth(&cli(&["--password", "wrong"]), &mut auth);
        assert_eq!(auth.user.as_ref().map(Secret::expose), Some("sec"));
        assert_eq!(auth.password.as_ref().map(Secret::expose), Some("wrong"));
    }

    #[test]
    fn a_user_flag_keeps_the_password_below_it_and_drops_a_token() {
        let mut auth = login("sec", "right");
        auth.token = Some(Secret::new("tok"));
        override_auth(&cli(&["--user", "other"]), &mut auth);
        assert_eq!(auth.user.as_ref().map(Secret::expose), Some("other"));
        assert_eq!(auth.password.as_ref().map(Secret::expose), Some("right"));
        assert!(auth.token.is_none());
    }

    #[test]
    fn another_way_to_authenticate_replaces_the_login_below_it() {
        let mut auth = login("sec", "right");
        override_auth(&cli(&["--creds", "/x.creds"]), &mut auth);
        assert!(auth.user.is_none() && auth.password.is_none());
        assert_eq!(
            auth.creds.as_deref(),
            Some(std::path::Path::new("/x.creds"))
        );

        let mut auth = BusAuth {
            nkey: Some("/seed.nk".into()),
            ..BusAuth::default()
        };
        override_auth(&cli(&["--user", "u", "--password", "p"]), &mut auth);
        assert!(auth.nkey.is_none());
        assert_eq!(auth.user.as_ref().map(Secret::expose), Some("u"));
    }

    #[test]
    fn no_flag_changes_nothing() {
        let mut auth = login("sec", "right");
        override_auth(&cli(&[]), &mut auth);
        assert_eq!(auth.user.as_ref().map(Secret::expose), Some("sec"));
        assert_eq!(auth.password.as_ref().map(Secret::expose), Some("right"));
    }
}

/// `--bus-mode`: the core's [`BusMode`](dlq::BusMode), as a command-line value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum BusModeArg {
    /// JetStream publish, acknowledged once the stream stored the event (the default).
    Jetstream,
    /// Plain core-NATS publish plus flush (weaker: for buses without JetStream only).
    Core,
}

impl From<BusModeArg> for dlq::BusMode {
    fn from(mode: BusModeArg) -> Self {
        match mode {
            BusModeArg::Jetstream => dlq::BusMode::Jetstream,
            BusModeArg::Core => dlq::BusMode::Core,
        }
    }
}
