//! The byte format of the sink's journal ([`crate::sink::legacy::journal`]). Pure encoding, no I/O.
//!
//! A segment file starts with [`MAGIC`] and holds one record per group commit:
//!
//! ```text
//! record  = len: u64 LE | crc32(payload): u32 LE | payload (len bytes)
//! payload = count: u32 LE | count × op
//! op      = 0 | key_len: u32 LE | key                          (remove key)
//!         | 1 | key_len: u32 LE | key | value_len: u32 LE | value   (insert key = value)
//! ```
//!
//! A record is the exact set of key changes of one sled batch, so replaying it is idempotent:
//! applying the records of a segment in order gives the same tree whatever part of them sled had
//! already made durable. Decoding stops at the first record that is cut short or fails its
//! checksum ([`Damage`]): after a crash only the last, never-acknowledged record can be torn.

/// The first bytes of every segment: the format and its version.
pub(crate) const MAGIC: &[u8; 8] = b"dlqjrnl1";

const HEADER: usize = 12;
const REMOVE: u8 = 0;
const INSERT: u8 = 1;

#[cfg(test)]
use crate::sink::projection::Write;

/// A decoded change, borrowing from the segment's bytes.
pub(crate) type WriteRef<'a> = (&'a [u8], Option<&'a [u8]>);

/// Why a record could not be encoded.
#[cfg(test)]
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("a journal record cannot hold {what} of {len} bytes")]
pub struct TooLarge {
    /// What was too large.
    pub what: &'static str,
    /// Its length.
    pub len: usize,
}

/// Where and why decoding a segment stopped early.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Damage {
    /// Byte offset of the first record not applied.
    pub offset: usize,
    /// Bytes from there to the end of the segment, discarded.
    pub discarded: usize,
    /// What was wrong.
    pub reason: &'static str,
}

/// Appends one record holding `writes` to `out` (format 2 wrote these; tests write them to
/// build format-2 directories).
#[cfg(test)]
pub fn encode(writes: &[Write], out: &mut Vec<u8>) -> Result<(), TooLarge> {
    let start = out.len();
    out.extend_from_slice(&[0; HEADER]);
    put_u32(out, "a group", writes.len())?;
    for (key, value) in writes {
        match value {
            None => {
                out.push(REMOVE);
                put_bytes(out, "a key", key)?;
            }
            Some(value) => {
                out.push(INSERT);
                put_bytes(out, "a key", key)?;
                put_bytes(out, "a value", value)?;
            }
        }
    }
    let payload = &out[start + HEADER..];
    let len = payload.len() as u64;
    let crc = crc32fast::hash(payload);
    out[start..start + 8].copy_from_slice(&len.to_le_bytes());
    out[start + 8..start + HEADER].copy_from_slice(&crc.to_le_bytes());
    Ok(())
}

#[cfg(test)]
fn put_u32(out: &mut Vec<u8>, what: &'static str, len: usize) -> Result<(), TooLarge> {
    let n = u32::try_from(len).map_err(|_| TooLarge { what, len })?;
    out.extend_from_slice(&n.to_le_bytes());
    Ok(())
}

#[cfg(test)]
fn put_bytes(out: &mut Vec<u8>, what: &'static str, bytes: &[u8]) -> Result<(), TooLarge> {
    put_u32(out, what, bytes.len())?;
    out.extend_from_slice(bytes);
    Ok(())
}

/// The records of one segment's bytes, in order, until the end or the first damaged record.
pub(crate) struct Records<'a> {
    bytes: &'a [u8],
    offset: usize,
    damage: Option<Damage>,
}

impl<'a> Records<'a> {
    /// Reads a whole segment. An empty segment has no records; one without [`MAGIC`] is damaged
    /// at offset 0.
    pub(crate) fn new(bytes: &'a [u8]) -> Self {
        let mut records = Records {
            bytes,
            offset: 0,
            damage: None,
        };
        if !bytes.is_empty() {
            if bytes.starts_with(MAGIC) {
                records.offset = MAGIC.len();
            } else {
                records.stop("the segment does not start with the journal's magic bytes");
            }
        }
        records
    }

    /// Where decoding stopped early, once the iterator returned `None`.
    pub(crate) fn damage(&self) -> Option<&Damage> {
        self.damage.as_ref()
    }

    fn stop(&mut self, reason: &'static str) {
        self.damage = Some(Damage {
            offset: self.offset,
            discarded: self.bytes.len() - self.offset,
            reason,
        });
        self.offset = self.bytes.len();
    }

    fn next_record(&mut self) -> Result<Vec<WriteRef<'a>>, &'static str> {
        let rest = &self.bytes[self.offset..];
        let header = rest.get(..HEADER).ok_or("a record header is cut short")?;
        let (len, crc) = header.split_at(8);
        let len = u64::from_le_bytes(array(len)?);
        let crc = u32::from_le_bytes(array(crc)?);
        let payload = usize::try_from(len)
            .ok()
            .and_then(|len| rest.get(HEADER..HEADER.checked_add(len)?))
            .ok_or("a record is cut short")?;
        if crc32fast::hash(payload) != crc {
            return Err("a record fails its checksum");
        }
        let writes = decode_payload(payload).ok_or("a record's payload is malformed")?;
        self.offset += HEADER + payload.len();
        Ok(writes)
    }
}

