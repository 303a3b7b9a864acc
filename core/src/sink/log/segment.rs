//! Segment files: their names, their header and the scan that validates one (pure code).
//!
//! A segment is `{first_seq:020}.seg`: the [`MAGIC`] header, then frames ([`super::frame`])
//! with consecutive sequences starting at `first_seq`. A segment is created as
//! `{first_seq:020}.seg.tmp`, its header written and synced, then renamed to its final name, so
//! a final name always holds a whole header. The name reserves `first_seq`: opening never hands
//! out a sequence below any segment's first one.
//!
//! # What a crash can leave after the last intact frame
//!
//! The scan reads frames up to the first bytes that are not an intact frame with the expected
//! sequence, at offset `v`. What follows decides between a **torn tail** (the residue of an
//! append no `fdatasync` completed: ignored) and **damage** (refused with the file and the
//! offset, since acknowledged events may be in it). The crash model is POSIX's, page by page
//! (`super::crash`): of unsynced bytes, any subset of their pages may persist, so a crash can
//! leave a **hole** (zeros up to a page boundary) followed by intact frames. The argument
//! for where that may be taken for a torn tail:
//!
//! 1. In one segment the writer appends a group with one write and makes it durable with one
//!    `fdatasync` before it writes the next; after a failed write or `fdatasync` it cuts the
//!    segment back to its last durable group (`ftruncate`, then `fdatasync`) and never appends
//!    to it again. So at any instant the bytes of a segment that no completed `fdatasync`
//!    covers are those of **one** group, the last written to it, and nothing follows them.
//! 2. No acknowledged frame follows a hole in one segment: its `fdatasync` would have covered
//!    the hole (every byte before it was written earlier) — unless the hole is damage.
//! 3. A segment other than the newest holds no unsynced byte: a newer segment is created only
//!    after the group before it was made durable (rotation) or cut off durably (a failed
//!    group: the next append retries the cut and fails until it succeeds); and opening cuts
//!    a torn tail with frames after it off the newest segment (`LogFs::truncate`) before
//!    anything is appended after it. So in an older segment any bad frame followed by an
//!    intact one is damage: [`scan`] refuses it.
//! 4. In the newest segment ([`scan_newest`]), a bad frame followed by intact frames is a
//!    torn tail when a **hole** lies between them: a [`SECTOR`]-aligned run of zeros
//!    (`[max(b - SECTOR, v), b)` zero for some multiple `b` of [`SECTOR`] with
//!    `v < b <= n`, `n` the next intact frame). A crash leaves exactly that: the frame at `v`
//!    is broken because a page of it did not persist, that page reads as zeros from the
//!    durable end or its start up to its end (page boundaries are sector multiples), and the
//!    frame at `n` lies after it, all of its pages kept. A flipped bit, a checksum mismatch
//!    or other bytes with intact frames after them is still damage.
//!
//! The limit: damage that zeroes whole sectors of the **newest** segment and leaves intact
//! frames after them reads like a crash's hole, and the acknowledged frames after it are taken
//! for the torn tail of the last group. Nothing on disk tells them apart without a durable
//! record of the segment's synced end per group (one more `fdatasync` per group); the sink's
//! open check (the projection's newest sequence against the log's) catches such a loss for
//! every event already checkpointed.

use super::frame::{self, FrameError};

/// The first bytes of every segment: format and version.
pub const MAGIC: &[u8; 8] = b"DLQSEG1\n";

/// The smallest unit a disk writes: a hole a crash leaves ends at a multiple of it.
pub const SECTOR: usize = 512;

const EXTENSION: &str = ".seg";
const TMP_EXTENSION: &str = ".seg.tmp";

/// The final name of the segment whose first event has sequence `first_seq`.
pub fn name(first_seq: u64) -> String {
    format!("{first_seq:020}{EXTENSION}")
}

/// The name a segment has until its header is durable.
pub fn tmp_name(first_seq: u64) -> String {
    format!("{first_seq:020}{TMP_EXTENSION}")
}

/// What a file name in the log directory is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A segment starting at this sequence.
    Segment(u64),
    /// A segment whose creation did not finish (deleted when the log is opened).
    Unfinished(u64),
    /// Not ours.
    Other,
}

/// Classifies a file name of the log directory.
pub fn classify(file: &str) -> Kind {
    let seq_of = |stem: &str| {
        (stem.len() == 20 && stem.bytes().all(|b| b.is_ascii_digit()))
            .then(|| stem.parse::<u64>().ok())
            .flatten()
    };
    if let Some(seq) = file.strip_suffix(TMP_EXTENSION).and_then(seq_of) {
        Kind::Unfinished(seq)
    } else if let Some(seq) = file.strip_suffix(EXTENSION).and_then(seq_of) {
        Kind::Segment(seq)
    } else {
        Kind::Other
    }
}

