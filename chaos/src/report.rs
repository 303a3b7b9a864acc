//! The drill's result (result.json) and its Markdown report.

use std::collections::BTreeMap;
use std::fmt::Write;

use serde::Serialize;

use crate::faults::Mark;

/// Emit latency in one phase, milliseconds.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Latency {
    /// Emit calls that started in the phase.
    pub count: u64,
    /// Median.
    pub p50_ms: f64,
    /// 99th percentile.
    pub p99_ms: f64,
    /// Slowest.
    pub max_ms: f64,
}

impl Latency {
    /// From latencies in microseconds.
    pub fn of(mut micros: Vec<u64>) -> Latency {
        micros.sort_unstable();
        let at = |q: f64| -> f64 {
            if micros.is_empty() {
                return 0.0;
            }
            let rank = ((q * micros.len() as f64).ceil() as usize).clamp(1, micros.len());
            micros.get(rank - 1).copied().unwrap_or(0) as f64 / 1000.0
        };
        Latency {
            count: micros.len() as u64,
            p50_ms: at(0.50),
            p99_ms: at(0.99),
            max_ms: micros.last().copied().unwrap_or(0) as f64 / 1000.0,
        }
    }
}

/// Emit latency before, during and after the fault.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Phases {
    /// Before the fault.
    pub before: Latency,
    /// `cluster-kill`: one node of three down, before the second kill; `net-partition`: the
    /// packet loss and slow-link phases, before the cut.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub degraded: Option<Latency>,
    /// During the outage: the whole fault, or for `cluster-kill` from the second kill (no
    /// quorum) until the cluster recovered, for `net-partition` the cut.
    pub during: Latency,
    /// After restoring, until the load stopped.
    pub after: Latency,
}

/// `dlq verify` of one data directory against the stream.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Verify {
    /// Node id.
    pub node_id: String,
    /// Exit code (0 equal, 5 differences), `None` if it did not run.
    pub exit: Option<i32>,
    /// Items in the sink, not rebuilt from the stream.
    pub missing: u64,
    /// Items rebuilt from the stream, not in the sink.
    pub extra: u64,
    /// Items in both that differ.
    pub diverging: u64,
    /// Items published under a volatile id because the sink refused them (the caller was told
    /// `NotStored`): in the stream, not in the sink, and not a disagreement.
    pub unstored: u64,
    /// Events still unpublished in the sink.
    pub unpublished: u64,
    /// Events the stream lost after acknowledging them, re-published from the sink by
    /// `dlq republish` before verifying (our mode only; `None` if not run).
    pub republished: Option<u64>,
    /// Up to 20 of the re-published event ids.
    pub republished_ids: Vec<String>,
    /// Messages in the stream when `dlq republish` read it (`None` if not run).
    pub repair_read: Option<u64>,
    /// Why it did not run, if so.
    pub note: Option<String>,
}

/// One point of the time series (every 500 ms).
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct Sample {
    /// Seconds since the load started.
    pub t: f64,
    /// Emit calls completed (cumulative).
    pub emitted: u64,
    /// Event ids acknowledged by the sinks (cumulative).
    pub acked: u64,
    /// Distinct dead-lettered items received by the subscriber (cumulative).
    pub received: u64,
    /// Unpublished events over all sinks.
    pub backlog: u64,
}

