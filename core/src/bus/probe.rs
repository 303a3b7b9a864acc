//! Asking the stream whether it still holds messages it acknowledged (anti-entropy).
//!
//! A PubAck names the stream sequence a message was stored at. Reading that sequence back
//! (`$JS.API.STREAM.MSG.GET.<stream>`, which needs no `allow_direct`) and comparing its
//! `Nats-Msg-Id` with the id we published says whether the message is still there: a deleted
//! message answers "no message found", and a server that lost its last block after a crash
//! hands the lost sequences to new messages, whose ids differ. [`classify`] is the pure part;
//! the requests are in [`NatsBus::probe_stream`].

use std::time::Duration;

use async_nats::jetstream::stream::{Config, LastRawMessageErrorKind, State};
use futures::stream::{self, StreamExt, TryStreamExt};

use super::{BusError, NatsBus, HEADER_MSG_ID};

/// How many message reads one probe keeps in flight.
const PROBES_IN_FLIGHT: usize = 32;

/// One message to look for: where the PubAck said it was stored, and under which id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Probe {
    /// The stream sequence from the PubAck.
    pub stream_seq: u64,
    /// The `Nats-Msg-Id` it was published under.
    pub msg_id: String,
}

/// What the stream holds at a probe's sequence.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Presence {
    /// The message is there, under its id.
    Held,
    /// The stream lost it: deleted, never synced before a crash, or its sequence reused.
    Missing,
    /// Below the stream's first sequence on a stream with limits (age, count, size): its
    /// limits removed it, which is not a loss to repair.
    Expired,
}

/// Where a probe's sequence stands against the stream's extent, before any message is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Position {
    /// Inside `first..=last`: read the message to know.
    Inside,
    /// Decided without reading.
    Known(Presence),
}

/// True when the stream's own limits remove messages (so a message below its first sequence
/// may have left by design).
pub(crate) fn has_limits(config: &Config) -> bool {
    config.max_age > Duration::ZERO
        || config.max_messages > 0
        || config.max_bytes > 0
        || config.max_messages_per_subject > 0
}

/// Where `stream_seq` stands in a stream with this `state`.
pub(crate) fn classify(stream_seq: u64, state: &State, limited: bool) -> Position {
    if state.messages == 0 || stream_seq > state.last_sequence {
        // Past the end: the tail was lost (a crash before the fsync) or everything was.
        if limited && state.messages == 0 && stream_seq <= state.last_sequence {
            return Position::Known(Presence::Expired);
        }
        return Position::Known(Presence::Missing);
    }
    if stream_seq < state.first_sequence {
        return Position::Known(if limited {
            Presence::Expired
        } else {
            Presence::Missing
        });
    }
    Position::Inside
}

impl NatsBus {
    /// Answers [`super::Bus::probe`]: reads the stream's extent once, then each message inside
    /// it, up to [`PROBES_IN_FLIGHT`] at a time. Changes nothing.
    pub(crate) async fn probe_stream(
        &self,
        probes: &[super::Probe],
    ) -> Result<Vec<Presence>, BusError> {
        let name = &self.config().stream;
        let mut handle = self.jetstream().get_stream(name).await.map_err(|err| {
            BusError::stream_setup(format!("cannot read stream {name}: {err}")).caused_by(err)
        })?;
        let info = handle.info().await.map_err(|err| {
            BusError::stream_setup(format!("cannot read stream {name}: {err}")).caused_by(err)
        })?;
        let (state, limited) = (info.state.clone(), has_limits(&info.config));
        let (handle, state) = (&handle, &state);
        stream::iter(probes.iter().cloned())
            .map(|probe: Probe| async move {
                match classify(probe.stream_seq, state, limited) {
                    Position::Known(presence) => Ok(presence),
                    Position::Inside => match handle.get_raw_message(probe.stream_seq).await {
                        Ok(message) => {
                            let id = message.headers.get(HEADER_MSG_ID).map(|v| v.as_str());
                            Ok(if id == Some(probe.msg_id.as_str()) {
                                Presence::Held
                            } else {
                                Presence::Missing
                            })
                        }
                        Err(err)
                            if matches!(err.kind(), LastRawMessageErrorKind::NoMessageFound) =>
                        {
                            Ok(Presence::Missing)
                        }
                        Err(err) => Err(BusError::transport(format!(
                            "cannot read message {} of stream {name}: {err}",
                            probe.stream_seq
                        ))
                        .caused_by(err)),
                    },
                }
            })
            .buffered(PROBES_IN_FLIGHT)
            .try_collect()
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(messages: u64, first: u64, last: u64) -> State {
        serde_json::from_value(serde_json::json!({
            "messages": messages, "bytes": 0, "first_seq": first,
            "first_ts": "2026-01-01T00:00:00Z", "last_seq": last,
            "last_ts": "2026-01-01T00:00:00Z", "consumer_count": 0
        }))
        .unwrap()
    }

    #[test]
    fn inside_the_extent_the_message_must_be_read() {
        assert_eq!(classify(5, &state(10, 1, 10), false), Position::Inside);
        assert_eq!(classify(1, &state(10, 1, 10), true), Position::Inside);
    }

    #[test]
    fn past_the_end_is_missing_even_with_limits() {
        let s = state(8, 1, 8);
        assert_eq!(classify(9, &s, false), Position::Known(Presence::Missing));
        assert_eq!(classify(9, &s, true), Position::Known(Presence::Missing));
    }

    #[test]
    fn below_the_start_is_expired_only_when_limits_remove_messages() {
        let s = state(5, 6, 10);
        assert_eq!(classify(3, &s, true), Position::Known(Presence::Expired));
        assert_eq!(classify(3, &s, false), Position::Known(Presence::Missing));
    }

    #[test]
    fn an_emptied_stream_lost_everything_unless_limits_emptied_it() {
        let s = state(0, 11, 10);
        assert_eq!(classify(4, &s, false), Position::Known(Presence::Missing));
        assert_eq!(classify(4, &s, true), Position::Known(Presence::Expired));
    }
}
