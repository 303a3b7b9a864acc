//! 1. The physical limit: serial fsyncs, and group commits of a plain file (one `fdatasync`
//!    per batch, records the size of one stored event) and of sled.

use std::collections::HashMap;
use std::fs::File;
use std::io::Write;
use std::os::unix::io::AsRawFd;
use std::path::Path;
use std::time::Instant;

use chrono::Utc;
use dlq::domain::event::{Event, EventKind};
use dlq::domain::model::DeadLetteredItem;
use hdrhistogram::Histogram;

use crate::run::{disk_bytes_written, histogram, Row, TOPIC};

/// Group sizes of the plain-file probes: the K values of the emit sections, since K waiting
/// callers are the most one group commit of the sink can take.
pub const BATCH_SIZES: [usize; 4] = [1, 8, 64, 256];
/// Bytes written per plain-file probe at most (rounds are cut for big records).
const PROBE_BYTES: usize = 256 << 20;

/// The ceilings measured in section 1, per payload.
#[derive(Default)]
pub struct Limits {
    /// Durable events/s of the plain-file group commit and its record size, per (payload blob
    /// bytes, batch size).
    pub groups: HashMap<(usize, usize), (f64, usize)>,
    /// How many times longer one plain append + `fdatasync` takes handed to another thread
    /// while the caller awaits it than made inline, per payload blob bytes
    /// ([`crate::handoff`]; means of alternated calls).
    pub handoff_ratio: HashMap<usize, f64>,
}

impl Limits {
    /// Mean µs of one plain append + `fdatasync` made inline (the group commit at batch 1).
    pub fn one_fsync_us(&self, blob: usize) -> Option<f64> {
        let &(per_sec, _) = self.groups.get(&(blob, 1))?;
        Some(1e6 / per_sec)
    }
}

