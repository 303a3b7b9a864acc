//! Turning what the drill recorded into a [`ModeResult`], and `dlq verify` per data dir.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::faults::Mark;
use crate::fleet::SharedTally;
use crate::observe::Seen;
use crate::report::{Latency, ModeResult, Phases, Sample, Verify};
use crate::DrillArgs;

/// The instants that split a mode's run into phases.
pub struct Times {
    /// The load started.
    pub t0: Instant,
    /// The same, Unix ms.
    pub t0_ms: u64,
    /// The fault began.
    pub fault_start: Instant,
    /// The outage proper began (`cluster-kill`: the second node's kill; `net-partition`: the
    /// cut; else `fault_start`).
    pub outage_start: Instant,
    /// The fault ended (restored and healthy).
    pub fault_end: Instant,
    /// The load stopped.
    pub stop: Instant,
    /// Every sink drained (while the load still ran).
    pub drained_at: Option<Instant>,
}

/// Computes the figures of one mode.
#[allow(clippy::too_many_arguments)]
pub fn summarise(
    mode: &str,
    reconciler: bool,
    tally: &SharedTally,
    sub: &Seen,
    stream: &Seen,
    times: &Times,
    samples: Vec<Sample>,
    marks: Vec<Mark>,
    verify: Vec<Verify>,
) -> ModeResult {
    let empty = crate::fleet::Tally::default();
    let guard = tally.lock();
    let t = guard.as_deref().unwrap_or(&empty);
    let secs = |i: Instant| (i - times.t0).as_secs_f64();
    let ms = |i: Instant| times.t0_ms + u64::try_from((i - times.t0).as_millis()).unwrap_or(0);
    let (fs, os, fe, st) = (
        ms(times.fault_start),
        ms(times.outage_start),
        ms(times.fault_end),
        ms(times.stop),
    );
    let phase = |from: u64, to: u64| {
        Latency::of(
            t.emits
                .iter()
                .filter(|e| e.start_ms >= from && e.start_ms < to)
                .map(|e| e.micros)
                .collect(),
        )
    };
    let mut lost: Vec<String> = t
        .acked
        .iter()
        .filter(|id| !stream.contains(id))
        .cloned()
        .collect();
    lost.sort();
    // The latest FINAL line per node (a killed incarnation has none).
    let mut finals = std::collections::BTreeMap::new();
    for f in &t.finals {
        let node = f["node_id"].as_str().unwrap_or_default().to_owned();
        finals.insert(node, f.clone());
    }
    let final_unpublished: u64 = finals
        .values()
        .filter_map(|f| f["unpublished"].as_u64())
        .sum();
    let all_drained = !finals.is_empty()
        && finals
            .values()
            .all(|f| f["drained"].as_bool().unwrap_or(false));
    let drain_after_stop = finals
        .values()
        .filter_map(|f| f["drain_ms_after_stop"].as_u64())
        .max()
        .unwrap_or(0);
    let time_to_drain_s = match times.drained_at {
        Some(at) => Some((at - times.fault_end).as_secs_f64()),
        None if all_drained && final_unpublished == 0 => {
            Some((times.stop - times.fault_end).as_secs_f64() + drain_after_stop as f64 / 1000.0)
        }
        None => None,
    };
    let not_stored_published = t.not_stored.iter().filter(|(_, p)| *p).count() as u64;
    let final_sum = |key: &str| -> u64 { finals.values().filter_map(|f| f[key].as_u64()).sum() };
    ModeResult {
        mode: mode.into(),
        reconciler,
        emit_calls: t.emits.len() as u64,
        outcomes: t.outcomes.clone(),
        acknowledged: t.acked.len() as u64,
        not_stored: t.not_stored.len() as u64,
        not_stored_published,
        subscriber_messages: sub.messages,
        subscriber_unique: sub.unique(),
        subscriber_items: sub.items,
        subscriber_duplicates_before_dedup: sub.duplicates_by_id(),
        subscriber_duplicates_after_dedup: sub.logical_duplicates,
        acked_not_seen_by_subscriber: t.acked.iter().filter(|id| !sub.contains(id)).count() as u64,
        stream_messages: stream.messages,
        stream_unique: stream.unique(),
        stream_items: stream.items,
        stream_duplicates_before_dedup: stream.duplicates_by_id(),
        stream_duplicates_after_dedup: stream.logical_duplicates,
        stream_sequence_gaps: if stream.last_seq == 0 {
            0
        } else {
            (stream.last_seq - stream.first_seq + 1).saturating_sub(stream.distinct_seqs)
        },
        stream_reader_repeats: stream.reader_repeats,
        stream_read_by_sequence: stream.read_by_sequence,
        acked_in_stream: t.acked.len() as u64 - lost.len() as u64,
        lost: lost.len() as u64,
        lost_sample: lost.into_iter().take(20).collect(),
        stream_duplicate_sample: stream.repeated_ids(20),
        final_unpublished,
        anti_entropy_missing: final_sum("anti_entropy_missing"),
        anti_entropy_republished: final_sum("anti_entropy_republished"),
        time_to_drain_s,
        peak_backlog: samples.iter().map(|s| s.backlog).max().unwrap_or(0),
        latency: Phases {
            before: phase(times.t0_ms, fs),
            degraded: (os > fs).then(|| phase(fs, os)),
            during: phase(os, fe),
            after: phase(fe, st),
        },
        emitter_rss_max_kb: t.max_rss_kb,
        emitter_hwm_max_kb: t.max_hwm_kb,
        verify,
        fault_start_s: secs(times.fault_start),
        outage_start_s: secs(times.outage_start),
        fault_end_s: secs(times.fault_end),
        stop_s: secs(times.stop),
        marks,
        samples,
    }
}

