//! A circuit breaker for the runner's agents: after a run of consecutive failures it stops
//! new agents from starting for a while, then lets a few probes through to test recovery.
//!
//! Pure state machine, time injected: callers pass `now` to every call, so the runner uses
//! its clock and tests use constructed instants.
//!
//! - **Closed**: every attempt may start. `failure_threshold` consecutive failures open the
//!   circuit; any success resets the count.
//! - **Open**: no attempt may start until `timeout` has passed since it opened; the first
//!   [`CircuitBreaker::try_acquire`] after that moves to half-open.
//! - **HalfOpen**: at most `half_open_requests` probes in flight. `success_threshold` probe
//!   successes close the circuit; any probe failure opens it again with a fresh timeout.
//!
//! Attempts overlap, so results can arrive after the state they started in has gone. Every
//! [`Permit`] remembers whether it is a probe and of which half-open episode:
//! - while Open, every result is ignored (a late failure does not extend the timeout);
//! - while HalfOpen, only probes of the current episode count; results of attempts started
//!   while Closed, or probes of an earlier episode, are ignored;
//! - while Closed, every result counts toward (or resets) the consecutive-failure count,
//!   including late probe results, since each is a real outcome of the dependency.
//!
//! Thresholds of 0 (rejected by workflow validation) are treated as 1.

use crate::runner::workflow::CircuitBreakerConfig;
use std::time::{Duration, Instant};

/// A state change, reported so the runner can log `CircuitOpen` / `CircuitClosed` events.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Transition {
    /// Closed or HalfOpen → Open.
    Opened,
    /// Open → HalfOpen.
    HalfOpened,
    /// HalfOpen → Closed.
    Closed,
}

/// Permission to run one attempt; hand it back with [`CircuitBreaker::record`].
#[derive(Debug)]
pub(super) struct Permit {
    /// The half-open episode this probe belongs to; `None` for an ordinary attempt.
    probe_of: Option<u64>,
}

#[derive(Debug, Clone, Copy)]
enum State {
    Closed { consecutive_failures: u32 },
    Open { until: Instant },
    HalfOpen { in_flight: u32, successes: u32 },
}

/// Closed / open / half-open circuit breaker (see the module documentation).
#[derive(Debug, Clone)]
pub(super) struct CircuitBreaker {
    config: CircuitBreakerConfig,
    state: State,
    /// Counts half-open episodes, so probes from an earlier one are recognised.
    episode: u64,
}

impl CircuitBreaker {
    /// A closed breaker.
    pub(super) fn new(config: CircuitBreakerConfig) -> Self {
        let config = CircuitBreakerConfig {
            failure_threshold: config.failure_threshold.max(1),
            success_threshold: config.success_threshold.max(1),
            half_open_requests: config.half_open_requests.max(1),
            ..config
        };
        CircuitBreaker {
            config,
            state: State::Closed {
                consecutive_failures: 0,
            },
            episode: 0,
        }
    }

    /// Asks to start one attempt at `now`. Closed: always granted. Open: refused until
    /// `timeout` after opening, then the breaker turns HalfOpen (reported) and grants a probe.
    /// HalfOpen: granted only while fewer than `half_open_requests` probes are in flight.
    pub(super) fn try_acquire(&mut self, now: Instant) -> (Option<Permit>, Option<Transition>) {
        let mut transition = None;
        if let State::Open { until } = self.state {
            if now < until {
                return (None, None);
            }
            self.episode = self.episode.wrapping_add(1);
            self.state = State::HalfOpen {
                in_flight: 0,
                successes: 0,
            };
            transition = Some(Transition::HalfOpened);
        }
        let permit = match &mut self.state {
            State::Closed { .. } => Some(Permit { probe_of: None }),
            State::HalfOpen { in_flight, .. } if *in_flight < self.config.half_open_requests => {
                *in_flight += 1;
                Some(Permit {
                    probe_of: Some(self.episode),
                })
            }
            State::HalfOpen { .. } | State::Open { .. } => None,
        };
        (permit, transition)
    }

    /// Reports the outcome of an attempt started with `permit`, at `now`.
    pub(super) fn record(
        &mut self,
        permit: Permit,
        success: bool,
        now: Instant,
    ) -> Option<Transition> {
        match &mut self.state {
            State::Closed {
                consecutive_failures,
            } => {
                if success {
                    *consecutive_failures = 0;
                    return None;
                }
                *consecutive_failures = consecutive_failures.saturating_add(1);
                if *consecutive_failures >= self.config.failure_threshold {
                    return Some(self.open(now));
                }
                None
            }
            State::Open { .. } => None,
            State::HalfOpen {
                in_flight,
                successes,
            } => {
                if permit.probe_of != Some(self.episode) {
                    return None;
                }
                *in_flight = in_flight.saturating_sub(1);
                if !success {
                    return Some(self.open(now));
                }
                *successes += 1;
                if *successes >= self.config.success_threshold {
                    self.state = State::Closed {
                        consecutive_failures: 0,
                    };
                    return Some(Transition::Closed);
                }
                None
            }
        }
    }

    /// When an Open breaker will let a probe through; `None` unless Open.
    pub(super) fn retry_at(&self) -> Option<Instant> {
        match self.state {
            State::Open { until } => Some(until),
            _ => None,
        }
    }

    fn open(&mut self, now: Instant) -> Transition {
        self.state = State::Open {
            until: deadline(now, self.config.timeout),
        };
        Transition::Opened
    }
}

/// `now + timeout`, or the latest representable instant short of it for absurd timeouts.
fn deadline(now: Instant, timeout: Duration) -> Instant {
    let mut timeout = timeout;
    loop {
        if let Some(until) = now.checked_add(timeout) {
            return until;
        }
        timeout /= 2;
    }
}

#[cfg(test)]
mod tests;
