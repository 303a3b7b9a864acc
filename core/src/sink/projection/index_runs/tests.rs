//! The runs against a model: a sorted set of logical keys, edited in random batches.

use std::collections::BTreeSet;

use proptest::prelude::*;

use super::edits::CachedRun;
use super::{codec, range, RunCache, RunEdits, RUN_MAX};
use crate::sink::projection::keys;

fn tree() -> sled::Tree {
    let db = sled::Config::new().temporary(true).open().unwrap();
    (*db).clone()
}

/// Applies `ops` (key, present) as one batch, as the projector does.
fn apply(tree: &sled::Tree, ops: &[(Vec<u8>, bool)]) {
    apply_cached(tree, ops, &mut RunCache::default());
}

/// [`apply`] over the runs `cache` holds, as the applier does; `cache` then holds them as
/// the batch left them.
fn apply_cached(tree: &sled::Tree, ops: &[(Vec<u8>, bool)], cache: &mut RunCache) {
    let mut edits = RunEdits::cached(tree, std::mem::take(cache));
    let mut batch = sled::Batch::default();
    for (key, present) in ops {
        assert!(edits.set(key, *present).unwrap());
    }
    *cache = edits.write_into(&mut batch);
    tree.apply_batch(batch).unwrap();
}

/// Every cached run is the tree's run of that key, entry for entry, and names the tree's next
/// run of its kind.
fn check_cache(tree: &sled::Tree, cache: &RunCache) {
    for (key, entries, next) in cache.runs() {
        let stored = tree
            .get(&key)
            .unwrap()
            .expect("a cached run is in the tree");
        let stored: Vec<Vec<u8>> = codec::decode(&stored)
            .unwrap()
            .iter()
            .map(<[u8]>::to_vec)
            .collect();
        assert_eq!(entries, stored, "cached run {key:?}");
        let kind = key[0];
        let after = (
            std::ops::Bound::Excluded(key.clone()),
            std::ops::Bound::Excluded(vec![kind + 1]),
        );
        let tree_next = tree
            .range(after)
            .next()
            .map(|found| found.unwrap().0.to_vec());
        assert_eq!(next, tree_next, "the run after cached run {key:?}");
    }
}

fn entries(tree: &sled::Tree, from: &[u8], to: Option<&[u8]>) -> Vec<Vec<u8>> {
    range(tree, from, to).map(Result::unwrap).collect()
}

/// Every run is non-empty, at most `RUN_MAX` long, and holds only entries between its key
/// and the next run's key.
fn check_runs(tree: &sled::Tree, run_prefix: &[u8]) {
    let runs: Vec<(Vec<u8>, Vec<Vec<u8>>)> = tree
        .scan_prefix(run_prefix)
        .map(|entry| {
            let (key, value) = entry.unwrap();
            (
                key.to_vec(),
                codec::decode(&value)
                    .unwrap()
                    .iter()
                    .map(<[u8]>::to_vec)
                    .collect(),
            )
        })
        .collect();
    for (n, (key, run)) in runs.iter().enumerate() {
        assert!(
            !run.is_empty() && run.len() <= RUN_MAX,
            "run of {}",
            run.len()
        );
        assert!(run[0].as_slice() >= &key[1..]);
        if let Some((next, _)) = runs.get(n + 1) {
            assert!(run.last().unwrap().as_slice() < &next[1..]);
        }
    }
}

fn age_key(job: u8, ms: u16, item: u16) -> Vec<u8> {
    keys::by_age(
        &format!("job-{job}"),
        i64::from(ms),
        &format!("item-{item}"),
    )
}

/// Inserts `keys` in batches of seven, in the order given; checks the runs and returns the
/// length of each age run, in order.
fn insert_by_sevens(tree: &sled::Tree, keys: &[Vec<u8>]) -> Vec<usize> {
    for chunk in keys.chunks(7) {
        let ops: Vec<_> = chunk.iter().map(|k| (k.clone(), true)).collect();
        apply(tree, &ops);
    }
    check_runs(tree, keys::AGE_RUNS);
    tree.scan_prefix(keys::AGE_RUNS)
        .map(|entry| codec::decode(&entry.unwrap().1).unwrap().len())
        .collect()
}

