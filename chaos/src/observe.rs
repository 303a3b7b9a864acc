//! The independent observers: a core-NATS subscriber that records every event id it receives
//! during the drill, and a reader of the whole JetStream stream at the end.
//!
//! Both count duplicates twice: *before dedup* (the same `Nats-Msg-Id` more than once) and
//! *after dedup by id* (a message with a new id that is the same logical event as one already
//! seen: the same `(job, item)` dead-lettered twice, or the same `(node, seq)`). The second
//! figure is what a consumer that drops repeated ids would still see twice.

use std::collections::hash_map::Entry;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_nats::jetstream::{self, consumer};
use dlq::event::{Event, EventKind};
use futures::StreamExt;
use tokio::task::JoinHandle;

use crate::{err, Res};

/// Messages seen by an observer.
#[derive(Debug, Default)]
pub struct Seen {
    /// Messages received (with repeats).
    pub messages: u64,
    /// How often each `Nats-Msg-Id` arrived.
    pub ids: HashMap<String, u32>,
    logical: HashMap<String, String>,
    /// Messages with a new id but an already seen logical event.
    pub logical_duplicates: u64,
    /// Messages whose body is not an event.
    pub malformed: u64,
    /// Distinct dead-lettered items (`dead_lettered` events, deduplicated logically).
    pub items: u64,
    /// Stream reader only: the lowest and highest stream sequence read (0 if none).
    pub first_seq: u64,
    /// See `first_seq`.
    pub last_seq: u64,
    /// Stream reader only: distinct stream sequences read.
    pub distinct_seqs: u64,
    seqs: std::collections::HashSet<u64>,
}

impl Seen {
    /// Records one message.
    pub fn add(&mut self, id: &str, payload: &[u8]) {
        self.messages += 1;
        let count = self.ids.entry(id.to_owned()).or_insert(0);
        *count += 1;
        if *count > 1 {
            return;
        }
        let Some(key) = logical_key(payload) else {
            self.malformed += 1;
            return;
        };
        match self.logical.entry(key) {
            Entry::Occupied(first) if first.get() != id => self.logical_duplicates += 1,
            Entry::Occupied(_) => {}
            Entry::Vacant(slot) => {
                if slot.key().starts_with("dl|") {
                    self.items += 1;
                }
                slot.insert(id.to_owned());
            }
        }
    }

    /// Distinct ids.
    pub fn unique(&self) -> u64 {
        self.ids.len() as u64
    }

    /// Repeats of an id already seen.
    pub fn duplicates_by_id(&self) -> u64 {
        self.messages.saturating_sub(self.unique())
    }

    /// Whether `id` was seen.
    pub fn contains(&self, id: &str) -> bool {
        self.ids.contains_key(id)
    }
}

fn logical_key(payload: &[u8]) -> Option<String> {
    let event = Event::from_json(payload).ok()?;
    Some(match &event.kind {
        EventKind::DeadLettered { item } => format!("dl|{}|{}", item.job_id, item.item_id),
        _ if event.seq > 0 => format!("ev|{}|{}", event.node_id, event.seq),
        _ => format!("id|{}", event.event_id),
    })
}

fn msg_id(headers: Option<&async_nats::HeaderMap>) -> String {
    headers
        .and_then(|h| h.get(dlq::bus::HEADER_MSG_ID))
        .map(|v| v.as_str().to_owned())
        .unwrap_or_default()
}

/// The subscriber: its own connection, straight to the server, reconnecting every 50 ms.
pub struct Subscriber {
    seen: Arc<Mutex<Seen>>,
    client: async_nats::Client,
    task: JoinHandle<()>,
}

impl Subscriber {
    /// Connects and subscribes to `subject` (returns once the subscription is registered).
    pub async fn start(url: &str, subject: &str) -> Res<Subscriber> {
        let client = async_nats::ConnectOptions::new()
            .name("dlq-chaos-subscriber")
            .retry_on_initial_connect()
            .max_reconnects(None)
            .reconnect_delay_callback(|_| Duration::from_millis(50))
            .subscription_capacity(1 << 20)
            .connect(dlq::bus::server_list(url))
            .await?;
        let mut subscription = client.subscribe(subject.to_owned()).await?;
        tokio::time::timeout(Duration::from_secs(10), client.flush())
            .await
            .map_err(|_| err("the subscriber could not reach the server"))??;
        let seen = Arc::new(Mutex::new(Seen::default()));
        let shared = seen.clone();
        let task = tokio::spawn(async move {
            while let Some(message) = subscription.next().await {
                let id = msg_id(message.headers.as_ref());
                if let Ok(mut seen) = shared.lock() {
                    seen.add(&id, &message.payload);
                }
            }
        });
        Ok(Subscriber { seen, client, task })
    }

    /// Waits `grace` for messages still on their way, then stops and returns what it saw.
    pub async fn finish(self, grace: Duration) -> Seen {
        let _ = tokio::time::timeout(Duration::from_secs(5), self.client.flush()).await;
        tokio::time::sleep(grace).await;
        self.task.abort();
        let _ = self.task.await;
        self.seen
            .lock()
            .map(|mut seen| std::mem::take(&mut *seen))
            .unwrap_or_default()
    }

    /// The shared record, for sampling while the drill runs.
    pub fn handle(&self) -> Arc<Mutex<Seen>> {
        self.seen.clone()
    }
}

/// Reads every message of `stream` by sequence, from the first to the last at call time.
pub async fn read_stream(url: &str, stream: &str) -> Res<Seen> {
    let client = async_nats::ConnectOptions::new()
        .connection_timeout(Duration::from_secs(5))
        .connect(dlq::bus::server_list(url))
        .await?;
    let js = jetstream::new(client);
    let mut handle = js.get_stream(stream).await?;
    let last = handle.info().await?.state.last_sequence;
    let mut seen = Seen::default();
    if last == 0 {
        return Ok(seen);
    }
    let reader = handle
        .create_consumer(consumer::pull::Config {
            deliver_policy: consumer::DeliverPolicy::All,
            ack_policy: consumer::AckPolicy::None,
            inactive_threshold: Duration::from_secs(60),
            ..Default::default()
        })
        .await?;
    let (mut at, mut idle) = (0u64, 0u32);
    while at < last {
        let mut batch = reader
            .fetch()
            .max_messages(1000)
            .expires(Duration::from_secs(1))
            .messages()
            .await?;
        let before = at;
        while let Some(message) = batch.next().await {
            let message = message?;
            if let Ok(info) = message.info() {
                at = at.max(info.stream_sequence);
                seen.last_seq = seen.last_seq.max(info.stream_sequence);
                if seen.seqs.insert(info.stream_sequence) {
                    seen.distinct_seqs += 1;
                }
                if seen.first_seq == 0 || info.stream_sequence < seen.first_seq {
                    seen.first_seq = info.stream_sequence;
                }
            }
            seen.add(&msg_id(message.headers.as_ref()), &message.payload);
        }
        if at == before {
            idle += 1;
            if idle > 10 {
                return Err(err(format!(
                    "reading stream {stream} stalled at sequence {at} of {last}"
                )));
            }
        } else {
            idle = 0;
        }
    }
    Ok(seen)
}
