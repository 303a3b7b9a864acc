//! The segment log on the real file system (issue 16): groups come back after reopening with
//! identical bytes, a torn tail is dropped, damage in the middle is refused with the file and
//! offset, and old segments are deleted.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use dlq::sink::test_support::log::io::{LogFs as _, RealFs, SegmentFile as _, PREALLOCATE_BYTES};
use dlq::sink::test_support::log::{segment, LogConfig, LogError, LogWriter};

fn config() -> LogConfig {
    LogConfig {
        segment_bytes: 1024,
        ..LogConfig::default()
    }
}

fn open(dir: &std::path::Path) -> Result<LogWriter<RealFs>, LogError> {
    LogWriter::open(RealFs::open(dir).unwrap(), config()).map(|(writer, _)| writer)
}

fn events(n: usize) -> Vec<Vec<u8>> {
    (0..n)
        .map(|i| {
            format!(
                "{{\"event_id\":\"e-{i}\",\"item\":\"{}\"}}",
                "z".repeat(i % 70)
            )
            .into_bytes()
        })
        .collect()
}

fn read_all(writer: &LogWriter<RealFs>) -> Vec<(u64, Vec<u8>)> {
    writer
        .records(0)
        .map(|r| r.map(|r| (r.seq, r.payload)).unwrap())
        .collect()
}

#[test]
fn groups_survive_reopening_with_identical_bytes_and_new_sequences_go_on() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("log");
    let all = events(60);
    let mut writer = open(&dir).unwrap();
    let mut seqs = Vec::new();
    for group in all.chunks(6) {
        seqs.extend(writer.append(group).unwrap());
    }
    assert!(writer.segments().len() > 2, "the workload must rotate");
    let before = read_all(&writer);
    drop(writer);
    let mut writer = open(&dir).unwrap();
    let after = read_all(&writer);
    assert_eq!(after, before);
    assert_eq!(
        after.iter().map(|(_, p)| p.clone()).collect::<Vec<_>>(),
        all
    );
    assert_eq!(after.iter().map(|(s, _)| *s).collect::<Vec<_>>(), seqs);
    let next = writer.append(&events(1)).unwrap();
    assert!(next.start > *seqs.last().unwrap());
}

#[test]
fn a_torn_tail_is_dropped_and_damage_in_the_middle_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("log");
    let mut writer = open(&dir).unwrap();
    for group in events(5).chunks(1) {
        writer.append(group).unwrap();
    }
    let file = dir.join(segment::name(writer.segments()[0]));
    drop(writer);
    // The frames, without the zeros reserved past them (events end in `}`).
    let mut good = std::fs::read(&file).unwrap();
    good.truncate(good.iter().rposition(|&b| b != 0).unwrap() + 1);

    // A crash during the last append: its frame is cut short.
    std::fs::write(&file, &good[..good.len() - 3]).unwrap();
    let (writer, recovery) = LogWriter::open(RealFs::open(&dir).unwrap(), config()).unwrap();
    assert_eq!(read_all(&writer).len(), 4);
    assert_eq!(recovery.torn.len(), 1);
    drop(writer);

    // A flipped bit in the second event, with intact events after it: not a crash state.
    let mut damaged = good.clone();
    let second = segment::MAGIC.len() + 16 + events(1)[0].len();
    damaged[second + 20] ^= 0x01;
    std::fs::write(&file, &damaged).unwrap();
    let err = open(&dir).unwrap_err();
    let text = err.to_string();
    assert!(
        matches!(err, LogError::Damaged { offset, .. } if offset == second),
        "{err:?}"
    );
    assert!(
        text.contains(&segment::name(1)) && text.contains("restore"),
        "{text}"
    );
}

#[test]
fn remove_through_deletes_whole_old_segments_only() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("log");
    let mut writer = open(&dir).unwrap();
    for group in events(80).chunks(4) {
        writer.append(group).unwrap();
    }
    let segments = writer.segments().to_vec();
    let through = segments[2] + 1; // inside the third segment
    assert_eq!(writer.remove_through(through).unwrap(), 2);
    assert_eq!(writer.segments(), &segments[2..]);
    let names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|entry| entry.unwrap().file_name().into_string().unwrap())
        .collect();
    let segment_files = names.iter().filter(|n| n.ends_with(".seg")).count();
    assert_eq!(segment_files, segments.len() - 2);
    // A sealed segment's sidecar index goes with it; the active one has none yet.
    let mut sidecars: Vec<&String> = names.iter().filter(|n| n.ends_with(".idx")).collect();
    sidecars.sort();
    let expected: Vec<String> = segments[2..segments.len() - 1]
        .iter()
        .map(|&first| format!("{first:020}.idx"))
        .collect();
    assert_eq!(sidecars, expected.iter().collect::<Vec<_>>(), "{names:?}");
    assert_eq!(writer.records(0).next().unwrap().unwrap().seq, segments[2]);
    drop(writer);
    let writer = open(&dir).unwrap();
    assert_eq!(writer.records(0).next().unwrap().unwrap().seq, segments[2]);
}