#[test]
fn a_job_filled_in_order_splits_into_runs_and_reads_back() {
    let tree = tree();
    let keys: Vec<Vec<u8>> = (0..1000).map(|n| age_key(1, n, n)).collect();
    let lens = insert_by_sevens(&tree, &keys);
    // Appends fill runs to the brim and start the next: only the last run is short, so a
    // batch rewrites a short tail, not a run of RUN_MAX / 2 or more.
    assert_eq!(lens.len(), 1000_usize.div_ceil(RUN_MAX), "{lens:?}");
    let (last, full) = lens.split_last().unwrap();
    assert!(full.iter().all(|&len| len == RUN_MAX), "{lens:?}");
    assert_eq!(*last, 1000 - RUN_MAX * full.len());
    assert_eq!(entries(&tree, keys::BY_AGE, None), keys);
    let job = keys::ages_of_job("job-1");
    let bound = keys::age_bound("job-1", 500);
    assert_eq!(entries(&tree, &job, Some(&bound)), keys[..500].to_vec());
    // Other indexes are untouched and empty.
    assert!(entries(&tree, keys::FIFO, None).is_empty());
}

/// Entries that always land before the job's others (the recency index, newest first, or an
/// import in reverse order) split the job's first run evenly: no trail of one-entry runs.
#[test]
fn a_job_filled_front_first_keeps_its_runs_at_least_half_full() {
    let tree = tree();
    let keys: Vec<Vec<u8>> = (0..1000).rev().map(|n| age_key(1, n, n)).collect();
    let lens = insert_by_sevens(&tree, &keys);
    let (_, all_but_last) = lens.split_last().unwrap();
    assert!(
        all_but_last.iter().all(|&len| len >= RUN_MAX / 2),
        "{lens:?}"
    );
    let mut sorted = keys.clone();
    sorted.sort();
    assert_eq!(entries(&tree, keys::BY_AGE, None), sorted);
}

#[test]
fn the_cache_follows_splits_and_is_dropped_when_a_run_goes() {
    let tree = tree();
    let mut cache = RunCache::default();
    let keys: Vec<Vec<u8>> = (0..1000).map(|n| age_key(3, n, n)).collect();
    for chunk in keys.chunks(50) {
        let ops: Vec<_> = chunk.iter().map(|k| (k.clone(), true)).collect();
        apply_cached(&tree, &ops, &mut cache);
        check_cache(&tree, &cache);
        assert!(!cache.runs().is_empty(), "the runs written stay cached");
    }
    assert_eq!(entries(&tree, keys::BY_AGE, None), keys);
    // Emptying the second run deletes it, so the first run's next one changes: the cache
    // must not keep naming the deleted run.
    let runs: Vec<CachedRun> = cache.runs();
    let (_, second, _) = &runs[1];
    let gone: Vec<(Vec<u8>, bool)> = second
        .iter()
        .map(|entry| ([keys::BY_AGE, entry].concat(), false))
        .collect();
    apply_cached(&tree, &gone, &mut cache);
    check_cache(&tree, &cache);
    check_runs(&tree, keys::AGE_RUNS);
    let left: Vec<Vec<u8>> = keys
        .iter()
        .filter(|k| !gone.iter().any(|(g, _)| g == *k))
        .cloned()
        .collect();
    assert_eq!(entries(&tree, keys::BY_AGE, None), left);
    // Entries of the deleted run's range land in the run before it.
    let back: Vec<_> = gone.iter().map(|(k, _)| (k.clone(), true)).collect();
    apply_cached(&tree, &back, &mut cache);
    check_cache(&tree, &cache);
    check_runs(&tree, keys::AGE_RUNS);
    assert_eq!(entries(&tree, keys::BY_AGE, None), keys);
    // A malformed run in the tree is still reported when the cache does not hold it.
    tree.insert(keys::FIFO_RUNS, &[0x80][..]).unwrap();
    let mut edits = RunEdits::cached(&tree, cache);
    assert!(edits.set(&keys::fifo("job-1", 1, "item-1"), true).is_err());
}

