//! The epoch: one incarnation of a data directory, drawn at random on every open.
//!
//! The log sequence alone cannot make event ids unique: a replaced data directory starts again
//! at 1, and a directory restored from a backup or VM snapshot continues from where the copy
//! was taken, below sequences already published. Neither can know it was replaced or restored,
//! so every open starts a new epoch and every event it writes carries it (and its id,
//! `"{node}:{epoch}:{seq}"`). The epoch needs no file of its own: it is written with the
//! epoch's first event, in the same atomic batch, and that event names what the directory held
//! when it was opened (the last logged event's epoch and sequence), so consumers can order the
//! node's epochs ([`crate::domain::event::Event::needs`]).
//!
//! The same holds inside an epoch: a group the log refused burns its sequences, so the next
//! group's first event names the last event made durable before it ([`Epoch::predecessor`]),
//! and consumers never wait for a burned sequence.

use std::hash::{BuildHasher, Hasher};
use std::path::Path;

use chrono::Utc;
use serde::Deserialize;
use sha2::{Digest, Sha256};
use tracing::warn;

use crate::domain::event::EPOCH_HEX;
use crate::sink::log_fs::Reader;
use crate::sink::SinkError;

/// The epoch of one open of a data directory.
#[derive(Debug, Clone)]
pub(crate) struct Epoch {
    /// The random id ([`EPOCH_HEX`] hex digits).
    pub(crate) id: String,
    /// The epoch of the last event made durable: at open, the last event in the log (`None`:
    /// no event, or one without epoch); once a group of this epoch is durable, this epoch.
    pub(crate) prev_epoch: Option<String>,
    /// The sequence of the last event made durable (0: none).
    pub(crate) prev_seq: u64,
}

/// The fields of a logged event that say where it belongs.
#[derive(Deserialize)]
struct Position {
    seq: u64,
    #[serde(default)]
    epoch: Option<String>,
}

impl Epoch {
    /// A new epoch for the data directory at `path` whose log `reader` reads.
    /// The predecessor is the last log entry that can be read: an unreadable one is never
    /// published (the reconciler parks it), so consumers could not wait for it.
    pub(crate) fn open(path: &Path, reader: &Reader) -> Result<Epoch, SinkError> {
        let (prev_epoch, prev_seq) = last_position(reader)?;
        Ok(Epoch {
            id: random_id(path),
            prev_epoch,
            prev_seq,
        })
    }

    /// What the event at `seq`, the first of a group, must name as its predecessor: the last
    /// event made durable before it, unless that is `seq - 1` of this epoch (the rule that
    /// needs no field). Set on the epoch's first event and on the first event after a burned
    /// group; later events of a group follow their predecessor directly.
    pub(crate) fn predecessor(&self, seq: u64) -> Option<(Option<String>, u64)> {
        let follows = self.prev_epoch.as_deref() == Some(self.id.as_str())
            && self.prev_seq.checked_add(1) == Some(seq);
        (!follows).then(|| (self.prev_epoch.clone(), self.prev_seq))
    }

    /// Records that this epoch's events up to `through` are durable.
    pub(crate) fn committed(&mut self, through: u64) {
        self.prev_epoch = Some(self.id.clone());
        self.prev_seq = through;
    }
}

/// The epoch and sequence of the last readable event of the log (`(None, 0)`: none).
fn last_position(reader: &Reader) -> Result<(Option<String>, u64), SinkError> {
    let mut next = reader.index().last_at_or_below(reader.durable_through());
    while let Some(seq) = next {
        if let Some(payload) = reader.read(seq)? {
            match serde_json::from_slice::<Position>(&payload) {
                Ok(position) => return Ok((position.epoch, position.seq)),
                Err(err) => warn!(
                    seq,
                    error = %err,
                    "unreadable log entry: the new epoch names the last readable event before it"
                ),
            }
        }
        next = reader.index().last_at_or_below(seq.saturating_sub(1));
    }
    Ok((None, 0))
}

