//! Events from the stream: decoding them, and folding them as a consumer does.

use super::{check, Broken, Outcome};
use crate::consumer::{classify, Fold, Offer};
use crate::domain::event::{EncodedEvent, Event};

/// One message body as an event: the full decoder, the reconciler's header-only read and the
/// consumer's classification. What decodes must encode, decode back to the same event, and
/// read the same header fields.
pub fn event_json(data: &[u8]) -> Outcome {
    let classified = classify(data);
    let head = EncodedEvent::stored(data.to_vec());
    let Ok(event) = Event::from_json(data) else {
        return check(classified.is_err(), || {
            "the consumer accepted what the decoder refused".into()
        });
    };
    check(classified.as_ref() == Ok(&event), || {
        "the consumer decoded another event than the decoder".into()
    })?;
    let json = event
        .to_json()
        .map_err(|err| Broken(format!("a decoded event does not encode: {err}")))?;
    let again = Event::from_json(&json)
        .map_err(|err| Broken(format!("an encoded event does not decode: {err}")))?;
    check(again == event, || {
        format!("an event changed through encode and decode: {event:?} became {again:?}")
    })?;
    let head = head.map_err(|err| {
        Broken(format!(
            "an event decodes, but its header fields cannot be read: {err}"
        ))
    })?;
    check(
        head.event_id == event.event_id
            && head.node_id == event.node_id
            && head.seq == event.seq
            && head.job_id == event.job_id
            && head.kind == event.kind.name(),
        || format!("header fields {head:?} differ from the event {event:?}"),
    )
}

/// Newline-separated message bodies fed to a consumer's fold, as a consumer reads the stream:
/// foreign ones skipped, every event offered. Then every node's gap is accepted, and every
/// message is offered again. Every offered event is applied, dropped as a duplicate or waiting;
/// once the gaps are accepted none waits; the second pass changes nothing.
pub fn consumer_fold(data: &[u8]) -> Outcome {
    let events: Vec<Event> = data
        .split(|&b| b == b'\n')
        .filter_map(|line| classify(line).ok())
        .collect();
    let mut fold = Fold::default();
    for event in &events {
        fold.offer(event.clone());
    }
    let counted = |fold: &Fold| fold.stats.applied + fold.stats.duplicates + fold.waiting() as u64;
    check(counted(&fold) == events.len() as u64, || {
        format!(
            "{} events offered, but {:?} and {} waiting",
            events.len(),
            fold.stats,
            fold.waiting()
        )
    })?;
    let nodes: Vec<String> = fold.nodes.keys().cloned().collect();
    for node in &nodes {
        // Each acceptance applies at least the event after the gap: bounded by the events.
        let mut rounds = 0;
        while fold.accept_gap(node).is_some() {
            rounds += 1;
            check(rounds <= events.len(), || {
                format!("accepting the gaps of node {node:?} does not end")
            })?;
        }
    }
    check(fold.waiting() == 0, || {
        format!(
            "{} events still wait once every gap is accepted",
            fold.waiting()
        )
    })?;
    check(counted(&fold) == events.len() as u64, || {
        "accepting gaps lost or doubled events".into()
    })?;
    let settled = fold.projection.clone();
    for event in &events {
        let offer = fold.offer(event.clone());
        check(offer == Offer::Duplicate, || {
            format!("event {:?} offered again was {offer:?}", event.event_id)
        })?;
    }
    check(fold.projection == settled, || {
        "offering the same events again changed the projection".into()
    })?;
    let _ = fold.take_touched();
    Ok(())
}
