//! Keeping items whole before the log segments they point into are deleted.
//!
//! An item's sled value points at its events in the log (`crate::sink::projection::item_record`). Retention
//! deletes done segments (`crate::sink::writer::log_retention`); a live item created in one of them would
//! otherwise pin that segment, and every later one, for as long as it lives. Instead, before a
//! checkpoint deletes the segments through sequence `S`, every item created at or before `S`
//! that still points into the log is rewritten whole ([`ItemRecord::Inline`]) and the mark
//! `m/inlined_through = S` is stored after them; the checkpoint's flush makes both durable
//! before any segment is unlinked. A crash in between leaves some items whole and the mark
//! behind: those items only pin their segments a checkpoint longer. Later failures of a whole
//! item keep it whole (`crate::sink::projection::staged`).
//!
//! Items created above the mark may point into the log: the oldest of them is where the log
//! must still start ([`oldest_pointer_seq`]).

use tracing::info;

use crate::sink::projection::index_runs;
use crate::sink::projection::item_record::ItemRecord;
use crate::sink::projection::keys;
use crate::sink::projection::reads::TreeView;
use crate::sink::{show_key, SinkError};

/// Items rewritten per sled batch: bounds the memory of one step.
const ITEMS_PER_BATCH: usize = 2048;

/// The stored mark: every item created at or below it is kept whole (0: none).
pub(crate) fn inlined_through(tree: &sled::Tree) -> Result<u64, SinkError> {
    Ok(tree
        .get(keys::INLINED_THROUGH)?
        .and_then(|bytes| keys::decode_u64(&bytes))
        .unwrap_or(0))
}

/// The lowest sequence a live item may point at: the oldest `created_seq` above the mark.
pub(crate) fn oldest_pointer_seq(view: &TreeView<'_>) -> Result<Option<u64>, SinkError> {
    view.oldest_created_seq_above(inlined_through(view.tree)?)
}

/// Rewrites whole every item created at or below `through` that points into the log, then
/// raises the mark to `through`. Returns how many items were rewritten. Must run while no
/// group is being applied (the writer's checkpoint, after the applier went idle).
pub(crate) fn inline_through(view: &TreeView<'_>, through: u64) -> Result<u64, SinkError> {
    let mark = inlined_through(view.tree)?;
    if through <= mark {
        return Ok(0);
    }
    let mut batch = sled::Batch::default();
    let (mut in_batch, mut rewritten) = (0usize, 0u64);
    for job in view.job_ids() {
        let job = job?;
        let prefix_len = keys::fifo_of_job(&job).len();
        let from = keys::fifo(&job, mark.saturating_add(1), "");
        let to = keys::fifo(&job, through.saturating_add(1), "");
        for fifo_key in index_runs::range(view.tree, &from, Some(&to)) {
            let fifo_key = fifo_key?;
            let item_id =
                keys::item_of_fifo(&fifo_key, prefix_len).ok_or_else(|| SinkError::Corrupt {
                    key: show_key(&fifo_key),
                    reason: "malformed FIFO index key".into(),
                    source: None,
                })?;
            let item_key = keys::item(&job, &item_id);
            let Some(value) = view.tree.get(&item_key)? else {
                continue;
            };
            let (stored, record) = view.load_item(&item_key, &value)?;
            if matches!(record, ItemRecord::Inline(_)) {
                continue;
            }
            let json = serde_json::to_vec(&stored).map_err(|source| SinkError::Encode {
                what: format!("item {job}/{item_id}"),
                source,
            })?;
            batch.insert(item_key, ItemRecord::Inline(json).encode());
            (in_batch, rewritten) = (in_batch + 1, rewritten + 1);
            if in_batch == ITEMS_PER_BATCH {
                view.tree.apply_batch(std::mem::take(&mut batch))?;
                in_batch = 0;
            }
        }
    }
    batch.insert(keys::INLINED_THROUGH, &through.to_be_bytes());
    view.tree.apply_batch(batch)?;
    if rewritten > 0 {
        info!(
            items = rewritten,
            through, "kept items whole in the projection before deleting the log segments they were created in"
        );
    }
    Ok(rewritten)
}
