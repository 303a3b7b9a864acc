//! One record of the segment log: the byte grammar, encoding and a decoder that never panics.
//!
//! ```text
//! frame   = len: u32 LE | crc: u32 LE | seq: u64 LE | payload (len bytes)
//! crc     = CRC-32 (IEEE, crc32fast) of the 8 seq bytes followed by the payload
//! payload = the exact JSON bytes the bus receives for the event
//! ```
//!
//! The checksum covers the sequence too, so a frame moved to another place or a flipped bit in
//! its sequence is caught like a flipped bit in its payload. `len` is not covered: a damaged
//! length makes the checksum fail (wrong bytes are hashed) or runs past the end (truncated).
//!
//! Pure code: no I/O, and every function takes any bytes and returns a result.

use thiserror::Error;

/// Bytes before the payload: len, crc and seq.
pub const HEADER_LEN: usize = 16;

/// The largest payload a frame may carry (64 MiB). A larger `len` is damage, not an event.
pub const MAX_PAYLOAD: usize = 64 << 20;

/// A frame read back: its sequence and the payload, borrowed from the buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Frame<'a> {
    /// The event's log sequence.
    pub seq: u64,
    /// The event's bytes, exactly as written.
    pub payload: &'a [u8],
}

/// Why the bytes at some offset are not a whole, intact frame.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum FrameError {
    /// Fewer bytes than the frame needs: a write cut short by a crash, or a cut file.
    #[error("truncated frame: {need} bytes needed, {have} present")]
    Truncated {
        /// Bytes the frame needs (its header, or header and payload).
        need: usize,
        /// Bytes left in the buffer.
        have: usize,
    },
    /// The length field exceeds [`MAX_PAYLOAD`].
    #[error("frame length {len} exceeds the maximum of {MAX_PAYLOAD} bytes")]
    TooLong {
        /// The length read.
        len: usize,
    },
    /// The checksum does not match the sequence and payload.
    #[error("checksum mismatch: stored {stored:#010x}, computed {computed:#010x}")]
    Checksum {
        /// The crc in the frame.
        stored: u32,
        /// The crc of the bytes present.
        computed: u32,
    },
}

/// The checksum of a frame with this sequence and payload.
pub fn checksum(seq: u64, payload: &[u8]) -> u32 {
    let mut hasher = crc32fast::Hasher::new();
    hasher.update(&seq.to_le_bytes());
    hasher.update(payload);
    hasher.finalize()
}

/// The encoded size of a frame carrying `payload_len` bytes.
pub fn encoded_len(payload_len: usize) -> usize {
    HEADER_LEN + payload_len
}

/// Appends the frame of (`seq`, `payload`) to `out`. The caller checks the length against
/// [`MAX_PAYLOAD`] first (a longer payload would not decode).
pub fn encode(seq: u64, payload: &[u8], out: &mut Vec<u8>) {
    let len = u32::try_from(payload.len()).unwrap_or(u32::MAX);
    out.reserve(encoded_len(payload.len()));
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(&checksum(seq, payload).to_le_bytes());
    out.extend_from_slice(&seq.to_le_bytes());
    out.extend_from_slice(payload);
}

/// Decodes the frame at the start of `buf`: the frame and the bytes it takes, or why the bytes
/// are not a frame. `buf` must not be empty to hold a frame (an empty buffer is `Truncated`).
pub fn decode(buf: &[u8]) -> Result<(Frame<'_>, usize), FrameError> {
    let Some(header) = buf.get(..HEADER_LEN) else {
        return Err(FrameError::Truncated {
            need: HEADER_LEN,
            have: buf.len(),
        });
    };
    let len = u32_at(header, 0) as usize;
    let stored = u32_at(header, 4);
    let seq = u64_at(header, 8);
    if len > MAX_PAYLOAD {
        return Err(FrameError::TooLong { len });
    }
    let total = encoded_len(len);
    let Some(payload) = buf.get(HEADER_LEN..total) else {
        return Err(FrameError::Truncated {
            need: total,
            have: buf.len(),
        });
    };
    let computed = checksum(seq, payload);
    if computed != stored {
        return Err(FrameError::Checksum { stored, computed });
    }
    Ok((Frame { seq, payload }, total))
}

/// Whether an intact frame with a sequence above `after` starts at any offset of `buf` from
/// `from` on: the test that tells damage in the middle (valid frames follow) from a torn tail
/// (nothing valid follows). Returns the first such offset.
pub fn intact_frame_after(buf: &[u8], from: usize, after: u64) -> Option<usize> {
    // A frame with a sequence above `after` has a byte other than zero in its sequence, so
    // none starts in the zeros at the end (a segment's reserved space).
    let nonzero = buf.iter().rposition(|&b| b != 0)?;
    let end = buf.len().checked_sub(HEADER_LEN)?.min(nonzero);
    (from..=end).find(|&offset| {
        let Some(rest) = buf.get(offset..) else {
            return false;
        };
        // Cheap checks first: most offsets fail on length or sequence before any checksum.
        let len = u32_at(rest, 0) as usize;
        let plausible =
            len <= MAX_PAYLOAD && encoded_len(len) <= rest.len() && u64_at(rest, 8) > after;
        plausible && decode(rest).is_ok()
    })
}

fn u32_at(bytes: &[u8], at: usize) -> u32 {
    let mut word = [0u8; 4];
    if let Some(src) = bytes.get(at..at + 4) {
        word.copy_from_slice(src);
    }
    u32::from_le_bytes(word)
}

fn u64_at(bytes: &[u8], at: usize) -> u64 {
    let mut word = [0u8; 8];
    if let Some(src) = bytes.get(at..at + 8) {
        word.copy_from_slice(src);
    }
    u64::from_le_bytes(word)
}
