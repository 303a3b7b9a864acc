//! Reading the DLQ stream from the start into a [`Fold`].

use std::time::Duration;

use async_nats::jetstream::{self, consumer};
use futures::StreamExt;
use thiserror::Error;

use super::fold::Fold;
use crate::event::Event;

/// Why the stream could not be read.
#[derive(Debug, Error)]
pub enum ReadError {
    /// No connection to the server.
    #[error("cannot connect to {url}: {reason} (is nats-server running? check --nats-url)")]
    Connect {
        /// The URL tried.
        url: String,
        /// What the client said.
        reason: String,
    },
    /// The stream does not exist or could not be read.
    #[error("cannot read stream {stream}: {reason}")]
    Stream {
        /// The stream name.
        stream: String,
        /// What the server said.
        reason: String,
    },
    /// No progress for too long.
    #[error("reading stream {stream} stalled at sequence {at} of {last}")]
    Stalled {
        /// The stream name.
        stream: String,
        /// The last stream sequence read.
        at: u64,
        /// The stream's last sequence when reading began.
        last: u64,
    },
}

/// What a read from the start found.
#[derive(Debug, Default)]
pub struct StreamRead {
    /// The projection, per-node cursors and counters.
    pub fold: Fold,
    /// Messages read.
    pub messages: u64,
    /// Messages whose body is not an event (skipped, counted).
    pub malformed: u64,
    /// The stream's last sequence when reading began (everything up to it was read).
    pub last_stream_seq: u64,
}

/// Reads every message of `stream` up to its last sequence at the time of the call, offering
/// each event (optionally only those of `node`) to a fresh [`Fold`].
pub async fn read_from_start(
    url: &str,
    stream: &str,
    node: Option<&str>,
) -> Result<StreamRead, ReadError> {
    let stream_error = |reason: String| ReadError::Stream {
        stream: stream.to_owned(),
        reason,
    };
    let client = async_nats::ConnectOptions::new()
        .connection_timeout(Duration::from_secs(5))
        .connect(crate::bus::server_list(url))
        .await
        .map_err(|err| ReadError::Connect {
            url: url.to_owned(),
            reason: err.to_string(),
        })?;
    let js = jetstream::new(client);
    let mut handle = js
        .get_stream(stream)
        .await
        .map_err(|e| stream_error(e.to_string()))?;
    let last = handle
        .info()
        .await
        .map_err(|e| stream_error(e.to_string()))?
        .state
        .last_sequence;
    let mut read = StreamRead {
        last_stream_seq: last,
        // Kept in memory only: nothing needs what each batch changed.
        fold: Fold::untracked(),
        ..StreamRead::default()
    };
    if last == 0 {
        return Ok(read);
    }
    let reader = handle
        .create_consumer(consumer::pull::Config {
            deliver_policy: consumer::DeliverPolicy::All,
            ack_policy: consumer::AckPolicy::None,
            inactive_threshold: Duration::from_secs(60),
            ..Default::default()
        })
        .await
        .map_err(|e| stream_error(e.to_string()))?;
    let mut at = 0;
    let mut idle_rounds = 0;
    while at < last {
        let before = at;
        let batch = fetch_into(&reader, &mut read.fold, node, &stream_error).await?;
        at = at.max(batch.reached);
        read.messages += batch.messages;
        read.malformed += batch.malformed;
        idle_rounds = if at == before { idle_rounds + 1 } else { 0 };
        if idle_rounds >= 10 {
            return Err(ReadError::Stalled {
                stream: stream.to_owned(),
                at,
                last,
            });
        }
    }
    Ok(read)
}

/// What one fetched batch held.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Batch {
    /// The highest stream sequence in the batch (0 when empty).
    pub(crate) reached: u64,
    /// Messages in the batch.
    pub(crate) messages: u64,
    /// Messages that were not events (skipped).
    pub(crate) malformed: u64,
}

/// Fetches one batch (up to 5,000 messages, those available now) and offers every event in it
/// (optionally only `node`'s) to `fold`.
pub(crate) async fn fetch_into(
    reader: &consumer::Consumer<consumer::pull::Config>,
    fold: &mut Fold,
    node: Option<&str>,
    stream_error: &impl Fn(String) -> ReadError,
) -> Result<Batch, ReadError> {
    let messages = reader
        .fetch()
        .max_messages(5000)
        .expires(Duration::from_secs(1))
        .messages()
        .await
        .map_err(|e| stream_error(e.to_string()))?;
    offer_all(messages, fold, node, stream_error).await
}

/// Waits up to `wait` for the next message (a caught-up consumer that follows the stream),
/// and offers it to `fold`.
pub(crate) async fn wait_into(
    reader: &consumer::Consumer<consumer::pull::Config>,
    fold: &mut Fold,
    wait: Duration,
    stream_error: &impl Fn(String) -> ReadError,
) -> Result<Batch, ReadError> {
    let messages = reader
        .batch()
        .max_messages(1)
        .expires(wait)
        .messages()
        .await
        .map_err(|e| stream_error(e.to_string()))?;
    offer_all(messages, fold, None, stream_error).await
}

async fn offer_all(
    mut messages: consumer::pull::Batch,
    fold: &mut Fold,
    node: Option<&str>,
    stream_error: &impl Fn(String) -> ReadError,
) -> Result<Batch, ReadError> {
    let mut batch = Batch::default();
    while let Some(message) = messages.next().await {
        let message = message.map_err(|e| stream_error(e.to_string()))?;
        if let Ok(info) = message.info() {
            batch.reached = batch.reached.max(info.stream_sequence);
        }
        batch.messages += 1;
        match Event::from_json(&message.payload) {
            Ok(event) if node.is_none_or(|n| n == event.node_id) => {
                fold.offer(event);
            }
            Ok(_) => {}
            Err(_) => batch.malformed += 1,
        }
    }
    Ok(batch)
}
