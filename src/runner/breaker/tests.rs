#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use super::*;
use proptest::prelude::*;

/// The breaker's state, as the tests observe it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum BreakerState {
    /// Attempts run normally.
    Closed,
    /// Attempts are refused until the timeout passes.
    Open,
    /// A limited number of probe attempts test recovery.
    HalfOpen,
}

impl CircuitBreaker {
    /// The current state. An Open breaker whose timeout has passed stays Open until the next
    /// [`try_acquire`](Self::try_acquire).
    fn state(&self) -> BreakerState {
        match self.state {
            State::Closed { .. } => BreakerState::Closed,
            State::Open { .. } => BreakerState::Open,
            State::HalfOpen { .. } => BreakerState::HalfOpen,
        }
    }
}

impl Permit {
    /// Whether this attempt is a half-open probe.
    fn is_probe(&self) -> bool {
        self.probe_of.is_some()
    }
}

fn config(failures: u32, successes: u32, probes: u32) -> CircuitBreakerConfig {
    CircuitBreakerConfig {
        failure_threshold: failures,
        success_threshold: successes,
        timeout: Duration::from_secs(30),
        half_open_requests: probes,
    }
}

fn secs(t0: Instant, s: u64) -> Instant {
    t0 + Duration::from_secs(s)
}

/// Runs one attempt from start to finish at `now`.
fn attempt(b: &mut CircuitBreaker, success: bool, now: Instant) -> Option<Transition> {
    let (permit, _) = b.try_acquire(now);
    b.record(permit.expect("attempt refused"), success, now)
}

/// A breaker opened at `t0` by `failures` consecutive failures.
fn opened(failures: u32, successes: u32, probes: u32, t0: Instant) -> CircuitBreaker {
    let mut b = CircuitBreaker::new(config(failures, successes, probes));
    for _ in 0..failures {
        attempt(&mut b, false, t0);
    }
    assert_eq!(b.state(), BreakerState::Open);
    b
}

#[test]
fn closed_opens_after_threshold_consecutive_failures() {
    let t0 = Instant::now();
    let mut b = CircuitBreaker::new(config(3, 2, 1));
    assert_eq!(b.state(), BreakerState::Closed);
    assert_eq!(b.retry_at(), None);
    assert_eq!(attempt(&mut b, false, t0), None);
    assert_eq!(attempt(&mut b, false, t0), None);
    assert_eq!(attempt(&mut b, false, t0), Some(Transition::Opened));
    assert_eq!(b.state(), BreakerState::Open);
    assert_eq!(b.retry_at(), Some(secs(t0, 30)));
}

#[test]
fn a_success_resets_the_failure_count() {
    let t0 = Instant::now();
    let mut b = CircuitBreaker::new(config(3, 2, 1));
    for _ in 0..5 {
        attempt(&mut b, false, t0);
        attempt(&mut b, false, t0);
        assert_eq!(attempt(&mut b, true, t0), None);
    }
    assert_eq!(
        b.state(),
        BreakerState::Closed,
        "10 failures, never 3 in a row"
    );
}

#[test]
fn open_refuses_until_timeout_then_half_opens() {
    let t0 = Instant::now();
    let mut b = opened(2, 1, 1, t0);
    let (permit, transition) = b.try_acquire(secs(t0, 29));
    assert!(permit.is_none() && transition.is_none());
    assert_eq!(b.state(), BreakerState::Open);
    let (permit, transition) = b.try_acquire(secs(t0, 30));
    assert!(permit.unwrap().is_probe());
    assert_eq!(transition, Some(Transition::HalfOpened));
    assert_eq!(b.state(), BreakerState::HalfOpen);
    assert_eq!(b.retry_at(), None);
}

#[test]
fn half_open_closes_after_success_threshold() {
    let t0 = Instant::now();
    let mut b = opened(1, 2, 1, t0);
    let t = secs(t0, 31);
    assert_eq!(attempt(&mut b, true, t), None);
    assert_eq!(b.state(), BreakerState::HalfOpen);
    assert_eq!(attempt(&mut b, true, t), Some(Transition::Closed));
    assert_eq!(b.state(), BreakerState::Closed);
    let (permit, _) = b.try_acquire(t);
    assert!(!permit.unwrap().is_probe());
}

#[test]
fn probe_failure_reopens_with_fresh_timeout() {
    let t0 = Instant::now();
    let mut b = opened(1, 2, 1, t0);
    assert_eq!(attempt(&mut b, true, secs(t0, 31)), None);
    assert_eq!(
        attempt(&mut b, false, secs(t0, 40)),
        Some(Transition::Opened)
    );
    assert_eq!(b.state(), BreakerState::Open);
    assert_eq!(b.retry_at(), Some(secs(t0, 70)));
    assert!(b.try_acquire(secs(t0, 69)).0.is_none());
    assert_eq!(b.try_acquire(secs(t0, 70)).1, Some(Transition::HalfOpened));
}

#[test]
fn half_open_limits_probes_in_flight() {
    let t0 = Instant::now();
    let mut b = opened(1, 5, 2, t0);
    let t = secs(t0, 30);
    let first = b.try_acquire(t).0.unwrap();
    let second = b.try_acquire(t).0.unwrap();
    assert!(
        b.try_acquire(t).0.is_none(),
        "third probe while two in flight"
    );
    assert_eq!(b.record(first, true, t), None);
    let third = b.try_acquire(t).0.unwrap();
    assert!(b.try_acquire(t).0.is_none());
    b.record(second, true, t);
    b.record(third, true, t);
    assert_eq!(b.state(), BreakerState::HalfOpen, "3 of 5 successes");
}

