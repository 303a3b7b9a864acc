//! The applier thread: applies each group's projection changes to sled after the log made the
//! group durable, off the acknowledgement path.
//!
//! The writer appends a group to the log (one `fdatasync`), hands its sled writes to this
//! thread, records the group's item state as an unapplied layer ([`Applied::push`]) and answers
//! its waiters. The applier takes every group waiting, applies them as one sled batch with the
//! `applied_through` mark, and drops their layers. The writer stages the next groups over the
//! unapplied layers (`crate::sink::projection::staged`), so decisions always see every durable event; queries
//! wait until the mark reaches the log's durable mark of when they started
//! ([`Applied::wait_for`]): a process reads its own writes.
//!
//! The applier gathers groups before it applies them: up to [`APPLY_GATHER`] after the first,
//! or until [`APPLY_GATHER_EVENTS`] events wait, unless someone waits for the projection (a
//! query, a checkpoint, a close). Each sled batch rewrites the newest index runs and the counters of
//! every job it touches, so a batch of many groups writes fewer sled keys per event.
//!
//! If sled refuses a batch, the applier stops applying (it may not skip a group) and reports
//! it; the writer then waits for it to drain and applies the log from sled's mark itself
//! (`crate::sink::projection::projector::catch_up`).

use std::collections::VecDeque;
use std::sync::mpsc::{Receiver, Sender};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use tracing::warn;

use crate::sink::projection::index_runs::RunCache;
use crate::sink::projection::projector;
use crate::sink::projection::staged::Layer;
use crate::sink::projection::Write;
use crate::sink::Faults;

/// A group for the applier: its writes and the last sequence they cover.
pub(crate) struct Job {
    pub(crate) writes: Vec<Write>,
    pub(crate) through: u64,
}

/// What has been applied, shared by the writer, the applier and queries.
#[derive(Default)]
pub(crate) struct Applied {
    state: Mutex<State>,
    changed: Condvar,
    /// Wakes a gathering applier ([`Applied::gather`]) when someone waits for it.
    hurry: Condvar,
}

#[derive(Default)]
struct State {
    /// Every logged event up to it is in the projection.
    through: u64,
    /// Groups handed to the applier: (first seq, last seq, item state), oldest first.
    pending: VecDeque<(u64, u64, Arc<Layer>)>,
    /// Why the applier stopped, if it did.
    failed: Option<String>,
    /// Someone waits for the applier: stop gathering.
    hurry: bool,
    /// The applier's queue is closing: never gather again.
    closing: bool,
    /// Moves each time the writer applied the projection itself ([`Applied::recovered`]):
    /// the applier then drops what it kept of the tree ([`RunCache`]).
    generation: u64,
}

impl State {
    /// How many events the groups handed to the applier hold.
    fn waiting_events(&self) -> u64 {
        let last = self
            .pending
            .back()
            .map_or(self.through, |(_, last, _)| *last);
        last.saturating_sub(self.through)
    }
}

/// Longest a query waits for the applier before it reads what is there.
const QUERY_WAIT: Duration = Duration::from_secs(10);

/// How long the applier gathers groups after the first before it applies them, unless
/// someone waits for the projection. A sled key costs the applier about the same whatever it
/// holds, and every batch rewrites the counters and the newest index runs of each job it
/// touches: applied one group at a time, 64 busy jobs cost about three sled keys per new item.
/// Gathering 10 ms cut the CPU per event by a quarter to a third at 64 and 256 in flight
/// (docs/benchmarks.md, issue 37's sixth round). One emit at a time gathers as long: each sled
/// batch writes sled's log buffer beside the log's, and the log's next `fdatasync` waits behind
/// it; applying every millisecond there (as until the tenth round) left `store`'s p50 at 1.59 ×
/// one plain `fdatasync`, 10 ms at 1.23 ×, for a p99 of 1.2-1.7 ms instead of 0.7.
const APPLY_GATHER: Duration = Duration::from_millis(10);
/// The applier stops gathering once this many events wait to be applied: a bound on the
/// memory the unapplied layers hold and on how long one sled batch takes.
const APPLY_GATHER_EVENTS: u64 = 2048;

