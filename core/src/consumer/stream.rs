//! Reading the DLQ stream from the start into a [`Fold`].

use std::time::Duration;

use async_nats::jetstream::context::GetStreamErrorKind;
use async_nats::jetstream::stream::{ConsumerError, ConsumerErrorKind, RawMessageErrorKind};
use async_nats::jetstream::{self, consumer};
use chrono::{DateTime, Utc};
use thiserror::Error;

use super::fetch::{self, Fetched};
use super::fold::Fold;
use super::foreign;
use super::seqset::SeqSet;
use crate::bus::{connect_watched, through_failover, BusConfig, Denials};
use crate::Cause;

/// Why the stream could not be read.
#[derive(Debug, Error)]
pub enum ReadError {
    /// No connection to the server: unreachable, or it refused the credentials or the TLS
    /// handshake (the error names the cause and the fix).
    #[error(transparent)]
    Connect(#[from] crate::bus::BusError),
    /// The server denied a permission the reader needs (the line names it and the fix).
    #[error("{0}")]
    Denied(String),
    /// The stream does not exist or could not be read.
    #[error("cannot read stream {stream}: {reason}")]
    Stream {
        /// The stream name.
        stream: String,
        /// What the server said.
        reason: String,
        /// The client's error, if there was one.
        #[source]
        source: Option<Cause>,
    },
}

impl ReadError {
    /// The same error, caused by `cause` (kept as its source; the message is unchanged).
    /// Only [`ReadError::Stream`] takes one.
    pub(crate) fn caused_by(mut self, cause: impl Into<Cause>) -> Self {
        if let ReadError::Stream { source, .. } = &mut self {
            *source = Some(cause.into());
        }
        self
    }
}

/// What a read from the start found.
#[derive(Debug, Default)]
pub struct StreamRead {
    /// The projection, per-node cursors and counters.
    pub fold: Fold,
    /// Messages read.
    pub messages: u64,
    /// Messages whose body is not a dlq event (skipped, counted in
    /// [`FOREIGN`](super::FOREIGN) by reason).
    pub malformed: u64,
    /// The stream's last sequence when reading began (everything up to it was read).
    pub last_stream_seq: u64,
}

/// One message of the stream, as [`for_each_message`] offers it.
#[derive(Debug, Clone, Copy)]
pub struct StreamMessage<'a> {
    /// Its stream sequence.
    pub stream_seq: u64,
    /// Its `Nats-Msg-Id` header, if any.
    pub msg_id: Option<&'a str>,
    /// Its body.
    pub payload: &'a [u8],
}

/// What the stream held when a read began, and how the read went.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StreamSpan {
    /// The first sequence still stored (after the stream's limits removed older ones).
    pub first_seq: u64,
    /// The last sequence assigned; everything up to it was read.
    pub last_seq: u64,
    /// When the first stored message arrived (`None` for an empty stream).
    pub first_time: Option<DateTime<Utc>>,
    /// Messages the consumer delivered twice (offered once).
    pub repeats: u64,
    /// Messages the consumer did not deliver, read one by one from the stream leader.
    pub read_by_sequence: u64,
    /// Sequences in the range with no message (deleted, or never stored).
    pub absent: u64,
}

