//! The configuration file (`dlq.yml`): every setting has a default, unknown keys are errors.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::bus::BusConfig;
use crate::emitter::reconciler::ReconcilerConfig;
use crate::emitter::AntiEntropyConfig;
use crate::emitter::RetentionConfig;
use crate::emitter::TopicPolicies;
use crate::sink::SinkConfig;

/// Settings of the sink, as written in the file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SinkSettings {
    /// sled page cache, in MiB.
    pub cache_capacity_mb: u64,
    /// Longest an append waits for durability.
    #[serde(with = "humantime_serde")]
    pub store_timeout: Duration,
    /// Most items per job before FIFO eviction.
    pub capacity_per_job: u64,
    /// Largest accepted event in bytes.
    pub max_event_bytes: usize,
    /// How often sled is flushed (and done log segments deleted) while anything changes.
    #[serde(with = "humantime_serde")]
    pub checkpoint_every: Duration,
    /// A log segment is closed at this many bytes.
    pub segment_bytes: u64,
    /// Done log segments older than this are deleted.
    #[serde(with = "humantime_serde")]
    pub log_retention_age: Duration,
    /// Done log segments are deleted, oldest first, while the log is larger, in MiB.
    pub log_retention_mb: u64,
}

impl Default for SinkSettings {
    fn default() -> Self {
        let defaults = SinkConfig::new("");
        SinkSettings {
            cache_capacity_mb: defaults.cache_capacity_bytes / (1024 * 1024),
            store_timeout: defaults.store_timeout,
            capacity_per_job: defaults.capacity_per_job,
            max_event_bytes: defaults.max_event_bytes,
            checkpoint_every: defaults.checkpoint_every,
            segment_bytes: defaults.segment_bytes,
            log_retention_age: defaults.log_retention.max_age,
            log_retention_mb: defaults.log_retention.max_bytes / (1024 * 1024),
        }
    }
}

/// The whole configuration.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// This node's id (stored in the database on first use).
    pub node_id: Option<String>,
    /// Sink settings.
    pub sink: SinkSettings,
    /// Bus settings.
    pub bus: BusConfigFile,
    /// Publish retry policies by topic.
    pub topics: TopicPolicies,
    /// Reconciler settings.
    pub reconciler: ReconcilerConfig,
    /// Retention settings.
    pub retention: RetentionConfig,
    /// Anti-entropy settings: checking that the stream still holds what it acknowledged.
    pub anti_entropy: AntiEntropyConfig,
    /// Where to serve Prometheus metrics, if anywhere.
    pub metrics_addr: Option<SocketAddr>,
    /// Program and arguments that `claude:` steps of `dlq run` / `dlq retry` run (the prompt
    /// is appended as one argument); `--agent-command` / `DLQ_AGENT_COMMAND` override it.
    pub agent_command: Option<String>,
}

/// [`BusConfig`] as it appears in the file (a newtype so `PartialEq` stays simple).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(transparent)]
pub struct BusConfigFile(pub BusConfig);

impl PartialEq for BusConfigFile {
    fn eq(&self, other: &Self) -> bool {
        serde_json::to_value(&self.0).ok() == serde_json::to_value(&other.0).ok()
    }
}

/// The configuration file could not be used.
#[derive(Debug, Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read config {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The file is not valid (syntax, unknown key, wrong type); the message has the location.
    #[error("invalid config {path}: {message}")]
    Invalid {
        /// The file.
        path: PathBuf,
        /// What is wrong and where.
        message: String,
    },
}

