//! Pure decisions of the workflow's error policy (its schema is `workflow::error_policy`): what
//! happens after an attempt, and when a job stops.
//!
//! Retries come first: an item is attempted up to `retry_config.max_attempts` times (with the
//! configured backoff between attempts); only when every attempt failed does
//! `on_item_failure` apply:
//!
//! | policy | the failed item | the job |
//! | --- | --- | --- |
//! | `dlq` (default) | dead-lettered with its whole history | continues |
//! | `retry` | retried (3 attempts, exponential, unless `retry_config` says otherwise), then dead-lettered | continues |
//! | `skip` | recorded as skipped | continues |
//! | `stop` | dead-lettered (its failure is kept) | stops: in-flight agents finish, the rest stay pending |
//! | `custom:<name>` | the handler `handlers.<name>` runs with the item; success records it as skipped (handled), failure dead-letters it | continues |
//!
//! `continue_on_failure: false` stops the job after the first failed item whatever the policy;
//! `max_failures` stops it once that many items failed; `failure_threshold` once the share of
//! failed items among completed ones exceeds it, checked after [`THRESHOLD_MIN_COMPLETED`]
//! items completed (or all of a smaller job), so one early failure does not stop a large job.

use super::job_summary::Tally;
use super::workflow::{ErrorPolicy, OnItemFailure};

/// Completed items needed before `failure_threshold` is checked.
const THRESHOLD_MIN_COMPLETED: u64 = 10;

/// What to do with an item whose every attempt failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum FinalAction {
    /// Write it to the dead-letter queue.
    DeadLetter,
    /// Record it as skipped.
    Skip,
    /// Run the named handler; dead-letter the item if the handler fails.
    Custom(String),
}

/// The action for an item that failed every attempt, and whether the job must stop.
pub(super) fn final_action(policy: &ErrorPolicy) -> (FinalAction, bool) {
    let stop = !policy.continue_on_failure;
    match &policy.on_item_failure {
        OnItemFailure::Dlq | OnItemFailure::Retry => (FinalAction::DeadLetter, stop),
        OnItemFailure::Skip => (FinalAction::Skip, stop),
        OnItemFailure::Stop => (FinalAction::DeadLetter, true),
        OnItemFailure::Custom(name) => (FinalAction::Custom(name.clone()), stop),
    }
}

/// Why the job must stop now, given the outcomes so far (`None`: keep going).
pub(super) fn stop_reason(policy: &ErrorPolicy, tally: &Tally, total: u64) -> Option<String> {
    let failures = tally.failures();
    if let Some(max) = policy.max_failures {
        if failures >= u64::from(max) && failures > 0 {
            return Some(format!(
                "max_failures reached: {failures} items failed (limit {max})"
            ));
        }
    }
    if let Some(threshold) = policy.failure_threshold {
        let completed = tally.completed();
        let enough = completed >= THRESHOLD_MIN_COMPLETED.min(total.max(1));
        let rate = tally.failure_rate();
        if enough && rate > threshold {
            return Some(format!(
                "failure_threshold exceeded: {failures} of {completed} completed items failed ({:.1}% > {:.1}%)",
                rate * 100.0,
                threshold * 100.0
            ));
        }
    }
    None
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;
    use crate::runner::job_summary::Outcome;

    fn policy(yaml: &str) -> ErrorPolicy {
        let text = format!(
            "name: t\nmode: mapreduce\nmap:\n  input: i.json\n  agent_template:\n    - shell: \"true\"\nerror_policy:\n{yaml}"
        );
        crate::runner::workflow::Workflow::parse(&text)
            .unwrap()
            .error_policy
    }

    fn tally(ok: u64, failed: u64) -> Tally {
        let mut tally = Tally::new(100);
        for i in 0..ok {
            tally.record(&format!("ok{i}"), Outcome::Succeeded);
        }
        for i in 0..failed {
            tally.record(&format!("bad{i}"), Outcome::DeadLettered);
        }
        tally
    }

    #[test]
    fn actions_per_policy() {
        assert_eq!(
            final_action(&policy("  on_item_failure: dlq\n")),
            (FinalAction::DeadLetter, false)
        );
        assert_eq!(
            final_action(&policy("  on_item_failure: retry\n")),
            (FinalAction::DeadLetter, false)
        );
        assert_eq!(
            final_action(&policy("  on_item_failure: skip\n")),
            (FinalAction::Skip, false)
        );
        assert_eq!(
            final_action(&policy("  on_item_failure: stop\n")),
            (FinalAction::DeadLetter, true)
        );
        assert_eq!(
            final_action(&policy(
                "  on_item_failure: skip\n  continue_on_failure: false\n"
            )),
            (FinalAction::Skip, true)
        );
    }

    #[test]
    fn max_failures_stops_at_the_limit() {
        let p = policy("  max_failures: 3\n");
        assert_eq!(stop_reason(&p, &tally(50, 2), 100), None);
        let reason = stop_reason(&p, &tally(50, 3), 100).unwrap();
        assert!(reason.contains("max_failures"), "{reason}");
    }

    #[test]
    fn threshold_waits_for_enough_completed_items() {
        let p = policy("  failure_threshold: 0.2\n");
        assert_eq!(
            stop_reason(&p, &tally(0, 1), 100),
            None,
            "one early failure"
        );
        assert_eq!(
            stop_reason(&p, &tally(8, 2), 100),
            None,
            "20% is not above 20%"
        );
        let reason = stop_reason(&p, &tally(7, 3), 100).unwrap();
        assert!(reason.contains("30.0% > 20.0%"), "{reason}");
        assert!(
            stop_reason(&p, &tally(1, 2), 3).is_some(),
            "small jobs check once all completed"
        );
    }

    #[test]
    fn no_limits_never_stop() {
        assert_eq!(
            stop_reason(&policy("  on_item_failure: dlq\n"), &tally(0, 99), 100),
            None
        );
    }
}
