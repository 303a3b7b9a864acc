//! The bytes of one run: its entries in ascending order, each front-coded against the one
//! before it. Pure encoding, no I/O.
//!
//! An entry is `varint(shared) varint(len) bytes`: the first `shared` bytes of the previous
//! entry, then `len` bytes of its own. Index entries of one job share the job id and most of a
//! timestamp or sequence, so a run costs a few bytes per entry.

use super::run::Run;

/// Encodes `entries` (ascending, distinct).
pub(crate) fn encode<'a>(entries: impl IntoIterator<Item = &'a [u8]>) -> Vec<u8> {
    let entries = entries.into_iter();
    // About two varints and a dozen bytes of its own per entry: one allocation for most runs.
    let mut out = Vec::with_capacity(entries.size_hint().0 * 16);
    let mut previous: &[u8] = &[];
    for entry in entries {
        let shared = shared_prefix(previous, entry);
        put_varint(&mut out, shared as u64);
        put_varint(&mut out, (entry.len() - shared) as u64);
        out.extend_from_slice(&entry[shared..]);
        previous = entry;
    }
    out
}

/// Decodes a run; `None` if the bytes are not one (truncated, a shared part longer than the
/// entry before, or entries out of order).
pub(crate) fn decode(mut bytes: &[u8]) -> Option<Run> {
    // Front coding makes a run's entries longer than its bytes: twice is a fair first guess.
    let mut run = Run::with_capacity(bytes.len() * 2);
    while !bytes.is_empty() {
        let shared = usize::try_from(take_varint(&mut bytes)?).ok()?;
        let len = usize::try_from(take_varint(&mut bytes)?).ok()?;
        let own = bytes.get(..len)?;
        bytes = &bytes[len..];
        match run.is_empty() {
            true if shared == 0 => run.push(own),
            true => return None,
            false => {
                run.push_shared(shared, own)?;
                let last = run.len() - 1;
                if run.get(last - 1) >= run.get(last) {
                    return None;
                }
            }
        }
    }
    Some(run)
}

/// How many leading bytes `a` and `b` share, compared eight at a time: the entries of one
/// job share its id and most of a timestamp or sequence, 20 to 40 bytes.
fn shared_prefix(a: &[u8], b: &[u8]) -> usize {
    let max = a.len().min(b.len());
    let word = |bytes: &[u8], at: usize| {
        let eight = bytes
            .get(at..at + 8)
            .and_then(|s| <[u8; 8]>::try_from(s).ok());
        eight.map_or(0, u64::from_le_bytes)
    };
    let mut at = 0;
    while at + 8 <= max {
        let differ = word(a, at) ^ word(b, at);
        if differ != 0 {
            // Little-endian: the first differing byte holds the lowest set bit.
            return at + (differ.trailing_zeros() / 8) as usize;
        }
        at += 8;
    }
    let (rest_a, rest_b) = (
        a.get(at..max).unwrap_or_default(),
        b.get(at..max).unwrap_or_default(),
    );
    at + rest_a
        .iter()
        .zip(rest_b)
        .take_while(|(x, y)| x == y)
        .count()
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

    fn entries_of(bytes: &[u8]) -> Option<Vec<Vec<u8>>> {
        decode(bytes).map(|run| run.iter().map(<[u8]>::to_vec).collect())
    }

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
        let bytes = encode(entries.iter().map(Vec::as_slice));
        assert!(bytes.len() < 100 * 12, "{} bytes", bytes.len());
        assert_eq!(entries_of(&bytes), Some(entries));
    }

    #[test]
    fn shared_prefixes_are_counted_to_the_byte() {
        let base: Vec<u8> = (0..40).collect();
        for differ_at in 0..40 {
            let mut other = base.clone();
            other[differ_at] ^= 0x40;
            assert_eq!(shared_prefix(&base, &other), differ_at);
            assert_eq!(shared_prefix(&base[..differ_at], &other), differ_at);
        }
        assert_eq!(shared_prefix(&base, &base), 40);
        assert_eq!(shared_prefix(&base[..17], &base), 17);
        assert_eq!(shared_prefix(&[], &base), 0);
    }

    #[test]
    fn malformed_runs_are_refused() {
        assert_eq!(entries_of(&[]), Some(Vec::new()));
        // Shared bytes without an entry before.
        assert_eq!(entries_of(&[1, 1, b'a']), None);
        // More shared bytes than the entry before has.
        assert_eq!(entries_of(&[0, 1, b'a', 2, 1, b'b']), None);
        // Truncated.
        assert_eq!(entries_of(&[0, 5, b'a']), None);
        // Out of order, and a repeat.
        assert_eq!(entries_of(&[0, 1, b'b', 0, 1, b'a']), None);
        assert_eq!(entries_of(&[0, 1, b'a', 1, 0]), None);
        // A varint that never ends.
        assert_eq!(entries_of(&[0x80; 11]), None);
    }

    proptest::proptest! {
        #[test]
        fn runs_round_trip(set in proptest::collection::btree_set(
            proptest::collection::vec(0u8..4, 0..12), 0..64,
        )) {
            let entries: Vec<Vec<u8>> = set.into_iter().collect();
            let bytes = encode(entries.iter().map(Vec::as_slice));
            proptest::prop_assert_eq!(entries_of(&bytes), Some(entries));
        }
    }
}
