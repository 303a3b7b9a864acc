//! The segment log's frame and segment decoders (issues 16 and 33): any bytes, any truncation
//! and any bit flip give a result, never a panic; encode and decode round-trip; a bit flip is
//! never read as an intact event; a crash's hole followed by frames ends only the newest
//! segment, and is damage in any other.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use dlq::sink::test_support::log::frame::{self, FrameError, HEADER_LEN};
use dlq::sink::test_support::log::segment::{self, Damage, MAGIC};
use proptest::prelude::*;

fn encoded(events: &[(u64, Vec<u8>)]) -> Vec<u8> {
    let mut buf = Vec::new();
    for (seq, payload) in events {
        frame::encode(*seq, payload, &mut buf);
    }
    buf
}

fn segment_bytes(first: u64, payloads: &[Vec<u8>]) -> Vec<u8> {
    let mut bytes = MAGIC.to_vec();
    for (seq, payload) in (first..).zip(payloads) {
        frame::encode(seq, payload, &mut bytes);
    }
    bytes
}

proptest! {
    #[test]
    fn encode_then_decode_round_trips(
        events in proptest::collection::vec((any::<u64>(), proptest::collection::vec(any::<u8>(), 0..300)), 0..8)
    ) {
        let buf = encoded(&events);
        let mut at = 0;
        for (seq, payload) in &events {
            let (frame, len) = frame::decode(&buf[at..]).unwrap();
            prop_assert_eq!(frame.seq, *seq);
            prop_assert_eq!(frame.payload, payload.as_slice());
            at += len;
        }
        prop_assert_eq!(at, buf.len());
    }

    #[test]
    fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..600), first in any::<u64>()) {
        let _ = frame::decode(&bytes);
        let _ = frame::intact_frame_after(&bytes, 0, 0);
        let mut with_magic = MAGIC.to_vec();
        with_magic.extend_from_slice(&bytes);
        let _ = segment::scan(&with_magic, first);
        let _ = segment::scan(&bytes, first);
        let _ = segment::scan_newest(&with_magic, first);
        let _ = segment::scan_newest(&bytes, first);
    }

    #[test]
    fn a_truncated_segment_is_a_torn_tail_keeping_every_whole_frame(
        payloads in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..120), 1..6),
        cut in any::<proptest::sample::Index>(),
    ) {
        let bytes = segment_bytes(5, &payloads);
        let cut = MAGIC.len() + cut.index(bytes.len() - MAGIC.len());
        let scan = segment::scan(&bytes[..cut], 5).unwrap();
        // Every frame wholly before the cut is kept, none after.
        let mut end = MAGIC.len();
        let mut whole = 0;
        for p in &payloads {
            end += HEADER_LEN + p.len();
            if end <= cut { whole += 1; }
        }
        prop_assert_eq!(scan.frames.len(), whole);
        // What follows the whole frames is a torn tail unless it is nothing but zeros: a cut
        // inside an empty payload's length field leaves zeros, which read as reserved space.
        let after = &bytes[scan.valid_len..cut];
        prop_assert_eq!(scan.torn.is_some(), after.iter().any(|&b| b != 0));
    }

    #[test]
    fn a_bit_flip_is_never_read_as_an_intact_event(
        payloads in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 1..120), 1..6),
        at in any::<proptest::sample::Index>(),
        bit in 0u8..8,
    ) {
        let bytes = segment_bytes(9, &payloads);
        let mut flipped = bytes.clone();
        let at = at.index(bytes.len());
        flipped[at] ^= 1 << bit;
        for scanned in [segment::scan(&flipped, 9), segment::scan_newest(&flipped, 9)] {
            match scanned {
                // Either refused as damage, or read up to the flip: every frame it keeps is
                // one that was written, with its bytes.
                Err(_) => {}
                Ok(scan) => {
                    prop_assert!(scan.valid_len <= at);
                    for (i, (seq, range)) in scan.frames.iter().enumerate() {
                        prop_assert_eq!(*seq, 9 + i as u64);
                        prop_assert_eq!(&flipped[range.clone()], payloads[i].as_slice());
                    }
                }
            }
        }
    }
}

