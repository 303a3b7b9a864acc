//! Consumers: rebuild the dead-letter state from the event stream alone.
//!
//! [`fold`] is the pure part (arrival order and duplicates do not matter); [`stream`] reads the
//! JetStream stream from the start into a fold; [`verify`] compares a fold's projection with an
//! emitter's sink. A durable, checkpointed consumer with its own store is the next step (issue
//! 5); this module is its core.

pub mod fold;
pub mod stream;
pub mod verify;

pub use fold::{Fold, FoldStats, Offer};
pub use stream::{read_from_start, ReadError, StreamRead};
pub use verify::{compare, Difference};
