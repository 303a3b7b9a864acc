//! The bytes of one run: its entries in ascending order, each front-coded against the one
//! before it. Pure encoding, no I/O.
//!
//! An entry is `varint(shared) varint(len) bytes`: the first `shared` bytes of the previous
//! entry, then `len` bytes of its own. Index entries of one job share the job id and most of a
//! timestamp or sequence, so a run costs a few bytes per entry.

/// Encodes `entries` (ascending, distinct).
pub(crate) fn encode(entries: &[Vec<u8>]) -> Vec<u8> {
    let mut out = Vec::with_capacity(entries.len() * 12);
    let mut previous: &[u8] = &[];
    for entry in entries {
        let shared = previous
            .iter()
            .zip(entry)
            .take_while(|(a, b)| a == b)
            .count();
        put_varint(&mut out, shared as u64);
        put_varint(&mut out, (entry.len() - shared) as u64);
        out.extend_from_slice(&entry[shared..]);
        previous = entry;
    }
    out
}

/// Decodes a run; `None` if the bytes are not one (truncated, a shared part longer than the
/// entry before, or entries out of order).
pub(crate) fn decode(mut bytes: &[u8]) -> Option<Vec<Vec<u8>>> {
    let mut entries: Vec<Vec<u8>> = Vec::new();
    while !bytes.is_empty() {
        let shared = usize::try_from(take_varint(&mut bytes)?).ok()?;
        let len = usize::try_from(take_varint(&mut bytes)?).ok()?;
        let own = bytes.get(..len)?;
        bytes = &bytes[len..];
        let mut entry = match entries.last() {
            Some(previous) => previous.get(..shared)?.to_vec(),
            None if shared == 0 => Vec::new(),
            None => return None,
        };
        entry.extend_from_slice(own);
        if entries.last().is_some_and(|previous| *previous >= entry) {
            return None;
        }
        entries.push(entry);
    }
    Some(entries)
}

fn put_varint(out: &mut Vec<u8>, mut value: u64) {
    while value >= 0x80 {
        out.push((value as u8) | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

fn take_varint(bytes: &mut &[u8]) -> Option<u64> {
    let mut value = 0u64;
    for shift in (0..64).step_by(7) {
        let (&byte, rest) = bytes.split_first()?;
        *bytes = rest;
        value |= u64::from(byte & 0x7f).checked_shl(shift)?;
        if byte & 0x80 == 0 {
            return Some(value);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shared_prefixes_cost_two_bytes() {
        let entries: Vec<Vec<u8>> = (0u64..100)
            .map(|n| {
                [
                    b"job-7\0".as_slice(),
                    &(1_700_000_000_000 + n).to_be_bytes(),
                    b"item-1",
                ]
                .concat()
            })
            .collect();
        let bytes = encode(&entries);
        assert!(bytes.len() < 100 * 12, "{} bytes", bytes.len());
        assert_eq!(decode(&bytes), Some(entries));
    }

    #[test]
    fn malformed_runs_are_refused() {
        assert_eq!(decode(&[]), Some(Vec::new()));
        // Shared bytes without an entry before.
        assert_eq!(decode(&[1, 1, b'a']), None);
        // Truncated.
        assert_eq!(decode(&[0, 5, b'a']), None);
        // Out of order.
        assert_eq!(decode(&[0, 1, b'b', 0, 1, b'a']), None);
        // A varint that never ends.
        assert_eq!(decode(&[0x80; 11]), None);
    }

    proptest::proptest! {
        #[test]
        fn runs_round_trip(set in proptest::collection::btree_set(
            proptest::collection::vec(0u8..4, 0..12), 0..64,
        )) {
            let entries: Vec<Vec<u8>> = set.into_iter().collect();
            proptest::prop_assert_eq!(decode(&encode(&entries)), Some(entries));
        }
    }
}
