//! Turning what the drill recorded into a [`ModeResult`], and `dlq verify` per data dir.

use std::path::PathBuf;
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
    /// The outage proper began (`cluster-kill`: the second node's kill; else `fault_start`).
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
        stream_reader_repeats: stream.messages.saturating_sub(stream.distinct_seqs),
        acked_in_stream: t.acked.len() as u64 - lost.len() as u64,
        lost: lost.len() as u64,
        lost_sample: lost.into_iter().take(20).collect(),
        final_unpublished,
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

/// `dlq verify` for each data directory (the emitters have exited, so the dirs are free).
pub async fn run_verify(args: &DrillArgs, dirs: &[(String, PathBuf)], url: &str) -> Vec<Verify> {
    let bin = args.dlq_bin.clone().or_else(|| {
        std::env::current_exe()
            .ok()
            .map(|exe| exe.with_file_name("dlq"))
    });
    let mut results = Vec::new();
    for (node, dir) in dirs {
        let mut v = Verify {
            node_id: node.clone(),
            ..Verify::default()
        };
        match &bin {
            Some(bin) if bin.is_file() => {
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
                        "verify",
                    ])
                    .kill_on_drop(true)
                    .output();
                match tokio::time::timeout(Duration::from_secs(120), run).await {
                    Ok(Ok(output)) => {
                        v.exit = output.status.code();
                        let text = String::from_utf8_lossy(&output.stdout);
                        let json: serde_json::Value = text
                            .lines()
                            .last()
                            .and_then(|l| serde_json::from_str(l).ok())
                            .unwrap_or_default();
                        v.missing = json["missing"].as_u64().unwrap_or(0);
                        v.extra = json["extra"].as_u64().unwrap_or(0);
                        v.diverging = json["diverging"].as_u64().unwrap_or(0);
                        v.unpublished = json["unpublished"].as_u64().unwrap_or(0);
                        if json.is_null() {
                            v.note = Some(String::from_utf8_lossy(&output.stderr).trim().into());
                        }
                    }
                    Ok(Err(e)) => v.note = Some(format!("cannot run {}: {e}", bin.display())),
                    Err(_) => v.note = Some("timed out after 120 s".into()),
                }
            }
            _ => v.note = Some("dlq binary not found (build it, or pass --dlq-bin)".into()),
        }
        results.push(v);
    }
    results
}
