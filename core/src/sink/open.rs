//! Opening a data directory: sled, the migration of an older format, the log's recovery, the
//! publish state, and applying what the projection has not seen yet.

use std::path::Path;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};

use chrono::Utc;
use sha2::{Digest, Sha256};
use tokio::sync::mpsc;
use tracing::{info, warn};

use super::config::{SinkConfig, LOG_DIR, MAX_VALUE_BYTES};
use super::handle::{Inner, LocalSink};
use super::legacy::migrate;
use super::log::LogWriter;
use super::log_fs;
use super::projection::applier::{self, Applied};
use super::projection::format::{self as projection_format, Takeover};
use super::projection::known_items::KnownItems;
use super::projection::publish_state::PublishState;
use super::projection::sled_open::{io_hint, open_db, RECOVERY_HINT};
use super::projection::{keys, projector};
use super::writer::checkpoint::SledFlusher;
use super::writer::epoch::Epoch;
use super::writer::log_node;
use super::writer::log_retention::{LogFloor, Retention};
use super::writer::seq_floor::SeqFloor;
use super::writer::{spawn_ticker, Writer};
use super::{Faults, SinkError};
use crate::domain::command::Limits;

/// The smallest sled page cache a sink opens with (sled itself panics below 256 bytes).
pub(crate) const MIN_CACHE_BYTES: u64 = 1024 * 1024;

