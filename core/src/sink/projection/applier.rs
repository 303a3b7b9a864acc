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
//! After a lone small group (one emit at a time) the applier lingers up to [`APPLY_LINGER`]
//! for more to apply with it, unless someone waits for the projection: fewer sled writes
//! beside the log's `fdatasync`s.
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
    /// Wakes a lingering applier ([`Applied::linger`]) when someone waits for it.
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
    /// Someone waits for the applier: stop lingering.
    hurry: bool,
    /// Moves each time the writer applied the projection itself ([`Applied::recovered`]):
    /// the applier then drops what it kept of the tree ([`RunCache`]).
    generation: u64,
}

/// Longest a query waits for the applier before it reads what is there.
const QUERY_WAIT: Duration = Duration::from_secs(10);

/// How long the applier waits after a lone small group arrives (none queued behind it) for
/// more to apply with it, unless someone waits for the projection. Each sled batch makes sled
/// write its I/O buffer: at one emit at a time that was a sled write beside every `fdatasync`
/// of the log (15.6 KiB written per 1.9 KB event). Lingering 1 ms cut that to 9.2 KiB and the
/// p50 of one-at-a-time `Sink::append` from 0.33–0.37 to 0.21–0.25 ms (docs/benchmarks.md,
/// "The writer, the applier and one emit at a time").
const APPLY_LINGER: Duration = Duration::from_millis(1);
/// The applier lingers only after a lone group of at most this many events: larger groups
/// already share sled's writes, and lingering then cost 15 % at 64 in flight.
const LINGER_MAX_EVENTS: u64 = 2;

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

    /// Records a group handed to the applier.
    pub(crate) fn push(&self, first: u64, through: u64, layer: Layer) {
        self.lock()
            .pending
            .push_back((first, through, Arc::new(layer)));
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

    /// Waits up to `max` (the applier, before it applies what it was given), or less when
    /// someone waits for the projection meanwhile.
    pub(crate) fn linger(&self, max: Duration) {
        let state = self.lock();
        let (mut state, _) = self
            .hurry
            .wait_timeout_while(state, max, |state| !state.hurry)
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        state.hurry = false;
    }

    /// Ends the applier's linger: someone waits for it.
    fn hurry(&self, state: &mut State) {
        state.hurry = true;
        self.hurry.notify_all();
    }

    /// Waits until every group handed over was applied or dropped after a failure.
    pub(crate) fn wait_idle(&self) {
        let mut state = self.lock();
        self.hurry(&mut state);
        while !state.pending.is_empty() {
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
        if state.through < seq {
            self.hurry(&mut state);
        }
        while state.through < seq && state.failed.is_none() && !state.pending.is_empty() {
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
    fn handled(&self, mut state: MutexGuard<'_, State>, through: u64) {
        while state
            .pending
            .front()
            .is_some_and(|(_, last, _)| *last <= through)
        {
            state.pending.pop_front();
        }
        drop(state);
        self.changed.notify_all();
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
        let more = take_waiting(jobs, &mut writes, &mut through);
        if !more && through.saturating_sub(applied.through()) <= LINGER_MAX_EVENTS {
            // A lone small group (one emit at a time, or nearly): give the next ones a moment
            // to join it.
            applied.linger(APPLY_LINGER);
            take_waiting(jobs, &mut writes, &mut through);
        }
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

/// Adds every group already waiting to `writes` and `through`; true when there was one.
fn take_waiting(jobs: &Receiver<Job>, writes: &mut Vec<Write>, through: &mut u64) -> bool {
    let mut took = false;
    while let Ok(next) = jobs.try_recv() {
        writes.extend(next.writes);
        (took, *through) = (true, next.through);
    }
    took
}

/// The writer's end of the applier.
pub(crate) type Jobs = Sender<Job>;

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// A lingering applier stops lingering as soon as a query waits for the projection, so
    /// reading one's own writes never pays the linger. (Liveness, not speed: a broken hurry
    /// leaves the applier lingering for an hour, and the guard below fails the test.)
    #[test]
    fn a_waiting_query_ends_the_linger() {
        let applied = Arc::new(Applied::new(0));
        applied.push(1, 1, Layer::default());
        let (done, lingered) = std::sync::mpsc::channel();
        let applier = {
            let applied = applied.clone();
            std::thread::spawn(move || {
                applied.linger(Duration::from_secs(3600));
                applied.done(1);
                done.send(()).unwrap();
            })
        };
        applied.wait_for(1);
        assert_eq!(applied.through(), 1, "the query saw the group applied");
        lingered
            .recv_timeout(Duration::from_secs(60))
            .expect("the applier still lingers although a query waits");
        applier.join().unwrap();
    }
}