#[test]
fn a_cut_leaving_only_the_zero_length_of_an_empty_payload_is_reserved_space() {
    // Found by the property above (CI, 2026-11-27): one empty payload, cut one byte into its
    // header. The byte left is the low byte of the length 0.
    let bytes = segment_bytes(5, &[Vec::new()]);
    let cut = MAGIC.len() + 1;
    assert_eq!(bytes[MAGIC.len()], 0);
    let scan = segment::scan(&bytes[..cut], 5).unwrap();
    assert!(scan.frames.is_empty());
    assert_eq!(scan.valid_len, MAGIC.len());
    assert!(scan.torn.is_none(), "{:?}", scan.torn);
    // With one more non-zero byte it is a torn tail.
    let mut torn = bytes[..cut].to_vec();
    torn.push(7);
    assert!(segment::scan(&torn, 5).unwrap().torn.is_some());
}

#[test]
fn damage_followed_by_intact_frames_is_refused_with_its_offset() {
    let payloads: Vec<Vec<u8>> = (0..4)
        .map(|i| format!("{{\"n\":{i}}}").into_bytes())
        .collect();
    let mut bytes = segment_bytes(1, &payloads);
    let second = MAGIC.len() + HEADER_LEN + payloads[0].len();
    bytes[second + HEADER_LEN] ^= 0x40; // the second event's payload
    let (offset, damage) = segment::scan(&bytes, 1).unwrap_err();
    assert_eq!(offset, second);
    assert!(
        matches!(
            damage,
            Damage::Middle {
                reason: FrameError::Checksum { .. },
                ..
            }
        ),
        "{damage:?}"
    );
}

#[test]
fn damage_in_the_last_frame_is_a_torn_tail() {
    let payloads: Vec<Vec<u8>> = (0..3)
        .map(|i| format!("{{\"n\":{i}}}").into_bytes())
        .collect();
    let mut bytes = segment_bytes(1, &payloads);
    let last = bytes.len() - 1;
    bytes[last] ^= 1;
    let scan = segment::scan(&bytes, 1).unwrap();
    assert_eq!(scan.last_seq(), Some(2));
    assert!(matches!(scan.torn, Some(FrameError::Checksum { .. })));
}

/// A segment whose space was reserved ahead of its appends ends in zeros: they end the
/// segment and are no torn tail; bytes torn off a frame before them still are one, and an
/// intact frame after zeros that end on no sector boundary (no crash's hole) is still damage
/// in the middle, in the newest segment too.
#[test]
fn zeros_after_the_frames_are_reserved_space_not_a_torn_tail() {
    let payloads: Vec<Vec<u8>> = (0..3)
        .map(|i| format!("{{\"n\":{i}}}").into_bytes())
        .collect();
    let frames = segment_bytes(1, &payloads);
    for zeros in [1, HEADER_LEN - 1, HEADER_LEN, 4096] {
        let mut bytes = frames.clone();
        bytes.resize(frames.len() + zeros, 0);
        let scan = segment::scan(&bytes, 1).unwrap();
        assert_eq!(scan.last_seq(), Some(3), "{zeros} zeros");
        assert_eq!(scan.valid_len, frames.len());
        assert_eq!(scan.torn, None, "{zeros} zeros read as a torn tail");
    }

    let mut torn = frames.clone();
    frame::encode(4, b"{\"n\":3}", &mut torn);
    torn.truncate(frames.len() + HEADER_LEN + 2);
    torn.resize(torn.len() + 4096, 0);
    let scan = segment::scan(&torn, 1).unwrap();
    assert_eq!(scan.last_seq(), Some(3));
    assert!(scan.torn.is_some(), "a torn frame before the zeros is torn");

    let mut gap = frames.clone();
    gap.resize(frames.len() + 64, 0);
    frame::encode(4, b"{\"n\":3}", &mut gap);
    assert!(frames.len() + 64 < segment::SECTOR);
    for scanned in [segment::scan(&gap, 1), segment::scan_newest(&gap, 1)] {
        let (offset, damage) = scanned.unwrap_err();
        assert_eq!(offset, frames.len());
        assert!(matches!(damage, Damage::Middle { .. }), "{damage:?}");
    }
}

