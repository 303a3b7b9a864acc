//! A segment file of the sink's event log, as opening the log and reading it back see it.

use super::{check, Outcome};
use crate::sink::log::crash::Files;
use crate::sink::log::sim::SimFs;
use crate::sink::log::{segment, LogConfig, LogWriter};

/// The sequence the fuzzed segment starts at.
const FIRST: u64 = 7;

/// The bytes as a segment starting at sequence 7: first the pure scan, which must name
/// consecutive sequences inside the bytes or refuse with an offset inside them; then the same
/// bytes behind a segment header, opened as a log directory (in memory) and read back both
/// sequentially and event by event, which must agree.
pub fn log_segment(data: &[u8]) -> Outcome {
    scan(data)?;
    let mut framed = segment::MAGIC.to_vec();
    framed.extend_from_slice(data);
    scan(&framed)?;
    open_and_read(&framed)
}

fn scan(bytes: &[u8]) -> Outcome {
    match segment::scan(bytes, FIRST) {
        Ok(found) => {
            check(found.valid_len <= bytes.len(), || {
                format!(
                    "valid length {} beyond {} bytes",
                    found.valid_len,
                    bytes.len()
                )
            })?;
            for (i, (seq, payload)) in found.frames.iter().enumerate() {
                check(*seq == FIRST + i as u64, || {
                    format!("frame {i} has sequence {seq}")
                })?;
                check(payload.end <= found.valid_len, || {
                    format!(
                        "frame {seq} ends at {} past {}",
                        payload.end, found.valid_len
                    )
                })?;
            }
            Ok(())
        }
        Err((offset, _)) => check(offset <= bytes.len(), || {
            format!("damage at {offset} beyond {} bytes", bytes.len())
        }),
    }
}

fn open_and_read(bytes: &[u8]) -> Outcome {
    let mut files = Files::new();
    files.insert(segment::name(FIRST), bytes.to_vec());
    let Ok((writer, _)) = LogWriter::open(SimFs::from_files(&files), LogConfig::default()) else {
        return Ok(()); // refused as damage: fine
    };
    let mut sequential = Vec::new();
    for record in writer.records(0) {
        match record {
            Ok(record) => sequential.push((record.seq, record.payload)),
            Err(err) => {
                return Err(super::Broken(format!(
                    "an opened log cannot be read: {err}"
                )))
            }
        }
    }
    let seqs: Vec<u64> = sequential.iter().map(|(seq, _)| *seq).collect();
    let one_by_one: Vec<(u64, Vec<u8>)> = writer
        .reader()
        .read_many(&seqs)
        .into_iter()
        .filter_map(|(seq, read)| read.ok().flatten().map(|payload| (seq, payload)))
        .collect();
    check(one_by_one == sequential, || {
        format!(
            "{} events read in sequence, {} read by sequence, or their bytes differ",
            sequential.len(),
            one_by_one.len()
        )
    })
}
