//! Consumers: rebuild the dead-letter state from the event stream alone.
//!
//! `fold` is the pure part (arrival order and duplicates do not matter); a message that is not
//! a dlq event is counted in [`FOREIGN`] and skipped, never fatal; `stream` reads the
//! JetStream stream from the start into a fold; `verify` compares a fold's projection with an
//! emitter's sink; [`repair`] re-publishes what a stream lost; `durable` keeps a consumer's state in its own `store`, checkpointed by
//! stream sequence.

mod cursor;
mod durable;
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