impl Config {
    /// Reads and validates a YAML file.
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_owned(),
            source,
        })?;
        Self::parse(&text).map_err(|message| ConfigError::Invalid {
            path: path.to_owned(),
            message,
        })
    }

    /// Parses YAML text.
    pub fn parse(text: &str) -> Result<Self, String> {
        serde_saphyr::from_str(text).map_err(|err| err.to_string())
    }

    /// The sink configuration for a data directory.
    pub fn sink_config(&self, data_dir: &Path) -> SinkConfig {
        SinkConfig {
            node_id: self.node_id.clone(),
            cache_capacity_bytes: self.sink.cache_capacity_mb.saturating_mul(1024 * 1024),
            store_timeout: self.sink.store_timeout,
            capacity_per_job: self.sink.capacity_per_job,
            max_event_bytes: self.sink.max_event_bytes,
            checkpoint_every: self.sink.checkpoint_every,
            segment_bytes: self.sink.segment_bytes,
            log_retention: crate::sink::LogRetention {
                max_age: self.sink.log_retention_age,
                max_bytes: self.sink.log_retention_mb.saturating_mul(1024 * 1024),
            },
            ..SinkConfig::new(data_dir)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_file_gives_defaults() {
        let config = Config::parse("{}").unwrap();
        assert_eq!(config.topics.default.retry_attempts, 1);
        assert_eq!(config.sink.store_timeout, Duration::from_secs(2));
        assert_eq!(config.bus.0.subject, "sys.job.dlq");
        assert!(config.anti_entropy.enabled);
    }

    #[test]
    fn anti_entropy_settings_parse_and_unknown_ones_are_refused() {
        let yaml = "anti_entropy:\n  enabled: false\n  interval: 10s\n  horizon: 15m\n  max_checks_per_pass: 100\n";
        let config = Config::parse(yaml).unwrap();
        assert!(!config.anti_entropy.enabled);
        assert_eq!(config.anti_entropy.interval, Duration::from_secs(10));
        assert_eq!(config.anti_entropy.horizon, Duration::from_secs(900));
        assert_eq!(config.anti_entropy.max_checks_per_pass, 100);
        assert!(Config::parse("anti_entropy:\n  horizn: 1m\n").is_err());
    }

    #[test]
    fn per_topic_policies_and_durations_parse() {
        let yaml = "topics:\n  default:\n    retry_attempts: 3\n    retry_delay: 250ms\n  topics:\n    mapreduce:\n      retry_attempts: 5\n      retry_delay: 1s\n      backoff: exponential\nbus:\n  publish_timeout: 750ms\n";
        let config = Config::parse(yaml).unwrap();
        assert_eq!(
            config.topics.default.retry_delay,
            Duration::from_millis(250)
        );
        assert_eq!(config.topics.for_topic("mapreduce").retry_attempts, 5);
        assert_eq!(config.bus.0.publish_timeout, Duration::from_millis(750));
    }

    #[test]
    fn bus_credentials_and_tls_parse_and_never_show() {
        let yaml = "bus:\n  url: tls://nats.example:4222\n  auth:\n    user: dlq\n    password: hunter2-pw\n  tls:\n    ca: /etc/dlq/ca.pem\n    first: true\n";
        let config = Config::parse(yaml).unwrap();
        let bus = &config.bus.0;
        assert_eq!(bus.auth.password.as_ref().unwrap().expose(), "hunter2-pw");
        assert_eq!(bus.tls.ca.as_deref(), Some(Path::new("/etc/dlq/ca.pem")));
        assert!(bus.tls.first);
        let shown = format!("{config:?} {}", serde_json::to_string(&config).unwrap());
        assert!(!shown.contains("hunter2"), "{shown}");
        assert!(Config::parse("bus:\n  auth:\n    passwd: x\n").is_err());
    }

    #[test]
    fn unknown_keys_are_errors_with_a_location() {
        let err = Config::parse("sink:\n  store_timout: 2s\n").unwrap_err();
        assert!(err.contains("store_timout"), "{err}");
        assert!(err.contains('2'), "expected a line number in: {err}");
    }
}

#[cfg(test)]
mod example_file {
    use super::*;

    /// The documented example in deploy/ stays valid.
    #[test]
    fn deploy_example_parses() {
        let config = Config::parse(include_str!("../../deploy/dlq.example.yml")).unwrap();
        assert_eq!(config.topics.for_topic("mapreduce").retry_attempts, 3);
        assert_eq!(config.sink.capacity_per_job, 10_000);
        assert_eq!(config.retention.retention_days, Some(30));
    }
}
