//! What can go wrong in the segment log, each with what to do about it.

use std::io;

use thiserror::Error;

use super::segment::Damage;

/// Why a call of the segment log failed. Appends that fail acknowledge nothing and burn their
/// sequences (they are never handed out again); the writer recovers by itself on the next call.
#[derive(Debug, Error)]
pub enum LogError {
    /// An event is larger than a frame can hold; nothing was written, no sequence used.
    #[error("event {index} of the group is {len} bytes, above the log's limit of {max}; nothing was written")]
    TooLarge {
        /// Its position in the group.
        index: usize,
        /// Its size.
        len: usize,
        /// The limit (`super::frame::MAX_PAYLOAD`).
        max: usize,
    },
    /// Creating a segment failed.
    #[error("cannot create log segment {file}: {source}; the group was not acknowledged and its sequences are never reused. Free disk space (ENOSPC) or check the disk (EIO); the next append starts a new segment")]
    Create {
        /// The file.
        file: String,
        /// The error of the file system.
        #[source]
        source: io::Error,
    },
    /// Appending to a segment failed (possibly after writing part of the bytes).
    #[error("appending to log segment {file} failed: {source}; the group was not acknowledged, the segment is abandoned and its sequences are never reused. Free disk space (ENOSPC) or check the disk (EIO); the next append starts a new segment")]
    Write {
        /// The file.
        file: String,
        /// The error of the file system.
        #[source]
        source: io::Error,
    },
    /// `fdatasync` of a segment failed: its unsynced bytes may or may not be on disk.
    #[error("fdatasync of log segment {file} failed: {source}; the group was not acknowledged (its bytes may or may not be on disk, so the segment is abandoned and its sequences are never reused). Check the disk; the next append starts a new segment")]
    Sync {
        /// The file.
        file: String,
        /// The error of the file system.
        #[source]
        source: io::Error,
    },
    /// A segment whose last group failed could not be cut back to its durable length.
    #[error("cannot cut the events of a failed group off log segment {file}: {source}; nothing new is appended until the cut succeeds (were the process restarted now, those unacknowledged events could be found and published). Free disk space (ENOSPC) or check the disk (EIO); the next append retries")]
    Cut {
        /// The file.
        file: String,
        /// The error of the file system.
        #[source]
        source: io::Error,
    },
    /// Opening could not cut a crash's torn tail (a hole, then frames of the group the crash
    /// interrupted) off the newest segment.
    #[error("cannot cut the torn tail off log segment {file} at byte {offset}: {source}; the bytes after it are the unacknowledged remains of the append a crash interrupted, and nothing may be appended after them until they are gone. Free disk space (ENOSPC) or check the disk (EIO), then open again")]
    CutTail {
        /// The file.
        file: String,
        /// Where its intact frames end.
        offset: usize,
        /// The error of the file system.
        #[source]
        source: io::Error,
    },
    /// Renaming a new segment to its final name failed.
    #[error("cannot rename log segment {from} to {to}: {source}; the group was not acknowledged. Check the disk; the next append starts a new segment")]
    Rename {
        /// The temporary name.
        from: String,
        /// The final name.
        to: String,
        /// The error of the file system.
        #[source]
        source: io::Error,
    },
    /// The directory fsync after a create, rename or unlink failed.
    #[error("fsync of the log directory failed: {source}; the segment being created or deleted may not survive a crash, so nothing was acknowledged. Check the disk; the next call retries")]
    SyncDir {
        /// The error of the file system.
        #[source]
        source: io::Error,
    },
    /// Deleting a segment failed; it stays.
    #[error("cannot delete log segment {file}: {source}; it stays on disk (its events may be read again, which is harmless) and the next remove_through retries")]
    Remove {
        /// The file.
        file: String,
        /// The error of the file system.
        #[source]
        source: io::Error,
    },
    /// The directory cannot be listed.
    #[error("cannot list the log directory: {source}; check that it exists and is readable")]
    List {
        /// The error of the file system.
        #[source]
        source: io::Error,
    },
    /// A segment cannot be read (or, at open, synced).
    #[error("cannot read log segment {file}: {source}; check the file's permissions and the disk")]
    Read {
        /// The file.
        file: String,
        /// The error of the file system.
        #[source]
        source: io::Error,
    },
    /// A segment is damaged in a way no crash leaves.
    #[error("log segment {file} is damaged at byte {offset}: {damage}. No crash leaves this, so the log refuses to open rather than drop acknowledged events: restore the data directory from a backup, or copy the file aside and truncate it to {offset} bytes to keep what precedes the damage (the events after it are then lost)")]
    Damaged {
        /// The file.
        file: String,
        /// Where the damage starts.
        offset: usize,
        /// What is wrong.
        #[source]
        damage: Damage,
    },
    /// A segment starts at or below the last sequence of the segment before it.
    #[error("log segment {file} starts at sequence {first_seq} but the segment before it ends at {previous_last}: the directory mixes two logs; move the files that do not belong here away")]
    Overlap {
        /// The file.
        file: String,
        /// The sequence its name gives.
        first_seq: u64,
        /// The last sequence of the segment before.
        previous_last: u64,
    },
}