/// Reads every message of `stream` from its first to its last sequence at the time of the
/// call, offering each to `visit` exactly once: one ephemeral pull consumer without acks, then
/// each sequence it did not deliver read by sequence from the stream leader (right after a
/// cluster failover a consumer was seen to skip a message, or to stall before the last one).
pub async fn for_each_message(
    bus: &BusConfig,
    stream: &str,
    mut visit: impl FnMut(StreamMessage<'_>),
) -> Result<StreamSpan, ReadError> {
    let stream_error = |reason: String| ReadError::Stream {
        stream: stream.to_owned(),
        reason,
        source: None,
    };
    let (client, denials) = connect_watched(bus, Duration::from_secs(5)).await?;
    read_each(client, stream, &denials, &stream_error, &mut visit)
        .await
        .map_err(|err| explain(err, &denials))
}

/// A read error, or the permission the server denied if it denied one: a request the user
/// may not make gets no answer, and the denial is the reason.
pub(crate) fn explain(err: ReadError, denials: &Denials) -> ReadError {
    match (err, denials.last()) {
        (ReadError::Stream { .. }, Some(line)) => ReadError::Denied(line),
        (err, _) => err,
    }
}

/// Fails once the server denied this connection a permission: a fetch it denied ends empty,
/// and reading on would wait in vain (or forever).
pub(crate) fn denied(denials: &Denials) -> Result<(), ReadError> {
    denials
        .last()
        .map_or(Ok(()), |line| Err(ReadError::Denied(line)))
}

/// A request that got no answer is tried again only while the server has denied this
/// connection nothing: a denied request gets no answer either, and waiting would not change it.
fn undenied(denials: &Denials) -> bool {
    denials.last().is_none()
}

async fn read_each(
    client: async_nats::Client,
    stream: &str,
    denials: &Denials,
    stream_error: &impl Fn(String) -> ReadError,
    visit: &mut impl FnMut(StreamMessage<'_>),
) -> Result<StreamSpan, ReadError> {
    let js = jetstream::new(client);
    let handle = through_failover(
        || js.get_stream(stream),
        |e| undenied(denials) && matches!(e.kind(), GetStreamErrorKind::Request),
    )
    .await
    .map_err(|e| stream_error(format!("looking the stream up: {e}")).caused_by(e))?;
    // The lookup is a STREAM.INFO request: its answer holds the state.
    let state = handle.cached_info().state.clone();
    let mut span = StreamSpan {
        first_seq: state.first_sequence,
        last_seq: state.last_sequence,
        first_time: (state.messages > 0)
            .then(|| i64::try_from(state.first_timestamp.unix_timestamp_nanos()).ok())
            .flatten()
            .map(DateTime::from_timestamp_nanos),
        ..StreamSpan::default()
    };
    if state.messages == 0 {
        return Ok(span);
    }
    let timed_out =
        |e: &ConsumerError| undenied(denials) && matches!(e.kind(), ConsumerErrorKind::TimedOut);
    let reader = through_failover(
        || {
            handle.create_consumer(consumer::pull::Config {
                deliver_policy: consumer::DeliverPolicy::All,
                ack_policy: consumer::AckPolicy::None,
                inactive_threshold: Duration::from_secs(60),
                ..Default::default()
            })
        },
        timed_out,
    )
    .await;
    // Right after a cluster failover the server was seen to leave consumer creation unanswered
    // for longer than the failover wait while the stream leader answered reads: then every
    // message is read by sequence from the leader (slower, the same result).
    let reader = match reader {
        Ok(reader) => Some(reader),
        Err(err) if timed_out(&err) => {
            tracing::warn!(
                "stream {stream}: creating a reader timed out for {}s; reading every message by sequence instead",
                crate::bus::FAILOVER_WAIT.as_secs()
            );
            None
        }
        Err(err) => return Err(stream_error(format!("creating a reader: {err}")).caused_by(err)),
    };
    let mut seen = SeqSet::new(span.first_seq, span.last_seq);
    if let Some(reader) = reader {
        let extent = fetch::Extent {
            last_seq: span.last_seq,
            messages: state.messages,
        };
        let (mut chunks, taking) =
            fetch::read_ahead(reader, extent, seen, denials.clone(), stream.to_owned());
        while let Some(chunk) = chunks.recv().await {
            for fetched in &chunk {
                visit(fetched.message());
            }
        }
        let taken = taking.await.map_err(|err| {
            stream_error(format!("the task reading the stream failed: {err}")).caused_by(err)
        })??;
        seen = taken.seen;
        span.repeats = taken.repeats;
    }
    let holes: Vec<u64> = seen.missing().collect();
    for seq in holes {
        match handle.get_raw_message(seq).await {
            Ok(message) => {
                span.read_by_sequence += 1;
                visit(StreamMessage {
                    stream_seq: seq,
                    msg_id: message
                        .headers
                        .get(crate::bus::HEADER_MSG_ID)
                        .map(|v| v.as_str()),
                    payload: &message.payload,
                });
            }
            Err(err) if matches!(err.kind(), RawMessageErrorKind::NoMessageFound) => {
                span.absent += 1;
            }
            Err(err) => {
                return Err(stream_error(format!("reading sequence {seq}: {err}")).caused_by(err))
            }
        }
    }
    Ok(span)
}

/// Reads every message of `stream` up to its last sequence at the time of the call, offering
/// each event (optionally only those of `node`) to a fresh [`Fold`].
pub async fn read_from_start(
    bus: &BusConfig,
    stream: &str,
    node: Option<&str>,
) -> Result<StreamRead, ReadError> {
    // Kept in memory only: nothing needs what each batch changed.
    let mut fold = Fold::untracked();
    let (mut messages, mut malformed) = (0, 0);
    let span = for_each_message(bus, stream, |message| {
        messages += 1;
        match foreign::decode(message.payload, message.stream_seq) {
            Some(event) if node.is_none_or(|n| n == event.node_id) => {
                fold.offer(event);
            }
            Some(_) => {}
            None => malformed += 1,
        }
    })
    .await?;
    Ok(StreamRead {
        fold,
        messages,
        malformed,
        last_stream_seq: span.last_seq,
    })
}

/// What one fetched batch held.
#[derive(Debug, Default, Clone)]
pub(crate) struct Batch {
    /// The highest stream sequence in the batch (0 when empty).
    pub(crate) reached: u64,
    /// Messages in the batch.
    pub(crate) messages: u64,
    /// Messages that were not events (skipped).
    pub(crate) malformed: u64,
    /// The stream sequences delivered, in delivery order.
    pub(crate) delivered: Vec<u64>,
}

/// The sequences after `checkpoint` up to `reached` that a batch did not deliver: messages a
/// consumer skipped (seen after cluster failovers) or that no longer exist.
pub(crate) fn holes(checkpoint: u64, reached: u64, delivered: &[u64]) -> Vec<u64> {
    let seen: std::collections::BTreeSet<u64> = delivered.iter().copied().collect();
    (checkpoint.saturating_add(1)..=reached)
        .filter(|seq| !seen.contains(seq))
        .collect()
}

/// Reads sequence `seq` from the stream leader and offers its event to `fold`; `Ok(false)`
/// when the stream no longer holds it (deleted, or removed by the stream's limits).
pub(crate) async fn offer_by_sequence(
    stream: &jetstream::stream::Stream,
    seq: u64,
    fold: &mut Fold,
    stream_error: &impl Fn(String) -> ReadError,
) -> Result<bool, ReadError> {
    match stream.get_raw_message(seq).await {
        Ok(message) => {
            if let Some(event) = foreign::decode(&message.payload, seq) {
                fold.offer(event);
            }
            Ok(true)
        }
        Err(err) if matches!(err.kind(), RawMessageErrorKind::NoMessageFound) => Ok(false),
        Err(err) => Err(stream_error(format!("reading sequence {seq}: {err}")).caused_by(err)),
    }
}

/// Offers every event of a fetched batch to `fold`, in delivery order.
pub(crate) fn offer_fetched(fetched: Vec<Fetched>, fold: &mut Fold) -> Batch {
    let mut batch = Batch::default();
    for message in fetched {
        let stream_seq = message.stream_seq();
        if stream_seq > 0 {
            batch.reached = batch.reached.max(stream_seq);
            batch.delivered.push(stream_seq);
        }
        batch.messages += 1;
        match foreign::decode(message.payload(), stream_seq) {
            Some(event) => {
                fold.offer(event);
            }
            None => batch.malformed += 1,
        }
    }
    batch
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::holes;

    #[test]
    fn holes_are_the_undelivered_sequences_after_the_checkpoint() {
        assert_eq!(holes(10, 15, &[11, 12, 13, 14, 15]), Vec::<u64>::new());
        assert_eq!(holes(10, 15, &[15, 11, 13]), vec![12, 14]);
        assert_eq!(holes(0, 3, &[3]), vec![1, 2]);
        assert_eq!(holes(7, 7, &[]), Vec::<u64>::new());
    }
}
