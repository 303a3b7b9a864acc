//! Key layout of the sled tree. Pure byte encoding, no I/O.
//!
//! All keys live in one sled tree so that one `apply_batch` changes the log, the unpublished set
//! and every projection index atomically (sled batches are crash-atomic within one tree). Ids
//! never contain NUL (see [`crate::domain::command::validate_id`]), so NUL separates key parts; numbers are
//! big-endian so byte order is numeric order.
//!
//! Every index is per job (the job id comes first): a job-scoped query is one prefix seek, and
//! a query over all jobs merges the jobs' index walks (jobs are few; items are many).

use chrono::{DateTime, Utc};

/// Prefix of the event log of sink format 2 (`l` + seq → event JSON): read only to migrate it
/// into the segment log ([`crate::sink::legacy::migrate`]).
pub const LOG: &[u8] = b"l";
/// Prefix of the pending set: `u` + seq → anything. Events at or below the published
/// watermark that still need publishing ([`crate::sink::projection::publish_state`]).
pub const UNPUBLISHED: &[u8] = b"u";
/// Prefix of the parked set: `p` + seq → `ParkedRecord` JSON (`parked.rs`). Events the bus
/// refused for good (or whose log entry cannot be read), moved out of the unpublished set so
/// they do not block the reconciler; `dlq reconcile --retry-parked` moves them back.
pub const PARKED: &[u8] = b"p";
/// Prefix of items: `i` + job + NUL + item → stored item JSON.
pub const ITEM: &[u8] = b"i";
/// Prefix of the signature index of projection formats 2 and 3 (`s` + signature + NUL + job +
/// NUL + item → empty). Nothing read it; format 4 drops it ([`crate::sink::projection::format`]).
pub const BY_SIGNATURE: &[u8] = b"s";
/// Prefix of the age index: `a` + job + NUL + first-failure ms + item → empty.
pub const BY_AGE: &[u8] = b"a";
/// Prefix of the recency index: `r` + job + NUL + last failure (newest first) + item → empty.
pub const BY_RECENCY: &[u8] = b"r";
/// Prefix of the FIFO index: `f` + job + NUL + created seq + item → empty.
pub const FIFO: &[u8] = b"f";
/// The three indexes' logical prefixes, in the order of [`INDEX_RUNS`].
pub(crate) const INDEX_KINDS: [&[u8]; 3] = [BY_AGE, BY_RECENCY, FIFO];
/// Prefix of the age index's runs (projection format 5, [`crate::sink::projection::index_runs`]).
pub const AGE_RUNS: &[u8] = b"A";
/// Prefix of the recency index's runs.
pub const RECENCY_RUNS: &[u8] = b"R";
/// Prefix of the FIFO index's runs.
pub const FIFO_RUNS: &[u8] = b"F";
/// Where each of [`INDEX_KINDS`] is stored in projection format 5.
pub(crate) const INDEX_RUNS: [&[u8]; 3] = [AGE_RUNS, RECENCY_RUNS, FIFO_RUNS];
/// Prefix of per-job counters: `c` + job → [`crate::sink::projection::counters::JobCounters`].
pub const JOB_COUNT: &[u8] = b"c";
/// The node id this database belongs to.
pub(crate) const NODE_ID: &[u8] = b"m/node_id";
/// The projection layout version this database's projection was built with.
pub(crate) const PROJECTION_FORMAT: &[u8] = b"m/projection_format";
/// The current projection layout: items are pointer records into the log
/// (`crate::sink::projection::item_record`), indexed by age, recency and FIFO order in sorted runs of entries
/// (`crate::sink::projection::index_runs`); no signature index. A database of an older layout is taken over or
/// rebuilt ([`crate::sink::projection::format`]).
pub(crate) const CURRENT_PROJECTION_FORMAT: u64 = 5;
/// The layout before: the same, with one sled key per index entry ([`BY_AGE`], [`BY_RECENCY`],
/// [`FIFO`]).
pub(crate) const KEYED_INDEXES_PROJECTION_FORMAT: u64 = 4;
/// The layout before that: pointer items, keyed indexes, plus a signature index
/// ([`BY_SIGNATURE`]).
pub(crate) const POINTER_ITEMS_PROJECTION_FORMAT: u64 = 3;
/// The oldest taken over: the same keys as format 3, every item kept whole as JSON. Such
/// items stay readable as they are.
pub(crate) const INLINE_ITEMS_PROJECTION_FORMAT: u64 = 2;
/// Where the event log is: absent in format 2 (the log in sled, `l/` keys, plus a journal),
/// [`CURRENT_SINK_FORMAT`] once it is in segment files.
pub(crate) const SINK_FORMAT: &[u8] = b"m/sink_format";
/// The sink format with the log in segment files (`log/`) and sled as the projection.
pub(crate) const CURRENT_SINK_FORMAT: u64 = 3;
/// The last log sequence applied to the projection; written in the same batch as the changes.
pub(crate) const APPLIED_THROUGH: &[u8] = b"m/applied_through";
/// The publish watermark and the events published above it ([`crate::sink::projection::publish_state`]).
pub(crate) const PUBLISHED: &[u8] = b"m/published";
/// Every item created at or below this sequence is kept whole in sled, not as a pointer into
/// the log (`crate::sink::projection::inline_items`); absent: 0.
pub(crate) const INLINED_THROUGH: &[u8] = b"m/inlined_through";