/// A group appended across a page boundary, whose first page did not persist while its
/// second did: zeros from the last durable frame to the page boundary, then the group's last
/// frames. In the newest segment that is the torn tail of the group a crash interrupted (no
/// acknowledged frame follows a hole: its fdatasync would have filled it), reported with where
/// the frames after it start, so opening cuts them off; in an older segment, which holds no
/// unsynced byte, it is damage with its offset.
#[test]
fn a_hole_then_frames_is_a_torn_tail_of_the_newest_segment_only() {
    let payloads: Vec<Vec<u8>> = (0..2)
        .map(|i| format!("{{\"n\":{i}}}").into_bytes())
        .collect();
    let durable = segment_bytes(1, &payloads);
    let mut group = Vec::new();
    frame::encode(3, &vec![b'x'; 5000], &mut group);
    frame::encode(4, b"{\"n\":4}", &mut group);
    let mut bytes = durable.clone();
    bytes.extend_from_slice(&group);
    let page = 4096;
    bytes[durable.len()..page].fill(0);
    let fourth = durable.len() + frame::encoded_len(5000);
    assert!(fourth > page);

    let scan = segment::scan_newest(&bytes, 1).unwrap();
    assert_eq!(scan.last_seq(), Some(2));
    assert_eq!(scan.valid_len, durable.len());
    assert!(scan.torn.is_some());
    assert_eq!(scan.frames_after, Some(fourth));

    let (offset, damage) = segment::scan(&bytes, 1).unwrap_err();
    assert_eq!(offset, durable.len());
    assert!(
        matches!(damage, Damage::Middle { next, .. } if next == fourth),
        "{damage:?}"
    );

    // Without the hole (the third frame's bytes flipped, not zeroed) it is damage in both.
    let mut flipped = durable.clone();
    flipped.extend_from_slice(&group);
    flipped[durable.len() + frame::HEADER_LEN + 10] ^= 0x40;
    for scanned in [
        segment::scan(&flipped, 1),
        segment::scan_newest(&flipped, 1),
    ] {
        let (offset, damage) = scanned.unwrap_err();
        assert_eq!(offset, durable.len());
        assert!(matches!(damage, Damage::Middle { .. }), "{damage:?}");
    }
}

#[test]
fn a_frame_with_another_sequence_is_refused() {
    let mut bytes = MAGIC.to_vec();
    frame::encode(1, b"{}", &mut bytes);
    frame::encode(3, b"{}", &mut bytes);
    let (_, damage) = segment::scan(&bytes, 1).unwrap_err();
    assert_eq!(
        damage,
        Damage::Sequence {
            expected: 2,
            found: 3
        }
    );
    assert_eq!(
        segment::scan(b"NOTASEG\nxx", 1).unwrap_err().1,
        Damage::Header
    );
}

#[test]
fn names_round_trip_and_other_files_are_ignored() {
    assert_eq!(
        segment::classify(&segment::name(42)),
        segment::Kind::Segment(42)
    );
    assert_eq!(
        segment::classify(&segment::tmp_name(42)),
        segment::Kind::Unfinished(42)
    );
    assert_eq!(
        segment::classify("00000000000000000042.wal"),
        segment::Kind::Other
    );
    assert_eq!(segment::classify("42.seg"), segment::Kind::Other);
    assert_eq!(segment::name(7), "00000000000000000007.seg");
}
