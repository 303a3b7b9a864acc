//! A durable consumer's items as a log of **chunks**: each save appends the changes of its
//! batch (an item put whole, or removed) as a few large sled values, instead of one sled key
//! per item. sled's cost is per key: 100,000 items of 1.4 KB written one key each reach about
//! 80,000 items/s on 2 cores, written 45 to 90 to a value 270,000 to 320,000 (docs/benchmarks.md). Loading
//! replays the chunks in order. When the chunks hold more than twice the live items (plus
//! [`COMPACT_SLACK`]), a save rewrites the live items as new chunks and deletes the old ones in
//! the same sled batch. Pure code: the store does the I/O.
//!
//! ```text
//! chunk = change ("\n" change)*          one JSON object per line
//! change = {"put": StoredItem} | {"removed": {"job_id": .., "item_id": ..}}
//! ```

use serde::{Deserialize, Serialize};

use crate::domain::event::append_json;
use crate::domain::projection::StoredItem;

/// A chunk is closed once it holds this many bytes (the last change may pass it). One chunk is
/// below sled's blob threshold (a quarter of its 512 KiB segment), but a leaf holding two is
/// above it: sled writes such a leaf to a blob file of its own whenever it rewrites it (seen in
/// a profile of `consumer_rebuild`, docs/benchmarks.md, twelfth round).
pub(crate) const CHUNK_BYTES: usize = 64 * 1024;

/// Stale entries tolerated beyond the live items before a save compacts the chunks.
pub(crate) const COMPACT_SLACK: u64 = 50_000;

/// One change to the items, as read back.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Change {
    /// The item as it is now.
    Put(Box<StoredItem>),
    /// The item is gone.
    Removed {
        /// Its job.
        job_id: String,
        /// Its id.
        item_id: String,
    },
}

impl Change {
    /// The change as written.
    pub(crate) fn as_written(&self) -> ChangeRef<'_> {
        match self {
            Change::Put(stored) => ChangeRef::Put(stored),
            Change::Removed { job_id, item_id } => ChangeRef::Removed { job_id, item_id },
        }
    }
}

/// One change to the items, as written: [`Change`] borrowing from the fold.
#[derive(Debug, Clone, Copy, Serialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum ChangeRef<'a> {
    /// The item as it is now.
    Put(&'a StoredItem),
    /// The item is gone.
    Removed {
        /// Its job.
        job_id: &'a str,
        /// Its id.
        item_id: &'a str,
    },
}

/// Where the chunks are: numbers `first..next` (not every number is used: a save reserves one
/// per change before it knows how many chunks its changes take), holding `entries` changes in
/// all.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Chunks {
    /// The oldest chunk number that may exist.
    pub(crate) first: u64,
    /// The number the next chunk gets.
    pub(crate) next: u64,
    /// Changes in the chunks.
    pub(crate) entries: u64,
}

impl Chunks {
    /// True when adding `adding` changes would leave more than twice `live` entries (plus
    /// `slack`): time to rewrite the live items instead.
    pub(crate) fn needs_compaction(&self, adding: u64, live: u64, slack: u64) -> bool {
        self.entries.saturating_add(adding) > live.saturating_mul(2).saturating_add(slack)
    }
}

/// Encodes `changes` as chunks of about [`CHUNK_BYTES`] each.
pub(crate) fn encode<'a>(
    changes: impl IntoIterator<Item = ChangeRef<'a>>,
) -> Result<Vec<Vec<u8>>, serde_json::Error> {
    let mut chunks = Vec::new();
    let mut current: Vec<u8> = Vec::new();
    for change in changes {
        if !current.is_empty() {
            current.push(b'\n');
        }
        append_json(&change, &mut current)?;
        if current.len() >= CHUNK_BYTES {
            chunks.push(std::mem::take(&mut current));
        }
    }
    if !current.is_empty() {
        chunks.push(current);
    }
    Ok(chunks)
}

/// Decodes one chunk's changes, in order.
pub(crate) fn decode(chunk: &[u8]) -> impl Iterator<Item = Result<Change, serde_json::Error>> + '_ {
    chunk
        .split(|&byte| byte == b'\n')
        .filter(|line| !line.is_empty())
        .map(serde_json::from_slice)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn changes_round_trip_in_chunks_of_bounded_size() {
        let ids: Vec<String> = (0..20_000).map(|n| format!("item-{n}")).collect();
        let written = ids.iter().map(|id| ChangeRef::Removed {
            job_id: "job",
            item_id: id,
        });
        let chunks = encode(written).unwrap();
        assert!(chunks.len() > 1, "{} chunks", chunks.len());
        // Every chunk but the last reached the size; none went much past it.
        for chunk in &chunks[..chunks.len() - 1] {
            assert!((CHUNK_BYTES..CHUNK_BYTES + 100).contains(&chunk.len()));
        }
        let back: Vec<Change> = chunks
            .iter()
            .flat_map(|chunk| decode(chunk))
            .collect::<Result<_, _>>()
            .unwrap();
        let expected: Vec<Change> = ids
            .iter()
            .map(|id| Change::Removed {
                job_id: "job".into(),
                item_id: id.clone(),
            })
            .collect();
        assert_eq!(back, expected);
        assert!(encode(Vec::new()).unwrap().is_empty());
    }

    #[test]
    fn changes_are_written_as_serde_json_writes_them() {
        // The chunks are read back by serde_json (and by stores written before the faster
        // writer): the bytes must be the same.
        let mut stored = crate::testing::stored_item("job \"q\"", "i\n1", "n:1");
        std::sync::Arc::make_mut(&mut stored.item).item_data = serde_json::json!({
            "blob": "x".repeat(1024),
            "text": "tab\t, quote \", back \\ slash, \u{1} control, é, 🦀",
            "n": [1, -2, 3.5, 1e300, null, true],
        });
        stored.unstored_event_ids.push("n:v7".into());
        let changes = [
            ChangeRef::Put(&stored),
            ChangeRef::Removed {
                job_id: "j",
                item_id: "</script>",
            },
        ];
        let mut expected = Vec::new();
        for (n, change) in changes.iter().enumerate() {
            if n > 0 {
                expected.push(b'\n');
            }
            serde_json::to_writer(&mut expected, change).unwrap();
        }
        assert_eq!(encode(changes).unwrap(), vec![expected]);
    }

    #[test]
    fn a_damaged_chunk_is_an_error() {
        assert!(decode(b"{\"removed\":{\"job_id\":\"j\"}}").any(|c| c.is_err()));
        assert!(decode(b"not json").any(|c| c.is_err()));
    }

    #[test]
    fn compaction_waits_for_twice_the_live_items_plus_slack() {
        let chunks = Chunks {
            first: 0,
            next: 4,
            entries: 150,
        };
        assert!(!chunks.needs_compaction(50, 100, 0));
        assert!(chunks.needs_compaction(51, 100, 0));
        assert!(!chunks.needs_compaction(51, 100, 1));
        assert!(!chunks.needs_compaction(u64::MAX, u64::MAX, u64::MAX));
    }
}
