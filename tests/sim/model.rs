//! What the sink promised about each item: present (a dead-letter was acknowledged), absent
//! (a removal was acknowledged), or doubtful (a write the sink did not confirm either way).

use std::collections::BTreeMap;

/// The expected state of one item.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expect {
    Present,
    Absent,
    /// `NotStored`/`Unconfirmed`: it may or may not be (or become) stored.
    Doubtful,
    /// Told `Unconfirmed` ("stored, or reported"), and the late write failed: it must be in
    /// the sink or, published as an unstored copy, in the consumers.
    Reported,
}

/// Expected items by (job, item).
#[derive(Debug, Default)]
pub struct Model {
    pub items: BTreeMap<(String, String), Expect>,
    /// Acknowledged dead-letters and removals (operations the sink said Ok to).
    pub acked: u64,
}

impl Model {
    pub fn set(&mut self, job: &str, item: &str, expect: Expect) {
        if expect != Expect::Doubtful {
            self.acked += 1;
        }
        self.items.insert((job.to_owned(), item.to_owned()), expect);
    }

    pub fn get(&self, job: &str, item: &str) -> Option<Expect> {
        self.items.get(&(job.to_owned(), item.to_owned())).copied()
    }

    /// The keys of `job` whose state is certain.
    pub fn certain_in(&self, job: &str) -> Vec<String> {
        self.items
            .iter()
            .filter(|((j, _), e)| j == job && **e != Expect::Doubtful)
            .map(|((_, item), _)| item.clone())
            .collect()
    }
}
