//! Error reporting during a job, as `error_collection` asks: each failure as it happens
//! (`immediate`), in groups of N (`batched: { size: N }`), or all at the end (`aggregate`,
//! the default). Reports go to the progress display and the job's events.

use super::context::JobContext;
use super::job_events::JobEventKind;
use super::progress::Progress;
use super::workflow::ErrorCollection;
use dlq::bus::Bus;

/// Collects failure lines and emits them per the strategy.
#[derive(Debug)]
pub(super) struct ErrorCollector {
    strategy: ErrorCollection,
    pending: Vec<String>,
}

impl ErrorCollector {
    /// A collector for `strategy`.
    pub(super) fn new(strategy: ErrorCollection) -> Self {
        ErrorCollector {
            strategy,
            pending: Vec::new(),
        }
    }

    /// Adds one failed item's line; reports now if the strategy says so.
    pub(super) fn add<B: Bus>(&mut self, ctx: &JobContext<B>, progress: &Progress, line: String) {
        self.pending.push(line);
        let due = match self.strategy {
            ErrorCollection::Immediate => true,
            ErrorCollection::Batched { size } => self.pending.len() >= size.max(1),
            ErrorCollection::Aggregate => false,
        };
        if due {
            self.flush(ctx, progress);
        }
    }

    /// Reports whatever is collected.
    pub(super) fn flush<B: Bus>(&mut self, ctx: &JobContext<B>, progress: &Progress) {
        if self.pending.is_empty() {
            return;
        }
        let errors = std::mem::take(&mut self.pending);
        progress.note(&format!("errors ({}):", errors.len()));
        for line in &errors {
            progress.note(&format!("  {line}"));
        }
        ctx.event(JobEventKind::ErrorReport { errors });
    }
}