/// [`EPOCH_HEX`] hex digits from the OS-seeded keys of std's `RandomState`, the clock, the
/// process and the path: two opens, even of copies of one directory, do not draw the same.
fn random_id(path: &Path) -> String {
    let mut hasher = Sha256::new();
    for _ in 0..2 {
        let mut random = std::collections::hash_map::RandomState::new().build_hasher();
        random.write_u64(0);
        hasher.update(random.finish().to_be_bytes());
    }
    hasher.update(Utc::now().timestamp_nanos_opt().unwrap_or(0).to_be_bytes());
    hasher.update(std::process::id().to_be_bytes());
    hasher.update(path.to_string_lossy().as_bytes());
    let digest = hasher.finalize();
    digest
        .iter()
        .take(EPOCH_HEX / 2)
        .map(|b| format!("{b:02x}"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::event::is_epoch;

    fn named(entries: &[(u64, &str)]) -> (Option<String>, u64) {
        let dir = tempfile::tempdir().unwrap();
        let real = crate::sink::log::io::RealFs::open(dir.path()).unwrap();
        let faults = crate::sink::Faults::default();
        let backend = crate::sink::fault_fs::Backend::Real(real);
        let fs = crate::sink::fault_fs::FaultFs { backend, faults };
        let config = crate::sink::log::LogConfig::default();
        let (mut log, _) = crate::sink::log::LogWriter::open(fs, config).unwrap();
        for (seq, json) in entries {
            log.skip_to(*seq);
            log.append(&[json.as_bytes()]).unwrap();
        }
        let epoch = Epoch::open(Path::new("/data"), &log.reader()).unwrap();
        (epoch.prev_epoch, epoch.prev_seq)
    }

    /// A new epoch names the last readable logged event: nothing for an empty log, the chain
    /// without an epoch for events written before epochs, and never an unreadable entry (it is
    /// parked, never published, so consumers could not wait for it).
    #[test]
    fn a_new_epoch_names_the_last_readable_event() {
        assert_eq!(named(&[]), (None, 0));
        assert_eq!(
            named(&[(1, r#"{"seq":1}"#), (2, r#"{"seq":2}"#)]),
            (None, 2)
        );
        let a = r#"{"seq":5,"epoch":"00000000000000aa"}"#;
        assert_eq!(
            named(&[(1, r#"{"seq":1}"#), (5, a), (6, "\u{1}garbage")]),
            (Some("00000000000000aa".into()), 5)
        );
        assert_eq!(named(&[(6, "garbage")]), (None, 0));
    }

    /// The epoch's first event names what the directory held; inside the epoch only the first
    /// event after a burned group names anything, and it names the last durable one.
    #[test]
    fn only_an_event_after_a_jump_names_its_predecessor() {
        let mut epoch = Epoch {
            id: "00000000000000e1".into(),
            prev_epoch: Some("00000000000000e0".into()),
            prev_seq: 4,
        };
        assert_eq!(
            epoch.predecessor(5),
            Some((Some("00000000000000e0".into()), 4))
        );
        // The first group (5..=6) was refused: the next still names the old epoch's 4.
        assert_eq!(
            epoch.predecessor(7),
            Some((Some("00000000000000e0".into()), 4))
        );
        epoch.committed(8);
        assert_eq!(epoch.predecessor(9), None);
        // 9..=10 burned.
        assert_eq!(
            epoch.predecessor(11),
            Some((Some("00000000000000e1".into()), 8))
        );
    }

    #[test]
    fn ids_are_epoch_shaped_and_differ() {
        let dir = std::path::Path::new("/data");
        let (a, b) = (random_id(dir), random_id(dir));
        assert!(is_epoch(&a), "{a}");
        assert!(is_epoch(&b), "{b}");
        assert_ne!(a, b);
    }
}
