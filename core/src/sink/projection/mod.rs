//! The projection: what sled holds of the log, for queries and decisions.
//!
//! The writer stages each group's changes ([`staged`]) and the applier ([`applier`]) applies
//! them to sled after the log made the group durable, with the `applied_through` mark in the
//! same batch ([`projector`]). Items are pointer records into the log ([`item_record`]), kept
//! whole before their segment goes ([`inline_items`]); indexes are sorted runs
//! ([`index_runs`]); the publish state and parked set say what the bus has
//! ([`publish_state`], [`parked`]); [`known_items`] lets the writer
//! decide a new item without reading sled. Nothing here writes the log or flushes sled: the writer does.

pub(super) mod applier;
pub(super) mod counters;
pub(super) mod format;
pub(super) mod index_runs;
pub(super) mod inline_items;
pub(super) mod item_record;
pub(super) mod keys;
pub(super) mod known_items;
pub(super) mod parked;
pub(super) mod projector;
pub(super) mod publish_state;
pub(super) mod reads;
pub(crate) mod sled_open;
pub(super) mod snapshot;
pub(super) mod staged;

/// One change of the projection: a key and its new value (`None`: remove the key).
pub(super) type Write = (Vec<u8>, Option<Vec<u8>>);
