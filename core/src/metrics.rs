//! Metric names, their descriptions, and the Prometheus exporter.
//!
//! Everything goes through the `metrics` facade; without an installed recorder the calls are
//! no-ops, so the library never requires Prometheus.

use std::net::SocketAddr;

use metrics::{describe_counter, describe_gauge, describe_histogram, Unit};
use thiserror::Error;

/// Publishes that failed after every retry, by `topic`.
pub const EMIT_FAILURES: &str = "dlq_emit_failures_total";
/// Stored events no background publish was started for, left to the reconciler, by `topic`
/// and `reason` (`bus_down`, `pending_limit`, `shutdown`).
pub const EMIT_DEFERRED: &str = "dlq_emit_deferred_total";
/// Appends the sink could not make durable.
pub const SINK_FAILURES: &str = "dlq_sink_failures_total";
/// Writes a caller was told were stored late (`Unconfirmed`) whose late write failed.
pub const LATE_STORE_FAILURES: &str = "dlq_late_store_failures_total";
/// Late-failed writes (told `Unconfirmed`) waiting to be stored again or published.
pub const UNSTORED_WAITING: &str = "dlq_unstored_waiting";
/// Late-failed writes lost: the emitter shut down before it could store or publish them.
pub const UNSTORED_DROPPED: &str = "dlq_unstored_dropped_total";
/// Loss markers published in place of stored events whose log entry cannot be read.
pub const LOSS_MARKERS: &str = "dlq_loss_markers_total";
/// Events the bus has not acknowledged yet.
pub const UNPUBLISHED: &str = "dlq_unpublished_events";
/// Items in the DLQ (all jobs), counted when `/metrics` is scraped.
pub const ITEMS: &str = "dlq_items";
/// Events published by the reconciler.
pub const RECONCILED: &str = "dlq_reconciled_total";
/// Age of the oldest unpublished event.
pub const OLDEST_UNPUBLISHED_AGE: &str = "dlq_oldest_unpublished_age_seconds";
/// Events the reconciler parked (the bus refused them for good, or they cannot be read), by
/// `reason` (`rejected`, `encode`, `unreadable`).
pub const PARKED_TOTAL: &str = "dlq_parked_total";
/// Events parked now, waiting for `dlq reconcile --retry-parked`.
pub const PARKED: &str = "dlq_parked_events";
/// Events stored durably, by `kind`.
pub const EVENTS_STORED: &str = "dlq_events_stored_total";
/// Groups of appends the sink's writer made durable, each with one write and one `fdatasync`
/// of the log: stored events over it is the average group.
pub const SINK_GROUP_COMMITS: &str = "dlq_sink_group_commits_total";
/// Events acknowledged by the bus on the emit path, by `topic`.
pub const PUBLISHED: &str = "dlq_published_total";
/// Time an emit call took, in seconds.
pub const EMIT_DURATION: &str = "dlq_emit_duration_seconds";

/// Acknowledged events anti-entropy checked in the stream.
pub const ANTI_ENTROPY_CHECKED: &str = "dlq_anti_entropy_checked_total";
/// Acknowledged events anti-entropy found missing from the stream.
pub const ANTI_ENTROPY_MISSING: &str = "dlq_anti_entropy_missing_total";
/// Missing events anti-entropy published again and the stream stored.
pub const ANTI_ENTROPY_REPUBLISHED: &str = "dlq_anti_entropy_republished_total";
/// Anti-entropy re-publishes the stream answered as duplicates (not stored).
pub const ANTI_ENTROPY_DUPLICATES: &str = "dlq_anti_entropy_duplicates_total";
/// Acknowledged events anti-entropy still checks.
pub const ANTI_ENTROPY_TRACKED: &str = "dlq_anti_entropy_tracked_events";
/// Acknowledged events anti-entropy stopped checking early because `max_tracked` was reached.
pub const ANTI_ENTROPY_DROPPED: &str = "dlq_anti_entropy_dropped_total";
/// How long ago the oldest acknowledgement anti-entropy still checks was made (0: none): about
/// `horizon` plus `interval` while the passes keep up, growing when they fall behind.
pub const ANTI_ENTROPY_OLDEST_UNCHECKED_AGE: &str = "dlq_anti_entropy_oldest_unchecked_age_seconds";
/// When the last anti-entropy pass completed (Unix seconds).
pub const ANTI_ENTROPY_LAST_PASS: &str = "dlq_anti_entropy_last_pass_timestamp_seconds";

/// Items of a running job, by `job_id` and `outcome` (succeeded, dead_lettered, skipped, pending).
pub const JOB_ITEMS: &str = "dlq_job_items";
/// Share of a job's completed items that failed, by `job_id`.
pub const JOB_FAILURE_RATE: &str = "dlq_job_failure_rate";
/// Items that failed every attempt, by `job_id` and `error_type`.
pub const JOB_FAILURES: &str = "dlq_job_failures_total";
/// 1 while a job's circuit breaker is open or half-open, by `job_id`.
pub const JOB_CIRCUIT_OPEN: &str = "dlq_job_circuit_open";

