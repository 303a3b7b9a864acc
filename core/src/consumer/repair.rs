//! Repairing a stream that lost acknowledged events: find this node's stored events that the
//! stream does not hold and publish them again under a new `Nats-Msg-Id`.
//!
//! The sink is the record of what happened; the stream is a copy. A server can lose a message
//! it acknowledged (seen with nats-server 2.9 when a stream leader is killed; the new leader
//! never had it and still answers "duplicate" within the window). Publishing the event again
//! under its own id would be dropped by that window, so it goes out under
//! `{event_id}~republished-{stamp}`; consumers drop it by `(node, epoch, seq)` if they hold it
//! already, so a repair never counts anything twice.

use std::collections::HashSet;

use chrono::{DateTime, Utc};
use serde::Deserialize;

use super::stream::{for_each_message, ReadError, StreamSpan};
use crate::bus::{BusError, NatsBus};
use crate::domain::event::Event;

/// Where an event of a node belongs: its epoch (`None`: written before epochs) and sequence.
/// Two incarnations of a data directory (replaced, restored) reuse sequences, never epochs.
pub type Position = (Option<String>, u64);

/// Which of one node's events a stream holds.
#[derive(Debug, Default)]
pub struct Holding {
    /// The positions of the node's events found in the stream.
    pub positions: HashSet<Position>,
    /// The stream's extent when the read began.
    pub span: StreamSpan,
    /// Messages read (every node's).
    pub messages: u64,
}

/// The part of an event that says whose it is (the rest of the body is skipped).
#[derive(Deserialize)]
struct Identity<'a> {
    #[serde(borrow)]
    node_id: std::borrow::Cow<'a, str>,
    seq: u64,
    #[serde(default)]
    epoch: Option<String>,
}

/// Reads the whole stream once and records which of `node`'s events (by position) it holds.
pub async fn holding_of_node(
    bus: &crate::bus::BusConfig,
    stream: &str,
    node: &str,
) -> Result<Holding, ReadError> {
    let mut holding = Holding::default();
    holding.span = for_each_message(bus, stream, |message| {
        holding.messages += 1;
        if let Ok(id) = serde_json::from_slice::<Identity<'_>>(message.payload) {
            if id.node_id == node && id.seq > 0 {
                holding.positions.insert((id.epoch, id.seq));
            }
        }
    })
    .await?;
    Ok(holding)
}

/// The stored events the stream should hold and does not.
#[derive(Debug, Default)]
pub struct Missing {
    /// Events to publish again, in log order.
    pub events: Vec<Event>,
    /// Events not in the stream but written before its first stored message: the stream's
    /// limits (age, count, size) may have removed them, so they are not re-published.
    pub before_stream: u64,
    /// Events not yet published at all: the reconciler's work, skipped here.
    pub unpublished: u64,
}

/// Picks from `log` (this node's stored events) those that are published, written at or after
/// `stream_start` (when the stream's first stored message arrived; `None`: the stream is empty,
/// so all), and whose position is not in `held`.
pub fn missing_events<E>(
    log: impl IntoIterator<Item = Result<Event, E>>,
    held: &HashSet<Position>,
    stream_start: Option<DateTime<Utc>>,
    is_unpublished: impl Fn(u64) -> bool,
) -> Result<Missing, E> {
    let mut missing = Missing::default();
    for event in log {
        let event = event?;
        if held.contains(&(event.epoch.clone(), event.seq)) {
            continue;
        }
        if is_unpublished(event.seq) {
            missing.unpublished += 1;
        } else if stream_start.is_some_and(|start| event.timestamp < start) {
            missing.before_stream += 1;
        } else {
            missing.events.push(event);
        }
    }
    Ok(missing)
}

/// The `Nats-Msg-Id` a repaired event goes out under.
pub(crate) fn republish_id(event: &Event, stamp: &str) -> String {
    format!("{}~republished-{stamp}", event.event_id)
}

/// Why a re-publish stopped.
#[derive(Debug, thiserror::Error)]
#[error("re-published {done} of {total} events, then: {source} (run it again once the bus is back; repeats are dropped by consumers)")]
pub struct RepublishError {
    /// Events published before the failure.
    pub done: u64,
    /// Events to publish.
    pub total: u64,
    /// The failure.
    pub source: BusError,
}

/// Publishes each event under `republish_id` with `stamp`, one at a time, each acknowledged
/// before the next; returns how many the stream stored as new (not as duplicates).
pub async fn republish(
    bus: &NatsBus,
    events: &[Event],
    stamp: &str,
) -> Result<u64, RepublishError> {
    let mut stored = 0;
    for (done, event) in (0u64..).zip(events) {
        let published = bus
            .publish_as(event, &republish_id(event, stamp))
            .await
            .map_err(|source| RepublishError {
                done,
                total: events.len() as u64,
                source,
            })?;
        if !published.duplicate {
            stored += 1;
        }
    }
    Ok(stored)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::domain::event::Event;
    use chrono::TimeDelta;

    fn event(seq: u64, at: DateTime<Utc>) -> Result<Event, ()> {
        Ok(crate::testing::removal(None, seq, None, at))
    }

    #[test]
    fn only_published_events_after_the_stream_start_that_it_lacks_are_missing() {
        let t0 = Utc::now();
        let at = |s: i64| t0 + TimeDelta::seconds(s);
        let log = vec![
            event(1, at(0)),
            event(2, at(10)),
            event(3, at(20)),
            event(4, at(30)),
            event(5, at(40)),
        ];
        let held: HashSet<Position> = [(None, 3)].into();
        let missing = missing_events(log, &held, Some(at(5)), |seq| seq == 5).unwrap();
        let seqs: Vec<u64> = missing.events.iter().map(|e| e.seq).collect();
        assert_eq!(seqs, vec![2, 4]);
        assert_eq!(missing.before_stream, 1);
        assert_eq!(missing.unpublished, 1);
    }

    #[test]
    fn the_same_sequence_of_another_epoch_does_not_count_as_held() {
        let mut replaced = event(2, Utc::now()).unwrap();
        replaced.epoch = Some("00000000000000bb".into());
        let held: HashSet<Position> = [(None, 2), (Some("00000000000000aa".into()), 2)].into();
        let missing = missing_events(vec![Ok::<_, ()>(replaced)], &held, None, |_| false).unwrap();
        assert_eq!(missing.events.len(), 1, "held only by other epochs");
        let mine: HashSet<Position> = [(Some("00000000000000bb".into()), 2)].into();
        let log = vec![Ok::<_, ()>(missing.events[0].clone())];
        assert!(missing_events(log, &mine, None, |_| false)
            .unwrap()
            .events
            .is_empty());
    }

    #[test]
    fn an_empty_stream_misses_every_published_event() {
        let log = vec![event(1, Utc::now()), event(2, Utc::now())];
        let missing = missing_events(log, &HashSet::new(), None, |_| false).unwrap();
        assert_eq!(missing.events.len(), 2);
        assert_eq!(missing.before_stream, 0);
    }

    #[test]
    fn a_corrupt_log_entry_stops_the_search() {
        let log = vec![event(1, Utc::now()), Err(()), event(3, Utc::now())];
        assert!(missing_events(log, &HashSet::new(), None, |_| false).is_err());
    }

    #[test]
    fn the_repair_id_differs_from_the_event_id_and_names_it() {
        let e = event(7, Utc::now()).unwrap();
        let id = republish_id(&e, "20261121T120000Z");
        assert_ne!(id, e.event_id);
        assert!(id.starts_with("n:7~"));
    }
}