/// Every projection prefix: what a rebuild clears and replays (with [`BY_SIGNATURE`] and the
/// keyed indexes, so a rebuild also drops what an older format left).
pub(crate) const PROJECTION_PREFIXES: [&[u8]; 9] = [
    ITEM,
    BY_SIGNATURE,
    BY_AGE,
    BY_RECENCY,
    FIFO,
    AGE_RUNS,
    RECENCY_RUNS,
    FIFO_RUNS,
    JOB_COUNT,
];

fn join(parts: &[&[u8]]) -> Vec<u8> {
    let mut key = Vec::with_capacity(parts.iter().map(|p| p.len()).sum());
    for part in parts {
        key.extend_from_slice(part);
    }
    key
}

/// `l` + seq (the key of the log in sink format 2; tests build such directories).
#[cfg(any(test, feature = "testing"))]
pub fn log(seq: u64) -> Vec<u8> {
    join(&[LOG, &seq.to_be_bytes()])
}

/// `u` + seq.
pub(crate) fn unpublished(seq: u64) -> Vec<u8> {
    join(&[UNPUBLISHED, &seq.to_be_bytes()])
}

/// `p` + seq.
pub(crate) fn parked(seq: u64) -> Vec<u8> {
    join(&[PARKED, &seq.to_be_bytes()])
}

/// `i` + job + NUL + item.
pub fn item(job_id: &str, item_id: &str) -> Vec<u8> {
    join(&[ITEM, job_id.as_bytes(), b"\0", item_id.as_bytes()])
}

/// Prefix of every item of one job.
pub(crate) fn items_of_job(job_id: &str) -> Vec<u8> {
    join(&[ITEM, job_id.as_bytes(), b"\0"])
}

/// `a` + job + NUL + first-failure ms + item. Negative times (before 1970) sort as 0.
pub(crate) fn by_age(job_id: &str, first_attempt_ms: i64, item_id: &str) -> Vec<u8> {
    let ms = u64::try_from(first_attempt_ms).unwrap_or(0);
    join(&[
        BY_AGE,
        job_id.as_bytes(),
        b"\0",
        &ms.to_be_bytes(),
        item_id.as_bytes(),
    ])
}

/// Prefix of one job's age index.
pub(crate) fn ages_of_job(job_id: &str) -> Vec<u8> {
    join(&[BY_AGE, job_id.as_bytes(), b"\0"])
}

/// Exclusive upper bound of the job's ages before `cutoff_ms`.
pub(crate) fn age_bound(job_id: &str, cutoff_ms: i64) -> Vec<u8> {
    let ms = u64::try_from(cutoff_ms).unwrap_or(0);
    join(&[BY_AGE, job_id.as_bytes(), b"\0", &ms.to_be_bytes()])
}

/// `(ms, item)` at the end of an age key of the job whose prefix is `job_prefix_len` long.
pub(crate) fn ms_item_of_age(key: &[u8], job_prefix_len: usize) -> Option<(i64, String)> {
    let ms = key
        .get(job_prefix_len..job_prefix_len + 8)
        .and_then(decode_u64)
        .and_then(|ms| i64::try_from(ms).ok())?;
    let item = String::from_utf8(key.get(job_prefix_len + 8..)?.to_vec()).ok()?;
    Some((ms, item))
}

/// A time as 12 bytes that sort **newest first**: seconds (sign-flipped, inverted) then
/// nanoseconds (inverted).
pub(crate) fn newest_first(time: DateTime<Utc>) -> [u8; 12] {
    let secs = (time.timestamp() as u64) ^ (1 << 63);
    let mut bytes = [0u8; 12];
    bytes[..8].copy_from_slice(&(!secs).to_be_bytes());
    bytes[8..].copy_from_slice(&(!time.timestamp_subsec_nanos()).to_be_bytes());
    bytes
}

/// Reads [`newest_first`]'s bytes back.
pub(crate) fn time_of_newest_first(bytes: &[u8]) -> Option<DateTime<Utc>> {
    let secs = !decode_u64(bytes.get(..8)?)? ^ (1 << 63);
    let nanos = !u32::from_be_bytes(<[u8; 4]>::try_from(bytes.get(8..12)?).ok()?);
    DateTime::from_timestamp(secs as i64, nanos)
}

/// `r` + job + NUL + last failure ([`newest_first`]) + item: a job's items, most recently failed
/// first, ties by item id.
pub(crate) fn by_recency(job_id: &str, last_attempt: DateTime<Utc>, item_id: &str) -> Vec<u8> {
    join(&[
        BY_RECENCY,
        job_id.as_bytes(),
        b"\0",
        &newest_first(last_attempt),
        item_id.as_bytes(),
    ])
}

