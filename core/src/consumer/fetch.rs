//! Taking messages from the stream's pull consumer: owned, not decoded, so the taking can run
//! on its own task while the caller decodes and folds what was taken before.
//!
//! A read spent its time in two halves of about equal cost, one after the other: taking
//! messages from the bus, and decoding and folding them (docs/benchmarks.md, issue 37). A
//! read from the start ([`read_ahead`]) takes every message on a spawned task that hands them
//! over in chunks through a bounded channel; a durable consumer fetches its next batch on a
//! spawned task while it folds and saves the last ([`take_batch`]). On a multi-threaded
//! runtime the halves overlap; what the caller sees is unchanged (each message once, in
//! delivery order).

use std::time::Duration;

use async_nats::jetstream::{self, consumer};
use bytes::Bytes;
use futures::StreamExt;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use super::seqset::SeqSet;
use super::stream::{denied, ReadError, StreamMessage};
use crate::bus::Denials;

/// How long the server keeps a fetch open for messages that are not there yet.
pub(super) const FETCH_EXPIRES: Duration = Duration::from_secs(1);

/// Most messages one fetch asks for.
pub(super) const FETCH_MAX: usize = 5000;

/// How long past a fetch's expiry the client waits for the server's next message or its end of
/// batch before it gives up: the server answers a pull request the user may not make with
/// nothing at all (the denial goes to the connection), so without a deadline the read would
/// wait forever.
const FETCH_GRACE: Duration = Duration::from_secs(10);

/// Messages per chunk a read from the start hands over: one channel operation per chunk.
const CHUNK: usize = 256;

/// Chunks read ahead of the caller at most (about 8 MiB of 1 KiB events): a slow caller
/// never has the whole stream in memory.
const CHUNKS_AHEAD: usize = 32;

/// A message taken from the bus, owned, not decoded.
pub(crate) struct Fetched {
    stream_seq: u64,
    msg_id: Option<String>,
    payload: Bytes,
}

impl Fetched {
    fn take(message: jetstream::Message) -> Fetched {
        let stream_seq = message.info().map_or(0, |info| info.stream_sequence);
        let msg_id = message
            .headers
            .as_ref()
            .and_then(|h| h.get(crate::bus::HEADER_MSG_ID))
            .map(|v| v.as_str().to_owned());
        Fetched {
            stream_seq,
            msg_id,
            payload: message.message.payload,
        }
    }

    /// Its stream sequence (0 if the message did not say).
    pub(crate) fn stream_seq(&self) -> u64 {
        self.stream_seq
    }

    /// Its body.
    pub(crate) fn payload(&self) -> &[u8] {
        &self.payload
    }

    /// The message as [`super::for_each_message`] offers it.
    pub(crate) fn message(&self) -> StreamMessage<'_> {
        StreamMessage {
            stream_seq: self.stream_seq,
            msg_id: self.msg_id.as_deref(),
            payload: &self.payload,
        }
    }
}

/// The stream error of `stream` for `reason`.
fn stream_error(stream: &str) -> impl Fn(String) -> ReadError + '_ {
    move |reason| ReadError::Stream {
        stream: stream.to_owned(),
        reason,
        source: None,
    }
}

/// The next message of a fetched batch (`None` at its end), or an error once the server has
/// sent nothing for `expires` plus [`FETCH_GRACE`].
async fn next_within(
    messages: &mut consumer::pull::Batch,
    expires: Duration,
    stream_error: &impl Fn(String) -> ReadError,
) -> Result<Option<jetstream::Message>, ReadError> {
    let deadline = expires + FETCH_GRACE;
    match tokio::time::timeout(deadline, messages.next()).await {
        Ok(next) => next
            .transpose()
            .map_err(|e| stream_error(e.to_string()).caused_by(e)),
        Err(_) => Err(stream_error(format!(
            "the server sent nothing for {}s after a fetch (was this user denied publish on \
             $JS.API.CONSUMER.MSG.NEXT.<stream>.*? see deploy/nats-permissions.conf)",
            deadline.as_secs()
        ))),
    }
}

/// Every message of a batch the server was asked for, in delivery order.
async fn take_all(
    mut messages: consumer::pull::Batch,
    expires: Duration,
    stream_error: &impl Fn(String) -> ReadError,
) -> Result<Vec<Fetched>, ReadError> {
    let mut taken = Vec::new();
    while let Some(message) = next_within(&mut messages, expires, stream_error).await? {
        taken.push(Fetched::take(message));
    }
    Ok(taken)
}

