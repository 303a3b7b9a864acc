//! Retention: items first failed more than `retention_days` ago are purged in the background
//! (through [`crate::sink::purge`], the same path as `dlq purge`); the reconciler publishes the
//! removals.

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

use crate::sink::Sink;

/// How long items are kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RetentionConfig {
    /// Items first failed longer ago than this many days are purged; `None` keeps them forever.
    pub retention_days: Option<u32>,
    /// How often the check runs.
    #[serde(with = "humantime_serde")]
    pub check_interval: Duration,
}

impl Default for RetentionConfig {
    fn default() -> Self {
        RetentionConfig {
            retention_days: Some(30),
            check_interval: Duration::from_secs(3600),
        }
    }
}

impl RetentionConfig {
    /// The cutoff for `now`: items first failed before it are expired.
    pub fn cutoff(&self, now: DateTime<Utc>) -> Option<DateTime<Utc>> {
        self.retention_days
            .map(|days| now - chrono::Duration::days(i64::from(days)))
    }
}

/// Purges expired items every `check_interval`; the reconciler publishes the removals.
pub(super) async fn retention_task<S: Sink>(
    sink: Arc<S>,
    config: RetentionConfig,
    wake: Arc<Notify>,
    shutdown: CancellationToken,
) {
    loop {
        if let Some(cutoff) = config.cutoff(Utc::now()) {
            match crate::sink::purge(&*sink, cutoff, None, None).await {
                Ok(0) => {}
                Ok(removed) => {
                    debug!(removed, "retention purged expired items");
                    wake.notify_one();
                }
                Err(err) => warn!(error = %err, "retention purge failed; will try again"),
            }
        }
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(config.check_interval) => {}
        }
    }
}
