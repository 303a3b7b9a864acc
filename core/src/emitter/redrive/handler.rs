//! The redrive handler: how an embedding scheduler takes an item back in-process.

use std::future::Future;
use std::pin::Pin;

use crate::domain::event::RedriveTarget;
use crate::domain::model::DeadLetteredItem;

/// What a [`RedriveHandler`] returns: `Ok` when the item's work now succeeded (the item is
/// resolved and leaves the queue), `Err(message)` when it failed again (the item stays).
pub type RedriveFuture = Pin<Box<dyn Future<Output = Result<(), String>> + Send>>;

/// Takes an item an operator redrives back into the scheduler's own work (re-run it, or
/// re-enqueue it on its original queue and wait for the answer). Registered with
/// [`EmitterBuilder::redrive_handler`](crate::EmitterBuilder::redrive_handler).
///
/// Any `Fn(DeadLetteredItem) -> impl Future<Output = Result<(), String>>` closure is one:
///
/// ```
/// # fn example(builder: dlq::EmitterBuilder<dlq::LocalSink, dlq::NatsBus>) {
/// let builder = builder.redrive_handler(|item: dlq::DeadLetteredItem| async move {
///     // hand `item.item_data` back to the work queue it came from ...
///     if item.item_data.get("url").is_some() { Ok(()) } else { Err("no url".to_owned()) }
/// });
/// # }
/// ```
pub trait RedriveHandler: Send + Sync + 'static {
    /// Runs the item's work again (with its data after any edit).
    fn redrive(&self, item: DeadLetteredItem) -> RedriveFuture;

    /// Where the `redriven` event says the item went: the scheduler's handler unless told.
    fn target(&self) -> RedriveTarget {
        RedriveTarget::Handler
    }
}

impl<F, Fut> RedriveHandler for F
where
    F: Fn(DeadLetteredItem) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<(), String>> + Send + 'static,
{
    fn redrive(&self, item: DeadLetteredItem) -> RedriveFuture {
        Box::pin(self(item))
    }
}
