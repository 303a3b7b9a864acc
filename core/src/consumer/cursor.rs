//! A node's progress in a consumer's fold: which of its events were applied, and which wait.
//!
//! A node's events form chains: one per epoch (an incarnation of its data directory, see
//! [`crate::domain::event`]) and one for events written before epochs existed. Inside a chain
//! events apply in sequence order; the first event of an epoch applies once the chain it names
//! is applied through the sequence it names ([`Event::needs`]). So a replaced data directory
//! (an epoch naming nothing) applies at once, a restored copy (an epoch naming an older point
//! of a chain already applied further) applies at once beside the chain it forked from, and an
//! ordinary restart (naming the last event of the previous epoch) waits for that event. Pure.

use std::collections::{BTreeMap, BTreeSet};

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::domain::event::{Event, EventKind};

/// One chain of a node's events: an epoch's, or those without an epoch. Saved as
/// `{"applied", "waiting"}`, the form a whole node's cursor had before epochs, so a store
/// written then loads as the chain without an epoch.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Chain {
    /// The highest sequence applied (0: none yet).
    pub applied: u64,
    /// Events waiting for a predecessor, by sequence.
    #[serde(default)]
    pub waiting: BTreeMap<u64, Event>,
}

/// Per-node progress: the chain without an epoch and one chain per epoch. A durable store
/// saves each chain on its own (`super::store`), so a node restarted many times does not
/// rewrite all its epochs on every save.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NodeCursor {
    legacy: Chain,
    epochs: BTreeMap<String, Chain>,
    /// Events waiting over all chains.
    waiting: usize,
    /// The chains with waiting events (`None`: the chain without an epoch).
    waiting_in: BTreeSet<Option<String>>,
}

/// A gap given up in one chain: its sequences `from..=to` will never be applied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Given {
    /// The chain's epoch (`None`: events without an epoch).
    pub epoch: Option<String>,
    /// First sequence given up.
    pub from: u64,
    /// Last sequence given up.
    pub to: u64,
}

impl NodeCursor {
    /// The chain of `epoch` (`None`: events without an epoch), if it exists.
    pub fn chain(&self, epoch: Option<&str>) -> Option<&Chain> {
        match epoch {
            None => Some(&self.legacy),
            Some(epoch) => self.epochs.get(epoch),
        }
    }

    /// The chains of every epoch seen, by epoch id.
    pub fn epochs(&self) -> &BTreeMap<String, Chain> {
        &self.epochs
    }

    /// Replaces the chain of `epoch` (as loaded from a store).
    pub(crate) fn set_chain(&mut self, epoch: Option<String>, chain: Chain) {
        let old = self.chain_mut(epoch.clone());
        let before = old.waiting.len();
        *old = chain;
        let after = old.waiting.len();
        self.waiting = self.waiting.saturating_sub(before) + after;
        if after > 0 {
            self.waiting_in.insert(epoch);
        } else {
            self.waiting_in.remove(&epoch);
        }
    }

    /// The highest sequence applied in the chain of `epoch`.
    pub(crate) fn applied_in(&self, epoch: Option<&str>) -> u64 {
        match epoch {
            None => self.legacy.applied,
            Some(epoch) => self.epochs.get(epoch).map_or(0, |chain| chain.applied),
        }
    }

    /// The highest sequence applied in any chain.
    pub fn highest_applied(&self) -> u64 {
        self.epochs
            .values()
            .map(|chain| chain.applied)
            .fold(self.legacy.applied, u64::max)
    }

    /// Events waiting for a predecessor, over all chains.
    pub fn waiting(&self) -> usize {
        self.waiting
    }

    /// Whether `event` was applied already, or waits already.
    pub(crate) fn is_duplicate(&self, event: &Event) -> bool {
        let chain = match event.epoch.as_deref() {
            None => Some(&self.legacy),
            Some(epoch) => self.epochs.get(epoch),
        };
        chain.is_some_and(|chain| {
            event.seq <= chain.applied || chain.waiting.contains_key(&event.seq)
        })
    }