/// The JSON size of the `DeadLettered` event the sink stores for `item`.
pub fn event_bytes(item: &DeadLetteredItem) -> usize {
    let event = Event {
        event_id: Event::stored_id("0123456789abcdef", "0123456789abcdef", 1_000_000),
        node_id: "0123456789abcdef".into(),
        seq: 1_000_000,
        epoch: Some("0123456789abcdef".into()),
        prev_epoch: None,
        prev_seq: None,
        timestamp: Utc::now(),
        job_id: item.job_id.clone(),
        topic: TOPIC.into(),
        kind: EventKind::DeadLettered {
            item: item.clone().into(),
        },
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

/// [`plain_groups`] into a file whose blocks are reserved first (`fallocate` of the whole
/// probe, written at increasing offsets), as the log's segments are (`src/sink/log/io.rs`).
fn reserved_groups(path: &Path, record: usize, batch: usize, rounds: usize) -> Groups {
    use std::os::unix::fs::FileExt as _;
    let file = File::create(path).expect("create probe file");
    let total = (rounds * batch * record) as i64;
    // SAFETY: a plain syscall on an open descriptor.
    let reserved = unsafe { libc::fallocate(file.as_raw_fd(), 0, 0, total) } == 0;
    assert!(reserved, "fallocate: {}", std::io::Error::last_os_error());
    file.sync_all().expect("sync probe");
    let (block, mut h, started) = (vec![0x5au8; record], histogram(), Instant::now());
    let mut offset = 0u64;
    for _ in 0..rounds {
        let t = Instant::now();
        for _ in 0..batch {
            file.write_all_at(&block, offset).expect("write probe");
            offset += record as u64;
        }
        file.sync_data().expect("sync probe");
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

/// How a sled probe makes each group durable.
#[derive(Clone, Copy, PartialEq)]
enum SledMode {
    /// sled's `flush` + fdatasync of its log per group: the writer before the journal.
    Flush,
    /// The group's bytes appended to a plain journal file + its fdatasync per group, sled
    /// flushed (+ fdatasync) once a second: the writer now.
    Journal,
    /// Nothing: sled's `apply_batch` alone, the ceiling of any design that keeps these keys in
    /// sled.
    ApplyOnly,
}

impl SledMode {
    fn name(self) -> &'static str {
        match self {
            SledMode::Flush => "sled group commit, flush per group (before the journal)",
            SledMode::Journal => "sled group commit, journal fdatasync per group (now)",
            SledMode::ApplyOnly => "sled apply_batch alone, no sync (sled's ceiling)",
        }
    }
}

/// `rounds` group commits of `batch` sink-like commands (a ~1.9 KiB log entry, ~1.7 KiB item,
/// markers and indexes: 8 keys) as one sled `apply_batch` each, made durable as `mode` says.
/// Returns the latencies, the seconds and the bytes this process wrote per command.
fn sled_groups(dir: &Path, batch: usize, rounds: usize, mode: SledMode) -> (Groups, f64) {
    let path = dir.join(format!("sled-{batch}.probe"));
    let config = sled::Config::new().path(&path).segment_size(8 << 20);
    let db = config.flush_every_ms(None).open().expect("open sled");
    let log = File::open(path.join("db")).expect("open sled log file");
    let mut journal = File::create(path.join("journal.probe")).expect("create journal probe");
    let (event, item) = (vec![0x5au8; 1900], vec![0x5bu8; 1700]);
    let (mut h, mut seq, started) = (histogram(), 0u64, Instant::now());
    let (written_before, mut last_checkpoint) = (disk_bytes_written(), Instant::now());
    for _ in 0..rounds {
        let t = Instant::now();
        let (mut group, mut bytes) = (sled::Batch::default(), 0);
        for _ in 0..batch {
            seq += 1;
            let job = seq % 64;
            let writes: [(Vec<u8>, &[u8]); 8] = [
                (format!("l/{seq:016x}").into_bytes(), &event),
                (format!("u/{seq:016x}").into_bytes(), &seq.to_be_bytes()),
                (format!("i/job-{job}\0item-{seq}").into_bytes(), &item),
                (
                    format!("s/0123456789abcdef/job/item-{seq}").into_bytes(),
                    &[],
                ),
                (format!("a/{seq:016x}/job/item-{seq}").into_bytes(), &[]),
                (format!("f/job-{job}/{seq:016x}").into_bytes(), &[]),
                (format!("c/job-{job}").into_bytes(), &seq.to_be_bytes()),
                (b"n".to_vec(), &seq.to_be_bytes()),
            ];
            for (key, value) in writes {
                bytes += key.len() + value.len() + 9;
                group.insert(key, value);
            }
        }
        db.apply_batch(group).expect("apply batch");
        match mode {
            SledMode::Flush => {
                db.flush().expect("sled flush");
                log.sync_data().expect("fdatasync sled log");
            }
            SledMode::Journal => {
                journal
                    .write_all(&vec![0x5cu8; bytes])
                    .expect("write journal");
                journal.sync_data().expect("fdatasync journal");
                if last_checkpoint.elapsed().as_secs() >= 1 {
                    db.flush().expect("sled flush");
                    log.sync_data().expect("fdatasync sled log");
                    last_checkpoint = Instant::now();
                }
            }
            SledMode::ApplyOnly => {}
        }
        h.saturating_record(t.elapsed().as_micros() as u64);
    }
    let secs = started.elapsed().as_secs_f64();
    let written = (disk_bytes_written() - written_before) as f64 / (rounds * batch) as f64;
    drop((db, log, journal));
    std::fs::remove_dir_all(&path).expect("remove sled probe");
    ((h, secs), written)
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
    sled_rows: bool,
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
    let mut limits = Limits::default();
    for &(blob, record) in records {
        for batch in BATCH_SIZES {
            let rounds = rounds.min(PROBE_BYTES / (batch * record)).max(5);
            let path = dir.join(format!("g{record}-{batch}.probe"));
            let (h, secs) = plain_groups(&path, record, batch, rounds, fdatasync);
            let per_sec = rounds as f64 / secs;
            limits
                .groups
                .insert((blob, batch), (per_sec * batch as f64, record));
            let name = format!("plain-file group commit, {} records", kb(record));
            let row = Row::new("1 limit", name, batch * rounds).latency(&h);
            let row = row.rates(Some(per_sec), Some(per_sec * batch as f64));
            rows.push(row.note(format!("batch {batch}; one fdatasync per batch")));
        }
        // The same appends into reserved blocks, as the log writes: reported beside the plain
        // limit, which stays what the targets are read against.
        for batch in [1, 64] {
            let rounds = rounds.min(PROBE_BYTES / (batch * record)).max(5);
            let path = dir.join(format!("r{record}-{batch}.probe"));
            let (h, secs) = reserved_groups(&path, record, batch, rounds);
            let per_sec = rounds as f64 / secs;
            let name = format!("reserved-file group commit, {} records", kb(record));
            let row = Row::new("1 limit", name, batch * rounds).latency(&h);
            let row = row.rates(Some(per_sec), Some(per_sec * batch as f64));
            rows.push(row.note(format!(
                "batch {batch}; blocks fallocate'd first, as the log's segments: one fdatasync per batch (not the targets' limit)"
            )));
        }
    }
    let modes = [SledMode::Flush, SledMode::Journal, SledMode::ApplyOnly];
    for mode in modes.into_iter().filter(|_| sled_rows) {
        for batch in BATCH_SIZES {
            let ((h, secs), written) = sled_groups(dir, batch, rounds, mode);
            let per_sec = rounds as f64 / secs;
            let row = Row::new("1 limit", mode.name(), batch * rounds).latency(&h);
            let row = row.rates(Some(per_sec), Some(per_sec * batch as f64));
            let kib = written / 1024.0;
            rows.push(row.note(format!(
                "batch {batch}; {SLED_NOTE}; {kib:.1} KiB to disk per command"
            )));
        }
    }
    limits
}

const FSYNC_NOTE: &str = "calls/s = implied max fsyncs/s (1 / p50)";
const SFR_NOTE: &str = "sled 0.34's own sync: no disk-cache flush, no file size; not durable alone";
const SLED_NOTE: &str = "sink-like commands (~3.6 KiB, 8 keys), one apply_batch per batch";

/// What a row of `blob`-sized events at K concurrent callers is read against: the plain-file
/// group-commit limit at batch K (at most 256) and its description.
pub fn limit_for(limits: &Limits, blob: usize, k: usize) -> (f64, String) {
    let batch = k.min(256);
    let (limit, record) = limits
        .groups
        .get(&(blob, batch))
        .copied()
        .unwrap_or_default();
    (
        limit,
        format!("plain file, batch {batch}, {} records", kb(record)),
    )
}
