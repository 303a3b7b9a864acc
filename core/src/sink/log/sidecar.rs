//! A sealed segment's frame offsets in a file beside it, so that reading one event of an old
//! segment takes one read instead of a scan of the whole segment; and the active segment's,
//! written at a clean close, so that the next open does not scan it either.
//!
//! ```text
//! {first_seq:020}.idx = MAGIC | first_seq u64 | end u64 | count u32 | start u32 * count | crc u32
//! ```
//! (little endian; the CRC-32 covers every byte before it). The file is only a cache: written
//! whole ([`LogFs::store`]: a temporary name, `fdatasync`, rename, no directory fsync) when the
//! writer seals a segment or a reader has scanned one, checked before use (CRC, first
//! sequence, the segment's current length, ascending offsets) and ignored when anything is off;
//! every frame read through it is checked again (CRC and sequence). The log's durability never
//! depends on it. It goes through the log's file trait, so the simulated directory records it
//! and every crash state of it is checked with the log.

use tracing::debug;

use super::index::SegmentIndex;
use super::io::LogFs;
use super::segment;

const MAGIC: &[u8; 8] = b"DLQIDX1\n";
const EXTENSION: &str = ".idx";

/// The sidecar file name of the segment starting at `first_seq`.
pub(super) fn name(first_seq: u64) -> String {
    format!("{first_seq:020}{EXTENSION}")
}

/// The sidecar bytes of a segment's index.
pub(super) fn encode(index: &SegmentIndex) -> Vec<u8> {
    let (starts, end) = index.parts();
    let mut out = Vec::with_capacity(MAGIC.len() + 24 + starts.len() * 4);
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&index.first_seq.to_le_bytes());
    out.extend_from_slice(&end.to_le_bytes());
    out.extend_from_slice(
        &u32::try_from(starts.len())
            .unwrap_or(u32::MAX)
            .to_le_bytes(),
    );
    for start in starts {
        out.extend_from_slice(&start.to_le_bytes());
    }
    let crc = crc32fast::hash(&out);
    out.extend_from_slice(&crc.to_le_bytes());
    out
}

/// The index a sidecar holds, if it is intact and fits the segment starting at `first_seq`
/// whose file is `segment_len` bytes long.
pub(super) fn decode(bytes: &[u8], first_seq: u64, segment_len: u64) -> Option<SegmentIndex> {
    let (body, crc) = bytes.split_at_checked(bytes.len().checked_sub(4)?)?;
    if crc32fast::hash(body).to_le_bytes() != *crc {
        return None;
    }
    let rest = body.strip_prefix(MAGIC.as_slice())?;
    let u64_at = |at: usize| Some(u64::from_le_bytes(rest.get(at..at + 8)?.try_into().ok()?));
    let (seq, end) = (u64_at(0)?, u64_at(8)?);
    let count = u32::from_le_bytes(rest.get(16..20)?.try_into().ok()?);
    let starts: Vec<u32> = rest
        .get(20..)?
        .chunks_exact(4)
        .map(|chunk| u32::from_le_bytes([chunk[0], chunk[1], chunk[2], chunk[3]]))
        .collect();
    let header = segment::MAGIC.len() as u64;
    let fits = seq == first_seq
        && end == segment_len
        && rest.len() == 20 + starts.len() * 4
        && usize::try_from(count).ok() == Some(starts.len())
        && starts
            .first()
            .is_none_or(|&first| u64::from(first) == header)
        && starts.windows(2).all(|pair| pair[0] < pair[1])
        && starts.last().is_none_or(|&last| u64::from(last) < end);
    fits.then(|| SegmentIndex::from_parts(first_seq, starts, end))
}

/// The index of the segment starting at `first_seq` from its sidecar, if one fits.
pub(super) fn load<F: LogFs>(fs: &F, first_seq: u64) -> Option<SegmentIndex> {
    let segment_len = fs.len(&segment::name(first_seq)).ok()?;
    let bytes = fs.read(&name(first_seq)).ok()?;
    decode(&bytes, first_seq, segment_len)
}

/// Writes the sidecar of a sealed segment's `index` ([`LogFs::store`]); a failure only costs
/// the next reader a scan.
pub(super) fn store<F: LogFs>(fs: &F, index: &SegmentIndex) {
    let file = name(index.first_seq);
    if let Err(err) = fs.store(&file, &encode(index)) {
        debug!(file = %file, error = %err, "cannot write a segment's sidecar index; readers scan the segment instead");
    }
}

/// Deletes the sidecar of the segment starting at `first_seq`, if there is one.
pub(super) fn remove<F: LogFs>(fs: &F, first_seq: u64) {
    let _ = fs.remove(&name(first_seq));
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn sample() -> SegmentIndex {
        let mut index = SegmentIndex::new(40, segment::MAGIC.len() as u64);
        index.push([100, 250, 3]);
        index
    }

    #[test]
    fn a_sidecar_round_trips_and_finds_each_frame() {
        let index = sample();
        let back = decode(&encode(&index), 40, 8 + 353).unwrap();
        assert_eq!(back, index);
        assert_eq!(back.frame(41), Some((108, 358)));
    }

    #[test]
    fn a_sidecar_that_does_not_fit_is_ignored() {
        let bytes = encode(&sample());
        assert!(decode(&bytes, 41, 361).is_none(), "another segment");
        assert!(
            decode(&bytes, 40, 362).is_none(),
            "the segment grew or was cut"
        );
        for at in 0..bytes.len() {
            let mut flipped = bytes.clone();
            flipped[at] ^= 0x10;
            assert!(decode(&flipped, 40, 361).is_none(), "byte {at} flipped");
        }
        for len in 0..bytes.len() {
            assert!(decode(&bytes[..len], 40, 361).is_none(), "cut to {len}");
        }
    }
}
