//! Key layout of the sled tree. Pure byte encoding, no I/O.
//!
//! All keys live in one sled tree so that one `apply_batch` changes the log, the unpublished set
//! and every projection index atomically (sled batches are crash-atomic within one tree). Ids
//! never contain NUL (see [`crate::decide::validate_id`]), so NUL separates key parts; numbers are
//! big-endian so byte order is numeric order.

/// Prefix of the event log: `l` + seq → event JSON.
pub const LOG: &[u8] = b"l";
/// Prefix of the unpublished set: `u` + seq → event timestamp (ms since epoch, big-endian).
pub const UNPUBLISHED: &[u8] = b"u";
/// Prefix of items: `i` + job + NUL + item → stored item JSON.
pub const ITEM: &[u8] = b"i";
/// Prefix of the signature index: `s` + signature + NUL + job + NUL + item → empty.
pub const BY_SIGNATURE: &[u8] = b"s";
/// Prefix of the age index: `a` + first-failure ms + job + NUL + item → empty.
pub const BY_AGE: &[u8] = b"a";
/// Prefix of the FIFO index: `f` + job + NUL + created seq + item → empty.
pub const FIFO: &[u8] = b"f";
/// Prefix of per-job counts: `c` + job → count (big-endian u64).
pub const JOB_COUNT: &[u8] = b"c";
/// The node id this database belongs to.
pub const NODE_ID: &[u8] = b"m/node_id";

/// Every projection prefix: what a rebuild clears and replays.
pub const PROJECTION_PREFIXES: [&[u8]; 5] = [ITEM, BY_SIGNATURE, BY_AGE, FIFO, JOB_COUNT];

fn join(parts: &[&[u8]]) -> Vec<u8> {
    let mut key = Vec::with_capacity(parts.iter().map(|p| p.len()).sum());
    for part in parts {
        key.extend_from_slice(part);
    }
    key
}

/// `l` + seq.
pub fn log(seq: u64) -> Vec<u8> {
    join(&[LOG, &seq.to_be_bytes()])
}

/// `u` + seq.
pub fn unpublished(seq: u64) -> Vec<u8> {
    join(&[UNPUBLISHED, &seq.to_be_bytes()])
}

/// `i` + job + NUL + item.
pub fn item(job_id: &str, item_id: &str) -> Vec<u8> {
    join(&[ITEM, job_id.as_bytes(), b"\0", item_id.as_bytes()])
}

/// Prefix of every item of one job.
pub fn items_of_job(job_id: &str) -> Vec<u8> {
    join(&[ITEM, job_id.as_bytes(), b"\0"])
}

/// `s` + signature + NUL + job + NUL + item.
pub fn by_signature(signature: &str, job_id: &str, item_id: &str) -> Vec<u8> {
    join(&[
        BY_SIGNATURE,
        signature.as_bytes(),
        b"\0",
        job_id.as_bytes(),
        b"\0",
        item_id.as_bytes(),
    ])
}

/// `a` + first-failure ms + job + NUL + item. Negative times (before 1970) sort as 0.
pub fn by_age(first_attempt_ms: i64, job_id: &str, item_id: &str) -> Vec<u8> {
    let ms = u64::try_from(first_attempt_ms).unwrap_or(0);
    join(&[
        BY_AGE,
        &ms.to_be_bytes(),
        job_id.as_bytes(),
        b"\0",
        item_id.as_bytes(),
    ])
}

/// Exclusive upper bound of ages before `cutoff_ms`.
pub fn age_bound(cutoff_ms: i64) -> Vec<u8> {
    let ms = u64::try_from(cutoff_ms).unwrap_or(0);
    join(&[BY_AGE, &ms.to_be_bytes()])
}

/// `f` + job + NUL + created seq + item.
pub fn fifo(job_id: &str, created_seq: u64, item_id: &str) -> Vec<u8> {
    join(&[
        FIFO,
        job_id.as_bytes(),
        b"\0",
        &created_seq.to_be_bytes(),
        item_id.as_bytes(),
    ])
}

/// Prefix of one job's FIFO index.
pub fn fifo_of_job(job_id: &str) -> Vec<u8> {
    join(&[FIFO, job_id.as_bytes(), b"\0"])
}

/// `c` + job.
pub fn job_count(job_id: &str) -> Vec<u8> {
    join(&[JOB_COUNT, job_id.as_bytes()])
}

/// Reads a big-endian u64 value; `None` if it is not 8 bytes.
pub fn decode_u64(bytes: &[u8]) -> Option<u64> {
    <[u8; 8]>::try_from(bytes).ok().map(u64::from_be_bytes)
}

/// The seq at the end of an `l` or `u` key.
pub fn seq_of(key: &[u8]) -> Option<u64> {
    key.get(1..).and_then(decode_u64)
}

/// The item id at the end of a FIFO key of the job whose prefix is `job_prefix`.
pub fn item_of_fifo(key: &[u8], job_prefix_len: usize) -> Option<String> {
    let rest = key.get(job_prefix_len + 8..)?;
    String::from_utf8(rest.to_vec()).ok()
}

/// `(job, item)` at the end of an age key.
pub fn job_item_of_age(key: &[u8]) -> Option<(String, String)> {
    let rest = key.get(1 + 8..)?;
    let split = rest.iter().position(|b| *b == 0)?;
    let job = String::from_utf8(rest.get(..split)?.to_vec()).ok()?;
    let item = String::from_utf8(rest.get(split + 1..)?.to_vec()).ok()?;
    Some((job, item))
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
        let age = by_age(1_700_000_000_000, "job-1", "item-x");
        assert_eq!(
            job_item_of_age(&age),
            Some(("job-1".into(), "item-x".into()))
        );
        assert!(age < age_bound(1_700_000_000_001));
        assert!(age >= age_bound(1_700_000_000_000));
    }

    #[test]
    fn job_prefix_does_not_match_longer_job_names() {
        assert!(!item("job-10", "a").starts_with(&items_of_job("job-1")));
    }
}
