//! The writer's checkpoints: the publish state saved and items kept whole on the writer, sled's
//! flush (on the writer, or for a tick on a thread of its own), then the segments deleted.

use tracing::warn;

use super::Writer;
use crate::sink::projection::inline_items;
use crate::sink::projection::keys;
use crate::sink::projection::reads::TreeView;
use crate::sink::writer::checkpoint::{flush_shared, BackgroundFlush, CheckpointError};

impl Writer {
    /// Saves the publish state in sled, makes sled durable, then deletes the log segments that
    /// are applied, checkpointed, published and past retention. Waits for a tick's flush first.
    pub(super) fn checkpoint(&mut self) -> Result<(), CheckpointError> {
        self.finish_flush(true);
        let removable = self.prepare_checkpoint(true)?;
        self.flush_here(removable)
    }

    /// A checkpoint that deletes no log segment (a rebuild's, while the projection is not
    /// what the log and the items kept whole make).
    pub(super) fn checkpoint_keeping_log(&mut self) -> Result<(), CheckpointError> {
        self.finish_flush(true);
        self.prepare_checkpoint(false)?;
        self.flush_here(0)
    }

    /// Flushes sled on the writer and completes the checkpoint.
    fn flush_here(&mut self, removable: u64) -> Result<(), CheckpointError> {
        let flushed = flush_shared(&self.flusher);
        if flushed.is_ok() {
            self.changed = false;
        }
        self.complete_checkpoint(flushed, removable)
    }

    /// A tick's checkpoint: sled's flush runs on a thread of its own while the writer goes on
    /// ([`Writer::finish_flush`] completes it). One at a time.
    pub(super) fn start_checkpoint(&mut self) {
        if self.flushing.is_some() {
            return;
        }
        let removable = match self.prepare_checkpoint(true) {
            Ok(removable) => removable,
            Err(reason) => {
                warn!(%reason, "sink checkpoint failed; the log keeps every event until one succeeds");
                return;
            }
        };
        match BackgroundFlush::start(&self.flusher, &self.faults, removable) {
            Ok(flushing) => {
                // Whatever is applied from now on is for the next checkpoint.
                self.changed = false;
                self.flushing = Some(flushing);
            }
            Err(err) => {
                warn!(error = %err, "cannot start a thread to flush sled; the writer flushes it");
                if let Err(reason) = self.flush_here(removable) {
                    warn!(%reason, "sink checkpoint failed; the log keeps every event until one succeeds");
                }
            }
        }
    }

    /// Completes a tick's checkpoint whose flush ended (or, with `wait`, once it ends).
    pub(super) fn finish_flush(&mut self, wait: bool) {
        let Some(flushing) = self
            .flushing
            .take_if(|flushing| wait || flushing.is_finished())
        else {
            return;
        };
        let removable = flushing.removable;
        if let Err(reason) = self.complete_checkpoint(flushing.wait(), removable) {
            self.changed = true;
            warn!(%reason, "sink checkpoint failed; the log keeps every event until one succeeds");
        }
    }

    /// The checkpoint's part before sled's flush: the applier drained, the publish state saved
    /// in sled, the items created in the segments about to go kept whole. Returns the last
    /// sequence whose segment may go once the flush succeeded (0 without `delete_segments`).
    fn prepare_checkpoint(&mut self, delete_segments: bool) -> Result<u64, CheckpointError> {
        if self.faults.fail_flush() {
            return Err(CheckpointError::Injected);
        }
        if self.applier.is_some() {
            self.applied.wait_idle();
        }
        let (published, keep_from) = match self.publish.lock() {
            Ok(mut state) => (state.encode(), state.keep_from()),
            Err(_) => return Err(CheckpointError::PublishStateUnavailable),
        };
        self.tree.insert(keys::PUBLISHED, published)?;
        let done_through = keep_from.saturating_sub(1).min(self.applied.through());
        // Items created in the segments about to go are kept whole first, durably with them.
        let removable = match delete_segments {
            true => self.retention.removable_through(&self.log, done_through),
            false => 0,
        };
        if removable == 0 {
            return Ok(0);
        }
        let reader = self.log.reader();
        let view = TreeView {
            tree: &self.tree,
            log: &reader,
        };
        match inline_items::inline_through(&view, removable) {
            Ok(_) => Ok(removable),
            Err(err) => {
                warn!(error = %err, "cannot keep items whole before deleting the log segments they were created in; none is deleted, the next checkpoint retries");
                Ok(0)
            }
        }
    }

    /// The checkpoint's part after sled's flush: on success, deletes the segments through
    /// `removable` that no live item points into.
    fn complete_checkpoint(
        &mut self,
        flushed: Result<(), CheckpointError>,
        removable: u64,
    ) -> Result<(), CheckpointError> {
        if let Err(reason) = flushed {
            if let Ok(mut state) = self.publish.lock() {
                state.mark_dirty();
            }
            return Err(reason);
        }
        if removable == 0 {
            return Ok(());
        }
        let reader = self.log.reader();
        let view = TreeView {
            tree: &self.tree,
            log: &reader,
        };
        // No segment goes while a live item may point into it.
        let through = match inline_items::oldest_pointer_seq(&view) {
            Ok(Some(oldest)) => removable.min(oldest.saturating_sub(1)),
            Ok(None) => removable,
            Err(err) => {
                warn!(error = %err, "cannot tell which log segments live items point into; none is deleted");
                0
            }
        };
        // Segments are deleted whole: capping the retention's answer is all it takes.
        if through > 0 {
            if let Err(err) = self.log.remove_through(through) {
                warn!(error = %err, "cannot delete old log segments; the next checkpoint retries");
            }
        }
        Ok(())
    }
}
