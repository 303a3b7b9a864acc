//! Per-topic publish retry policy, run with `backon`.

use std::collections::HashMap;
use std::time::Duration;

use backon::{BackoffBuilder, ConstantBuilder, ExponentialBuilder, FibonacciBuilder};
use serde::{Deserialize, Serialize};

/// How the delay between publish retries grows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RetryBackoff {
    /// The same delay each time (the default).
    #[default]
    Fixed,
    /// Doubling delays.
    Exponential,
    /// Fibonacci delays.
    Fibonacci,
}

/// How the emitter retries publishing for one topic.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TopicPolicy {
    /// Retries after the first publish attempt (default 1).
    pub retry_attempts: u32,
    /// Delay before the first retry (default 500 ms).
    #[serde(with = "humantime_serde")]
    pub retry_delay: Duration,
    /// Growth of the delay.
    pub backoff: RetryBackoff,
}

impl Default for TopicPolicy {
    fn default() -> Self {
        TopicPolicy {
            retry_attempts: 1,
            retry_delay: Duration::from_millis(500),
            backoff: RetryBackoff::Fixed,
        }
    }
}

impl TopicPolicy {
    /// The delays before each retry, in order (`retry_attempts` of them), rounded to whole
    /// milliseconds (backon computes growth in floating point; timers tick in milliseconds).
    pub fn delays(&self) -> Vec<Duration> {
        let times = usize::try_from(self.retry_attempts).unwrap_or(usize::MAX);
        let delay = self.retry_delay;
        let delays: Vec<Duration> = match self.backoff {
            RetryBackoff::Fixed => ConstantBuilder::default()
                .with_delay(delay)
                .with_max_times(times)
                .build()
                .collect(),
            RetryBackoff::Exponential => ExponentialBuilder::default()
                .with_min_delay(delay)
                .with_max_times(times)
                .build()
                .collect(),
            RetryBackoff::Fibonacci => FibonacciBuilder::default()
                .with_min_delay(delay)
                .with_max_times(times)
                .build()
                .collect(),
        };
        delays
            .into_iter()
            .map(|d| Duration::from_millis((d.as_secs_f64() * 1000.0).round() as u64))
            .collect()
    }

    /// The longest a publish can take under this policy, given the per-attempt timeout.
    pub fn budget(&self, publish_timeout: Duration) -> Duration {
        let attempts = self.retry_attempts.saturating_add(1);
        publish_timeout.saturating_mul(attempts) + self.delays().into_iter().sum::<Duration>()
    }
}

/// Policies by topic, with a default for topics not listed.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TopicPolicies {
    /// Policy for topics without their own.
    pub default: TopicPolicy,
    /// Policies by topic name.
    pub topics: HashMap<String, TopicPolicy>,
}

impl TopicPolicies {
    /// The policy for `topic`.
    pub(crate) fn for_topic(&self, topic: &str) -> TopicPolicy {
        self.topics.get(topic).copied().unwrap_or(self.default)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_is_one_retry_after_500ms() {
        let policy = TopicPolicy::default();
        assert_eq!(policy.delays(), vec![Duration::from_millis(500)]);
        assert_eq!(
            policy.budget(Duration::from_secs(1)),
            Duration::from_millis(2500)
        );
    }

    #[test]
    fn exponential_is_not_capped_at_three_attempts() {
        let policy = TopicPolicy {
            retry_attempts: 5,
            retry_delay: Duration::from_millis(10),
            backoff: RetryBackoff::Exponential,
        };
        let delays = policy.delays();
        assert_eq!(delays.len(), 5);
        assert!(delays[4] > delays[0]);
    }

    #[test]
    fn topics_override_the_default() {
        let mut policies = TopicPolicies::default();
        let fast = TopicPolicy {
            retry_attempts: 0,
            ..TopicPolicy::default()
        };
        policies.topics.insert("fast".into(), fast);
        assert_eq!(policies.for_topic("fast").retry_attempts, 0);
        assert_eq!(policies.for_topic("other").retry_attempts, 1);
    }
}