/// A segment's frames, as found by [`scan`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Scan {
    /// Each intact frame: its sequence and the byte range of its payload.
    pub frames: Vec<(u64, std::ops::Range<usize>)>,
    /// Where the intact frames end.
    pub valid_len: usize,
    /// A torn tail after them, if any: what was wrong with the bytes at `valid_len`.
    pub torn: Option<FrameError>,
    /// Where an intact frame follows the torn tail, after a hole (only in the newest segment:
    /// see the module doc). Opening cuts such a tail off.
    pub frames_after: Option<usize>,
}

impl Scan {
    /// The sequence of the last intact frame.
    #[cfg(any(test, feature = "testing"))]
    pub fn last_seq(&self) -> Option<u64> {
        self.frames.last().map(|(seq, _)| *seq)
    }
}

/// Why a segment cannot be used as it is. Not a crash state: damage or another program.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Damage {
    /// The file does not start with [`MAGIC`].
    #[error("it does not start with the segment header {MAGIC:?}")]
    Header,
    /// A bad frame is followed by an intact one.
    #[error("{reason}, and an intact frame follows at byte {next}")]
    Middle {
        /// What is wrong with the bad frame.
        reason: FrameError,
        /// Where the next intact frame starts.
        next: usize,
    },
    /// A durable frame read back is not intact any more (the file changed after it was synced).
    #[error("the durable frame there is not intact: {reason}")]
    Frame {
        /// What is wrong with it.
        reason: FrameError,
    },
    /// An intact frame carries another sequence than the one expected there.
    #[error("an intact frame holds sequence {found} where {expected} was expected")]
    Sequence {
        /// The sequence the position calls for.
        expected: u64,
        /// The sequence in the frame.
        found: u64,
    },
}

/// Validates the bytes of an older segment (not the newest) that starts at `first_seq`.
/// Frames must carry `first_seq`, `first_seq + 1`, ... . The first bytes that are not an intact
/// frame end the segment: nothing but zeros is the space reserved ahead of the appends
/// (`super::io::RealFile`), not an error; a **torn tail** (returned in [`Scan::torn`]) when
/// other bytes and no intact frame follow, which is what a crash during an append leaves; and
/// [`Damage::Middle`] with the offset when an intact frame follows (see the module doc).
pub fn scan(bytes: &[u8], first_seq: u64) -> Result<Scan, (usize, Damage)> {
    scan_in(bytes, first_seq, false)
}

/// [`scan`] for the newest segment: a bad frame followed by intact frames, with a hole between
/// them, is a torn tail too ([`Scan::frames_after`]; see the module doc).
pub fn scan_newest(bytes: &[u8], first_seq: u64) -> Result<Scan, (usize, Damage)> {
    scan_in(bytes, first_seq, true)
}

fn scan_in(bytes: &[u8], first_seq: u64, newest: bool) -> Result<Scan, (usize, Damage)> {
    if bytes.get(..MAGIC.len()) != Some(MAGIC.as_slice()) {
        return Err((0, Damage::Header));
    }
    let mut at = MAGIC.len();
    let mut expected = first_seq;
    let mut frames = Vec::new();
    while at < bytes.len() {
        let rest = bytes.get(at..).unwrap_or_default();
        match frame::decode(rest) {
            Ok((frame, len)) => {
                if frame.seq != expected {
                    return Err((
                        at,
                        Damage::Sequence {
                            expected,
                            found: frame.seq,
                        },
                    ));
                }
                let start = at + frame::HEADER_LEN;
                frames.push((frame.seq, start..at + len));
                at += len;
                expected = expected.saturating_add(1);
            }
            Err(_) if rest.iter().all(|&b| b == 0) => break,
            Err(reason) => {
                let last = expected.saturating_sub(1);
                let next = frame::intact_frame_after(bytes, at + 1, last);
                if let Some(next) = next.filter(|&next| !(newest && hole_between(bytes, at, next)))
                {
                    return Err((at, Damage::Middle { reason, next }));
                }
                return Ok(Scan {
                    frames,
                    valid_len: at,
                    torn: Some(reason),
                    frames_after: next,
                });
            }
        }
    }
    Ok(Scan {
        frames,
        valid_len: at,
        torn: None,
        frames_after: None,
    })
}

/// Whether a hole lies between the bad frame at `from` and the intact frame at `to`: for some
/// multiple `b` of [`SECTOR`] with `from < b <= to`, the bytes `max(b - SECTOR, from)..b` are
/// all zeros.
fn hole_between(bytes: &[u8], from: usize, to: usize) -> bool {
    let first = (from / SECTOR + 1) * SECTOR;
    (first..=to).step_by(SECTOR).any(|b| {
        let start = b.saturating_sub(SECTOR).max(from);
        bytes
            .get(start..b)
            .is_some_and(|run| run.iter().all(|&byte| byte == 0))
    })
}