/// The `dlq` binary: `--dlq-bin`, else beside this executable.
fn dlq_bin(args: &DrillArgs) -> Option<PathBuf> {
    args.dlq_bin
        .clone()
        .or_else(|| {
            std::env::current_exe()
                .ok()
                .map(|exe| exe.with_file_name("dlq"))
        })
        .filter(|bin| bin.is_file())
}

/// Runs `dlq --format json COMMAND` on one data directory (the emitters have exited, so the
/// directories are free); returns its exit code and the last line of its output as JSON, or
/// why it did not run.
async fn run_dlq(
    bin: Option<&Path>,
    (node, dir): &(String, PathBuf),
    url: &str,
    command: &str,
) -> Result<(Option<i32>, serde_json::Value), String> {
    let bin = bin.ok_or("dlq binary not found (build it, or pass --dlq-bin)")?;
    let run = tokio::process::Command::new(bin)
        .arg("--data-dir")
        .arg(dir)
        .args([
            "--node-id",
            node,
            "--nats-url",
            url,
            "--format",
            "json",
            command,
        ])
        .kill_on_drop(true)
        .output();
    let output = tokio::time::timeout(Duration::from_secs(120), run)
        .await
        .map_err(|_| format!("dlq {command} timed out after 120 s"))?
        .map_err(|e| format!("cannot run {}: {e}", bin.display()))?;
    let json: serde_json::Value = String::from_utf8_lossy(&output.stdout)
        .lines()
        .last()
        .and_then(|l| serde_json::from_str(l).ok())
        .unwrap_or_default();
    if json.is_null() {
        return Err(String::from_utf8_lossy(&output.stderr).trim().into());
    }
    Ok((output.status.code(), json))
}

/// What `dlq republish` did on one data directory.
#[derive(Debug, Clone, Default)]
pub struct Repair {
    /// Events re-published.
    pub republished: u64,
    /// Up to 20 of their ids.
    pub ids: Vec<String>,
    /// Messages the repair read from the stream (every node's).
    pub stream_messages: u64,
}

/// `dlq republish` for each data directory: publishes again what the stream lost after
/// acknowledging it. Returns what it did per node (`None` where it failed, with the failure
/// printed).
pub async fn run_repair(
    args: &DrillArgs,
    dirs: &[(String, PathBuf)],
    url: &str,
) -> Vec<Option<Repair>> {
    let bin = dlq_bin(args);
    let mut repaired = Vec::new();
    for node_dir in dirs {
        match run_dlq(bin.as_deref(), node_dir, url, "republish").await {
            Ok((_, json)) => repaired.push(json["republished"].as_u64().map(|n| {
                Repair {
                    republished: n,
                    stream_messages: json["stream_messages"].as_u64().unwrap_or(0),
                    ids: json["events"]
                        .as_array()
                        .map(|ids| {
                            ids.iter()
                                .filter_map(|id| id.as_str().map(str::to_owned))
                                .collect()
                        })
                        .unwrap_or_default(),
                }
            })),
            Err(note) => {
                eprintln!("dlq-chaos: dlq republish for {}: {note}", node_dir.0);
                repaired.push(None);
            }
        }
    }
    repaired
}

/// `dlq verify` for each data directory; `repaired` is what [`run_repair`] returned (empty
/// when the mode has no repair step).
pub async fn run_verify(
    args: &DrillArgs,
    dirs: &[(String, PathBuf)],
    url: &str,
    repaired: &[Option<Repair>],
) -> Vec<Verify> {
    let bin = dlq_bin(args);
    let mut results = Vec::new();
    for (i, node_dir) in dirs.iter().enumerate() {
        let mut v = Verify {
            node_id: node_dir.0.clone(),
            republished: repaired
                .get(i)
                .and_then(|r| r.as_ref().map(|r| r.republished)),
            republished_ids: repaired
                .get(i)
                .and_then(|r| r.as_ref().map(|r| r.ids.clone()))
                .unwrap_or_default(),
            repair_read: repaired
                .get(i)
                .and_then(|r| r.as_ref().map(|r| r.stream_messages)),
            ..Verify::default()
        };
        match run_dlq(bin.as_deref(), node_dir, url, "verify").await {
            Ok((exit, json)) => {
                v.exit = exit;
                v.missing = json["missing"].as_u64().unwrap_or(0);
                v.extra = json["extra"].as_u64().unwrap_or(0);
                v.diverging = json["diverging"].as_u64().unwrap_or(0);
                v.unstored = json["unstored"].as_u64().unwrap_or(0);
                v.unpublished = json["unpublished"].as_u64().unwrap_or(0);
            }
            Err(note) => v.note = Some(note),
        }
        results.push(v);
    }
    results
}