#[test]
fn emptied_runs_are_deleted() {
    let tree = tree();
    let keys: Vec<Vec<u8>> = (0..300).map(|n| age_key(2, n, n)).collect();
    apply(
        &tree,
        &keys.iter().map(|k| (k.clone(), true)).collect::<Vec<_>>(),
    );
    apply(
        &tree,
        &keys.iter().map(|k| (k.clone(), false)).collect::<Vec<_>>(),
    );
    assert_eq!(tree.scan_prefix(keys::AGE_RUNS).count(), 0);
    assert!(entries(&tree, keys::BY_AGE, None).is_empty());
}

#[test]
fn a_malformed_run_is_reported_with_its_key() {
    let tree = tree();
    tree.insert(keys::AGE_RUNS, &[0x80][..]).unwrap();
    let err = range(&tree, keys::BY_AGE, None)
        .next()
        .unwrap()
        .unwrap_err();
    assert!(err.to_string().contains("malformed index run"), "{err}");
    let mut edits = RunEdits::new(&tree);
    assert!(edits.set(&age_key(1, 1, 1), true).is_err());
}

#[test]
fn other_keys_are_not_index_keys() {
    let tree = tree();
    let mut edits = RunEdits::new(&tree);
    assert!(!edits.set(&keys::item("job", "item"), true).unwrap());
    assert!(!edits.set(keys::APPLIED_THROUGH, true).unwrap());
    assert!(range(&tree, b"i", None).next().is_none());
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]
    /// Random batches of inserts and removes over three jobs: the runs always hold exactly
    /// the model's keys, in order, and any range reads what the model's range holds.
    #[test]
    fn runs_hold_exactly_the_model(
        batches in prop::collection::vec(
            prop::collection::vec((0u8..3, 0u16..400, any::<bool>()), 1..200),
            1..12,
        ),
        lo in (0u8..3, 0u16..400),
        hi in (0u8..4, 0u16..400),
    ) {
        let (tree, cached_tree) = (tree(), tree());
        let mut cache = RunCache::default();
        let mut model: BTreeSet<Vec<u8>> = BTreeSet::new();
        for batch in batches {
            let mut ops: Vec<(Vec<u8>, bool)> = Vec::new();
            let mut last: std::collections::BTreeMap<Vec<u8>, bool> = Default::default();
            for (job, n, present) in batch {
                last.insert(age_key(job, n, n % 17), present);
            }
            for (key, present) in last {
                if present { model.insert(key.clone()); } else { model.remove(&key); }
                ops.push((key, present));
            }
            apply(&tree, &ops);
            check_runs(&tree, keys::AGE_RUNS);
            let all: Vec<Vec<u8>> = model.iter().cloned().collect();
            prop_assert_eq!(entries(&tree, keys::BY_AGE, None), all.clone());
            // The applier's way: each batch edits the runs the last one left in its cache.
            apply_cached(&cached_tree, &ops, &mut cache);
            check_runs(&cached_tree, keys::AGE_RUNS);
            check_cache(&cached_tree, &cache);
            prop_assert_eq!(entries(&cached_tree, keys::BY_AGE, None), all);
        }
        let (from, to) = (age_key(lo.0, lo.1, 0), age_key(hi.0, hi.1, 0));
        let expected: Vec<Vec<u8>> = model.iter().filter(|k| **k >= from && **k < to).cloned().collect();
        prop_assert_eq!(entries(&tree, &from, Some(&to)), expected);
    }
}