/// The outcome of one mode (ours or the baseline).
#[derive(Debug, Clone, Default, Serialize)]
pub struct ModeResult {
    /// `ours` or `baseline`.
    pub mode: String,
    /// Whether the reconciler ran.
    pub reconciler: bool,
    /// Emit calls completed.
    pub emit_calls: u64,
    /// Emit calls by outcome (`ok`, `ok-unpublished`, `notstored`, `unconfirmed`, `error`).
    pub outcomes: BTreeMap<String, u64>,
    /// Event ids the sinks acknowledged (durable; the scheduler was told `Ok`).
    pub acknowledged: u64,
    /// Events the sink refused (the scheduler was told `NotStored`).
    pub not_stored: u64,
    /// Of those, published to the bus anyway.
    pub not_stored_published: u64,
    /// Messages the subscriber received (with repeats).
    pub subscriber_messages: u64,
    /// Distinct ids it received.
    pub subscriber_unique: u64,
    /// Distinct dead-lettered items it received.
    pub subscriber_items: u64,
    /// Repeated ids at the subscriber.
    pub subscriber_duplicates_before_dedup: u64,
    /// Logical duplicates left after dropping repeated ids.
    pub subscriber_duplicates_after_dedup: u64,
    /// Acknowledged ids the subscriber never received (it reconnects after a restart; the
    /// stream is the record).
    pub acked_not_seen_by_subscriber: u64,
    /// Messages in the stream.
    pub stream_messages: u64,
    /// Distinct ids in the stream.
    pub stream_unique: u64,
    /// Distinct dead-lettered items in the stream.
    pub stream_items: u64,
    /// Repeated ids in the stream.
    pub stream_duplicates_before_dedup: u64,
    /// Logical duplicates in the stream after dropping repeated ids.
    pub stream_duplicates_after_dedup: u64,
    /// Stream sequences between the first and the last message read that hold no message
    /// (nothing is ever deleted from the stream, so 0 unless the server skipped sequences).
    pub stream_sequence_gaps: u64,
    /// Messages the stream reader's consumer delivered more than once (same stream sequence;
    /// offered once).
    pub stream_reader_repeats: u64,
    /// Messages the end-of-drill reader's consumer skipped, read by sequence instead.
    pub stream_read_by_sequence: u64,
    /// Acknowledged ids found in the stream.
    pub acked_in_stream: u64,
    /// LOST: acknowledged ids never in the stream.
    pub lost: u64,
    /// Up to 20 lost ids.
    pub lost_sample: Vec<String>,
    /// Up to 20 event ids the stream holds more than once.
    pub stream_duplicate_sample: Vec<String>,
    /// Events left unpublished in the sinks at the end.
    pub final_unpublished: u64,
    /// Acknowledged events the emitters' anti-entropy found missing from the stream (summed
    /// over the last incarnation of each emitter).
    pub anti_entropy_missing: u64,
    /// Of those, re-published and stored again.
    pub anti_entropy_republished: u64,
    /// Seconds from restoring until the backlog was drained (`None`: never).
    pub time_to_drain_s: Option<f64>,
    /// Largest unpublished backlog over all sinks (sampled every 500 ms).
    pub peak_backlog: u64,
    /// Emit latency per phase.
    pub latency: Phases,
    /// Largest resident memory of an emitter process (KiB).
    pub emitter_rss_max_kb: u64,
    /// Largest peak resident memory (VmHWM) of an emitter process (KiB).
    pub emitter_hwm_max_kb: u64,
    /// `dlq verify` per data directory.
    pub verify: Vec<Verify>,
    /// Seconds after the load started: fault start, fault end, load stop.
    pub fault_start_s: f64,
    /// Seconds after the load started: the outage proper began (`cluster-kill`: the second
    /// node's kill; else equal to `fault_start_s`).
    pub outage_start_s: f64,
    /// See `fault_start_s`.
    pub fault_end_s: f64,
    /// See `fault_start_s`.
    pub stop_s: f64,
    /// Timeline.
    pub marks: Vec<Mark>,
    /// Time series.
    pub samples: Vec<Sample>,
}

/// The whole drill.
#[derive(Debug, Clone, Serialize)]
pub struct DrillResult {
    /// The command that produced it.
    pub command: String,
    /// UTC start time.
    pub started_at: String,
    /// The fault.
    pub fault: crate::Fault,
    /// net-cut mode, when relevant.
    pub net_cut_mode: Option<crate::CutMode>,
    /// sink-fail mode, when relevant.
    pub sink_mode: Option<crate::SinkMode>,
    /// net-partition: what each phase did to the emitters' link, in order.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub partition_phases: Option<Vec<String>>,
    /// Fault duration, seconds.
    pub duration_s: f64,
    /// Failures per second over all emitters.
    pub rate: f64,
    /// Emitter processes.
    pub emitters: usize,
    /// Load before the fault, seconds.
    pub warmup_s: f64,
    /// Load after the fault, seconds.
    pub after_s: f64,
    /// Emit-path policy of both modes.
    pub emit_policy: String,
    /// CPUs of the machine.
    pub cpus: usize,
    /// Our mode lost nothing acknowledged and the subscriber saw no duplicate after dedup.
    pub pass: Option<bool>,
    /// Our emitter.
    pub ours: Option<ModeResult>,
    /// The baseline: a plain sink-then-publish emitter without a reconciler.
    pub baseline: Option<ModeResult>,
}

fn kb(v: u64) -> String {
    format!("{:.1} MiB", v as f64 / 1024.0)
}

fn drain(r: &ModeResult) -> String {
    match r.time_to_drain_s {
        Some(s) => format!("{s:.1} s"),
        None => format!("never ({} left unpublished)", r.final_unpublished),
    }
}

