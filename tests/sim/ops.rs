//! The operations of the simulation and their seeded generator.
//!
//! A seed fixes the whole list of operations (what to do, in which order, with which faults);
//! the world then runs them on real parts, so a seed replays the same operations (the timing
//! of the real threads, nats-server and sled may still differ between runs).

pub use super::switches::Switches;

/// A small deterministic generator (SplitMix64): the same seed gives the same operations.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed ^ 0x9E37_79B9_7F4A_7C15)
    }

    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number in `0..n` (`n > 0`).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    /// True with probability `percent`/100.
    pub fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}

/// A log call an injected fault hits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FaultAt {
    Write,
    Sync,
    Create,
    Remove,
    SyncDir,
    Rename,
}

/// One step of a simulation run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    /// `tasks` concurrent `dead_letter`s of items `first..first+tasks` of job `job`.
    Emit {
        tasks: u8,
        job: u8,
        first: u16,
    },
    /// A slow disk: the writer takes the dead-letter, stalls past the store timeout (the
    /// caller is told `Unconfirmed`), and then its write fails at `at`.
    UnconfirmedThenFailed {
        at: FaultAt,
        job: u8,
        item: u16,
    },
    /// The durable-only `store` of one item.
    Store {
        job: u8,
        item: u16,
    },
    /// Removes one item (resolved).
    Remove {
        job: u8,
        item: u16,
    },
    /// Clears up to `limit` items of a job.
    Clear {
        job: u8,
        limit: u8,
    },
    /// A dead-letter above the bus's `max_payload` (under the sink's `max_event_bytes`).
    Oversized {
        job: u8,
        item: u16,
    },
    /// An emit like [`Op::Emit`] whose append hits a failing log call (`at`: a write, an
    /// `fdatasync` or a segment's creation) with `errno`; cleared after it.
    FailedEmit {
        at: FaultAt,
        /// Calls of that kind that still succeed first (a new segment's header is synced
        /// before the group is).
        skip: u8,
        errno: i32,
        tasks: u8,
        job: u8,
        first: u16,
    },
    /// A checkpoint whose log call `at` (an unlink, the directory fsync, a rename) fails.
    FailedCheckpoint {
        at: FaultAt,
        errno: i32,
    },
    /// The next read of the log fails with EIO (whoever reads it: the reconciler, a query),
    /// then the reconciler is woken; the fault is cleared after this operation.
    FailedRead,
    /// A checkpoint (sled flushed, publish state saved, done segments deleted).
    Checkpoint,
    /// Power cut: the log in crash state number `pick` (modulo their count), sled as of the
    /// last checkpoint; then reopen.
    Crash {
        pick: u64,
    },
    /// Power cut in the middle of `tasks` concurrent dead-letters (bus down, so nothing of
    /// them is published): the log at trace point `at` (of the operations the emits made, per
    /// mille) in crash state `pick`, sled as of the last checkpoint; then reopen.
    CrashDuring {
        tasks: u8,
        job: u8,
        first: u16,
        at: u16,
        pick: u64,
    },
    /// Clean shutdown and reopen.
    Restart,
    /// Time jumps past the log retention: from now on every done segment may go.
    TimeJump,
    /// `rebuild_projection`.
    Rebuild,
    /// nats-server killed / restarted / frozen / thawed.
    BusKill,
    BusRestart,
    BusFreeze,
    BusThaw,
    /// The stream loses a message: a dead-letter is emitted and, once published and the newest
    /// message, deleted from the stream; anti-entropy must put it back (bus up only).
    LoseMessage {
        job: u8,
        item: u16,
    },
    /// The durable consumer catches up.
    ConsumerCatchUp,
}

/// What the generator tracks to respect the switches.
#[derive(Default)]
struct State {
    bus_down: bool,
    bus_frozen: bool,
    retention: bool,
    failed_write: bool,
    next_item: u16,
    /// The last operation reopened the sink (its next append starts a fresh segment).
    reopened: bool,
    /// The last operation was a failed append.
    failed_last: bool,
}

const JOBS: u64 = 3;

/// The operations of seed `seed`: `count` of them.
pub fn generate(seed: u64, count: usize, switches: Switches) -> Vec<Op> {
    let mut rng = Rng::new(seed);
    let mut state = State::default();
    let mut ops = Vec::with_capacity(count + 8);
    while ops.len() < count {
        // The edges where parts meet come up more often than at random: a failed append as
        // the first write after a reopen (a fresh segment), a reopen right after one.
        let op = if state.reopened && rng.chance(30) {
            append_fault(&mut rng, &mut state, switches)
        } else if state.failed_last && rng.chance(30) {
            Some(if rng.chance(50) {
                Op::Restart
            } else {
                Op::Crash { pick: rng.next() }
            })
        } else {
            None
        };
        let op = op.or_else(|| pick(&mut rng, &mut state, switches));
        if let Some(op) = op {
            state.reopened = matches!(
                op,
                Op::Restart | Op::TimeJump | Op::Crash { .. } | Op::CrashDuring { .. }
            );
            state.failed_last = matches!(op, Op::FailedEmit { .. });
            let lost = matches!(op, Op::LoseMessage { .. });
            ops.push(op);
            if lost && !switches.repair_then_crash {
                ops.push(Op::Checkpoint);
            }
        }
    }
    ops
}