impl<'a> Iterator for Records<'a> {
    type Item = Vec<WriteRef<'a>>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.offset >= self.bytes.len() {
            return None;
        }
        match self.next_record() {
            Ok(writes) => Some(writes),
            Err(reason) => {
                self.stop(reason);
                None
            }
        }
    }
}

fn array<const N: usize>(bytes: &[u8]) -> Result<[u8; N], &'static str> {
    bytes.try_into().map_err(|_| "a record header is cut short")
}

fn decode_payload(payload: &[u8]) -> Option<Vec<WriteRef<'_>>> {
    let mut cursor = Cursor(payload);
    let count = cursor.u32()?;
    let mut writes = Vec::with_capacity(count.min(1 << 16) as usize);
    for _ in 0..count {
        let tag = cursor.take(1)?[0];
        let key = cursor.bytes()?;
        let value = match tag {
            REMOVE => None,
            INSERT => Some(cursor.bytes()?),
            _ => return None,
        };
        writes.push((key, value));
    }
    cursor.0.is_empty().then_some(writes)
}

struct Cursor<'a>(&'a [u8]);

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.0.len() < n {
            return None;
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Some(head)
    }

    fn u32(&mut self) -> Option<u32> {
        Some(u32::from_le_bytes(self.take(4)?.try_into().ok()?))
    }

    fn bytes(&mut self) -> Option<&'a [u8]> {
        let len = self.u32()? as usize;
        self.take(len)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn segment(groups: &[Vec<Write>]) -> (Vec<u8>, Vec<usize>) {
        let mut bytes = MAGIC.to_vec();
        let mut ends = Vec::new();
        for group in groups {
            encode(group, &mut bytes).unwrap();
            ends.push(bytes.len());
        }
        (bytes, ends)
    }

    fn owned(records: &mut Records<'_>) -> Vec<Vec<Write>> {
        records
            .map(|writes| {
                writes
                    .into_iter()
                    .map(|(k, v)| (k.to_vec(), v.map(<[u8]>::to_vec)))
                    .collect()
            })
            .collect()
    }

    fn groups() -> impl Strategy<Value = Vec<Vec<Write>>> {
        let write = (
            proptest::collection::vec(any::<u8>(), 0..24),
            proptest::option::of(proptest::collection::vec(any::<u8>(), 0..64)),
        );
        proptest::collection::vec(proptest::collection::vec(write, 0..6), 0..6)
    }

    #[test]
    fn an_empty_segment_has_no_records_and_no_damage() {
        let mut records = Records::new(&[]);
        assert!(records.next().is_none());
        assert!(records.damage().is_none());
    }

    #[test]
    fn a_foreign_file_is_damaged_at_offset_zero() {
        let mut records = Records::new(b"not a journal");
        assert!(records.next().is_none());
        let damage = records.damage().unwrap();
        assert_eq!((damage.offset, damage.discarded), (0, 13));
    }

    #[test]
    fn a_zero_filled_tail_is_damage_not_an_empty_record() {
        let (mut bytes, ends) = segment(&[vec![(b"k".to_vec(), Some(b"v".to_vec()))]]);
        bytes.extend_from_slice(&[0; 64]);
        let mut records = Records::new(&bytes);
        assert_eq!(records.by_ref().count(), 1);
        assert_eq!(records.damage().unwrap().offset, ends[0]);
    }

    proptest! {
        #[test]
        fn records_round_trip(groups in groups()) {
            let (bytes, _) = segment(&groups);
            let mut records = Records::new(&bytes);
            prop_assert_eq!(owned(records.by_ref()), groups);
            prop_assert!(records.damage().is_none());
        }

        /// Cutting a segment anywhere yields exactly the records wholly before the cut.
        #[test]
        fn a_torn_tail_yields_the_whole_records_before_it(groups in groups(), cut in any::<prop::sample::Index>()) {
            let (bytes, ends) = segment(&groups);
            let cut = MAGIC.len() + cut.index(bytes.len() - MAGIC.len() + 1);
            let whole = ends.iter().filter(|&&end| end <= cut).count();
            let mut records = Records::new(&bytes[..cut]);
            let decoded: Vec<_> = records.by_ref().collect();
            prop_assert_eq!(decoded.len(), whole);
            let at_boundary = cut == MAGIC.len() || ends.contains(&cut);
            prop_assert_eq!(records.damage().is_none(), at_boundary);
        }

        /// Flipping any bit of a record stops decoding at that record, never later.
        #[test]
        fn a_flipped_bit_stops_at_its_record(groups in groups(), at in any::<prop::sample::Index>(), bit in 0u8..8) {
            prop_assume!(!groups.is_empty());
            let (mut bytes, ends) = segment(&groups);
            let at = MAGIC.len() + at.index(bytes.len() - MAGIC.len());
            bytes[at] ^= 1 << bit;
            let hit = ends.iter().position(|&end| at < end).unwrap();
            let mut records = Records::new(&bytes);
            let decoded = records.by_ref().count();
            prop_assert_eq!(decoded, hit);
            prop_assert!(records.damage().is_some());
        }
    }
}
