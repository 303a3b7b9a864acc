//! 1. The physical limit: serial fsyncs, and group commits of a plain file (one `fdatasync`
//!    per batch, records the size of one stored event) and of sled.

use std::collections::HashMap;
use std::fs::File;
use std::io::Write;
use std::os::unix::io::AsRawFd;
use std::path::Path;
use std::time::Instant;

use chrono::Utc;
use dlq::event::{Event, EventKind};
use dlq::model::DeadLetteredItem;
use hdrhistogram::Histogram;

use crate::run::{histogram, Row, TOPIC};

/// Group sizes of the plain-file probes: the K values of the emit sections, since K waiting
/// callers are the most one group commit of the sink can take.
pub const BATCH_SIZES: [usize; 4] = [1, 8, 64, 256];
/// Bytes written per plain-file probe at most (rounds are cut for big records).
const PROBE_BYTES: usize = 256 << 20;

/// Durable events/s of the plain-file group commit and its record size, per (payload blob
/// bytes, batch size).
pub type Limits = HashMap<(usize, usize), (f64, usize)>;

/// The JSON size of the `DeadLettered` event the sink stores for `item`.
pub fn event_bytes(item: &DeadLetteredItem) -> usize {
    let event = Event {
        event_id: Event::stored_id("0123456789abcdef", 1_000_000),
        node_id: "0123456789abcdef".into(),
        seq: 1_000_000,
        prev_seq: None,
        timestamp: Utc::now(),
        job_id: item.job_id.clone(),
        topic: TOPIC.into(),
        kind: EventKind::DeadLettered { item: item.clone() },
    };
    event.to_json().map_or(0, |j| j.len())
}

extern "C" {
    fn sync_file_range(fd: i32, offset: i64, nbytes: i64, flags: u32) -> i32;
}
/// SYNC_FILE_RANGE_WAIT_BEFORE | WRITE | WAIT_AFTER: what sled 0.34 calls on Linux.
const SFR_ALL: u32 = 1 | 2 | 4;

/// Per-group latencies and the elapsed seconds of a run of group commits.
type Groups = (Histogram<u64>, f64);
type SyncFn = fn(&File, u64) -> std::io::Result<()>;

/// `rounds` group commits of `batch` appends of `record` bytes to a plain file, one `sync` per
/// group. The file is removed afterwards.
fn plain_groups(path: &Path, record: usize, batch: usize, rounds: usize, sync: SyncFn) -> Groups {
    let mut file = File::create(path).expect("create probe file");
    let (block, mut h, started) = (vec![0x5au8; record], histogram(), Instant::now());
    for round in 0..rounds {
        let t = Instant::now();
        for _ in 0..batch {
            file.write_all(&block).expect("write probe");
        }
        let offset = (round * batch * record) as u64;
        sync(&file, offset).expect("sync probe");
        h.saturating_record(t.elapsed().as_micros() as u64);
    }
    let secs = started.elapsed().as_secs_f64();
    drop(file);
    std::fs::remove_file(path).expect("remove probe file");
    (h, secs)
}

fn sfr(file: &File, offset: u64) -> std::io::Result<()> {
    // SAFETY: a plain syscall on an open descriptor; nbytes 0 means "to the end of the file".
    match unsafe { sync_file_range(file.as_raw_fd(), offset as i64, 0, SFR_ALL) } {
        0 => Ok(()),
        _ => Err(std::io::Error::last_os_error()),
    }
}

