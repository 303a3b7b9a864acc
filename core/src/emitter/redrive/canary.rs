//! The canary of a redrive, pure: how many items go first, their re-failure rate per error
//! signature, and whether that rate halts the rest.

use std::collections::BTreeMap;

use serde::Serialize;

/// How many items a canary redrives first.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum CanarySize {
    /// The first N items.
    Count(usize),
    /// This percentage of the items (rounded up, at least one).
    Percent(f64),
}

/// A canary: redrive the first items, wait for their outcomes, and halt before releasing the
/// rest when any error signature re-fails more often than `halt_above`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Canary {
    /// How many go first.
    pub size: CanarySize,
    /// The re-failure rate (0 to 1) above which a signature halts the redrive.
    pub halt_above: f64,
}

/// The halt threshold when none is given: more than half of a signature's canary items failed.
pub const DEFAULT_HALT_ABOVE: f64 = 0.5;

impl Canary {
    /// How many of `total` items the canary redrives first.
    pub fn len(&self, total: usize) -> usize {
        let wanted = match self.size {
            CanarySize::Count(n) => n,
            CanarySize::Percent(p) => {
                let share = (total as f64 * p.clamp(0.0, 100.0) / 100.0).ceil();
                (share as usize).max(1)
            }
        };
        wanted.min(total)
    }
}

/// How one error signature fared in the canary.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SignatureRate {
    /// The items' error signature (of the failure that dead-lettered them).
    pub signature: String,
    /// Canary items of this signature with an outcome.
    pub redriven: u64,
    /// How many of them failed again.
    pub failed: u64,
    /// `failed / redriven`.
    pub rate: f64,
}

/// The re-failure rate per signature of `outcomes` (`(signature, failed again)`), by signature.
pub fn rates<'a>(outcomes: impl IntoIterator<Item = (&'a str, bool)>) -> Vec<SignatureRate> {
    let mut counts: BTreeMap<&str, (u64, u64)> = BTreeMap::new();
    for (signature, failed) in outcomes {
        let entry = counts.entry(signature).or_default();
        entry.0 += 1;
        entry.1 += u64::from(failed);
    }
    counts
        .into_iter()
        .map(|(signature, (redriven, failed))| SignatureRate {
            signature: signature.to_owned(),
            redriven,
            failed,
            rate: failed as f64 / redriven as f64,
        })
        .collect()
}

/// The signatures whose rate is above `halt_above`: any one halts the redrive.
pub fn halting(rates: &[SignatureRate], halt_above: f64) -> Vec<String> {
    rates
        .iter()
        .filter(|rate| rate.rate > halt_above)
        .map(|rate| rate.signature.clone())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_canary_takes_n_or_a_share_rounded_up_never_more_than_all() {
        let count = |n| Canary {
            size: CanarySize::Count(n),
            halt_above: 0.5,
        };
        let percent = |p| Canary {
            size: CanarySize::Percent(p),
            halt_above: 0.5,
        };
        assert_eq!(count(3).len(10), 3);
        assert_eq!(count(30).len(10), 10);
        assert_eq!(percent(10.0).len(10), 1);
        assert_eq!(percent(25.0).len(10), 3);
        assert_eq!(percent(0.0).len(10), 1, "at least one");
        assert_eq!(percent(100.0).len(7), 7);
        assert_eq!(percent(10.0).len(0), 0);
    }

    #[test]
    fn rates_are_per_signature_and_only_those_above_the_threshold_halt() {
        let outcomes = [
            ("b", true),
            ("a", false),
            ("b", true),
            ("a", true),
            ("b", false),
            ("c", false),
        ];
        let rates = rates(outcomes);
        let seen: Vec<_> = rates
            .iter()
            .map(|r| (r.signature.as_str(), r.redriven, r.failed))
            .collect();
        assert_eq!(seen, vec![("a", 2, 1), ("b", 3, 2), ("c", 1, 0)]);
        assert_eq!(
            halting(&rates, 0.5),
            vec!["b".to_owned()],
            "a is at 0.5, not above"
        );
        assert_eq!(halting(&rates, 0.4), vec!["a".to_owned(), "b".to_owned()]);
        assert!(halting(&rates, 1.0).is_empty());
    }
}