/// Opening with everything up to some sequence known done reads only the newest segments; old
/// ones are scanned when read, and damage in them is found then, with the file and offset.
#[test]
fn old_segments_are_scanned_only_when_read() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("log");
    let all = events(60);
    let mut writer = open(&dir).unwrap();
    for group in all.chunks(6) {
        writer.append(group).unwrap();
    }
    let segments = writer.segments();
    drop(writer);
    assert!(segments.len() > 3, "{segments:?}");
    let done = segments[2] - 1; // the first two segments hold nothing left to do

    let fs = RealFs::open(&dir).unwrap();
    let (writer, recovery) = LogWriter::open_lazy(fs, config(), done).unwrap();
    let index = writer.reader().index().clone();
    let scanned: Vec<bool> = index.segments().iter().map(|s| s.is_scanned()).collect();
    assert_eq!(&scanned[..2], [false, false], "{scanned:?}");
    assert!(scanned[2..].iter().all(|s| *s), "{scanned:?}");
    assert_eq!(recovery.last_seq, 60);
    assert_eq!(writer.reader().read(1).unwrap().unwrap(), all[0]);
    let read: Vec<Vec<u8>> = read_all(&writer).into_iter().map(|(_, p)| p).collect();
    assert_eq!(read, all, "every event, old segments included");
    drop(writer);

    // Damage in an old segment does not stop the open; reading it says where it is.
    let first = dir.join(segment::name(segments[0]));
    let mut bytes = std::fs::read(&first).unwrap();
    bytes[segment::MAGIC.len() + 20] ^= 0xff;
    std::fs::write(&first, bytes).unwrap();
    let fs = RealFs::open(&dir).unwrap();
    let (writer, _) = LogWriter::open_lazy(fs, config(), done).unwrap();
    let err = writer.reader().read(1).unwrap_err();
    assert!(matches!(err, LogError::Damaged { .. }), "{err}");
    assert!(
        err.to_string().contains(&segment::name(segments[0])),
        "{err}"
    );
    assert_eq!(writer.reader().read(60).unwrap().unwrap(), all[59]);
}

/// Reading many events at once: runs of neighbours in one read, a missing sequence is `None`,
/// and a damaged event is reported under its own sequence while its neighbours still read.
#[test]
fn many_events_read_at_once_and_damage_names_its_event() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("log");
    let all = events(30);
    let mut writer = open(&dir).unwrap();
    for group in all.chunks(5) {
        writer.append(group).unwrap();
    }
    let segments = writer.segments();
    let reader = writer.reader();
    let wanted = [1, 2, 3, 7, 8, 30, 31];
    let read = reader.read_many(&wanted);
    let seqs: Vec<u64> = read.iter().map(|(seq, _)| *seq).collect();
    assert_eq!(seqs, wanted);
    for (seq, payload) in &read {
        let expected = all.get(*seq as usize - 1).cloned();
        assert_eq!(payload.as_ref().unwrap(), &expected, "event {seq}");
    }
    // Flip a byte inside event 2's payload under the open log: its run fails, and is read
    // again event by event.
    let first = dir.join(segment::name(segments[0]));
    let mut bytes = std::fs::read(&first).unwrap();
    let second_frame = segment::MAGIC.len() + 16 + all[0].len();
    bytes[second_frame + 20] ^= 0xff;
    std::fs::write(&first, &bytes).unwrap();
    let read = reader.read_many(&[1, 2, 3]);
    assert_eq!(read[0].1.as_ref().unwrap().as_ref(), Some(&all[0]));
    assert!(
        matches!(read[1].1, Err(LogError::Damaged { .. })),
        "{:?}",
        read[1]
    );
    assert_eq!(read[2].1.as_ref().unwrap().as_ref(), Some(&all[2]));
    drop(writer);
}

#[test]
fn a_clean_close_spares_the_next_open_its_scan() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("log");
    let one_segment = || LogConfig {
        segment_bytes: 1 << 20,
        ..LogConfig::default()
    };
    let open = || LogWriter::open(RealFs::open(&dir).unwrap(), one_segment()).unwrap();
    let all = events(40);
    let (mut writer, recovery) = open();
    assert_eq!(recovery.from_sidecars, 0);
    for group in all[..30].chunks(3) {
        writer.append(group).unwrap();
    }
    writer.store_active_sidecar();
    drop(writer);

    let (mut writer, recovery) = open();
    assert_eq!(
        recovery.from_sidecars, 1,
        "the clean close's sidecar was not used"
    );
    assert_eq!(read_all(&writer).len(), 30);
    // A reopened log appends to a new segment; this one ends without a clean close.
    for group in all[30..].chunks(3) {
        writer.append(group).unwrap();
    }
    let before = read_all(&writer);
    drop(writer);

    let (mut writer, recovery) = open();
    assert_eq!(recovery.segments.len(), 2);
    assert_eq!(
        recovery.from_sidecars, 1,
        "only the first segment has a sidecar"
    );
    assert_eq!(read_all(&writer), before);
    assert_eq!(
        before.iter().map(|(_, p)| p.clone()).collect::<Vec<_>>(),
        all
    );
    assert_eq!(writer.append(&events(1)).unwrap(), 41..42);
}