#[test]
fn late_failure_while_open_does_not_extend_timeout() {
    let t0 = Instant::now();
    let mut b = CircuitBreaker::new(config(2, 1, 1));
    let slow = b.try_acquire(t0).0.unwrap();
    attempt(&mut b, false, t0);
    attempt(&mut b, false, t0);
    assert_eq!(b.record(slow, false, secs(t0, 20)), None);
    assert_eq!(b.retry_at(), Some(secs(t0, 30)));
}

#[test]
fn late_ordinary_result_while_half_open_is_not_a_probe() {
    let t0 = Instant::now();
    let mut b = CircuitBreaker::new(config(1, 1, 1));
    let slow_ok = b.try_acquire(t0).0.unwrap();
    let slow_bad = b.try_acquire(t0).0.unwrap();
    attempt(&mut b, false, t0);
    let probe = b.try_acquire(secs(t0, 30)).0.unwrap();
    assert_eq!(b.record(slow_ok, true, secs(t0, 31)), None);
    assert_eq!(b.record(slow_bad, false, secs(t0, 31)), None);
    assert_eq!(b.state(), BreakerState::HalfOpen);
    assert!(
        b.try_acquire(secs(t0, 31)).0.is_none(),
        "the probe slot is still taken"
    );
    assert_eq!(
        b.record(probe, true, secs(t0, 32)),
        Some(Transition::Closed)
    );
}

#[test]
fn probe_from_an_earlier_episode_is_ignored() {
    let t0 = Instant::now();
    let mut b = opened(1, 1, 2, t0);
    let failing = b.try_acquire(secs(t0, 30)).0.unwrap();
    let stale = b.try_acquire(secs(t0, 30)).0.unwrap();
    assert_eq!(
        b.record(failing, false, secs(t0, 30)),
        Some(Transition::Opened)
    );
    assert_eq!(b.try_acquire(secs(t0, 60)).1, Some(Transition::HalfOpened));
    assert_eq!(b.record(stale, true, secs(t0, 61)), None);
    assert_eq!(
        b.state(),
        BreakerState::HalfOpen,
        "an old probe does not close it"
    );
}

#[test]
fn late_results_while_closed_count() {
    let t0 = Instant::now();
    let mut b = opened(1, 1, 2, t0);
    let closing = b.try_acquire(secs(t0, 30)).0.unwrap();
    let late = b.try_acquire(secs(t0, 30)).0.unwrap();
    assert_eq!(
        b.record(closing, true, secs(t0, 30)),
        Some(Transition::Closed)
    );
    assert_eq!(
        b.record(late, false, secs(t0, 31)),
        Some(Transition::Opened)
    );
}

#[test]
fn zero_thresholds_act_as_one_and_huge_timeout_does_not_panic() {
    let t0 = Instant::now();
    let mut b = CircuitBreaker::new(CircuitBreakerConfig {
        timeout: Duration::MAX,
        ..config(0, 0, 0)
    });
    assert_eq!(attempt(&mut b, false, t0), Some(Transition::Opened));
    assert!(b.retry_at().unwrap() > secs(t0, 1_000_000));
    assert!(b.try_acquire(secs(t0, 1_000_000)).0.is_none());
}

#[derive(Debug, Clone)]
enum Op {
    Acquire,
    Record { index: usize, success: bool },
    Advance { secs: u64 },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        Just(Op::Acquire),
        (any::<usize>(), any::<bool>()).prop_map(|(index, success)| Op::Record { index, success }),
        (0u64..40).prop_map(|secs| Op::Advance { secs }),
    ]
}

proptest! {
    #[test]
    fn never_more_probes_in_flight_than_allowed(
        failures in 1u32..4,
        successes in 1u32..4,
        probes in 1u32..4,
        ops in proptest::collection::vec(op(), 1..200),
    ) {
        let t0 = Instant::now();
        let mut now = t0;
        let mut b = CircuitBreaker::new(config(failures, successes, probes));
        let mut outstanding: Vec<Permit> = Vec::new();
        for op in ops {
            match op {
                Op::Acquire => {
                    let (permit, _) = b.try_acquire(now);
                    if let Some(p) = permit {
                        prop_assert!(b.state() != BreakerState::Open);
                        prop_assert_eq!(p.is_probe(), b.state() == BreakerState::HalfOpen);
                        outstanding.push(p);
                    }
                }
                Op::Record { index, success } if !outstanding.is_empty() => {
                    let p = outstanding.swap_remove(index % outstanding.len());
                    b.record(p, success, now);
                }
                Op::Record { .. } => {}
                Op::Advance { secs } => now += Duration::from_secs(secs),
            }
            let current: Vec<&Permit> = outstanding
                .iter()
                .filter(|p| p.probe_of == Some(b.episode))
                .collect();
            if let State::HalfOpen { in_flight, .. } = b.state {
                prop_assert_eq!(in_flight as usize, current.len());
                prop_assert!(current.len() <= probes as usize);
            }
        }
    }
}