/// Opens the sink described by `config` and starts its writer thread.
fn open(config: SinkConfig) -> Result<Inner, SinkError> {
    if config.max_event_bytes > MAX_VALUE_BYTES {
        return Err(SinkError::Rejected(format!(
            "max_event_bytes {} is above the sink's limit of {MAX_VALUE_BYTES} bytes",
            config.max_event_bytes
        )));
    }
    if config.cache_capacity_bytes < MIN_CACHE_BYTES {
        return Err(SinkError::Rejected(format!(
            "the sled page cache of {} bytes is below its minimum of 1 MiB: set sink.cache_capacity_mb to 1 or more",
            config.cache_capacity_bytes
        )));
    }
    if let Some(node_id) = &config.node_id {
        crate::domain::command::validate_id::<SinkError>("node_id", node_id)
            .map_err(|err| SinkError::Rejected(err.to_string()))?;
    }
    let open_error = |context: &str, err: std::io::Error| SinkError::Open {
        path: config.path.clone(),
        reason: format!("{context}: {err}"),
        hint: io_hint(&err).unwrap_or(RECOVERY_HINT),
        source: Some(err.into()),
    };
    let db = open_db(&config)?;
    let tree: sled::Tree = (*db).clone();
    let mut flusher = SledFlusher::open(db, &config.path)
        .map_err(|err| open_error("cannot open sled's log file for fsync", err))?;
    let node_id = resolve_node_id(&tree, &config)?;
    let log_config = config.log_config();
    migrate::to_current(&config.path, &tree, &mut flusher, &log_config)?;
    let applied = projector::applied_through(&tree)?;
    if applied > 0 && !config.path.join(LOG_DIR).exists() && !config.simulated_log() {
        return Err(log_behind(&config, applied, 0));
    }
    // A unit struct without the `testing` feature; the switches of the tests with it.
    #[allow(clippy::default_constructed_unit_structs)]
    let faults = Faults::default();
    let fs = log_fs::open(&config, &faults)
        .map_err(|err| open_error("cannot open the log directory", err))?;
    let publish = load_publish_state(&tree)?;
    // Segments with nothing left to apply or publish are scanned only when read.
    let done_through = applied.min(publish.keep_from().saturating_sub(1));
    // The log's own errors say what to do (damage names the file and offset).
    let opened = LogWriter::open_lazy(fs, log_config, done_through);
    let (mut log, recovery) = opened.map_err(|err| SinkError::Open {
        path: config.path.join(LOG_DIR),
        reason: err.to_string(),
        hint: "Nothing was changed.",
        source: Some(err.into()),
    })?;
    for (file, offset, reason) in &recovery.torn {
        info!(%file, offset, %reason, "the log ends in an append a crash cut short (never acknowledged); ignored");
    }
    // Sequences never go back: not below the old format's floor, nor below what the
    // projection or the publish state have seen.
    let floor = SeqFloor::open(&config.path)?.floor();
    log.skip_to(floor.max(applied + 1).max(publish.watermark() + 1));
    let reader = log.reader();
    let format = tree
        .get(keys::PROJECTION_FORMAT)?
        .and_then(|bytes| keys::decode_u64(&bytes));
    // Compared with how far the log went, not with its newest event: retention may have
    // deleted every event while an empty newest segment (a failed group) stays.
    if applied > log.settled_through() {
        return Err(log_behind(&config, applied, log.settled_through()));
    }
    // A projection of another layout is rebuilt from the log; formats 2 to 4 are taken over
    // (only once the open is not refused: a refused open changes nothing).
    let (takeover, taken_over) = projection_format::take_over(&tree, format)?;
    if taken_over.signature_keys > 0 {
        info!(
            keys = taken_over.signature_keys,
            "deleted the signature index of an older projection format (nothing reads it)"
        );
    }
    if taken_over.index_entries > 0 {
        info!(
            entries = taken_over.index_entries,
            "moved the index entries of an older projection format into sorted runs"
        );
    }
    let rebuild = takeover == Takeover::Rebuild;
    let (applied, caught_up) = if rebuild {
        (0, 0)
    } else {
        projector::catch_up(&tree, &reader, applied)?
    };
    if caught_up > 0 {
        info!(
            events = caught_up,
            "applied logged events the projection did not have (the last run did not close cleanly)"
        );
    }
    let epoch = Epoch::open(&config.path, &reader)?;
    let publish = Arc::new(Mutex::new(publish));
    let floor = LogFloor::default();
    let (requests, rx) = mpsc::channel(config.queue_depth.max(1));
    let applied = Arc::new(Applied::new(applied));
    let (jobs, to_apply) = std::sync::mpsc::channel();
    let applier = applier::spawn(tree.clone(), applied.clone(), to_apply, faults.clone()).map_err(
        |source| SinkError::Io {
            context: "cannot start the applier thread".into(),
            source,
        },
    )?;
    let item_scans = Arc::new(AtomicU64::new(0));
    let mut writer = Writer {
        tree: tree.clone(),
        flusher: Arc::new(Mutex::new(flusher)),
        flushing: None,
        log,
        applied: applied.clone(),
        jobs: Some(jobs),
        applier: Some(applier),
        changed: caught_up > 0,
        publish: publish.clone(),
        retention: Retention {
            policy: config.log_retention,
            floor: floor.clone(),
        },
        node_id: node_id.clone(),
        epoch,
        limits: Limits {
            capacity_per_job: config.capacity_per_job,
        },
        max_event_bytes: config.max_event_bytes,
        max_group: config.max_group.max(1),
        faults: faults.clone(),
        known: KnownItems::new(item_scans.clone()),
    };
    if rebuild {
        let applied = writer.rebuild_durably()?;
        if applied > 0 {
            info!(
                applied,
                from = ?format,
                to = keys::CURRENT_PROJECTION_FORMAT,
                "rebuilt the projection from the log"
            );
        }
    }
    let handle = std::thread::Builder::new()
        .name("dlq-sink-writer".into())
        .spawn(move || writer.run(rx))
        .map_err(|source| SinkError::Io {
            context: "cannot start the writer thread".into(),
            source,
        })?;
    spawn_ticker(requests.downgrade(), config.checkpoint_every)?;
    Ok(Inner {
        tree,
        node_id,
        requests,
        store_timeout: config.store_timeout,
        log: reader,
        applied,
        publish,
        #[cfg(any(test, feature = "testing"))]
        faults,
        log_floor: floor,
        #[cfg(any(test, feature = "testing"))]
        marks_synced: Default::default(),
        #[cfg(any(test, feature = "testing"))]
        item_scans,
        writer: Mutex::new(Some(handle)),
    })
}