fn pick(rng: &mut Rng, state: &mut State, switches: Switches) -> Option<Op> {
    let job = rng.below(JOBS) as u8;
    let known = state.next_item.max(1);
    Some(match rng.below(100) {
        0..=29 => {
            let tasks = 1 + rng.below(6) as u8;
            let first = state.next_item;
            // Sometimes the same ids again: failures merge into existing items.
            let first = if rng.chance(25) {
                rng.below(u64::from(known)) as u16
            } else {
                state.next_item += u16::from(tasks);
                first
            };
            Op::Emit { tasks, job, first }
        }
        30..=35 => {
            state.next_item += 1;
            Op::Store {
                job,
                item: state.next_item - 1,
            }
        }
        36..=43 => Op::Remove {
            job,
            item: rng.below(u64::from(known)) as u16,
        },
        44..=46 => Op::Clear {
            job,
            limit: 1 + rng.below(3) as u8,
        },
        47..=50 if switches.parked_events => {
            state.next_item += 1;
            Op::Oversized {
                job,
                item: state.next_item - 1,
            }
        }
        51..=57 => return append_fault(rng, state, switches),
        58..=60 => Op::FailedCheckpoint {
            at: [FaultAt::Remove, FaultAt::SyncDir, FaultAt::Rename][rng.below(3) as usize],
            errno: errno(rng),
        },
        61..=62 if switches.parked_events && switches.failed_write_bus_up => Op::FailedRead,
        95..=96 if switches.failed_write_bus_down => {
            state.next_item += 1;
            Op::UnconfirmedThenFailed {
                at: [FaultAt::Write, FaultAt::Sync][rng.below(2) as usize],
                job,
                item: state.next_item - 1,
            }
        }
        63..=69 => Op::Checkpoint,
        70..=71 => Op::Crash { pick: rng.next() },
        72..=73 => {
            let tasks = 2 + rng.below(6) as u8;
            state.next_item += u16::from(tasks);
            state.bus_down = true;
            state.bus_frozen = false;
            Op::CrashDuring {
                tasks,
                job,
                first: state.next_item - u16::from(tasks),
                at: rng.below(1001) as u16,
                pick: rng.next(),
            }
        }
        74..=76 => Op::Restart,
        77..=78
            if !state.retention
                && (!state.failed_write || switches.failed_write_with_retention) =>
        {
            state.retention = true;
            Op::TimeJump
        }
        79..=82 if !state.retention || switches.rebuild_after_retention => Op::Rebuild,
        83..=86 => bus(rng, state),
        87..=91 => Op::ConsumerCatchUp,
        92..=94 => {
            state.next_item += 1;
            Op::LoseMessage {
                job,
                item: state.next_item - 1,
            }
        }
        _ => return None,
    })
}

fn errno(rng: &mut Rng) -> i32 {
    if rng.chance(50) {
        28 // ENOSPC
    } else {
        5 // EIO
    }
}

/// A failed append (the fault, then the emit it hits), when the switches allow it now.
fn append_fault(rng: &mut Rng, state: &mut State, switches: Switches) -> Option<Op> {
    let bus_ok = if state.bus_down || state.bus_frozen {
        switches.failed_write_bus_down
    } else {
        switches.failed_write_bus_up
    };
    // In a seed that ran retention only scenario 2's switch allows it (its symptom, a
    // directory that no longer opens, ends the run before the consumers are checked).
    let allowed = if state.retention {
        switches.failed_write_with_retention
    } else {
        bus_ok
    };
    if !allowed {
        return None;
    }
    state.failed_write = true;
    let at = [FaultAt::Write, FaultAt::Sync, FaultAt::Create][rng.below(3) as usize];
    let tasks = 1 + rng.below(3) as u8;
    let first = state.next_item;
    state.next_item += u16::from(tasks);
    Some(Op::FailedEmit {
        at,
        skip: rng.below(3) as u8,
        errno: errno(rng),
        tasks,
        job: rng.below(JOBS) as u8,
        first,
    })
}

fn bus(rng: &mut Rng, state: &mut State) -> Op {
    if state.bus_frozen {
        state.bus_frozen = false;
        return Op::BusThaw;
    }
    if state.bus_down {
        state.bus_down = false;
        return Op::BusRestart;
    }
    if rng.chance(70) {
        state.bus_down = true;
        Op::BusKill
    } else {
        state.bus_frozen = true;
        Op::BusFreeze
    }
}
