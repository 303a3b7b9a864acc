//! The domain core: dead-lettered items, the events that change them, and the pure rules that
//! turn a request into events and events into state. Nothing here does I/O.
//!
//! - [`model`]: the item format (`DeadLetteredItem`, `FailureDetail`, `ErrorType`).
//! - [`attempt`]: describing one failed attempt (`FailureDetail::builder`).
//! - [`failure`]: building a complete item from failed attempts (`DeadLetteredItem::new`).
//! - [`signature`]: classifying failures, error signatures and patterns, remediation hints.
//! - [`event`]: the events of the log and their wire form.
//! - [`command`]: what a caller asks for, and [`command::decide`], which events it produces.
//! - [`merge_patch`]: JSON merge patch (RFC 7396), how an operator edits an item's data.
//! - [`projection`]: applying events to items; the state every reader queries.
//! - [`timefmt`]: the timestamp formats items and events use.

pub mod attempt;
pub mod command;
pub mod event;
pub mod failure;
pub mod merge_patch;
pub mod model;
pub mod projection;
pub mod signature;
pub mod timefmt;
