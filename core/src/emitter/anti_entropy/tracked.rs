//! The acknowledged events anti-entropy still checks: pure bookkeeping, no I/O.
//!
//! Acknowledgements are grouped in buckets, one per `slice` of time (and per event-id prefix,
//! `{node}:{epoch}`): a bucket holds the log sequences acknowledged then, as ranges
//! ([`Seqs`]), and the span of stream sequences their PubAcks named. A bucket costs a few
//! ranges however many events it holds, so the memory bound (`capacity`, in ranges) is reached
//! only by scattered sequences, never by the rate alone.
//!
//! A pass takes the buckets due ([`Tracked::due`]: all of them, or as many as `budget` stream
//! messages to read allow, going round over successive passes), reads which of this node's
//! event ids the stream holds over their span, and settles them ([`Tracked::settle`]): an event
//! not found is missing (or expired, below the start of a stream whose limits remove
//! messages); a bucket whose events were all found more than `horizon` after its newest
//! acknowledgement is forgotten. A missing event stays tracked until its repair is
//! acknowledged ([`Tracked::replace`]) or the sink no longer has it ([`Tracked::forget`]).

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::seqs::Seqs;

/// One slice of acknowledgements.
#[derive(Debug, Clone)]
struct Bucket {
    ticket: u64,
    /// The event ids' common part: an event's id is `{prefix}:{seq}`.
    prefix: Arc<str>,
    seqs: Seqs,
    stream_lo: u64,
    stream_hi: u64,
    oldest: Instant,
    newest: Instant,
    /// Taken by a pass: what is acknowledged from then on goes to a new bucket, or the pass
    /// would settle events its read did not cover.
    sealed: bool,
}

/// The buckets a pass checks, and the span of stream sequences to read for them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Due {
    tickets: Vec<u64>,
    /// First stream sequence to read.
    pub lo: u64,
    /// Last stream sequence to read.
    pub hi: u64,
    /// Whose event ids to collect.
    pub prefixes: Vec<Arc<str>>,
}

/// Where the stream started when it was read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Start {
    /// The stream's first sequence.
    pub first_seq: u64,
    /// Whether the stream's limits remove messages (below `first_seq` they left by design).
    pub limited: bool,
}

/// What settling a pass found.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Settled {
    /// Events checked.
    pub checked: u64,
    /// Events the stream's limits removed (forgotten).
    pub expired: u64,
    /// Events the stream lost: (id prefix, log sequence). Still tracked.
    pub missing: Vec<(Arc<str>, u64)>,
}

/// The event ids the stream holds, by prefix: what a read found.
pub(crate) type Found = HashMap<Arc<str>, Seqs>;

/// Splits a `Nats-Msg-Id` (an event id, or a repair id `{event_id}~...`) into the event id's
/// prefix and log sequence.
pub(crate) fn split_id(msg_id: &str) -> Option<(&str, u64)> {
    let event_id = msg_id.split('~').next()?;
    let (prefix, seq) = event_id.rsplit_once(':')?;
    Some((prefix, seq.parse().ok()?))
}

/// The tracked buckets.
#[derive(Debug)]
pub(crate) struct Tracked {
    buckets: VecDeque<Bucket>,
    slice: Duration,
    capacity: usize,
    ranges: usize,
    events: u64,
    next_ticket: u64,
    /// Ticket after which the next pass starts.
    cursor: u64,
    /// Events dropped unchecked because the ranges would have passed `capacity`.
    pub dropped: u64,
}

impl Tracked {
    /// An empty set: one bucket per `slice`, at most `capacity` ranges in all.
    pub(crate) fn new(capacity: usize, slice: Duration) -> Self {
        Tracked {
            buckets: VecDeque::new(),
            slice,
            capacity: capacity.max(1),
            ranges: 0,
            events: 0,
            next_ticket: 1,
            cursor: 0,
            dropped: 0,
        }
    }

    /// How many events are tracked.
    pub(crate) fn len(&self) -> u64 {
        self.events
    }

