//! The segment log on the real file system (issue 16): groups come back after reopening with
//! identical bytes, a torn tail is dropped, damage in the middle is refused with the file and
//! offset, and old segments are deleted.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use dlq::sink::log::io::RealFs;
use dlq::sink::log::{segment, LogConfig, LogError, LogWriter};

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
    let good = std::fs::read(&file).unwrap();

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
    let on_disk = std::fs::read_dir(&dir).unwrap().count();
    assert_eq!(on_disk, segments.len() - 2);
    assert_eq!(writer.records(0).next().unwrap().unwrap().seq, segments[2]);
    drop(writer);
    let writer = open(&dir).unwrap();
    assert_eq!(writer.records(0).next().unwrap().unwrap().seq, segments[2]);
}