impl Applied {
    /// Starts with everything up to `through` applied.
    pub(crate) fn new(through: u64) -> Self {
        let applied = Self::default();
        applied.lock().through = through;
        applied
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The last sequence applied.
    pub(crate) fn through(&self) -> u64 {
        self.lock().through
    }

    /// The unapplied layers, oldest first, and the first sequence they hold (`None`: none).
    pub(crate) fn base(&self) -> (Vec<Arc<Layer>>, Option<u64>) {
        let state = self.lock();
        let first = state.pending.front().map(|(first, _, _)| *first);
        (
            state.pending.iter().map(|(_, _, l)| l.clone()).collect(),
            first,
        )
    }

    /// Records a group handed to the applier (and ends its gathering once enough wait).
    pub(crate) fn push(&self, first: u64, through: u64, layer: Layer) {
        let mut state = self.lock();
        state.pending.push_back((first, through, Arc::new(layer)));
        if state.waiting_events() >= APPLY_GATHER_EVENTS {
            self.hurry.notify_all();
        }
    }

    /// How many times the writer applied the projection itself (see [`Applied::recovered`]).
    fn generation(&self) -> u64 {
        self.lock().generation
    }

    /// Why the applier stopped, if it did.
    pub(crate) fn failure(&self) -> Option<String> {
        self.lock().failed.clone()
    }

    /// After the writer applied the log itself: everything up to `through` is applied again.
    pub(crate) fn recovered(&self, through: u64) {
        let mut state = self.lock();
        state.through = through;
        state.pending.clear();
        state.failed = None;
        state.generation += 1;
        self.changed.notify_all();
    }

    /// Waits up to `max` (the applier, gathering groups before it applies them), or less when
    /// someone waits for the projection or [`APPLY_GATHER_EVENTS`] events wait meanwhile.
    pub(crate) fn gather(&self, max: Duration) {
        let state = self.lock();
        let (mut state, _) = self
            .hurry
            .wait_timeout_while(state, max, |state| {
                !state.hurry && !state.closing && state.waiting_events() < APPLY_GATHER_EVENTS
            })
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        state.hurry = false;
    }

    /// The writer closes the applier's queue: the applier applies what it has without
    /// gathering from now on.
    pub(crate) fn closing(&self) {
        let mut state = self.lock();
        state.closing = true;
        self.hurry.notify_all();
    }

    /// Ends the applier's gathering: someone waits for it.
    fn hurry(&self, state: &mut State) {
        state.hurry = true;
        self.hurry.notify_all();
    }

    /// Waits until every group handed over was applied or dropped after a failure.
    pub(crate) fn wait_idle(&self) {
        let mut state = self.lock();
        while !state.pending.is_empty() {
            // Again after each batch: a group handed over while the applier took the last
            // hurry would otherwise wait for a whole gathering.
            self.hurry(&mut state);
            state = self
                .changed
                .wait(state)
                .unwrap_or_else(|poisoned| poisoned.into_inner());
        }
    }

    /// Waits (at most [`QUERY_WAIT`]) until everything up to `seq` is applied, or the applier
    /// stopped; a query then reads the projection as it is.
    pub(crate) fn wait_for(&self, seq: u64) {
        let deadline = Instant::now() + QUERY_WAIT;
        let mut state = self.lock();
        while state.through < seq && state.failed.is_none() && !state.pending.is_empty() {
            // Again after each batch, as in `wait_idle`.
            self.hurry(&mut state);
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                warn!(
                    seq,
                    applied = state.through,
                    "a query read the projection before the applier caught up"
                );
                return;
            }
            state = match self.changed.wait_timeout(state, left) {
                Ok((state, _)) => state,
                Err(poisoned) => poisoned.into_inner().0,
            };
        }
    }

    fn done(&self, through: u64) {
        let mut state = self.lock();
        state.through = through;
        self.handled(state, through);
    }

    /// The groups up to `through` were not applied: `reason` says why (kept from the first).
    pub(crate) fn fail(&self, reason: String, through: u64) {
        let mut state = self.lock();
        state.failed.get_or_insert(reason);
        self.handled(state, through);
    }

    /// Drops the layers of the groups up to `through` (applied or given up) and wakes waiters.
    /// The layers (every staged item of their groups) are freed after the lock is released:
    /// the writer takes the same lock for each group ([`Applied::base`], [`Applied::push`]).
    fn handled(&self, mut state: MutexGuard<'_, State>, through: u64) {
        let mut done = Vec::new();
        while state
            .pending
            .front()
            .is_some_and(|(_, last, _)| *last <= through)
        {
            done.extend(state.pending.pop_front());
        }
        drop(state);
        self.changed.notify_all();
        drop(done);
    }
}