/// The row shown only when a mode has a degraded phase (`cluster-kill`: one node down;
/// `net-partition`: packet loss, then the slow link).
const DEGRADED_ROW: &str =
    "emit latency p50 / p99 degraded (one cluster node down / packet loss and slow link)";

/// The rows of the comparison table: label and value for a mode.
type Row = (&'static str, fn(&ModeResult) -> String);

const ROWS: &[Row] = &[
    ("emit calls", |r| r.emit_calls.to_string()),
    ("acknowledged by the sink (event ids)", |r| {
        r.acknowledged.to_string()
    }),
    ("refused by the sink (published anyway / not)", |r| {
        format!(
            "{} ({} / {})",
            r.not_stored,
            r.not_stored_published,
            r.not_stored - r.not_stored_published
        )
    }),
    ("received by the subscriber: distinct ids (items)", |r| {
        format!("{} ({})", r.subscriber_unique, r.subscriber_items)
    }),
    ("in the stream: distinct ids (items)", |r| {
        format!("{} ({})", r.stream_unique, r.stream_items)
    }),
    ("anti-entropy: found missing / re-published", |r| {
        format!(
            "{} / {}",
            r.anti_entropy_missing, r.anti_entropy_republished
        )
    }),
    (
        "stream sequence gaps / reader's consumer: delivered twice, skipped (read by sequence)",
        |r| {
            format!(
                "{} / {} / {}",
                r.stream_sequence_gaps, r.stream_reader_repeats, r.stream_read_by_sequence
            )
        },
    ),
    ("**LOST** (acknowledged, never in the stream)", |r| {
        format!("**{}**", r.lost)
    }),
    ("acknowledged, not seen by the subscriber", |r| {
        r.acked_not_seen_by_subscriber.to_string()
    }),
    ("duplicates at the subscriber: by id / after dedup", |r| {
        format!(
            "{} / {}",
            r.subscriber_duplicates_before_dedup, r.subscriber_duplicates_after_dedup
        )
    }),
    ("duplicates in the stream: by id / after dedup", |r| {
        format!(
            "{} / {}",
            r.stream_duplicates_before_dedup, r.stream_duplicates_after_dedup
        )
    }),
    ("time to drain after restore", drain),
    ("peak unpublished backlog", |r| r.peak_backlog.to_string()),
    ("emit latency p50 / p99 before", |r| {
        format!(
            "{:.1} / {:.1} ms",
            r.latency.before.p50_ms, r.latency.before.p99_ms
        )
    }),
    (DEGRADED_ROW, |r| match &r.latency.degraded {
        Some(l) => format!("{:.1} / {:.1} ms", l.p50_ms, l.p99_ms),
        None => "–".into(),
    }),
    ("emit latency p50 / p99 during the outage", |r| {
        format!(
            "{:.1} / {:.1} ms",
            r.latency.during.p50_ms, r.latency.during.p99_ms
        )
    }),
    ("emit latency p50 / p99 after", |r| {
        format!(
            "{:.1} / {:.1} ms",
            r.latency.after.p50_ms, r.latency.after.p99_ms
        )
    }),
    ("emitter memory: max RSS / peak (VmHWM)", |r| {
        format!(
            "{} / {}",
            kb(r.emitter_rss_max_kb),
            kb(r.emitter_hwm_max_kb)
        )
    }),
    (
        "lost by the bus after its ack, re-published by `dlq republish`",
        |r| {
            let runs: Vec<u64> = r.verify.iter().filter_map(|v| v.republished).collect();
            if runs.len() < r.verify.len() || runs.is_empty() {
                "not run".into()
            } else {
                runs.iter().sum::<u64>().to_string()
            }
        },
    ),
    ("`dlq verify` (missing / extra / diverging items)", |r| {
        let sum = |f: fn(&Verify) -> u64| r.verify.iter().map(f).sum::<u64>();
        if r.verify.iter().any(|v| v.exit.is_none()) {
            "not run".into()
        } else {
            format!(
                "{} / {} / {}",
                sum(|v| v.missing),
                sum(|v| v.extra),
                sum(|v| v.diverging)
            )
        }
    }),
];

/// The Markdown report.
pub fn markdown(d: &DrillResult) -> String {
    let mut s = String::new();
    let fault = d.fault.name();
    let _ = writeln!(s, "# Chaos drill: {fault}, {}s\n", d.duration_s);
    let _ = writeln!(s, "```\n{}\n```\n", d.command);
    let mut detail = String::new();
    if let Some(mode) = d.net_cut_mode {
        detail = format!(" (proxy mode {mode:?})").to_lowercase();
    }
    if let Some(mode) = d.sink_mode {
        detail = format!(" (sink mode {mode:?})");
    }
    if let Some(phases) = &d.partition_phases {
        detail = format!(
            " (nats-server in a network namespace, the emitters in another, joined by a veth \
             link that only they use; the subscriber and `dlq verify` reach the server over a \
             second link that is never faulted; a third of the duration each: {})",
            phases.join("; then ")
        );
    }
    if d.fault == crate::Fault::ClusterKill {
        detail = " (three-node JetStream cluster, stream `DLQ` with 3 replicas, emitters given \
                  all three URLs: the stream leader SIGKILLed, a second node at half the \
                  duration, both restarted at the end; the subscriber is on the third node)"
            .into();
    }
    let _ = writeln!(
        s,
        "Started {}. Fault `{fault}`{detail} for {} s after {} s of load; load continued {} s after \
         restoring. {} failures/s from {} emitter processes; {} CPUs. Both modes: {}; ours adds \
         the reconciler, the baseline (a plain sink-then-publish emitter) has none.\n",
        d.started_at, d.duration_s, d.warmup_s, d.after_s, d.rate, d.emitters, d.cpus, d.emit_policy
    );
    let modes: Vec<&ModeResult> = [d.baseline.as_ref(), d.ours.as_ref()]
        .into_iter()
        .flatten()
        .collect();
    let _ = write!(s, "| |");
    for m in &modes {
        let _ = write!(s, " {} |", title(m));
    }
    let _ = write!(s, "\n| --- |");
    for _ in &modes {
        let _ = write!(s, " ---: |");
    }
    s.push('\n');
    for (label, value) in ROWS {
        if *label == DEGRADED_ROW && modes.iter().all(|m| m.latency.degraded.is_none()) {
            continue;
        }
        let _ = write!(s, "| {label} |");
        for m in &modes {
            let _ = write!(s, " {} |", value(m));
        }
        s.push('\n');
    }
    match d.pass {
        Some(true) => s.push_str("\n**PASS**: our emitter lost nothing it acknowledged, and the subscriber saw no duplicate after dedup by id.\n"),
        Some(false) => s.push_str("\n**FAIL**: our emitter lost acknowledged events or the subscriber saw duplicates after dedup (see result.json).\n"),
        None => {}
    }
    s.push_str(
        "\nChart: `chart.svg` (emitted, received and backlog over time; the fault is shaded).\n",
    );
    for m in &modes {
        let _ = writeln!(s, "\n## Timeline ({})\n", title(m));
        for mark in &m.marks {
            let _ = writeln!(s, "- {:.1} s: {}", mark.t, mark.what);
        }
        if !m.lost_sample.is_empty() {
            let _ = writeln!(s, "\nSome lost ids: {}", m.lost_sample.join(", "));
        }
        let repaired: Vec<&str> = m
            .verify
            .iter()
            .flat_map(|v| v.republished_ids.iter().map(String::as_str))
            .collect();
        if !repaired.is_empty() {
            let _ = writeln!(
                s,
                "\nRe-published by `dlq republish`: {}",
                repaired.join(", ")
            );
        }
        if !m.stream_duplicate_sample.is_empty() {
            let _ = writeln!(
                s,
                "\nIn the stream more than once: {}",
                m.stream_duplicate_sample.join(", ")
            );
        }
    }
    s.push_str(READING);
    s
}

/// The column title of a mode.
pub fn title(m: &ModeResult) -> &'static str {
    if m.reconciler {
        "ours (reconciler)"
    } else {
        "baseline (ref. 003)"
    }
}

const READING: &str = "
## Reading it

- **acknowledged**: event ids whose emit returned `Ok` (durable in the sled sink); the scheduler
  believes these are safe. **LOST** counts those never found in the JetStream stream `DLQ` at the
  end (read by sequence, after the load stopped, the reconcilers drained and, for ours,
  `dlq republish` re-published what the bus lost after acknowledging it).
- The baseline keeps events it could not publish in its sink (that design is sink-first too),
  but nothing ever publishes them: every failure during the outage is missing from the bus.
- **duplicates by id**: the same event id more than once (re-publishes: JetStream drops them
  inside its duplicate window, a core subscriber sees them; repairs by `dlq republish` carry a
  new message id, so the stream keeps them). **after dedup**: the same logical event under two
  event ids; must be 0.
- **acknowledged, not seen by the subscriber**: the core subscriber misses what is published
  while it is itself reconnecting; the stream is the record.
- **time to drain**: from the end of the fault until every sink's oldest unpublished event was
  younger than 1.5 s (sampled every 500 ms), or until the backlog reached 0 after the load stopped.
";
