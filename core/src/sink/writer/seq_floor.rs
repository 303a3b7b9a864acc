//! The sequence floor of sink format 2: a tiny file beside sled that kept the log sequence
//! from going back when sled recovered a shorter prefix of its log.
//!
//! Format 2 reserved sequences in blocks in `seq.floor`. The segment log needs no floor (its
//! file names reserve sequences), but a directory migrated from format 2 may hold one: opening
//! starts the log at or above it, so no sequence handed out before is handed out again.

use std::path::Path;

use crate::sink::SinkError;

const FILE_NAME: &str = "seq.floor";

/// The floor file of one data directory.
#[derive(Debug)]
pub(crate) struct SeqFloor {
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
                source: None,
                hint: "The file holds one number: the next unused event sequence. If the database is intact, delete seq.floor; otherwise see docs/operations.md, 'Recovering a data directory'.",
            })?,
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => 0,
            Err(source) => {
                return Err(SinkError::Io {
                    context: format!("cannot read {}", path.display()),
                    source,
                })
            }
        };
        Ok(SeqFloor { floor })
    }

    /// The floor as read.
    pub(crate) fn floor(&self) -> u64 {
        self.floor
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_floor_and_none_is_zero() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(SeqFloor::open(dir.path()).unwrap().floor(), 0);
        std::fs::write(dir.path().join(FILE_NAME), "42\n").unwrap();
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