/// Starts the applier thread on `tree`; it stops when `jobs` closes.
pub(crate) fn spawn(
    tree: sled::Tree,
    applied: Arc<Applied>,
    jobs: Receiver<Job>,
    faults: Faults,
) -> std::io::Result<std::thread::JoinHandle<()>> {
    std::thread::Builder::new()
        .name("dlq-sink-applier".into())
        .spawn(move || run(&tree, &applied, &jobs, &faults))
}

fn run(tree: &sled::Tree, applied: &Applied, jobs: &Receiver<Job>, faults: &Faults) {
    // The runs this thread wrote, as the tree holds them: valid while the generation stays.
    let (mut cache, mut generation) = (RunCache::default(), applied.generation());
    while let Ok(first) = jobs.recv() {
        faults.wait_while_applier_paused();
        let (mut writes, mut through) = (first.writes, first.through);
        take_waiting(jobs, &mut writes, &mut through);
        applied.gather(APPLY_GATHER);
        take_waiting(jobs, &mut writes, &mut through);
        if applied.failure().is_some() {
            // Stopped: the writer applies the log from sled's mark once it sees the failure.
            applied.fail("an earlier batch failed".into(), through);
            continue;
        }
        if applied.generation() != generation {
            (cache, generation) = (RunCache::default(), applied.generation());
        }
        match projector::apply_cached(tree, writes, through, &mut cache) {
            Ok(()) => applied.done(through),
            Err(err) => {
                warn!(error = %err, "sled refused the projection of durable groups; the writer applies them from the log");
                applied.fail(err.to_string(), through);
            }
        }
    }
}

/// Adds every group already waiting to `writes` and `through`.
fn take_waiting(jobs: &Receiver<Job>, writes: &mut Vec<Write>, through: &mut u64) {
    while let Ok(next) = jobs.try_recv() {
        writes.extend(next.writes);
        *through = next.through;
    }
}

/// The writer's end of the applier.
pub(crate) type Jobs = Sender<Job>;

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// A gathering applier stops gathering as soon as a query waits for the projection, so
    /// reading one's own writes never pays the wait. (Liveness, not speed: a broken hurry
    /// leaves the applier gathering for an hour, and the guard below fails the test.)
    #[test]
    fn a_waiting_query_ends_the_gathering() {
        let applied = Arc::new(Applied::new(0));
        applied.push(1, 1, Layer::default());
        let (done, gathered) = std::sync::mpsc::channel();
        let applier = {
            let applied = applied.clone();
            std::thread::spawn(move || {
                applied.gather(Duration::from_secs(3600));
                applied.done(1);
                done.send(()).unwrap();
            })
        };
        applied.wait_for(1);
        assert_eq!(applied.through(), 1, "the query saw the group applied");
        gathered
            .recv_timeout(Duration::from_secs(60))
            .expect("the applier still gathers although a query waits");
        applier.join().unwrap();
    }

    /// Gathers for an hour on another thread; the receiver hears when it ended.
    fn gather_an_hour(applied: &Arc<Applied>) -> std::sync::mpsc::Receiver<()> {
        let (done, gathered) = std::sync::mpsc::channel();
        let applied = applied.clone();
        std::thread::spawn(move || {
            applied.gather(Duration::from_secs(3600));
            done.send(()).unwrap();
        });
        gathered
    }

    /// A full batch handed over ends the gathering: the applier never sits on more than
    /// `APPLY_GATHER_EVENTS` events for the sake of a larger batch.
    #[test]
    fn a_full_batch_ends_the_gathering() {
        let applied = Arc::new(Applied::new(0));
        applied.push(1, APPLY_GATHER_EVENTS - 1, Layer::default());
        let gathered = gather_an_hour(&applied);
        assert!(
            gathered.recv_timeout(Duration::from_millis(50)).is_err(),
            "one event short of a full batch, the applier gathers on"
        );
        applied.push(APPLY_GATHER_EVENTS, APPLY_GATHER_EVENTS, Layer::default());
        gathered
            .recv_timeout(Duration::from_secs(60))
            .expect("the applier still gathers although a full batch waits");
    }

    /// Once the writer closes the queue, no gathering waits: the last batches are applied at
    /// once and the sink closes without the applier's wait.
    #[test]
    fn closing_ends_every_gathering() {
        let applied = Arc::new(Applied::new(0));
        applied.push(1, 1, Layer::default());
        let gathered = gather_an_hour(&applied);
        applied.closing();
        gathered
            .recv_timeout(Duration::from_secs(60))
            .expect("the applier still gathers although the queue closes");
        gather_an_hour(&applied)
            .recv_timeout(Duration::from_secs(60))
            .expect("a gathering after the close waits");
    }
}
