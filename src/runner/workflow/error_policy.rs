//! The `error_policy` section of a workflow file: what happens to failed items, retries and
//! their backoff, and the circuit breaker. Its types are re-exported by the parent module; what
//! the runner decides from them is in [`crate::runner::on_failure`].

use serde::de::{self, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;
use std::time::Duration;

/// The workflow-level error policy: how failed items are retried, dead-lettered, skipped or
/// handled, and when failures stop the job.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub(in crate::runner) struct ErrorPolicy {
    /// What to do with an item that still fails after its retries; default `dlq`.
    pub on_item_failure: OnItemFailure,
    /// Whether other items keep running after a failure; default true.
    pub continue_on_failure: bool,
    /// Stop the job after this many failed items.
    pub max_failures: Option<u32>,
    /// Stop the job when this fraction of items (0.0 to 1.0) has failed.
    pub failure_threshold: Option<f64>,
    /// When failures are reported; default `aggregate`.
    pub error_collection: ErrorCollection,
    /// Stop starting agents while failures are sustained.
    pub circuit_breaker: Option<CircuitBreakerConfig>,
    /// Retries of a failed item before `on_item_failure` applies.
    pub retry_config: Option<RetryConfig>,
}

impl Default for ErrorPolicy {
    fn default() -> Self {
        ErrorPolicy {
            on_item_failure: OnItemFailure::Dlq,
            continue_on_failure: true,
            max_failures: None,
            failure_threshold: None,
            error_collection: ErrorCollection::Aggregate,
            circuit_breaker: None,
            retry_config: None,
        }
    }
}

/// What happens to an item that failed for good.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(in crate::runner) enum OnItemFailure {
    /// Dead-letter the item and continue (`dlq`).
    #[default]
    Dlq,
    /// Retry the item with backoff, then dead-letter it (`retry`).
    Retry,
    /// Mark the item skipped and continue (`skip`).
    Skip,
    /// Stop the whole job (`stop`).
    Stop,
    /// Run the steps of `handlers.<name>` (`custom:<name>`).
    Custom(String),
}

const ON_ITEM_FAILURE_VALUES: &str = "dlq, retry, skip, stop or custom:<handler name>";

impl fmt::Display for OnItemFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            OnItemFailure::Dlq => f.write_str("dlq"),
            OnItemFailure::Retry => f.write_str("retry"),
            OnItemFailure::Skip => f.write_str("skip"),
            OnItemFailure::Stop => f.write_str("stop"),
            OnItemFailure::Custom(name) => write!(f, "custom:{name}"),
        }
    }
}

impl std::str::FromStr for OnItemFailure {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "dlq" => Ok(OnItemFailure::Dlq),
            "retry" => Ok(OnItemFailure::Retry),
            "skip" => Ok(OnItemFailure::Skip),
            "stop" => Ok(OnItemFailure::Stop),
            _ => match s.strip_prefix("custom:").map(str::trim) {
                Some(name) if !name.is_empty() => Ok(OnItemFailure::Custom(name.to_string())),
                _ => Err(format!(
                    "unknown on_item_failure `{s}`, expected {ON_ITEM_FAILURE_VALUES}"
                )),
            },
        }
    }
}

impl Serialize for OnItemFailure {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for OnItemFailure {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct OnItemFailureVisitor;
        impl Visitor<'_> for OnItemFailureVisitor {
            type Value = OnItemFailure;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str(ON_ITEM_FAILURE_VALUES)
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<OnItemFailure, E> {
                v.parse().map_err(E::custom)
            }
        }
        deserializer.deserialize_str(OnItemFailureVisitor)
    }
}

/// When the runner reports item failures.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase", deny_unknown_fields)]
pub(in crate::runner) enum ErrorCollection {
    /// All at the end of the job (`aggregate`).
    #[default]
    Aggregate,
    /// As each one happens (`immediate`).
    Immediate,
    /// Every `size` failures (`batched: { size: 10 }`).
    Batched {
        /// Failures per report; at least 1.
        size: usize,
    },
}

/// Circuit breaker settings (see [`crate::runner::breaker`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub(in crate::runner) struct CircuitBreakerConfig {
    /// Consecutive failures that open the circuit; default 5.
    pub failure_threshold: u32,
    /// Successful probes that close it again; default 2.
    pub success_threshold: u32,
    /// How long it stays open before probing; default 30s.
    #[serde(with = "humantime_serde")]
    pub timeout: Duration,
    /// Probes in flight at most while half-open; default 3.
    pub half_open_requests: u32,
}

impl Default for CircuitBreakerConfig {
    fn default() -> Self {
        CircuitBreakerConfig {
            failure_threshold: 5,
            success_threshold: 2,
            timeout: Duration::from_secs(30),
            half_open_requests: 3,
        }
    }
}

/// Retries of a failed item (see [`crate::runner::backoff`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub(in crate::runner) struct RetryConfig {
    /// Total attempts including the first; default 3.
    pub max_attempts: u32,
    /// How the delay grows between retries; default exponential from 1s, ×2.
    pub backoff: BackoffStrategy,
    /// Randomise each delay by ±`jitter_factor`; default false.
    pub jitter: bool,
    /// Relative jitter amplitude, 0.0 to 1.0; default 0.1.
    pub jitter_factor: f64,
    /// Upper bound of any delay.
    #[serde(with = "humantime_serde")]
    pub max_delay: Option<Duration>,
}

impl Default for RetryConfig {
    fn default() -> Self {
        RetryConfig {
            max_attempts: 3,
            backoff: BackoffStrategy::default(),
            jitter: false,
            jitter_factor: 0.1,
            max_delay: None,
        }
    }
}

/// How the delay between retries grows. YAML: `backoff: { exponential: { initial: 1s, multiplier: 2 } }`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase", deny_unknown_fields)]
pub(in crate::runner) enum BackoffStrategy {
    /// The same delay every time.
    Fixed {
        /// The delay.
        #[serde(with = "humantime_serde")]
        delay: Duration,
    },
    /// `initial + retry × increment`.
    Linear {
        /// Base delay.
        #[serde(with = "humantime_serde")]
        initial: Duration,
        /// Added per retry.
        #[serde(with = "humantime_serde")]
        increment: Duration,
    },
    /// `initial × multiplier^(retry − 1)`.
    Exponential {
        /// Delay before the first retry.
        #[serde(with = "humantime_serde")]
        initial: Duration,
        /// Growth factor; at least 1.
        multiplier: f64,
    },
    /// `initial × fib(retry)`: 1, 1, 2, 3, 5, ...
    Fibonacci {
        /// Unit delay.
        #[serde(with = "humantime_serde")]
        initial: Duration,
    },
}

impl Default for BackoffStrategy {
    fn default() -> Self {
        BackoffStrategy::Exponential {
            initial: Duration::from_secs(1),
            multiplier: 2.0,
        }
    }
}
