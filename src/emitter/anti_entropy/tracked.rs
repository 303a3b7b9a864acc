//! The recently acknowledged events anti-entropy checks: pure bookkeeping, no I/O.
//!
//! Every durable event the bus acknowledged is recorded with the stream sequence of its
//! PubAck. An entry is checked on later passes until a check finds it held long enough after
//! its acknowledgement (the task decides, [`Tracked::forget`]); while the bus cannot be read
//! nothing is forgotten. Each pass takes at most `limit` entries, going round the whole set over
//! successive passes (a cursor), so the work per pass is bounded however fast events arrive.
//! The set is bounded too: past `capacity` the oldest entries are dropped (and counted).

use std::collections::{HashMap, VecDeque};
use std::time::Instant;

/// One acknowledged event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Acked {
    /// Its log sequence in the sink.
    pub seq: u64,
    /// The `Nats-Msg-Id` it went out under (its event id, or a repair id).
    pub msg_id: String,
    /// Where the PubAck said the stream stored it.
    pub stream_seq: u64,
    /// When it was acknowledged (or last re-published).
    pub acked_at: Instant,
    /// Insertion number: the cursor's position.
    ticket: u64,
}

/// The tracked set.
#[derive(Debug)]
pub(crate) struct Tracked {
    entries: VecDeque<Acked>,
    /// Log sequence -> ticket of its live entry.
    live: HashMap<u64, u64>,
    capacity: usize,
    next_ticket: u64,
    /// Ticket after which the next pass starts.
    cursor: u64,
    /// Entries dropped because the set was full (never checked to the horizon).
    pub dropped: u64,
}

impl Tracked {
    /// An empty set holding at most `capacity` entries.
    pub fn new(capacity: usize) -> Self {
        Tracked {
            entries: VecDeque::new(),
            live: HashMap::new(),
            capacity: capacity.max(1),
            next_ticket: 1,
            cursor: 0,
            dropped: 0,
        }
    }

    /// How many entries are tracked.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Records an acknowledgement. An event already tracked keeps its entry (a second
    /// acknowledgement of the same event is a duplicate ack naming the same message).
    pub fn record(&mut self, seq: u64, msg_id: &str, stream_seq: u64, at: Instant) {
        if self.live.contains_key(&seq) {
            return;
        }
        while self.entries.len() >= self.capacity {
            if let Some(old) = self.entries.pop_front() {
                self.live.remove(&old.seq);
                self.dropped += 1;
            }
        }
        let ticket = self.next_ticket;
        self.next_ticket += 1;
        self.live.insert(seq, ticket);
        self.entries.push_back(Acked {
            seq,
            msg_id: msg_id.to_owned(),
            stream_seq,
            acked_at: at,
            ticket,
        });
    }

    /// Up to `limit` entries to check, continuing after the last pass's; once the end is
    /// reached the next pass starts again from the oldest.
    pub fn due(&mut self, limit: usize) -> Vec<Acked> {
        let start = self.entries.partition_point(|e| e.ticket <= self.cursor);
        let batch: Vec<Acked> = self
            .entries
            .iter()
            .skip(start)
            .take(limit.max(1))
            .cloned()
            .collect();
        self.cursor = match batch.last() {
            Some(last) if start + batch.len() < self.entries.len() => last.ticket,
            _ => 0,
        };
        batch
    }

    /// Forgets one checked entry (its message left by the stream's limits, or the sink no
    /// longer has the event).
    pub fn forget(&mut self, checked: &Acked) {
        if self.live.get(&checked.seq) == Some(&checked.ticket) {
            self.live.remove(&checked.seq);
            self.entries.retain(|e| e.ticket != checked.ticket);
        }
    }

    /// Replaces a checked entry after its event was published again: the new copy is
    /// checked from now on, until the horizon passes it.
    pub fn replace(&mut self, checked: &Acked, msg_id: &str, stream_seq: u64, at: Instant) {
        self.forget(checked);
        self.record(checked.seq, msg_id, stream_seq, at);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn filled(n: u64, at: Instant) -> Tracked {
        let mut t = Tracked::new(100);
        for seq in 1..=n {
            t.record(seq, &format!("n:{seq}"), 100 + seq, at);
        }
        t
    }

    fn seqs(batch: &[Acked]) -> Vec<u64> {
        batch.iter().map(|e| e.seq).collect()
    }

    #[test]
    fn passes_go_round_the_set_a_limit_at_a_time() {
        let now = Instant::now();
        let mut t = filled(5, now);
        assert_eq!(seqs(&t.due(2)), vec![1, 2]);
        assert_eq!(seqs(&t.due(2)), vec![3, 4]);
        assert_eq!(seqs(&t.due(2)), vec![5]);
        assert_eq!(seqs(&t.due(2)), vec![1, 2], "round again");
    }

    #[test]
    fn an_event_acknowledged_twice_is_tracked_once() {
        let now = Instant::now();
        let mut t = filled(2, now);
        t.record(2, "n:2", 102, now);
        assert_eq!(t.len(), 2);
        assert_eq!(seqs(&t.due(10)), vec![1, 2]);
    }

    #[test]
    fn a_replaced_entry_is_checked_under_its_new_id_and_sequence() {
        let now = Instant::now();
        let mut t = filled(3, now);
        let batch = t.due(10);
        t.replace(&batch[1], "n:2~repair", 900, now);
        let again = t.due(10);
        assert_eq!(seqs(&again), vec![1, 3, 2]);
        assert_eq!(
            (again[2].msg_id.as_str(), again[2].stream_seq),
            ("n:2~repair", 900)
        );
        // A stale copy of the old entry changes nothing.
        t.forget(&batch[1]);
        assert_eq!(t.len(), 3);
    }

    #[test]
    fn the_set_is_bounded_and_counts_what_it_dropped() {
        let now = Instant::now();
        let mut t = Tracked::new(3);
        for seq in 1..=5 {
            t.record(seq, "x", seq, now);
        }
        assert_eq!(t.len(), 3);
        assert_eq!(t.dropped, 2);
        assert_eq!(seqs(&t.due(10)), vec![3, 4, 5]);
    }
}
