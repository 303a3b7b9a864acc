//! The independent observers: a core-NATS subscriber that records every event id it receives
//! during the drill, and a reader of the whole JetStream stream at the end.
//!
//! Both count duplicates twice: *before dedup* (the same event id more than once: a re-publish,
//! or a repair by `dlq republish` of an event this observer already had) and *after dedup by id*
//! (a message with a new event id that is the same logical event as one already seen: the same
//! `(job, item)` dead-lettered twice, or the same `(node, epoch, seq)`). The second figure is what a
//! consumer that drops repeated event ids would still see twice.

use std::collections::hash_map::Entry;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use dlq::domain::event::{Event, EventKind};
use futures::StreamExt;
use tokio::task::JoinHandle;

use crate::{err, Res};

/// Messages seen by an observer.
#[derive(Debug, Default)]
pub struct Seen {
    /// Messages received (with repeats).
    pub messages: u64,
    /// How often each event id arrived (taken from the body; the `Nats-Msg-Id` for a body that
    /// is not an event). A re-published repair carries a new message id but the same event id.
    pub ids: HashMap<String, u32>,
    /// Messages whose `Nats-Msg-Id` marks them as a repair by `dlq republish`.
    pub repairs: u64,
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
    /// Stream reader only: messages its consumer delivered twice (counted once).
    pub reader_repeats: u64,
    /// Stream reader only: messages its consumer skipped, read by sequence instead.
    pub read_by_sequence: u64,
    /// Stream reader only: the stream sequences of each event id.
    seqs_of: HashMap<String, Vec<u64>>,
}

impl Seen {
    /// Records one message; returns its event id.
    pub fn add(&mut self, msg_id: &str, payload: &[u8]) -> String {
        self.messages += 1;
        if msg_id.contains("~republished-") {
            self.repairs += 1;
        }
        let event = Event::from_json(payload).ok();
        let id = event.as_ref().map_or(msg_id, |e| e.event_id.as_str());
        let id = id.to_owned();
        let count = self.ids.entry(id.clone()).or_insert(0);
        *count += 1;
        if *count > 1 {
            return id;
        }
        let Some(key) = event.as_ref().map(logical_key) else {
            self.malformed += 1;
            return id;
        };
        match self.logical.entry(key) {
            Entry::Occupied(first) if *first.get() != id => self.logical_duplicates += 1,
            Entry::Occupied(_) => {}
            Entry::Vacant(slot) => {
                if slot.key().starts_with("dl|") {
                    self.items += 1;
                }
                slot.insert(id.clone());
            }
        }
        id
    }

    /// Distinct ids.
    pub fn unique(&self) -> u64 {
        self.ids.len() as u64
    }

    /// Repeats of an event id already seen.
    pub fn duplicates_by_id(&self) -> u64 {
        self.messages.saturating_sub(self.unique())
    }

    /// Up to `n` event ids seen more than once, sorted, each with the stream sequences it is
    /// stored at (stream reader), e.g. `node:12 @ 230, 40551`.
    pub fn repeated_ids(&self, n: usize) -> Vec<String> {
        let mut ids: Vec<String> = self
            .ids
            .iter()
            .filter(|(_, count)| **count > 1)
            .map(|(id, _)| match self.seqs_of.get(id) {
                Some(seqs) => format!(
                    "{id} @ {}",
                    seqs.iter()
                        .map(u64::to_string)
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
                None => id.clone(),
            })
            .collect();
        ids.sort();
        ids.truncate(n);
        ids
    }

    /// Whether the event `id` was seen.
    pub fn contains(&self, id: &str) -> bool {
        self.ids.contains_key(id)
    }
}

fn logical_key(event: &Event) -> String {
    match &event.kind {
        EventKind::DeadLettered { item } => format!("dl|{}|{}", item.job_id, item.item_id),
        _ if event.seq > 0 => format!(
            "ev|{}|{}|{}",
            event.node_id,
            event.epoch.as_deref().unwrap_or_default(),
            event.seq
        ),
        _ => format!("id|{}", event.event_id),
    }
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
    let mut seen = Seen::default();
    let span = dlq::consumer::for_each_message(&dlq::bus::BusConfig::at(url), stream, |message| {
        let seq = message.stream_seq;
        seen.last_seq = seen.last_seq.max(seq);
        if seen.seqs.insert(seq) {
            seen.distinct_seqs += 1;
        }
        if seen.first_seq == 0 || seq < seen.first_seq {
            seen.first_seq = seq;
        }
        let id = seen.add(message.msg_id.unwrap_or_default(), message.payload);
        seen.seqs_of.entry(id).or_default().push(seq);
    })
    .await?;
    seen.reader_repeats = span.repeats;
    seen.read_by_sequence = span.read_by_sequence;
    Ok(seen)
}
