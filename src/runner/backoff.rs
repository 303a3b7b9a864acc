//! Delays between the retries of a failed item: pure arithmetic on a [`RetryConfig`], so the
//! runner's retry loop only sleeps and every delay can be tested without a clock.
//!
//! Retries are numbered from 1: retry 1 follows the first failed attempt. Retry 0 is treated
//! as retry 1. For retry `n`:
//!
//! | strategy | delay | example |
//! | --- | --- | --- |
//! | `fixed` | `delay` | 1s, 1s, 1s |
//! | `linear` | `initial + n × increment` | 1s/500ms: 1.5s, 2s, 2.5s |
//! | `exponential` | `initial × multiplier^(n − 1)` | 1s/×2: 1s, 2s, 4s |
//! | `fibonacci` | `initial × fib(n)`, fib(1) = fib(2) = 1 | 1s: 1s, 1s, 2s, 3s, 5s |
//!
//! With `jitter`, the delay is then scaled by `1 + jitter_factor × (2 × sample − 1)`, where
//! `sample` is uniform in [0, 1) and supplied by the caller: the result lies within
//! ±`jitter_factor` of the plain delay. Finally the delay is capped at `max_delay` when set.
//!
//! Nothing here overflows or panics: every intermediate value saturates, and no delay ever
//! exceeds [`DELAY_CEILING`] (24 h), whatever the retry number, multiplier or `max_delay`.
//! Values that validation rejects are tolerated: a multiplier below 1 or NaN counts as 1, a
//! jitter factor is clamped to [0, 1], and a sample outside [0, 1] is clamped (NaN means
//! no jitter).

use crate::runner::workflow::{BackoffStrategy, RetryConfig};
use std::time::Duration;

/// Upper bound of every delay computed here: one day.
const DELAY_CEILING: Duration = Duration::from_secs(24 * 60 * 60);

/// Delay before retry number `retry` (1-based: retry 1 happens after the first failed
/// attempt; 0 counts as 1). `jitter_sample` is uniform in [0, 1) and only used when
/// `config.jitter` is set.
pub(super) fn retry_delay(config: &RetryConfig, retry: u32, jitter_sample: f64) -> Duration {
    let sample = config.jitter.then_some(jitter_sample);
    delay(config, retry, sample)
}

fn delay(config: &RetryConfig, retry: u32, jitter_sample: Option<f64>) -> Duration {
    let retry = retry.max(1);
    let base = base_delay(&config.backoff, retry);
    let jittered = match jitter_sample {
        Some(sample) => jitter(base, config.jitter_factor, sample),
        None => base,
    };
    let cap = config
        .max_delay
        .map_or(DELAY_CEILING, |max| max.min(DELAY_CEILING));
    jittered.min(cap)
}

/// The strategy's delay for `retry >= 1`, at most [`DELAY_CEILING`].
fn base_delay(strategy: &BackoffStrategy, retry: u32) -> Duration {
    let unbounded = match *strategy {
        BackoffStrategy::Fixed { delay } => delay,
        BackoffStrategy::Linear { initial, increment } => {
            initial.saturating_add(increment.saturating_mul(retry))
        }
        BackoffStrategy::Exponential {
            initial,
            multiplier,
        } => {
            if initial.is_zero() {
                return Duration::ZERO;
            }
            let multiplier = if multiplier.is_nan() {
                1.0
            } else {
                multiplier.max(1.0)
            };
            let exponent = i32::try_from(retry - 1).unwrap_or(i32::MAX);
            from_nanos_f64(initial.as_nanos() as f64 * multiplier.powi(exponent))
        }
        BackoffStrategy::Fibonacci { initial } => {
            let nanos = initial
                .as_nanos()
                .saturating_mul(u128::from(fibonacci(retry)));
            Duration::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX))
        }
    };
    unbounded.min(DELAY_CEILING)
}

/// fib(1) = fib(2) = 1, saturating at `u64::MAX` (reached before n = 100).
fn fibonacci(n: u32) -> u64 {
    let (mut current, mut next) = (1u64, 1u64);
    for _ in 1..n.min(100) {
        (current, next) = (next, current.saturating_add(next));
    }
    current
}