/// Asks for one batch: up to [`FETCH_MAX`] messages, those available now.
async fn fetch_batch(
    reader: &consumer::Consumer<consumer::pull::Config>,
    stream_error: &impl Fn(String) -> ReadError,
) -> Result<consumer::pull::Batch, ReadError> {
    reader
        .fetch()
        .max_messages(FETCH_MAX)
        .expires(FETCH_EXPIRES)
        .messages()
        .await
        .map_err(|e| stream_error(e.to_string()).caused_by(e))
}

/// Takes one batch: up to [`FETCH_MAX`] messages, those available now.
pub(crate) async fn take_batch(
    reader: consumer::Consumer<consumer::pull::Config>,
    stream: String,
) -> Result<Vec<Fetched>, ReadError> {
    let stream_error = stream_error(&stream);
    let messages = fetch_batch(&reader, &stream_error).await?;
    take_all(messages, FETCH_EXPIRES, &stream_error).await
}

/// Waits up to `wait` for the next message (a caught-up consumer that follows the stream).
pub(crate) async fn take_next(
    reader: &consumer::Consumer<consumer::pull::Config>,
    wait: Duration,
    stream: &str,
) -> Result<Vec<Fetched>, ReadError> {
    let stream_error = stream_error(stream);
    let messages = reader
        .batch()
        .max_messages(1)
        .expires(wait)
        .messages()
        .await
        .map_err(|e| stream_error(e.to_string()).caused_by(e))?;
    take_all(messages, wait, &stream_error).await
}

/// What the reading task of [`read_ahead`] saw, once it is done.
pub(crate) struct Taken {
    /// The sequences delivered (the caller reads the others by sequence).
    pub(crate) seen: SeqSet,
    /// Messages delivered twice (handed over once).
    pub(crate) repeats: u64,
}

/// Where a read from the start stops: what the stream held when it began.
#[derive(Clone, Copy)]
pub(crate) struct Extent {
    /// The stream's last sequence.
    pub(crate) last_seq: u64,
    /// How many messages it held.
    pub(crate) messages: u64,
}

/// Starts taking every message of `extent` from `reader` on a spawned task, each sequence of
/// `seen`'s range once; the chunks arrive on the receiver, and the task's result (after the
/// last chunk) says which sequences came. The task ends early, quietly, if the receiver is
/// dropped.
pub(crate) fn read_ahead(
    reader: consumer::Consumer<consumer::pull::Config>,
    extent: Extent,
    seen: SeqSet,
    denials: Denials,
    stream: String,
) -> (
    mpsc::Receiver<Vec<Fetched>>,
    JoinHandle<Result<Taken, ReadError>>,
) {
    let (chunks, receiver) = mpsc::channel(CHUNKS_AHEAD);
    let task = tokio::spawn(take_extent(reader, extent, seen, denials, stream, chunks));
    (receiver, task)
}

async fn take_extent(
    reader: consumer::Consumer<consumer::pull::Config>,
    extent: Extent,
    mut seen: SeqSet,
    denials: Denials,
    stream: String,
    chunks: mpsc::Sender<Vec<Fetched>>,
) -> Result<Taken, ReadError> {
    let stream_error = stream_error(&stream);
    let (mut at, mut delivered, mut idle_rounds, mut repeats) = (0, 0u64, 0, 0u64);
    let mut chunk = Vec::with_capacity(CHUNK);
    while at < extent.last_seq && delivered < extent.messages && idle_rounds < 3 {
        let mut messages = fetch_batch(&reader, &stream_error).await?;
        let before = at;
        while let Some(message) = next_within(&mut messages, FETCH_EXPIRES, &stream_error).await? {
            let fetched = Fetched::take(message);
            at = at.max(fetched.stream_seq);
            if fetched.stream_seq > extent.last_seq {
                continue; // stored after the read began
            }
            if !seen.insert(fetched.stream_seq) {
                repeats += 1;
                continue;
            }
            delivered += 1;
            chunk.push(fetched);
            if chunk.len() == CHUNK && !hand_over(&chunks, &mut chunk).await {
                return Ok(Taken { seen, repeats });
            }
        }
        denied(&denials)?;
        idle_rounds = if at == before { idle_rounds + 1 } else { 0 };
        // The batch ended: what it held goes to the caller now, not with the next batch.
        if !hand_over(&chunks, &mut chunk).await {
            break;
        }
    }
    Ok(Taken { seen, repeats })
}

/// Sends the chunk (if it holds anything) and starts a new one; false if the caller is gone.
async fn hand_over(chunks: &mpsc::Sender<Vec<Fetched>>, chunk: &mut Vec<Fetched>) -> bool {
    if chunk.is_empty() {
        return true;
    }
    let full = std::mem::replace(chunk, Vec::with_capacity(CHUNK));
    chunks.send(full).await.is_ok()
}