    /// The lowest log sequence still tracked: the log must keep it.
    pub(crate) fn floor(&self) -> Option<u64> {
        self.buckets.iter().filter_map(|b| b.seqs.first()).min()
    }

    /// When the oldest tracked event was acknowledged.
    pub(crate) fn oldest(&self) -> Option<Instant> {
        self.buckets.iter().map(|b| b.oldest).min()
    }

    /// Records that event `seq`, published under `msg_id`, was acknowledged at `stream_seq`.
    /// `None` when its id does not end in `:{seq}` (it cannot be found by id); otherwise how
    /// many older events were dropped unchecked to stay within the capacity.
    pub(crate) fn record(
        &mut self,
        seq: u64,
        msg_id: &str,
        stream_seq: u64,
        at: Instant,
    ) -> Option<u64> {
        let (prefix, id_seq) = split_id(msg_id)?;
        if id_seq != seq {
            return None;
        }
        let fits = self.buckets.back().is_some_and(|last| {
            !last.sealed
                && &*last.prefix == prefix
                && at.saturating_duration_since(last.oldest) < self.slice
        });
        if !fits {
            let prefix = self
                .buckets
                .iter()
                .rev()
                .find(|b| &*b.prefix == prefix)
                .map_or_else(|| Arc::from(prefix), |b| b.prefix.clone());
            self.buckets.push_back(Bucket {
                ticket: self.next_ticket,
                prefix,
                seqs: Seqs::default(),
                stream_lo: stream_seq,
                stream_hi: stream_seq,
                oldest: at,
                newest: at,
                sealed: false,
            });
            self.next_ticket += 1;
        }
        let Some(bucket) = self.buckets.back_mut() else {
            return Some(0);
        };
        let before = bucket.seqs.ranges();
        if bucket.seqs.insert(seq) {
            self.events += 1;
        }
        self.ranges = self.ranges + bucket.seqs.ranges() - before;
        bucket.stream_lo = bucket.stream_lo.min(stream_seq);
        bucket.stream_hi = bucket.stream_hi.max(stream_seq);
        bucket.newest = bucket.newest.max(at);
        bucket.oldest = bucket.oldest.min(at);
        let mut dropped = 0;
        while self.ranges > self.capacity {
            let Some(old) = self.buckets.pop_front() else {
                break;
            };
            self.ranges -= old.seqs.ranges();
            self.events -= old.seqs.len();
            dropped += old.seqs.len();
        }
        self.dropped += dropped;
        Some(dropped)
    }

    /// The buckets to check now: from after the last pass's, as many as `budget` stream
    /// messages to read allow (at least one); once the end is reached the next pass starts
    /// again from the oldest. `None` when nothing is tracked.
    pub(crate) fn due(&mut self, budget: u64) -> Option<Due> {
        let start = self.buckets.partition_point(|b| b.ticket <= self.cursor);
        let start = if start >= self.buckets.len() {
            0
        } else {
            start
        };
        let mut due: Option<Due> = None;
        let mut taken = 0;
        for bucket in self.buckets.iter_mut().skip(start) {
            let (lo, hi) = match &due {
                Some(d) => (d.lo.min(bucket.stream_lo), d.hi.max(bucket.stream_hi)),
                None => (bucket.stream_lo, bucket.stream_hi),
            };
            if due.is_some() && hi - lo + 1 > budget {
                break;
            }
            let d = due.get_or_insert_with(|| Due {
                tickets: Vec::new(),
                lo,
                hi,
                prefixes: Vec::new(),
            });
            d.tickets.push(bucket.ticket);
            bucket.sealed = true;
            (d.lo, d.hi) = (lo, hi);
            if !d.prefixes.contains(&bucket.prefix) {
                d.prefixes.push(bucket.prefix.clone());
            }
            taken += 1;
        }
        let due = due?;
        self.cursor = if start + taken < self.buckets.len() {
            due.tickets.last().copied().unwrap_or(0)
        } else {
            0
        };
        Some(due)
    }

