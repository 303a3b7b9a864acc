//! Consumers: rebuild the dead-letter state from the event stream alone.
//!
//! `fold` is the pure part (arrival order and duplicates do not matter); a message that is not
//! a dlq event is counted in [`FOREIGN`] and skipped, never fatal; `stream` reads the
//! JetStream stream from the start into a fold; `verify` compares a fold's projection with an
//! emitter's sink; [`repair`] re-publishes what a stream lost; `durable` keeps a consumer's state in its own `store`, checkpointed by
//! stream sequence.

mod cursor;
mod durable;
mod fetch;
mod fold;
mod foreign;
mod item_log;
pub mod repair;
mod seqset;
mod store;
mod stream;
mod verify;

pub use durable::{
    run_durable, run_durable_observed, ConsumeError, DurableConfig, DurableRun, Progress, ABSENT,
    APPLIED, DUPLICATES, LAG, OLDEST_WAITING_AGE, READ_BY_SEQUENCE, WAITING,
};
pub use fold::{
    AcceptedGap, Chain, Fold, FoldStats, HeldItem, HeldItems, NodeCursor, Offer,
    MAX_WAITING_PER_NODE,
};
pub use foreign::{classify, Foreign, FOREIGN, MAX_MESSAGE_BYTES};
pub use store::{ConsumerStore, PendingSave, StoreError};
pub use stream::{
    for_each_message, read_from_start, ReadError, StreamMessage, StreamRead, StreamSpan,
};
pub use verify::{compare, compare_node, explain_held, Difference};

/// What benches outside the crate must reach inside the consumer: not part of the API, and
/// built only with the `testing` feature.
#[cfg(any(test, feature = "testing"))]
#[doc(hidden)]
pub mod test_support {
    use crate::domain::projection::StoredItem;

    /// `items` in the chunks a durable consumer's store writes them in (its item log), so a
    /// bench can time sled writing exactly those bytes.
    pub fn item_chunks<'a>(
        items: impl IntoIterator<Item = &'a StoredItem>,
    ) -> Result<Vec<Vec<u8>>, serde_json::Error> {
        super::item_log::encode(items.into_iter().map(super::item_log::ChangeRef::Put))
    }
}
