//! What a redrive did: counts, the items that failed again, the canary's rates, a JSON summary
//! and a line for people.

use serde::Serialize;
use serde_json::json;

use super::canary::SignatureRate;

/// One item whose redrive failed again.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FailedAgain {
    /// The item's job.
    pub job_id: String,
    /// The item.
    pub item_id: String,
    /// What the handler answered.
    pub error: String,
}

/// The outcome of [`Emitter::redrive`](crate::Emitter::redrive).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct RedriveReport {
    /// Items handed back (a `redriven` event written for each).
    pub redriven: u64,
    /// Of those, how many the handler resolved (each removed, reason `resolved`).
    pub resolved: u64,
    /// Of those, the ones that failed again (each a `redrive_failed` event; the item stays).
    pub failed_again: Vec<FailedAgain>,
    /// Items whose generation had moved on: another redrive took it; nothing written.
    pub already_redriven: Vec<String>,
    /// Items no longer in the queue (as `JOB/ITEM`); nothing written.
    pub not_found: Vec<String>,
    /// Items the canary held back: never redriven.
    pub not_released: u64,
    /// The signatures whose canary re-failure rate passed the threshold (empty: released).
    pub halted_by: Vec<String>,
    /// The canary's re-failure rate per error signature (empty without a canary).
    pub canary: Vec<SignatureRate>,
}

impl RedriveReport {
    /// The report as JSON for scripts and the API.
    pub fn summary(&self) -> serde_json::Value {
        json!({
            "redriven": self.redriven,
            "resolved": self.resolved,
            "failed_again": self.failed_again.len(),
            "already_redriven": self.already_redriven.len(),
            "not_found": self.not_found.len(),
            "not_released": self.not_released,
            "halted": !self.halted_by.is_empty(),
            "halted_by": self.halted_by,
            "canary": self.canary,
            "failures": self.failed_again,
            "already_redriven_items": self.already_redriven,
            "not_found_items": self.not_found,
        })
    }

    /// What happened, in a line (two when the canary halted).
    pub fn line(&self) -> String {
        let mut line = format!(
            "redrove {} items: {} resolved, {} failed again, {} already redriven, {} not found",
            self.redriven,
            self.resolved,
            self.failed_again.len(),
            self.already_redriven.len(),
            self.not_found.len()
        );
        if !self.halted_by.is_empty() {
            let rates: Vec<String> = self
                .canary
                .iter()
                .filter(|rate| self.halted_by.contains(&rate.signature))
                .map(|rate| {
                    format!(
                        "{} failed {}/{} ({:.0}%)",
                        rate.signature,
                        rate.failed,
                        rate.redriven,
                        rate.rate * 100.0
                    )
                })
                .collect();
            line.push_str(&format!(
                "\ncanary halted: {}; {} items not released",
                rates.join(", "),
                self.not_released
            ));
        }
        line
    }
}
