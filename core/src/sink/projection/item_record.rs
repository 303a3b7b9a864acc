//! What sled keeps of one item: the log sequences of the events that made it, not the item.
//!
//! The log already holds every event with the whole item in it; keeping the item in sled too
//! put it on disk twice, and made every sled batch copy kilobytes per item. Now an item's value
//! is a **pointer record**: the sequences of its events, oldest first. Reading the item reads
//! those events from the log and folds them ([`crate::domain::projection::apply`]). Before the
//! log's retention deletes a segment, the live items created in it are rewritten whole
//! (`crate::sink::projection::inline_items`).
//!
//! ```text
//! record = 0x01 | varint(first seq) | varint(seq - previous seq)*
//! ```
//!
//! A value that starts with `{` is an item kept whole as JSON: projection format 2 stored every
//! item that way, and so does `crate::sink::projection::inline_items` for items older than the log; such items
//! stay whole (their first events may be gone from the log).
//! Pure code: no I/O.

use thiserror::Error;

/// The first byte of a pointer record.
const POINTER: u8 = 0x01;
/// The first byte of a whole item (a JSON object).
const INLINE: u8 = b'{';

/// An item's value in sled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ItemRecord {
    /// The item is the fold of these logged events, ascending.
    Events(Vec<u64>),
    /// The item itself, as JSON (from projection format 2, or older than the log).
    Inline(Vec<u8>),
}

/// Why a value is not an item record.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub(crate) enum RecordError {
    /// No bytes at all.
    #[error("empty item record")]
    Empty,
    /// The first byte names no known record kind.
    #[error("unknown item record kind {0:#04x}")]
    UnknownKind(u8),
    /// A varint runs past the end or past 64 bits.
    #[error("malformed sequence in item record")]
    Malformed,
    /// The sequences do not ascend, or there are none.
    #[error("item record sequences are empty or not ascending")]
    NotAscending,
}

impl ItemRecord {
    /// The record's bytes.
    pub(crate) fn encode(&self) -> Vec<u8> {
        match self {
            ItemRecord::Inline(json) => json.clone(),
            ItemRecord::Events(seqs) => {
                let mut out = Vec::with_capacity(1 + seqs.len() * 4);
                out.push(POINTER);
                let mut previous = 0;
                for &seq in seqs {
                    put_varint(&mut out, seq.wrapping_sub(previous));
                    previous = seq;
                }
                out
            }
        }
    }

    /// Reads a record back; any bytes give a result, never a panic.
    pub(crate) fn decode(bytes: &[u8]) -> Result<Self, RecordError> {
        match bytes.first() {
            None => Err(RecordError::Empty),
            Some(&INLINE) => Ok(ItemRecord::Inline(bytes.to_vec())),
            Some(&POINTER) => {
                let mut seqs = Vec::new();
                let mut rest = &bytes[1..];
                let mut previous = 0u64;
                while !rest.is_empty() {
                    let (delta, used) = get_varint(rest).ok_or(RecordError::Malformed)?;
                    rest = &rest[used..];
                    let seq = previous
                        .checked_add(delta)
                        .ok_or(RecordError::NotAscending)?;
                    if delta == 0 && !seqs.is_empty() {
                        return Err(RecordError::NotAscending);
                    }
                    seqs.push(seq);
                    previous = seq;
                }
                if seqs.is_empty() || seqs.first() == Some(&0) {
                    return Err(RecordError::NotAscending);
                }
                Ok(ItemRecord::Events(seqs))
            }
            Some(&other) => Err(RecordError::UnknownKind(other)),
        }
    }
}

fn put_varint(out: &mut Vec<u8>, mut value: u64) {
    while value >= 0x80 {
        out.push((value as u8) | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

/// The varint at the start of `bytes` and how many bytes it took.
fn get_varint(bytes: &[u8]) -> Option<(u64, usize)> {
    let mut value = 0u64;
    for (i, &byte) in bytes.iter().enumerate().take(10) {
        let bits = u64::from(byte & 0x7f);
        let shifted = bits.checked_shl(7 * i as u32)?;
        if i == 9 && bits > 1 {
            return None;
        }
        value |= shifted;
        if byte & 0x80 == 0 {
            return Some((value, i + 1));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pointer_record_is_small() {
        let record = ItemRecord::Events(vec![1_000_000, 1_000_007]);
        let bytes = record.encode();
        assert_eq!(bytes.len(), 1 + 3 + 1);
        assert_eq!(ItemRecord::decode(&bytes), Ok(record));
    }

    #[test]
    fn a_json_value_is_an_inline_item() {
        let json = br#"{"item":{}}"#.to_vec();
        assert_eq!(
            ItemRecord::decode(&json),
            Ok(ItemRecord::Inline(json.clone()))
        );
        assert_eq!(ItemRecord::Inline(json.clone()).encode(), json);
    }

    #[test]
    fn damaged_records_are_refused() {
        assert_eq!(ItemRecord::decode(b""), Err(RecordError::Empty));
        assert_eq!(
            ItemRecord::decode(b"\x07"),
            Err(RecordError::UnknownKind(7))
        );
        assert_eq!(ItemRecord::decode(b"\x01"), Err(RecordError::NotAscending));
        assert_eq!(ItemRecord::decode(b"\x01\x80"), Err(RecordError::Malformed));
        assert_eq!(
            ItemRecord::decode(b"\x01\x05\x00"),
            Err(RecordError::NotAscending)
        );
        assert_eq!(
            ItemRecord::decode(b"\x01\xff\xff\xff\xff\xff\xff\xff\xff\xff\x7f"),
            Err(RecordError::Malformed)
        );
    }

    proptest::proptest! {
        /// Every ascending list of sequences comes back as it went in.
        #[test]
        fn records_round_trip(start in 1u64..u64::MAX / 2, gaps in proptest::collection::vec(1u64..1 << 40, 0..20)) {
            let mut seqs = vec![start];
            for gap in gaps {
                let next = seqs[seqs.len() - 1].saturating_add(gap);
                if next == seqs[seqs.len() - 1] { break; }
                seqs.push(next);
            }
            let record = ItemRecord::Events(seqs);
            proptest::prop_assert_eq!(ItemRecord::decode(&record.encode()), Ok(record));
        }

        /// Any bytes decode to a result without panicking.
        #[test]
        fn any_bytes_decode(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..40)) {
            let _ = ItemRecord::decode(&bytes);
        }
    }
}
