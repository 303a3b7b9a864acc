//! Reading which message ids the stream holds over a span of stream sequences, in bulk
//! (anti-entropy): an ephemeral pull consumer from the span's first sequence, headers only, no
//! acks, fetched in large batches, so a pass costs one request per batch rather than one per
//! message. That needs `$JS.API.CONSUMER.CREATE.<stream>` and
//! `$JS.API.CONSUMER.MSG.NEXT.<stream>.*`, which also let a user read the whole stream; a user
//! without them (deploy/nats-permissions.conf's emitter by default) reads the span one message
//! per request instead (`$JS.API.STREAM.MSG.GET.<stream>`, 32 in flight), slower.

use std::time::Duration;

use async_nats::jetstream::consumer::{self, AckPolicy, DeliverPolicy};
use async_nats::jetstream::stream::{LastRawMessageErrorKind, Stream};
use futures::StreamExt;
use tracing::debug;

use super::probe::has_limits;
use super::{BusError, NatsBus, HEADER_MSG_ID};
use crate::error_class::Cause;

/// Messages asked for per fetch.
const SCAN_BATCH: usize = 10_000;
/// How long a fetch waits for messages that are not there (a deleted tail).
const SCAN_EXPIRES: Duration = Duration::from_secs(1);
/// How long past the expiry the client waits for the server's next message before giving up.
const SCAN_GRACE: Duration = Duration::from_secs(10);
/// Message reads in flight when reading one message per request.
const GETS_IN_FLIGHT: usize = 32;

/// The stream's extent when a scan began.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Extent {
    /// Its first sequence.
    pub first_seq: u64,
    /// Its last sequence.
    pub last_seq: u64,
    /// How many messages it held.
    pub messages: u64,
    /// Whether its limits (age, count, size) remove messages.
    pub limited: bool,
}

impl NatsBus {
    /// Answers [`super::Bus::scan_ids`].
    pub(crate) async fn scan_stream_ids(
        &self,
        from: u64,
        to: u64,
        visit: &mut (dyn FnMut(u64, &str) + Send),
    ) -> Result<Extent, BusError> {
        let name = &self.config().stream;
        let failed = |what: &str, err: Cause| {
            BusError::transport(format!("cannot {what} stream {name}: {err}")).caused_by(err)
        };
        let mut handle = self
            .jetstream()
            .get_stream(name)
            .await
            .map_err(|err| failed("look up", err.into()))?;
        let info = handle
            .info()
            .await
            .map_err(|err| failed("read", err.into()))?;
        let extent = Extent {
            first_seq: info.state.first_sequence,
            last_seq: info.state.last_sequence,
            messages: info.state.messages,
            limited: has_limits(&info.config),
        };
        let (from, to) = (from.max(extent.first_seq).max(1), to.min(extent.last_seq));
        if extent.messages == 0 || from > to {
            return Ok(extent);
        }
        let reader = handle
            .create_consumer(consumer::pull::Config {
                deliver_policy: DeliverPolicy::ByStartSequence {
                    start_sequence: from,
                },
                ack_policy: AckPolicy::None,
                headers_only: true,
                memory_storage: true,
                inactive_threshold: Duration::from_secs(10),
                ..Default::default()
            })
            .await;
        let reader = match reader {
            Ok(reader) => reader,
            Err(err) => {
                debug!(%err, "anti-entropy cannot create a reader on stream {name}; reading its messages one per request");
                return scan_by_sequence(&handle, from, to, visit)
                    .await
                    .map(|()| extent);
            }
        };
        let mut at = from - 1;
        while at < to {
            let mut batch = reader
                .fetch()
                .max_messages(SCAN_BATCH)
                .expires(SCAN_EXPIRES)
                .messages()
                .await
                .map_err(|err| failed("fetch from", err.into()))?;
            let mut got = 0;
            loop {
                let next = tokio::time::timeout(SCAN_EXPIRES + SCAN_GRACE, batch.next())
                    .await
                    .map_err(|_| {
                        BusError::transport(format!(
                            "cannot hear back from stream {name}: no answer to a fetch"
                        ))
                    })?;
                let Some(message) = next else { break };
                let message = message.map_err(|err| failed("read", err))?;
                got += 1;
                let seq = message.info().map_or(0, |info| info.stream_sequence);
                at = at.max(seq);
                if seq > to {
                    continue;
                }
                let id = message.headers.as_ref().and_then(|h| h.get(HEADER_MSG_ID));
                if let Some(id) = id {
                    visit(seq, id.as_str());
                }
            }
            if got == 0 {
                break; // the rest of the span was deleted
            }
        }
        Ok(extent)
    }
}

/// Reads `from..=to` one message per request (`$JS.API.STREAM.MSG.GET`), for a user that may
/// not create consumers.
async fn scan_by_sequence(
    handle: &Stream,
    from: u64,
    to: u64,
    visit: &mut (dyn FnMut(u64, &str) + Send),
) -> Result<(), BusError> {
    let mut reads = futures::stream::iter(from..=to)
        .map(|seq| async move { (seq, handle.get_raw_message(seq).await) })
        .buffered(GETS_IN_FLIGHT);
    while let Some((seq, read)) = reads.next().await {
        match read {
            Ok(message) => {
                if let Some(id) = message.headers.get(HEADER_MSG_ID) {
                    visit(seq, id.as_str());
                }
            }
            Err(err) if matches!(err.kind(), LastRawMessageErrorKind::NoMessageFound) => {}
            Err(err) => {
                return Err(BusError::transport(format!(
                    "cannot read message {seq} of the stream: {err}"
                ))
                .caused_by(err))
            }
        }
    }
    Ok(())
}
