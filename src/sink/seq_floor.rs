//! The sequence floor: a tiny file beside sled that keeps the log sequence from going back.
//!
//! sled may recover a damaged database as a shorter prefix of its log. The next sequence number
//! would then go backwards. Ids would still be new (every open writes under a new epoch, see
//! [`super::epoch`]), but a directory's sequence stays monotonic, which keeps its log, its
//! unpublished set and what operators see in order. To that end the writer
//! reserves sequence numbers in blocks: before it uses a sequence at or above the floor written
//! in `seq.floor`, it raises the floor by [`BLOCK`] and fsyncs the file. On open, the next
//! sequence is the larger of sled's and the floor. A clean close writes the exact next
//! sequence, so an ordinary restart continues without a gap; after a crash the sequence jumps
//! to the floor (a gap, never a reuse).

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use super::SinkError;

/// Sequence numbers reserved per fsync of the floor file.
pub const BLOCK: u64 = 100_000;

const FILE_NAME: &str = "seq.floor";

/// The floor file of one data directory.
#[derive(Debug)]
pub(crate) struct SeqFloor {
    dir: PathBuf,
    /// No sequence at or above this has been handed out.
    floor: u64,
}

impl SeqFloor {
    /// Reads the floor of `dir` (0 when there is none yet).
    pub(crate) fn open(dir: &Path) -> Result<Self, SinkError> {
        let path = dir.join(FILE_NAME);
        let floor = match std::fs::read_to_string(&path) {
            Ok(text) => text.trim().parse::<u64>().map_err(|_| SinkError::Open {
                path: path.clone(),
                reason: format!("unreadable sequence floor {:?}", text.trim()),
                hint: "The file holds one number: the next unused event sequence. If the database is intact, delete seq.floor; otherwise see docs/operations.md, 'Recovering a data directory'.",
            })?,
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => 0,
            Err(err) => return Err(SinkError::Io(format!("cannot read {}: {err}", path.display()))),
        };
        Ok(SeqFloor {
            dir: dir.to_owned(),
            floor,
        })
    }

    /// The floor as read or last written.
    pub(crate) fn floor(&self) -> u64 {
        self.floor
    }

    /// Makes sure `seq` may be used: raises and persists the floor when `seq` reaches it.
    pub(crate) fn reserve(&mut self, seq: u64) -> Result<(), SinkError> {
        if seq < self.floor {
            return Ok(());
        }
        self.write(seq.saturating_add(BLOCK))
    }

    /// Persists `floor` exactly (on a clean close: the next sequence, so no gap).
    pub(crate) fn write(&mut self, floor: u64) -> Result<(), SinkError> {
        let io = |err: std::io::Error| SinkError::Io(format!("cannot write {FILE_NAME}: {err}"));
        let tmp = self.dir.join(format!("{FILE_NAME}.tmp"));
        let mut file = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .open(&tmp)
            .map_err(io)?;
        file.write_all(format!("{floor}\n").as_bytes())
            .map_err(io)?;
        file.sync_all().map_err(io)?;
        std::fs::rename(&tmp, self.dir.join(FILE_NAME)).map_err(io)?;
        File::open(&self.dir)
            .and_then(|d| d.sync_all())
            .map_err(io)?;
        self.floor = floor;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reserves_in_blocks_and_reads_back() {
        let dir = tempfile::tempdir().unwrap();
        let mut floor = SeqFloor::open(dir.path()).unwrap();
        assert_eq!(floor.floor(), 0);
        floor.reserve(1).unwrap();
        assert_eq!(floor.floor(), 1 + BLOCK);
        floor.reserve(5).unwrap();
        assert_eq!(floor.floor(), 1 + BLOCK, "no write inside the block");
        floor.reserve(1 + BLOCK).unwrap();
        assert_eq!(floor.floor(), 1 + 2 * BLOCK);
        assert_eq!(SeqFloor::open(dir.path()).unwrap().floor(), 1 + 2 * BLOCK);
        floor.write(42).unwrap();
        assert_eq!(SeqFloor::open(dir.path()).unwrap().floor(), 42);
    }

    #[test]
    fn garbage_is_an_open_error() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(FILE_NAME), "twelve").unwrap();
        let err = SeqFloor::open(dir.path()).unwrap_err();
        assert!(err.to_string().contains("delete seq.floor"), "{err}");
    }
}
