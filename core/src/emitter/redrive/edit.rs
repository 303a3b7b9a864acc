//! Editing an item's data before a redrive: a JSON merge patch, recorded as `item_edited`.

use super::super::{EmitError, Emitter};
use crate::bus::Bus;
use crate::domain::command::Command;
use crate::domain::event::RemovedBy;
use crate::sink::Sink;

impl<S: Sink, B: Bus> Emitter<S, B> {
    /// Applies the JSON merge patch `patch` (RFC 7396) to the item's `item_data`, as one
    /// `item_edited` event naming `by` and the old values of what changed. Returns whether it
    /// changed anything (a patch that leaves the data as it is writes nothing). An item that
    /// is not there is [`EmitError::NotFound`]; one that would grow past the sink's value
    /// limit is [`EmitError::Rejected`], and nothing is written.
    pub async fn edit(
        &self,
        job_id: &str,
        item_id: &str,
        patch: serde_json::Value,
        by: Option<RemovedBy>,
    ) -> Result<bool, EmitError> {
        let command = Command::Edit {
            job_id: job_id.to_owned(),
            item_id: item_id.to_owned(),
            patch,
            by,
        };
        let receipt = self.submit_stored("", command).await?;
        Ok(!receipt.event_ids.is_empty())
    }
}