/// Prefix of one job's recency index.
pub(crate) fn recency_of_job(job_id: &str) -> Vec<u8> {
    join(&[BY_RECENCY, job_id.as_bytes(), b"\0"])
}

/// The job's recency keys from `time` on (that time included, older ones after it).
pub(crate) fn recency_from(job_id: &str, time: DateTime<Utc>) -> Vec<u8> {
    join(&[BY_RECENCY, job_id.as_bytes(), b"\0", &newest_first(time)])
}

/// `(last failure, item)` at the end of a recency key of the job whose prefix is
/// `job_prefix_len` long.
pub(crate) fn time_item_of_recency(
    key: &[u8],
    job_prefix_len: usize,
) -> Option<(DateTime<Utc>, String)> {
    let time = time_of_newest_first(key.get(job_prefix_len..job_prefix_len + 12)?)?;
    let item = String::from_utf8(key.get(job_prefix_len + 12..)?.to_vec()).ok()?;
    Some((time, item))
}

/// The job id of a `c` key.
pub(crate) fn job_of_count(key: &[u8]) -> Option<String> {
    String::from_utf8(key.get(JOB_COUNT.len()..)?.to_vec()).ok()
}

/// `f` + job + NUL + created seq + item.
pub(crate) fn fifo(job_id: &str, created_seq: u64, item_id: &str) -> Vec<u8> {
    join(&[
        FIFO,
        job_id.as_bytes(),
        b"\0",
        &created_seq.to_be_bytes(),
        item_id.as_bytes(),
    ])
}

/// Prefix of one job's FIFO index.
pub(crate) fn fifo_of_job(job_id: &str) -> Vec<u8> {
    join(&[FIFO, job_id.as_bytes(), b"\0"])
}

/// The first key after every key that starts with `prefix` (which ends below `0xff`, as every
/// job prefix here ends in NUL).
pub(crate) fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while end.last() == Some(&0xff) {
        end.pop();
    }
    if let Some(last) = end.last_mut() {
        *last += 1;
    }
    end
}

/// `c` + job.
pub(crate) fn job_count(job_id: &str) -> Vec<u8> {
    join(&[JOB_COUNT, job_id.as_bytes()])
}

/// Reads a big-endian u64 value; `None` if it is not 8 bytes.
pub(crate) fn decode_u64(bytes: &[u8]) -> Option<u64> {
    <[u8; 8]>::try_from(bytes).ok().map(u64::from_be_bytes)
}

/// The seq at the end of an `l` or `u` key.
pub(crate) fn seq_of(key: &[u8]) -> Option<u64> {
    key.get(1..).and_then(decode_u64)
}

/// The item id at the end of a FIFO key of the job whose prefix is `job_prefix`.
pub(crate) fn item_of_fifo(key: &[u8], job_prefix_len: usize) -> Option<String> {
    let rest = key.get(job_prefix_len + 8..)?;
    String::from_utf8(rest.to_vec()).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sequences_sort_numerically() {
        assert!(log(9) < log(10));
        assert!(log(255) < log(256));
        assert_eq!(seq_of(&unpublished(42)), Some(42));
    }

    #[test]
    fn fifo_and_age_keys_round_trip() {
        let prefix = fifo_of_job("job-1");
        let key = fifo("job-1", 7, "item-x");
        assert!(key.starts_with(&prefix));
        assert_eq!(item_of_fifo(&key, prefix.len()).as_deref(), Some("item-x"));
        let age = by_age("job-1", 1_700_000_000_000, "item-x");
        let ages = ages_of_job("job-1");
        assert!(age.starts_with(&ages));
        assert_eq!(
            ms_item_of_age(&age, ages.len()),
            Some((1_700_000_000_000, "item-x".into()))
        );
        assert!(age < age_bound("job-1", 1_700_000_000_001));
        assert!(age >= age_bound("job-1", 1_700_000_000_000));
    }

    #[test]
    fn job_prefix_does_not_match_longer_job_names() {
        assert!(!item("job-10", "a").starts_with(&items_of_job("job-1")));
    }

    proptest::proptest! {
        /// Recency keys sort newest first (ties by item id) and decode to the exact time.
        #[test]
        fn recency_keys_sort_newest_first(
            a in -4_000_000_000i64..8_000_000_000, an in 0u32..1_000_000_000,
            b in -4_000_000_000i64..8_000_000_000, bn in 0u32..1_000_000_000,
        ) {
            let ta = DateTime::from_timestamp(a, an).unwrap();
            let tb = DateTime::from_timestamp(b, bn).unwrap();
            let (ka, kb) = (by_recency("j", ta, "x"), by_recency("j", tb, "y"));
            let prefix = recency_of_job("j").len();
            proptest::prop_assert_eq!(time_item_of_recency(&ka, prefix), Some((ta, "x".to_owned())));
            if ta != tb {
                proptest::prop_assert_eq!(ka < kb, ta > tb);
            } else {
                proptest::prop_assert!(ka < kb);
            }
            proptest::prop_assert!(ka >= recency_from("j", ta));
        }
    }
}