fn jitter(base: Duration, factor: f64, sample: f64) -> Duration {
    if sample.is_nan() {
        return base;
    }
    let factor = if factor.is_nan() {
        0.0
    } else {
        factor.clamp(0.0, 1.0)
    };
    let scale = 1.0 + factor * (2.0 * sample.clamp(0.0, 1.0) - 1.0);
    from_nanos_f64(base.as_nanos() as f64 * scale)
}

/// Rounds a non-negative number of nanoseconds to a duration, at most [`DELAY_CEILING`].
fn from_nanos_f64(nanos: f64) -> Duration {
    let ceiling = DELAY_CEILING.as_nanos() as f64;
    if nanos.is_nan() || nanos >= ceiling {
        DELAY_CEILING
    } else if nanos <= 0.0 {
        Duration::ZERO
    } else {
        // Below the ceiling (8.64e13 ns), so the cast is exact after rounding.
        Duration::from_nanos(nanos.round() as u64)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const MS: fn(u64) -> Duration = Duration::from_millis;
    const S: fn(u64) -> Duration = Duration::from_secs;

    /// [`schedule`] lists at most this many delays.
    const MAX_SCHEDULE_LEN: usize = 1000;

    /// The delays before each retry of an item allowed `max_attempts` attempts in total
    /// (`max_attempts − 1` delays, at most [`MAX_SCHEDULE_LEN`]), without jitter.
    fn schedule(config: &RetryConfig, max_attempts: u32) -> Vec<Duration> {
        (1..max_attempts)
            .take(MAX_SCHEDULE_LEN)
            .map(|retry| delay(config, retry, None))
            .collect()
    }

    fn config(backoff: BackoffStrategy) -> RetryConfig {
        RetryConfig {
            backoff,
            ..RetryConfig::default()
        }
    }

    fn strategies() -> [BackoffStrategy; 4] {
        [
            BackoffStrategy::Fixed { delay: S(2) },
            BackoffStrategy::Linear {
                initial: S(1),
                increment: MS(500),
            },
            BackoffStrategy::Exponential {
                initial: S(1),
                multiplier: 2.0,
            },
            BackoffStrategy::Fibonacci { initial: S(1) },
        ]
    }

    #[test]
    fn exact_sequences() {
        let [fixed, linear, exponential, fibonacci] = strategies().map(config);
        assert_eq!(schedule(&fixed, 4), vec![S(2), S(2), S(2)]);
        assert_eq!(schedule(&linear, 4), vec![MS(1500), S(2), MS(2500)]);
        assert_eq!(schedule(&exponential, 5), vec![S(1), S(2), S(4), S(8)]);
        assert_eq!(
            schedule(&fibonacci, 8),
            vec![S(1), S(1), S(2), S(3), S(5), S(8), S(13)]
        );
    }

    #[test]
    fn fractional_multiplier_is_exact_to_the_millisecond() {
        let c = config(BackoffStrategy::Exponential {
            initial: MS(100),
            multiplier: 1.5,
        });
        assert_eq!(schedule(&c, 4), vec![MS(100), MS(150), MS(225)]);
    }

    #[test]
    fn schedule_has_one_delay_per_retry() {
        let c = RetryConfig::default();
        assert!(schedule(&c, 0).is_empty());
        assert!(schedule(&c, 1).is_empty());
        assert_eq!(schedule(&c, 3), vec![S(1), S(2)]);
        assert_eq!(schedule(&c, u32::MAX).len(), MAX_SCHEDULE_LEN);
    }

    #[test]
    fn retry_zero_is_retry_one() {
        for strategy in strategies() {
            let c = config(strategy);
            assert_eq!(retry_delay(&c, 0, 0.5), retry_delay(&c, 1, 0.5));
        }
    }

    #[test]
    fn huge_retry_numbers_saturate_at_the_ceiling() {
        for strategy in strategies().into_iter().skip(1) {
            let c = config(strategy);
            assert_eq!(retry_delay(&c, u32::MAX, 0.0), DELAY_CEILING);
        }
        let huge = config(BackoffStrategy::Exponential {
            initial: Duration::MAX,
            multiplier: f64::MAX,
        });
        assert_eq!(retry_delay(&huge, 3, 0.0), DELAY_CEILING);
        let fixed = config(BackoffStrategy::Fixed {
            delay: Duration::MAX,
        });
        assert_eq!(retry_delay(&fixed, 1, 0.0), DELAY_CEILING);
        let fib = config(BackoffStrategy::Fibonacci {
            initial: Duration::MAX,
        });
        assert_eq!(retry_delay(&fib, 200, 0.0), DELAY_CEILING);
    }

    #[test]
    fn max_delay_caps() {
        let c = RetryConfig {
            max_delay: Some(S(5)),
            ..RetryConfig::default()
        };
        assert_eq!(schedule(&c, 6), vec![S(1), S(2), S(4), S(5), S(5)]);
        let above = RetryConfig {
            max_delay: Some(S(100 * 24 * 3600)),
            ..RetryConfig::default()
        };
        assert_eq!(retry_delay(&above, 1000, 0.0), DELAY_CEILING);
    }

    #[test]
    fn jitter_only_when_enabled() {
        let mut c = RetryConfig {
            jitter_factor: 0.5,
            ..RetryConfig::default()
        };
        assert_eq!(retry_delay(&c, 2, 0.0), S(2));
        c.jitter = true;
        assert_eq!(retry_delay(&c, 2, 0.0), S(1));
        assert_eq!(retry_delay(&c, 2, 0.5), S(2));
        assert_eq!(retry_delay(&c, 2, 0.75), MS(2500));
        assert_eq!(retry_delay(&c, 2, 1.0), S(3));
        assert_eq!(retry_delay(&c, 2, f64::NAN), S(2));
        assert_eq!(schedule(&c, 3), vec![S(1), S(2)], "schedule has no jitter");
    }

    #[test]
    fn tolerates_values_validation_rejects() {
        let c = RetryConfig {
            backoff: BackoffStrategy::Exponential {
                initial: S(1),
                multiplier: f64::NAN,
            },
            jitter: true,
            jitter_factor: 7.0,
            ..RetryConfig::default()
        };
        assert_eq!(retry_delay(&c, 3, 0.5), S(1));
        assert_eq!(retry_delay(&c, 3, 1.0), S(2), "factor clamped to 1");
        let shrinking = config(BackoffStrategy::Exponential {
            initial: S(1),
            multiplier: 0.5,
        });
        assert_eq!(retry_delay(&shrinking, 3, 0.0), S(1));
    }

    fn any_strategy() -> impl Strategy<Value = BackoffStrategy> {
        let d = (0u64..10_000_000).prop_map(Duration::from_micros);
        prop_oneof![
            d.clone().prop_map(|delay| BackoffStrategy::Fixed { delay }),
            (d.clone(), d.clone())
                .prop_map(|(initial, increment)| BackoffStrategy::Linear { initial, increment }),
            (d.clone(), 1.0f64..1000.0).prop_map(|(initial, multiplier)| {
                BackoffStrategy::Exponential {
                    initial,
                    multiplier,
                }
            }),
            d.prop_map(|initial| BackoffStrategy::Fibonacci { initial }),
        ]
    }

    proptest! {
        #[test]
        fn jitter_stays_within_factor_and_cap(
            backoff in any_strategy(),
            retry in any::<u32>(),
            factor in 0.0f64..=1.0,
            sample in 0.0f64..1.0,
            max_delay in proptest::option::of((0u64..100_000).prop_map(Duration::from_millis)),
        ) {
            let plain = RetryConfig { backoff, jitter: false, jitter_factor: factor, max_delay, max_attempts: 3 };
            let jittered = RetryConfig { jitter: true, ..plain.clone() };
            let base = retry_delay(&RetryConfig { max_delay: None, ..plain.clone() }, retry, sample);
            let got = retry_delay(&jittered, retry, sample);
            let cap = max_delay.unwrap_or(DELAY_CEILING);
            prop_assert!(got <= cap);
            prop_assert!(retry_delay(&plain, retry, sample) <= cap);
            let base_ns = base.as_nanos() as f64;
            let lo = (base_ns * (1.0 - factor) - 1.0).min(cap.as_nanos() as f64);
            let hi = base_ns * (1.0 + factor) + 1.0;
            let got_ns = got.as_nanos() as f64;
            prop_assert!(got_ns >= lo && got_ns <= hi, "{got:?} not within ±{factor} of {base:?}");
        }

        #[test]
        fn delays_never_decrease(backoff in any_strategy(), retry in 1u32..10_000) {
            let c = config(backoff);
            prop_assert!(retry_delay(&c, retry + 1, 0.0) >= retry_delay(&c, retry, 0.0));
        }
    }
}