/// Registers the descriptions of every metric above.
pub fn describe() {
    describe_gauge!(JOB_ITEMS, "Items of a job by outcome");
    describe_gauge!(
        JOB_FAILURE_RATE,
        "Share of a job's completed items that failed"
    );
    describe_counter!(
        JOB_FAILURES,
        "Items that failed every attempt, by job and error type"
    );
    describe_gauge!(
        JOB_CIRCUIT_OPEN,
        "1 while a job's circuit breaker is not closed"
    );
    describe_counter!(
        EMIT_FAILURES,
        "Publishes that failed after every retry, by topic"
    );
    describe_counter!(
        EMIT_DEFERRED,
        "Stored events left to the reconciler without a publish attempt, by topic and reason"
    );
    describe_counter!(SINK_FAILURES, "Appends the sink could not make durable");
    describe_counter!(
        LOSS_MARKERS,
        "Loss markers published in place of stored events whose log entry cannot be read"
    );
    describe_counter!(
        LATE_STORE_FAILURES,
        "Writes reported as stored late (Unconfirmed) whose late write failed: their volatile copy was published"
    );
    describe_gauge!(
        UNSTORED_WAITING,
        "Late-failed writes (told Unconfirmed) waiting to be stored again or published"
    );
    describe_counter!(
        UNSTORED_DROPPED,
        "Late-failed writes lost: the emitter shut down before it could store or publish them"
    );
    describe_gauge!(UNPUBLISHED, "Events the bus has not acknowledged yet");
    describe_gauge!(
        ITEMS,
        "Items in the DLQ (all jobs), counted when /metrics is scraped"
    );
    describe_counter!(RECONCILED, "Events published by the reconciler");
    describe_gauge!(
        OLDEST_UNPUBLISHED_AGE,
        Unit::Seconds,
        "Age of the oldest unpublished event"
    );
    describe_counter!(
        PARKED_TOTAL,
        "Events the reconciler parked, by reason (rejected, encode, unreadable)"
    );
    describe_gauge!(
        PARKED,
        "Events parked now, waiting for dlq reconcile --retry-parked"
    );
    describe_counter!(EVENTS_STORED, "Events stored durably, by kind");
    describe_counter!(
        SINK_GROUP_COMMITS,
        "Groups of appends the sink's writer made durable, one write and one fdatasync each"
    );
    describe_counter!(
        PUBLISHED,
        "Events acknowledged by the bus on the emit path, by topic"
    );
    describe_histogram!(EMIT_DURATION, Unit::Seconds, "Time an emit call took");
    describe_counter!(
        ANTI_ENTROPY_CHECKED,
        "Acknowledged events anti-entropy checked in the stream"
    );
    describe_counter!(
        ANTI_ENTROPY_MISSING,
        "Acknowledged events anti-entropy found missing from the stream"
    );
    describe_counter!(
        ANTI_ENTROPY_REPUBLISHED,
        "Lost events anti-entropy published again and the stream stored"
    );
    describe_counter!(
        ANTI_ENTROPY_DUPLICATES,
        "Anti-entropy re-publishes answered as duplicates (not stored)"
    );
    describe_counter!(
        ANTI_ENTROPY_DROPPED,
        "Acknowledged events anti-entropy stopped checking early (max_tracked reached)"
    );
    describe_gauge!(
        ANTI_ENTROPY_TRACKED,
        "Acknowledged events anti-entropy still checks"
    );
    describe_gauge!(
        ANTI_ENTROPY_OLDEST_UNCHECKED_AGE,
        Unit::Seconds,
        "Age of the oldest acknowledgement anti-entropy has not yet checked past its horizon"
    );
    describe_gauge!(
        ANTI_ENTROPY_LAST_PASS,
        Unit::Seconds,
        "When the last anti-entropy pass completed, in Unix seconds"
    );
}

/// The exporter could not start.
#[derive(Debug, Error)]
#[error("cannot serve metrics on {addr}: {reason} (choose another --metrics-addr)")]
pub struct MetricsError {
    addr: SocketAddr,
    reason: String,
}

/// Installs the Prometheus recorder and serves `/metrics` on `addr`. Needs a Tokio runtime.
pub fn serve_prometheus(addr: SocketAddr) -> Result<(), MetricsError> {
    metrics_exporter_prometheus::PrometheusBuilder::new()
        .with_http_listener(addr)
        .install()
        .map_err(|err| MetricsError {
            addr,
            reason: err.to_string(),
        })?;
    describe();
    Ok(())
}
