//! Segment files: their names, their header and the scan that validates one (pure code).
//!
//! A segment is `{first_seq:020}.seg`: the [`MAGIC`] header, then frames ([`super::frame`])
//! with consecutive sequences starting at `first_seq`. A segment is created as
//! `{first_seq:020}.seg.tmp`, its header written and synced, then renamed to its final name, so
//! a final name always holds a whole header. The name reserves `first_seq`: opening never hands
//! out a sequence below any segment's first one.

use super::frame::{self, FrameError};

/// The first bytes of every segment: format and version.
pub const MAGIC: &[u8; 8] = b"DLQSEG1\n";

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
}

impl Scan {
    /// The sequence of the last intact frame.
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

/// Validates the bytes of the segment that starts at `first_seq`. Frames must carry
/// `first_seq`, `first_seq + 1`, ... . The first bytes that are not an intact frame end the
/// segment: nothing but zeros is the space reserved ahead of the appends
/// (`super::io::RealFile`), not an error; a **torn tail** (returned in [`Scan::torn`]) when
/// other bytes and no intact frame follow, which is what a crash during an append leaves; and
/// [`Damage::Middle`] with the offset when an intact frame follows.
pub fn scan(bytes: &[u8], first_seq: u64) -> Result<Scan, (usize, Damage)> {
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
                if let Some(next) = frame::intact_frame_after(bytes, at + 1, last) {
                    return Err((at, Damage::Middle { reason, next }));
                }
                return Ok(Scan {
                    frames,
                    valid_len: at,
                    torn: Some(reason),
                });
            }
        }
    }
    Ok(Scan {
        frames,
        valid_len: at,
        torn: None,
    })
}