    /// Whether everything `event` comes after has been applied.
    pub fn ready(&self, event: &Event) -> bool {
        let (chain, seq) = event.needs();
        self.applied_in(chain) >= seq
    }

    /// When `event` is the full event of a stub waiting in its chain: takes the stub's place
    /// (the stub stood in for it; applied now, it would hold its item for an event already
    /// here). False otherwise.
    pub(crate) fn replace_waiting_stub(&mut self, event: &Event) -> bool {
        let chain = match event.epoch.as_deref() {
            None => Some(&mut self.legacy),
            Some(epoch) => self.epochs.get_mut(epoch),
        };
        let Some(waiting) = chain.and_then(|chain| chain.waiting.get_mut(&event.seq)) else {
            return false;
        };
        let stands_in = matches!(
            &waiting.kind,
            EventKind::Held { held_event_id, .. } if *held_event_id == event.event_id
        );
        if stands_in {
            *waiting = event.clone();
        }
        stands_in
    }

    /// Keeps `event` until `NodeCursor::take_ready` finds it ready.
    pub fn buffer(&mut self, event: Event) {
        let epoch = event.epoch.clone();
        let chain = self.chain_mut(epoch.clone());
        if chain.waiting.insert(event.seq, event).is_none() {
            self.waiting += 1;
            self.waiting_in.insert(epoch);
        }
    }

    /// Records `event` as applied.
    pub(crate) fn mark_applied(&mut self, event: &Event) {
        let chain = match event.epoch.as_deref() {
            None => &mut self.legacy,
            Some(epoch) => match self.epochs.get_mut(epoch) {
                Some(chain) => chain,
                None => self.epochs.entry(epoch.to_owned()).or_default(),
            },
        };
        chain.applied = chain.applied.max(event.seq);
    }

    /// Removes and returns a waiting event that is ready now, if any.
    pub(crate) fn take_ready(&mut self) -> Option<Event> {
        if self.waiting == 0 {
            return None;
        }
        let ready = self
            .heads()
            .find(|(_, head)| self.ready(head))
            .map(|(epoch, head)| (epoch.map(str::to_owned), head.seq))?;
        let (epoch, seq) = ready;
        let chain = self.chain_mut(epoch.clone());
        let event = chain.waiting.remove(&seq)?;
        if chain.waiting.is_empty() {
            self.waiting_in.remove(&epoch);
        }
        self.waiting -= 1;
        Some(event)
    }

    /// The timestamp of the oldest waiting event.
    pub fn oldest_waiting(&self) -> Option<DateTime<Utc>> {
        self.waiting_in
            .iter()
            .filter_map(|epoch| self.chain(epoch.as_deref()))
            .filter_map(|chain| chain.waiting.values().map(|e| e.timestamp).min())
            .min()
    }

    /// Gives up what the oldest blocked event waits for: the chain it needs is taken as applied
    /// through the sequence it needs. `None` when nothing waits behind a gap.
    pub(crate) fn give_up_oldest_gap(&mut self) -> Option<Given> {
        let (chain, to) = self
            .heads()
            .filter(|(_, head)| !self.ready(head))
            .min_by_key(|(_, head)| (head.timestamp, head.seq))
            .map(|(_, head)| {
                let (chain, to) = head.needs();
                (chain.map(str::to_owned), to)
            })?;
        let needed = self.chain_mut(chain.clone());
        let from = needed.applied + 1;
        needed.applied = to;
        Some(Given {
            epoch: chain,
            from,
            to,
        })
    }

    /// The first waiting event of every chain that has one, with the chain's epoch.
    fn heads(&self) -> impl Iterator<Item = (Option<&str>, &Event)> {
        self.waiting_in.iter().filter_map(|epoch| {
            let epoch = epoch.as_deref();
            let head = self.chain(epoch)?.waiting.values().next()?;
            Some((epoch, head))
        })
    }

    fn chain_mut(&mut self, epoch: Option<String>) -> &mut Chain {
        match epoch {
            None => &mut self.legacy,
            Some(epoch) => self.epochs.entry(epoch).or_default(),
        }
    }
}