    /// Settles the buckets of `due` against what the stream held when read at `now`.
    pub(crate) fn settle(
        &mut self,
        due: &Due,
        found: &Found,
        start: Start,
        now: Instant,
        horizon: Duration,
    ) -> Settled {
        let empty = Seqs::default();
        let mut settled = Settled::default();
        for bucket in self
            .buckets
            .iter_mut()
            .filter(|b| due.tickets.contains(&b.ticket))
        {
            settled.checked += bucket.seqs.len();
            let held = found.get(&bucket.prefix).unwrap_or(&empty);
            let absent = bucket.seqs.missing_from(held);
            let below_start = start.limited && bucket.stream_lo < start.first_seq;
            for &seq in &absent {
                if below_start {
                    bucket.seqs.remove(seq);
                    settled.expired += 1;
                } else {
                    settled.missing.push((bucket.prefix.clone(), seq));
                }
            }
            let all_held = below_start || absent.is_empty();
            if all_held && now.saturating_duration_since(bucket.newest) > horizon {
                bucket.seqs = Seqs::default();
            }
        }
        self.prune();
        settled
    }

    /// Stops tracking event `seq` (the sink no longer has it).
    pub(crate) fn forget(&mut self, prefix: &str, seq: u64) {
        for bucket in self.buckets.iter_mut().filter(|b| &*b.prefix == prefix) {
            bucket.seqs.remove(seq);
        }
        self.prune();
    }

    /// Tracks event `seq` as published again under `msg_id` at `stream_seq`, from `at` on.
    pub(crate) fn replace(
        &mut self,
        seq: u64,
        msg_id: &str,
        stream_seq: u64,
        at: Instant,
    ) -> Option<u64> {
        let (prefix, _) = split_id(msg_id)?;
        self.forget(prefix, seq);
        self.record(seq, msg_id, stream_seq, at)
    }