/// `rounds` group commits of `batch` sink-like commands (a ~1.9 KiB log entry, ~1.7 KiB item,
/// markers and indexes) on sled, then `flush` + fdatasync of sled's log file, as the sink's
/// writer does. `merged`: the whole group as one `apply_batch` instead of one per command.
fn sled_groups(dir: &Path, batch: usize, rounds: usize, merged: bool) -> Groups {
    let path = dir.join(format!("sled-{batch}-{merged}.probe"));
    let config = sled::Config::new().path(&path).segment_size(8 << 20);
    let db = config.flush_every_ms(None).open().expect("open sled");
    let log = File::open(path.join("db")).expect("open sled log file");
    let (event, item) = (vec![0x5au8; 1900], vec![0x5bu8; 1700]);
    let (mut h, mut seq, started) = (histogram(), 0u64, Instant::now());
    for _ in 0..rounds {
        let t = Instant::now();
        let mut group = sled::Batch::default();
        for _ in 0..batch {
            seq += 1;
            let mut one = sled::Batch::default();
            let b = if merged { &mut group } else { &mut one };
            b.insert(format!("l/{seq:016x}").as_bytes(), event.clone());
            b.insert(format!("u/{seq:016x}").as_bytes(), &seq.to_be_bytes());
            let job = seq % 64;
            b.insert(format!("i/job-{job}\0item-{seq}").as_bytes(), item.clone());
            b.insert(format!("s/0123456789abcdef/job/item-{seq}").as_bytes(), &[]);
            b.insert(format!("a/{seq:016x}/job/item-{seq}").as_bytes(), &[]);
            b.insert(format!("f/job-{job}/{seq:016x}").as_bytes(), &[]);
            b.insert(format!("c/job-{job}").as_bytes(), &seq.to_be_bytes());
            b.insert(b"n".as_slice(), &seq.to_be_bytes());
            if !merged {
                db.apply_batch(one).expect("apply batch");
            }
        }
        if merged {
            db.apply_batch(group).expect("apply batch");
        }
        db.flush().expect("sled flush");
        log.sync_data().expect("fdatasync sled log");
        h.saturating_record(t.elapsed().as_micros() as u64);
    }
    let secs = started.elapsed().as_secs_f64();
    drop((db, log));
    std::fs::remove_dir_all(&path).expect("remove sled probe");
    (h, secs)
}

/// Size of a record in words: "1.9 KB", "66 KB".
pub fn kb(bytes: usize) -> String {
    format!("{:.1} KB", bytes as f64 / 1000.0)
}

/// Measures the limits; `records`: (payload blob bytes, stored event bytes) of the payloads measured later.
pub fn physical_limit(
    dir: &Path,
    n: usize,
    rounds: usize,
    records: &[(usize, usize)],
    rows: &mut Vec<Row>,
) -> Limits {
    let fdatasync: SyncFn = |file, _| file.sync_data();
    for (name, sync) in [("fdatasync", fdatasync), ("sync_file_range", sfr)] {
        let (h, _) = plain_groups(&dir.join(format!("{name}.probe")), 1024, 1, n, sync);
        let implied_max = 1e6 / h.value_at_quantile(0.5).max(1) as f64;
        let row = Row::new("1 limit", format!("1 KiB append + {name}"), n).latency(&h);
        let note = [FSYNC_NOTE, SFR_NOTE][usize::from(name != "fdatasync")];
        rows.push(row.rates(Some(implied_max), None).note(note));
    }
    let mut limits = Limits::new();
    for &(blob, record) in records {
        for batch in BATCH_SIZES {
            let rounds = rounds.min(PROBE_BYTES / (batch * record)).max(5);
            let path = dir.join(format!("g{record}-{batch}.probe"));
            let (h, secs) = plain_groups(&path, record, batch, rounds, fdatasync);
            let per_sec = rounds as f64 / secs;
            limits.insert((blob, batch), (per_sec * batch as f64, record));
            let name = format!("plain-file group commit, {} records", kb(record));
            let row = Row::new("1 limit", name, batch * rounds).latency(&h);
            let row = row.rates(Some(per_sec), Some(per_sec * batch as f64));
            rows.push(row.note(format!("batch {batch}; one fdatasync per batch")));
        }
    }
    for (batch, merged) in [
        (1, false),
        (8, false),
        (64, false),
        (64, true),
        (256, false),
        (256, true),
    ] {
        let (h, secs) = sled_groups(dir, batch, rounds, merged);
        let name = [
            "sled group commit, one apply_batch per command",
            "sled group commit, one merged apply_batch",
        ][usize::from(merged)];
        let per_sec = rounds as f64 / secs;
        let row = Row::new("1 limit", name, batch * rounds).latency(&h);
        let row = row.rates(Some(per_sec), Some(per_sec * batch as f64));
        rows.push(row.note(format!("batch {batch}; {SLED_NOTE}")));
    }
    limits
}

const FSYNC_NOTE: &str = "calls/s = implied max fsyncs/s (1 / p50)";
const SFR_NOTE: &str = "sled 0.34's own sync: no disk-cache flush, no file size; not durable alone";
const SLED_NOTE: &str = "sink-like commands (~3.6 KiB, 8 keys); flush + fdatasync(db) per batch";
