//! How long log segments stay once every event in them is applied, checkpointed and published.
//!
//! The log is needed after publishing too: `dlq republish` and `dlq verify` compare it with
//! the stream. A segment whose events are all done is deleted, oldest first, once it is older
//! than [`LogRetention::max_age`] (by its file's modification time: when its last event was
//! written) or while the log is larger than [`LogRetention::max_bytes`]. The segment being
//! appended to always stays. Live items created in a segment about to go are first kept whole
//! in sled (`crate::sink::projection::inline_items`), so no item pins the log. Nor does a segment holding an event
//! anti-entropy still checks ([`LogFloor`]): it must be able to read back what the stream lost.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::SystemTime;

use crate::sink::config::LogRetention;
use crate::sink::log::{segment, LogWriter};
use crate::sink::log_fs::{real_dir, Fs};

/// The lowest log sequence whose segment must stay whatever the retention (0: none), set by
/// the sink's handle ([`crate::sink::Sink::hold_log_from`]) and read by its writer.
#[derive(Debug, Clone, Default)]
pub(crate) struct LogFloor(Arc<AtomicU64>);

impl LogFloor {
    /// Keeps the segments of `floor` and after (`None`: no floor).
    pub(crate) fn hold_from(&self, floor: Option<u64>) {
        self.0.store(floor.unwrap_or(0), Ordering::SeqCst);
    }

    /// `removable` capped below the floor.
    fn cap(&self, removable: u64) -> u64 {
        match self.0.load(Ordering::SeqCst) {
            0 => removable,
            floor => removable.min(floor - 1),
        }
    }
}

/// The retention a writer applies: the policy, under the floor.
#[derive(Debug, Clone, Default)]
pub(crate) struct Retention {
    pub(crate) policy: LogRetention,
    pub(crate) floor: LogFloor,
}

impl Retention {
    /// The highest sequence whose segment may be deleted now (see
    /// [`LogRetention::removable_through`]), below the floor.
    pub(crate) fn removable_through(&self, log: &LogWriter<Fs>, done_through: u64) -> u64 {
        self.floor
            .cap(self.policy.removable_through(log, done_through))
    }
}

impl LogRetention {
    /// The highest sequence whose segment may be deleted now, given that every event up to
    /// `done_through` is done (0: none).
    pub(crate) fn removable_through(&self, log: &LogWriter<Fs>, done_through: u64) -> u64 {
        let segments = log.segments();
        // Retention zero deletes every done segment whatever its size and age; other
        // retentions need them, which a simulated log (crash tests) does not have.
        let keep_nothing = self.max_age.is_zero() && self.max_bytes == 0;
        let dir = real_dir(log.fs());
        if dir.is_none() && !keep_nothing {
            return 0;
        }
        let sizes: Vec<(u64, Option<SystemTime>)> = segments
            .iter()
            .map(|&first| {
                let path = dir.map(|dir| dir.join(segment::name(first)));
                let meta = path.and_then(|path| std::fs::metadata(path).ok());
                let len = meta.as_ref().map_or(0, |m| m.len());
                (len, meta.and_then(|m| m.modified().ok()))
            })
            .collect();
        let mut total: u64 = sizes.iter().map(|(len, _)| len).sum();
        let now = SystemTime::now();
        let mut removable = 0;
        for (at, pair) in segments.windows(2).enumerate() {
            let last_seq = pair[1].saturating_sub(1);
            if last_seq > done_through {
                break;
            }
            let (len, modified) = sizes.get(at).copied().unwrap_or((0, None));
            let old = modified
                .and_then(|time| now.duration_since(time).ok())
                .is_some_and(|age| age > self.max_age);
            if !(keep_nothing || old || total > self.max_bytes) {
                break;
            }
            removable = last_seq;
            total = total.saturating_sub(len);
        }
        removable
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_floor_keeps_its_segment_and_every_later_one() {
        let floor = LogFloor::default();
        assert_eq!(floor.cap(40), 40, "no floor");
        floor.hold_from(Some(25));
        assert_eq!((floor.cap(40), floor.cap(10)), (24, 10));
        floor.hold_from(Some(1));
        assert_eq!(floor.cap(40), 0);
        floor.hold_from(None);
        assert_eq!(floor.cap(40), 40);
    }
}