    /// Drops empty buckets and recounts.
    fn prune(&mut self) {
        self.buckets.retain(|b| b.seqs.len() > 0);
        self.ranges = self.buckets.iter().map(|b| b.seqs.ranges()).sum();
        self.events = self.buckets.iter().map(|b| b.seqs.len()).sum();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SLICE: Duration = Duration::from_secs(1);
    const HORIZON: Duration = Duration::from_secs(60);
    const START: Start = Start {
        first_seq: 1,
        limited: false,
    };

    fn found(prefix: &str, seqs: &[u64]) -> Found {
        let mut set = Seqs::default();
        for &seq in seqs {
            set.insert(seq);
        }
        HashMap::from([(Arc::from(prefix), set)])
    }

    #[test]
    fn a_burst_of_acknowledgements_costs_one_range() {
        let now = Instant::now();
        let mut t = Tracked::new(10, SLICE);
        for seq in (1..=10_000).rev() {
            assert_eq!(
                t.record(seq, &format!("n:e:{seq}"), seq + 100, now),
                Some(0)
            );
        }
        assert_eq!((t.len(), t.ranges, t.floor()), (10_000, 1, Some(1)));
        let due = t.due(u64::MAX).unwrap();
        assert_eq!((due.lo, due.hi), (101, 10_100));
    }

    #[test]
    fn an_id_that_does_not_end_in_its_sequence_is_not_tracked() {
        let mut t = Tracked::new(10, SLICE);
        assert_eq!(t.record(5, "n:e:6", 1, Instant::now()), None);
        assert_eq!(
            t.record(5, "n:e:5~anti-entropy-1", 1, Instant::now()),
            Some(0)
        );
        assert_eq!(t.len(), 1);
    }

    #[test]
    fn what_the_stream_lacks_is_missing_and_stays_until_replaced() {
        let now = Instant::now();
        let mut t = Tracked::new(10, SLICE);
        for seq in 1..=5 {
            t.record(seq, &format!("n:e:{seq}"), seq, now);
        }
        let due = t.due(u64::MAX).unwrap();
        let later = now + HORIZON * 2;
        let settled = t.settle(&due, &found("n:e", &[1, 2, 4, 5]), START, later, HORIZON);
        assert_eq!(settled.checked, 5);
        assert_eq!(settled.missing, vec![(Arc::from("n:e"), 3)]);
        assert_eq!(t.len(), 5, "not forgotten while one is missing");
        t.replace(3, "n:e:3~anti-entropy-9", 40, later);
        let due = t.due(u64::MAX).unwrap();
        assert_eq!((due.lo, due.hi), (1, 40));
        let settled = t.settle(&due, &found("n:e", &[1, 2, 3, 4, 5]), START, later, HORIZON);
        assert!(settled.missing.is_empty());
        assert_eq!(
            t.len(),
            1,
            "the repaired one is checked for its own horizon"
        );
        assert_eq!(t.floor(), Some(3));
    }

    /// The dlq process test saw this: events acknowledged while a pass read the stream went
    /// into the bucket the pass had taken, and were settled as missing.
    #[test]
    fn what_is_acknowledged_during_a_pass_waits_for_the_next() {
        let now = Instant::now();
        let mut t = Tracked::new(10, SLICE);
        t.record(1, "n:e:1", 1, now);
        let due = t.due(u64::MAX).unwrap();
        t.record(2, "n:e:2", 2, now);
        let settled = t.settle(&due, &found("n:e", &[1]), START, now, HORIZON);
        assert!(settled.missing.is_empty(), "{settled:?}");
        let due = t.due(u64::MAX).unwrap();
        assert_eq!((due.lo, due.hi), (1, 2));
    }

    #[test]
    fn held_events_are_forgotten_only_past_the_horizon() {
        let now = Instant::now();
        let mut t = Tracked::new(10, SLICE);
        t.record(1, "n:e:1", 1, now);
        let held = found("n:e", &[1]);
        let due = t.due(u64::MAX).unwrap();
        t.settle(&due, &held, START, now + HORIZON, HORIZON);
        assert_eq!(t.len(), 1);
        let due = t.due(u64::MAX).unwrap();
        t.settle(&due, &held, START, now + HORIZON * 2, HORIZON);
        assert_eq!((t.len(), t.floor(), t.oldest()), (0, None, None));
    }

    #[test]
    fn below_the_start_of_a_limited_stream_is_expired() {
        let now = Instant::now();
        let mut t = Tracked::new(10, SLICE);
        t.record(1, "n:e:1", 1, now);
        let due = t.due(u64::MAX).unwrap();
        let start = Start {
            first_seq: 5,
            limited: true,
        };
        let settled = t.settle(&due, &Found::new(), start, now, HORIZON);
        assert_eq!((settled.expired, settled.missing.len()), (1, 0));
        assert_eq!(t.len(), 0);
    }

    #[test]
    fn passes_go_round_the_buckets_a_budget_at_a_time() {
        let now = Instant::now();
        let mut t = Tracked::new(100, SLICE);
        for (i, seq) in (1..=3).enumerate() {
            let at = now + SLICE * i as u32;
            t.record(seq, &format!("n:e:{seq}"), seq * 10, at);
        }
        let spans: Vec<(u64, u64)> = (0..4)
            .map(|_| t.due(5).map(|d| (d.lo, d.hi)).unwrap())
            .collect();
        assert_eq!(spans, vec![(10, 10), (20, 20), (30, 30), (10, 10)]);
        assert_eq!(t.due(u64::MAX).map(|d| (d.lo, d.hi)), Some((20, 30)));
    }

    #[test]
    fn past_the_capacity_the_oldest_are_dropped_and_counted() {
        let now = Instant::now();
        let mut t = Tracked::new(2, SLICE);
        // Every other sequence: one range each.
        assert_eq!(t.record(1, "n:e:1", 1, now), Some(0));
        assert_eq!(t.record(3, "n:e:3", 2, now), Some(0));
        assert_eq!(t.record(5, "n:e:5", 3, now + SLICE), Some(2));
        assert_eq!((t.len(), t.dropped, t.floor()), (1, 2, Some(5)));
    }
}
