//! What the reconciler publishes in place of a stored event that can never be published as it
//! is, so consumers of the node's chain never wait for it: a **stub** for an event the bus
//! refused for good ([`Event::stub`]), a **loss marker** for a log entry that cannot be read.
//!
//! A marker must stand at the unreadable entry's position: its sequence, and the epoch of the
//! chain it belongs to, which only its readable neighbours tell ([`marker_epoch`]).

use chrono::Utc;

use crate::domain::event::{Event, EventKind};
use crate::sink::{Sink, SinkError};

/// How far the neighbours of an unreadable entry are looked for on each side.
const NEIGHBOURS: u64 = 1024;

/// The epoch of the chain an unreadable entry at `seq` belongs to, from the nearest readable
/// stored events after it (`after`) and before it (`before`); `None` inside means the chain
/// without an epoch, `None` outside that no chain waits for it.
///
/// The event after it follows it in its own epoch unless it names a predecessor: naming `seq`
/// itself says which chain `seq` is in; naming a later one means `seq` is in the chain before
/// (the event before it tells which); naming an earlier one means it skips `seq` (in its own
/// epoch, as far as anyone waits).
pub(crate) fn marker_epoch(
    seq: u64,
    after: Option<&Event>,
    before: Option<&Event>,
) -> Option<Option<String>> {
    match after {
        Some(next) => match next.prev_seq {
            Some(prev) if prev == seq => Some(next.prev_epoch.clone()),
            Some(prev) if prev > seq => before.map(|event| event.epoch.clone()),
            _ => Some(next.epoch.clone()),
        },
        None => before.map(|event| event.epoch.clone()),
    }
}

/// What a marker at `seq` in the chain of `epoch` must name as its predecessor: the nearest
/// readable event before it (`before`), unless that is `seq - 1` of the same chain (the rule
/// that needs no field). So a marker standing in for an epoch's first event waits for what the
/// epoch followed, not for a `seq - 1` its chain never had; and no marker is applied before
/// the events it follows (applied, it would make them look like repeats). Without a readable
/// event before it, the plain rule.
pub(crate) fn marker_predecessor(
    seq: u64,
    epoch: &Option<String>,
    before: Option<&Event>,
) -> (Option<String>, Option<u64>) {
    match before {
        Some(prev) if prev.epoch == *epoch && prev.seq.checked_add(1) == Some(seq) => (None, None),
        Some(prev) => (prev.epoch.clone(), Some(prev.seq)),
        None => (None, None),
    }
}

/// The loss marker for the unreadable entry `seq` of `sink`'s log; `None` when no readable
/// neighbour places it in a chain (then nothing can be waiting for it).
pub(crate) fn loss_marker<S: Sink>(
    sink: &S,
    seq: u64,
    reason: &str,
) -> Result<Option<Event>, SinkError> {
    let after = nearest(sink, (seq + 1)..=seq.saturating_add(NEIGHBOURS))?;
    let before = nearest(sink, (seq.saturating_sub(NEIGHBOURS).max(1)..seq).rev())?;
    let Some(epoch) = marker_epoch(seq, after.as_ref(), before.as_ref()) else {
        return Ok(None);
    };
    let (prev_epoch, prev_seq) = marker_predecessor(seq, &epoch, before.as_ref());
    let node = sink.node_id();
    let id = match &epoch {
        Some(epoch) => Event::stored_id(node, epoch, seq),
        None => Event::legacy_id(node, seq),
    };
    Ok(Some(Event {
        event_id: format!("{id}~lost"),
        node_id: node.to_owned(),
        seq,
        epoch,
        prev_epoch,
        prev_seq,
        timestamp: Utc::now(),
        job_id: String::new(),
        topic: String::new(),
        kind: EventKind::Lost {
            lost_reason: reason.to_owned(),
        },
    }))
}

/// The first stored event of `seqs` that can be read and decoded.
fn nearest<S: Sink>(sink: &S, seqs: impl Iterator<Item = u64>) -> Result<Option<Event>, SinkError> {
    for seq in seqs {
        let stored = match sink.stored(seq) {
            Ok(stored) => stored,
            Err(SinkError::Unreadable { .. } | SinkError::Corrupt { .. }) => continue,
            Err(err) => return Err(err),
        };
        if let Some(event) = stored.and_then(|encoded| encoded.decode().ok()) {
            return Ok(Some(event));
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::removal;

    const A: &str = "00000000000000aa";
    const B: &str = "00000000000000bb";

    fn at(epoch: &str, seq: u64, prev: Option<(&str, u64)>) -> Event {
        let mut event = removal(Some(epoch), seq, prev.map(|p| p.1), Utc::now());
        event.prev_epoch = prev.map(|p| p.0.to_owned());
        event
    }

    #[test]
    fn a_marker_stands_in_the_chain_its_neighbours_place_it_in() {
        let before = at(A, 4, None);
        // Followed in its own epoch.
        let next = at(A, 6, None);
        assert_eq!(
            marker_epoch(5, Some(&next), Some(&before)),
            Some(Some(A.into()))
        );
        // Named by the first event of the next epoch.
        let next = at(B, 6, Some((A, 5)));
        assert_eq!(
            marker_epoch(5, Some(&next), Some(&before)),
            Some(Some(A.into()))
        );
        // Before the event the next epoch names: the chain of the event before it.
        let next = at(B, 9, Some((A, 7)));
        assert_eq!(
            marker_epoch(5, Some(&next), Some(&before)),
            Some(Some(A.into()))
        );
        // The last entry of the log.
        assert_eq!(marker_epoch(5, None, Some(&before)), Some(Some(A.into())));
        assert_eq!(marker_epoch(5, None, None), None);
    }

    #[test]
    fn a_marker_names_the_event_before_it_unless_that_is_its_plain_predecessor() {
        let a = Some(A.to_owned());
        assert_eq!(
            marker_predecessor(5, &a, Some(&at(A, 4, None))),
            (None, None)
        );
        // Standing in for the first event of epoch B, after A:4.
        let b = Some(B.to_owned());
        assert_eq!(
            marker_predecessor(5, &b, Some(&at(A, 4, None))),
            (a.clone(), Some(4))
        );
        // Burned sequences between.
        assert_eq!(
            marker_predecessor(9, &a, Some(&at(A, 4, None))),
            (a, Some(4))
        );
        assert_eq!(marker_predecessor(1, &b, None), (None, None));
    }
}
