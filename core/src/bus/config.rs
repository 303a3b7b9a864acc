//! [`BusConfig`]: where and how to publish (`bus` in the configuration file), and
//! [`BusMode`].

use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::auth::{redact_url, BusAuth, BusTls};

/// How events are published.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BusMode {
    /// JetStream publish, acknowledged once the stream stored the event (the default).
    #[default]
    Jetstream,
    /// Plain core-NATS publish plus flush. Weaker: the flush only proves the server received
    /// the bytes; with no subscriber or a server crash the event is gone. For buses without
    /// JetStream only.
    Core,
}

/// Where and how to publish. `Debug` shows the URL without its credentials and no secret.
#[derive(Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct BusConfig {
    /// Server URL, or several separated by commas (a cluster's seeds). Credentials written in
    /// it (`nats://user:password@host`, `nats://token@host`) are used (see [`super::auth`]),
    /// and serialized as `<redacted>`.
    #[serde(serialize_with = "serialize_redacted_url")]
    pub url: String,
    /// How to authenticate.
    pub auth: BusAuth,
    /// TLS settings (a `tls://` URL alone also makes TLS required).
    pub tls: BusTls,
    /// Subject events are published on.
    pub subject: String,
    /// JetStream (default) or core.
    pub mode: BusMode,
    /// Stream name (JetStream mode). Created from this configuration when missing; an existing
    /// stream is checked and never changed (`bus::stream`, `dlq stream update`).
    pub stream: String,
    /// How long JetStream remembers message ids to drop duplicates (a new stream's window; an
    /// existing stream with a shorter one is warned about).
    #[serde(with = "humantime_serde")]
    pub duplicate_window: Duration,
    /// Stream replicas (3 on a cluster) of a new stream; an existing stream with fewer is warned
    /// about, never scaled.
    pub replicas: usize,
    /// Longest wait for an acknowledgement.
    #[serde(with = "humantime_serde")]
    pub publish_timeout: Duration,
    /// Longest pause between reconnect attempts.
    #[serde(with = "humantime_serde")]
    pub reconnect_max_delay: Duration,
}

impl Default for BusConfig {
    fn default() -> Self {
        BusConfig {
            url: "nats://127.0.0.1:4222".into(),
            auth: BusAuth::default(),
            tls: BusTls::default(),
            subject: "sys.job.dlq".into(),
            mode: BusMode::Jetstream,
            stream: "DLQ".into(),
            duplicate_window: Duration::from_secs(120),
            replicas: 1,
            publish_timeout: Duration::from_secs(2),
            reconnect_max_delay: Duration::from_secs(2),
        }
    }
}

fn serialize_redacted_url<S: serde::Serializer>(
    url: &str,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    serializer.serialize_str(&redact_url(url))
}

impl BusConfig {
    /// The defaults, with the servers at `url` (no credentials beyond those in the URL).
    pub fn at(url: impl Into<String>) -> Self {
        BusConfig {
            url: url.into(),
            ..BusConfig::default()
        }
    }
}

impl fmt::Debug for BusConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BusConfig")
            .field("url", &redact_url(&self.url))
            .field("auth", &self.auth)
            .field("tls", &self.tls)
            .field("subject", &self.subject)
            .field("mode", &self.mode)
            .field("stream", &self.stream)
            .field("duplicate_window", &self.duplicate_window)
            .field("replicas", &self.replicas)
            .field("publish_timeout", &self.publish_timeout)
            .field("reconnect_max_delay", &self.reconnect_max_delay)
            .finish()
    }
}