/// A segment's blocks are reserved ahead of its appends (a file longer than them, zeros past
/// them) and given back when the writer is done with it; a cut resets both.
#[test]
fn a_segment_is_reserved_ahead_of_its_appends_and_sealed_to_them() {
    let tmp = tempfile::tempdir().unwrap();
    let fs = RealFs::open(tmp.path().join("log")).unwrap();
    let path = fs.dir().join("f");
    let len = || std::fs::metadata(&path).unwrap().len();
    let mut file = fs.create("f").unwrap();
    file.append(b"head").unwrap();
    file.sync_data().unwrap();
    if len() == 4 {
        eprintln!("this file system does not fallocate: the segment grows with its appends");
    } else {
        assert_eq!(len(), PREALLOCATE_BYTES, "one chunk reserved");
    }
    let big = vec![7u8; PREALLOCATE_BYTES as usize];
    file.append(&big).unwrap();
    file.append(b"tail").unwrap();
    let written = 8 + PREALLOCATE_BYTES;
    assert!(len() >= written);
    let bytes = std::fs::read(&path).unwrap();
    assert_eq!(&bytes[..4], b"head");
    assert!(bytes[4..written as usize - 4].iter().all(|&b| b == 7));
    assert_eq!(&bytes[written as usize - 4..written as usize], b"tail");
    assert!(bytes[written as usize..].iter().all(|&b| b == 0));
    file.seal().unwrap();
    assert_eq!(len(), written, "sealed to its appends");
    file.cut(4).unwrap();
    assert_eq!(len(), 4);
    file.append(b"again").unwrap();
    file.seal().unwrap();
    assert_eq!(std::fs::read(&path).unwrap(), b"headagain");
}

/// A log dropped without a clean close keeps its reserved zeros: the next open finds every
/// event, reports no torn tail, and goes on.
#[test]
fn reserved_zeros_left_by_an_unclean_end_are_no_torn_tail() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("log");
    let big = || LogConfig {
        segment_bytes: 1 << 20,
        ..LogConfig::default()
    };
    let open = || LogWriter::open(RealFs::open(&dir).unwrap(), big()).unwrap();
    let all = events(30);
    let (mut writer, _) = open();
    for group in all.chunks(3) {
        writer.append(group).unwrap();
    }
    let before = read_all(&writer);
    drop(writer);
    let (mut writer, recovery) = open();
    assert_eq!(recovery.torn, Vec::new());
    assert_eq!(read_all(&writer), before);
    assert_eq!(writer.append(&events(1)).unwrap(), 31..32);
    writer.store_active_sidecar();
    let newest = dir.join(segment::name(31));
    let len = std::fs::metadata(&newest).unwrap().len();
    assert!(
        len < PREALLOCATE_BYTES,
        "the segment closed cleanly keeps its reserved space: {len} bytes"
    );
}

/// What a power cut can leave on a real disk: the newest segment's last group with its first
/// page never written (zeros, the blocks reserved ahead) and its second page written. Opening
/// keeps every frame before the hole, cuts the rest off the file (`ftruncate` + `fdatasync`),
/// and the next segment goes on above; opening again finds the same events.
#[test]
fn a_hole_then_frames_ending_the_newest_segment_is_cut_off_at_open() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("log");
    let mut writer = open(&dir).unwrap();
    writer.append(&events(3)).unwrap();
    let kept = read_all(&writer);
    let file = dir.join(segment::name(writer.segments()[0]));
    drop(writer);
    let mut bytes = std::fs::read(&file).unwrap();
    let durable = bytes.iter().rposition(|&b| b != 0).unwrap() + 1;
    bytes.truncate(durable);
    // The interrupted group: a large frame across the page boundary, then a small one.
    dlq::sink::test_support::log::frame::encode(4, &vec![b'x'; 5000], &mut bytes);
    let last = bytes.len();
    dlq::sink::test_support::log::frame::encode(5, b"{\"event_id\":\"e-5\"}", &mut bytes);
    bytes[durable..4096].fill(0);
    std::fs::write(&file, &bytes).unwrap();

    let (mut writer, recovery) = LogWriter::open(RealFs::open(&dir).unwrap(), config()).unwrap();
    assert_eq!(recovery.cut, vec![(segment::name(1), durable)]);
    assert_eq!(std::fs::metadata(&file).unwrap().len(), durable as u64);
    assert_eq!(read_all(&writer), kept);
    assert!(last > 4096);
    let next = writer.append(&events(1)).unwrap();
    drop(writer);
    let writer = open(&dir).unwrap();
    let seqs: Vec<u64> = read_all(&writer).iter().map(|(seq, _)| *seq).collect();
    assert_eq!(seqs, vec![1, 2, 3, next.start]);
}
