//! The sink's journal segments, as a restart reads them.

use std::sync::OnceLock;

use super::{check, scratch, Outcome};
use crate::sink::{replay_journal, segment_file_name, JournalRecords, JOURNAL_MAGIC as MAGIC};

/// A journal segment: first the bytes as a whole segment, then the bytes as the payload of one
/// record with a valid length and checksum (so the payload decoder is reached, not only the
/// checksum check). Decoding stops at the first damaged record and says where; what decodes is
/// then replayed from a segment file into a sled tree, as a restart does.
pub fn journal_segment(data: &[u8]) -> Outcome {
    decode(data)?;
    let mut framed = MAGIC.to_vec();
    framed.extend_from_slice(&(data.len() as u64).to_le_bytes());
    framed.extend_from_slice(&crc32fast::hash(data).to_le_bytes());
    framed.extend_from_slice(data);
    decode(&framed)?;
    replay(data);
    replay(&framed);
    Ok(())
}

fn decode(segment: &[u8]) -> Outcome {
    let mut records = JournalRecords::new(segment);
    let writes: usize = records.by_ref().map(|record| record.len()).sum();
    if let Some(damage) = records.damage() {
        check(
            damage.offset + damage.discarded == segment.len() && damage.offset <= segment.len(),
            || {
                format!(
                    "damage {damage:?} does not end the segment of {} bytes",
                    segment.len()
                )
            },
        )?;
    }
    // Touch the result so the decoding is not optimised away.
    std::hint::black_box(writes);
    Ok(())
}

/// Replays `segment` from a data directory into a temporary sled tree, then empties the tree
/// and removes the segment and any damaged copy the replay kept.
fn replay(segment: &[u8]) {
    static TREE: OnceLock<Option<sled::Db>> = OnceLock::new();
    let db = TREE.get_or_init(|| sled::Config::new().temporary(true).open().ok());
    let (Some(db), Some(data_dir)) = (db, scratch("journal")) else {
        return;
    };
    let dir = data_dir.join(crate::sink::test_support::JOURNAL_DIR);
    let _ = std::fs::remove_dir_all(&dir);
    if std::fs::create_dir_all(&dir).is_err()
        || std::fs::write(dir.join(segment_file_name(1)), segment).is_err()
    {
        return;
    }
    let _ = replay_journal(&data_dir, db);
    // Start the next input from an empty tree: memory stays flat over millions of runs.
    let _ = db.clear();
    let _ = std::fs::remove_dir_all(&dir);
}
