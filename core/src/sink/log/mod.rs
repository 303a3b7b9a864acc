//! The sink's event log: our own append-only segment files, the durable copy of every event.
//!
//! Every event the sink acknowledges is here first: the sink's writer thread
//! (`sink/writer/`) appends each group commit with [`LogWriter::append`] and answers its
//! callers only after that returns; sled holds the projection, applied from this log after it
//! (`sink/applier.rs`) and rebuilt from it when lost. The reconciler and anti-entropy read the
//! events they publish from here, the exact bytes the bus receives. Opening a data directory
//! (`sink/open.rs`) recovers the log with [`LogWriter::open_lazy`]; a directory of the previous
//! format is copied into it by `sink/migrate.rs`. The design is in docs/design.md, "Sink
//! layout" and "Durability and group commit". Each promise below is checked against every
//! state a crash may leave (`tests/sink_log_crash.rs`, and with sled beside it
//! `tests/sink_crash_states.rs`).
//!
//! # On-disk layout
//!
//! One directory (`log/` in the data directory) of segments
//! `{first_seq:020}.seg`. A segment is the 8-byte header [`segment::MAGIC`] followed by frames
//! with consecutive sequences from `first_seq` on. Segments are ordered by their names; between
//! two segments sequences may jump (a failed group burns its sequences), never go back.
//!
//! # Record format
//!
//! One frame per event ([`frame`]):
//! `len u32 LE | crc32 u32 LE | seq u64 LE | payload`, the CRC-32 (IEEE) over `seq` and the
//! payload, the payload being the exact JSON bytes the bus receives.
//!
//! # What is durable when
//!
//! * [`LogWriter::append`] writes a group's frames with one write and one `fdatasync`, and
//!   returns the group's sequences only after that `fdatasync` succeeded. `Ok` survives a
//!   power cut.
//! * A new segment is created as `*.seg.tmp`, its header written and `fdatasync`ed, renamed to
//!   its final name, and the directory fsynced, before any group is written to it: an
//!   acknowledged event is never in a file whose name a crash can lose. On the real disk its
//!   blocks are reserved ahead of the appends ([`io::RealFile`]), so an `fdatasync` commits no
//!   block allocation; the file is cut back to its frames when the segment is sealed or the
//!   log closes, and the zeros a crash leaves after the frames end the segment.
//! * [`LogWriter::remove_through`] unlinks whole old segments, oldest first (never the newest,
//!   nor the newest holding an event: the log's last event stays readable), and fsyncs the
//!   directory after each one. A crash may bring the last deleted segments back (their events
//!   are then read again: duplicates, never loss), but never a hole: an older segment back
//!   while a newer one is gone (the crash states of `tests/sink_crash_states.rs` found one
//!   when the directory was fsynced once for all).
//! * [`LogWriter::durable_through`] is the highest acknowledged sequence; readers
//!   ([`LogWriter::records`]) never go past it, so nothing unsynced is ever published.
//!
//! # Sequences are never reused
//!
//! The writer takes a group's sequences before any I/O. If any step fails (create, write,
//! `fdatasync`, rename, directory fsync), the group is not acknowledged, its sequences are
//! burned, and the segment is **abandoned**: after a failed `fdatasync` the kernel may have
//! dropped the dirty pages or may still write them (the "fsyncgate" lesson), so nothing more
//! is appended to that file; the next group starts a new segment named after its own, higher,
//! first sequence. Opening starts a new segment too, above every sequence and every segment
//! name it found (names reserve sequences). Sequences handed out to a group that failed and
//! that no crash state keeps can be handed out again after a crash; the sink's per-open epoch
//! in event ids (`super::epoch`) keeps such events' ids distinct.
//!
//! # Recovery
//!
//! Opening ([`LogWriter::open`], `reader::recover`) reads every segment in order:
//!
//! * frames are read up to the first bytes that are not an intact frame with the expected
//!   sequence. If no intact frame with a higher sequence follows in that segment, those bytes
//!   are a **torn tail** (a crash or a failed write cut the append short; the group was never
//!   acknowledged): they are ignored and reported in [`Recovery::torn`]. Any segment may end
//!   so, not only the last, since failed groups abandon their segment.
//! * in the newest segment only, a bad frame followed by intact frames with a **hole** (zeros
//!   up to a sector boundary) between them is a torn tail too: a crash keeps unsynced pages in
//!   any subset, and no acknowledged frame can follow a hole. Opening cuts such a tail off
//!   ([`Recovery::cut`]) before anything is appended after it. The argument, and its limit, is
//!   in [`segment`]'s module doc.
//! * a bad frame followed by an intact one anywhere else, a bad header, a frame with the wrong
//!   sequence, or a segment starting at or below the previous one's last event is damage no
//!   crash leaves: opening refuses with [`LogError::Damaged`] / [`LogError::Overlap`], naming
//!   the file, the offset and what to do, rather than drop acknowledged events silently.
//! * unfinished segments (`*.seg.tmp`) are deleted; every segment is `fdatasync`ed (a killed
//!   process leaves unsynced bytes readable, which must not be built on before they are
//!   durable) and the directory fsynced; the durable mark is the last intact event.
//!
//! # A failed group is cut off
//!
//! After a failed `fdatasync` the abandoned group's bytes may still be readable from the page
//! cache while not on disk (Linux marks the pages clean). A process restarted without a reboot
//! would read them as intact events, and its open-time `fdatasync` does not write clean pages,
//! so a later power cut could remove events the restarted process published. The writer
//! therefore cuts the segment back to its last durable group ([`io::SegmentFile::cut`]) right
//! after a failed write or sync, and retries a failed cut before the next group. A process
//! killed between the failed sync and the cut is the window left.
//!
//! # Invariants
//!
//! 1. Every acknowledged event is in every crash state, with identical bytes.
//! 2. A sequence is in at most one event ever written; after recovery, new sequences are above
//!    every sequence found.
//! 3. Opening a crash state never fails; it fails only on damage, with the file and offset.
//! 4. A reader never sees an event above the durable mark.
//!
//! # I/O
//!
//! All file-system calls go through [`io::LogFs`] (the sidecar indexes and the blocks reserved
//! ahead of the appends included): [`io::RealFs`] on disk, and [`sim::SimFs`] in tests, which
//! records a trace from which [`crash`] builds every crash state (POSIX's model, page by page)
//! and which can inject ENOSPC/EIO into any kind of call. The simulation, the crash model and
//! the crash harness are test machinery: built only for tests and the `testing` feature.

#[cfg(any(test, feature = "testing"))]
pub mod crash;
mod error;
pub mod frame;
#[cfg(any(test, feature = "testing"))]
pub mod harness;
mod index;
pub mod io;
mod reader;
pub mod segment;
mod sidecar;
#[cfg(any(test, feature = "testing"))]
pub mod sim;
mod writer;

pub use error::LogError;
pub use index::LogIndex;
#[cfg(any(test, feature = "testing"))]
pub use index::SegmentIndex;
pub use reader::LogReader;
#[cfg(any(test, feature = "testing"))]
pub use reader::{Record, Records, Recovery};
pub use writer::{LogConfig, LogWriter};