/// log/ was removed or an older copy restored: rebuilding would drop what the projection
/// holds, so opening refuses and the operator decides.
fn log_behind(config: &SinkConfig, applied: u64, durable: u64) -> SinkError {
    SinkError::Open {
        path: config.path.join(LOG_DIR),
        reason: format!(
            "the projection holds events up to sequence {applied} but the log only up to {durable}: log/ was removed, or an older copy of it restored"
        ),
        source: None,
        hint: "Nothing was changed. Put back the log/ directory that belongs to this database. To keep only what this log/ holds instead, move sled's files aside (db, conf, blobs/ and every snap.* file): the next open rebuilds the projection from log/ under the same node id; the events log/ lacks, and items older than the log's retention, are then only in the NATS stream.",
    }
}

/// The publish state saved at the last checkpoint, with the pending and parked keys. An
/// unreadable saved state starts from nothing published: everything is published again
/// (duplicates, which JetStream and consumers drop), never lost.
fn load_publish_state(tree: &sled::Tree) -> Result<PublishState, SinkError> {
    let seqs = |prefix: &[u8]| -> Result<Vec<u64>, SinkError> {
        let mut seqs = Vec::new();
        for entry in tree.scan_prefix(prefix) {
            if let Some(seq) = keys::seq_of(&entry?.0) {
                seqs.push(seq);
            }
        }
        Ok(seqs)
    };
    let (pending, parked) = (seqs(keys::UNPUBLISHED)?, seqs(keys::PARKED)?);
    let saved = tree.get(keys::PUBLISHED)?;
    match PublishState::load(saved.as_deref(), pending.clone(), parked.clone()) {
        Some(state) => Ok(state),
        None => {
            warn!("the saved publish state is unreadable: every logged event is published again (the stream and consumers drop duplicates by id)");
            PublishState::load(None, pending, parked).ok_or(SinkError::Unavailable(
                "cannot start an empty publish state",
            ))
        }
    }
}

impl LocalSink {
    /// Opens (or creates) the data directory and starts its writer thread. A directory of the
    /// previous format (the log in sled) is migrated first (see `migrate`).
    pub fn open(config: SinkConfig) -> Result<Self, SinkError> {
        Ok(LocalSink {
            inner: Arc::new(open(config)?),
        })
    }
}

fn resolve_node_id(tree: &sled::Tree, config: &SinkConfig) -> Result<String, SinkError> {
    let stored = tree
        .get(keys::NODE_ID)?
        .map(|v| String::from_utf8_lossy(&v).into_owned());
    match (stored, &config.node_id) {
        (Some(stored), Some(wanted)) if &stored != wanted => Err(SinkError::Open {
            path: config.path.clone(),
            reason: format!("the database belongs to node '{stored}', not '{wanted}'"),
            hint: "Each node needs its own data directory: pass the matching --node-id or another --data-dir.",
            source: None,
        }),
        (Some(stored), _) => Ok(stored),
        (None, wanted) => {
            // A given node id was validated before the database was opened.
            // A database that lost its node id beside a log keeps the log's.
            let from_log = || log_node::node_id_in_log(&config.path.join(LOG_DIR));
            let node_id = match wanted {
                Some(id) => id.clone(),
                None => from_log().unwrap_or_else(|| generated_node_id(&config.path)),
            };
            tree.insert(keys::NODE_ID, node_id.as_bytes())?;
            tree.flush()?;
            Ok(node_id)
        }
    }
}

/// A new node id: stable once stored, unique enough across hosts and directories.
fn generated_node_id(path: &Path) -> String {
    let mut hasher = Sha256::new();
    hasher.update(path.to_string_lossy().as_bytes());
    hasher.update(Utc::now().timestamp_nanos_opt().unwrap_or(0).to_be_bytes());
    hasher.update(std::process::id().to_be_bytes());
    let digest = hasher.finalize();
    let hex: String = digest.iter().take(4).map(|b| format!("{b:02x}")).collect();
    format!("node-{hex}")
}
