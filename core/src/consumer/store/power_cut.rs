//! A power cut after a save: what the disk holds then is sled's files as they were when the
//! store opened, with each file the store fsynced since replaced by its content at that fsync
//! (a file written but never fsynced keeps its old content, as after a power cut). The store
//! reopened from that must hold every save that returned.
#![allow(clippy::unwrap_used)]

use std::path::Path;
use std::sync::Arc;

use super::*;

fn copy_tree(from: &Path, to: &Path) {
    if from.is_dir() {
        std::fs::create_dir_all(to).unwrap();
        for entry in std::fs::read_dir(from).unwrap() {
            let entry = entry.unwrap();
            copy_tree(&entry.path(), &to.join(entry.file_name()));
        }
    } else if from.exists() {
        std::fs::create_dir_all(to.parent().unwrap()).unwrap();
        std::fs::copy(from, to).unwrap();
    }
}

fn put(fold: &mut Fold, job: &str, id: &str, last_event_id: &str) {
    let stored = crate::testing::stored_item(job, id, last_event_id);
    let key = (job.to_owned(), id.to_owned());
    fold.projection.items.insert(key.clone(), stored);
    fold.touched.items.insert(key);
}

#[test]
fn a_save_that_returned_survives_a_power_cut() {
    let work = tempfile::tempdir().unwrap();
    let live = work.path().join("store");
    let (opened, synced) = (work.path().join("opened"), work.path().join("synced"));
    let store = ConsumerStore::open(&live).unwrap();
    copy_tree(&live, &opened);
    let hook = {
        let (live, synced) = (live.clone(), synced.clone());
        Arc::new(move |file: &Path| {
            let relative = file.strip_prefix(&live).unwrap();
            copy_tree(file, &synced.join(relative));
        })
    };
    store.on_sync(hook);

    let mut fold = store.load().unwrap();
    for (n, id) in ["a", "b", "c"].into_iter().enumerate() {
        put(&mut fold, "job", id, &format!("n:{n}"));
        store.save(&mut fold, 10 + n as u64).unwrap();
    }
    // A large value goes to a blob file of its own, which sled's flush never syncs.
    let mut big = crate::testing::stored_item("job", "big", "n:9");
    std::sync::Arc::make_mut(&mut big.item).item_data =
        serde_json::json!({ "blob": "x".repeat(256 * 1024) });
    fold.projection
        .items
        .insert(("job".into(), "big".into()), big);
    fold.touched.items.insert(("job".into(), "big".into()));
    store.save(&mut fold, 20).unwrap();
    let saved = fold.projection.items.clone();
    drop(store);

    let cut = work.path().join("after-the-cut");
    copy_tree(&opened, &cut);
    copy_tree(&synced, &cut);
    let reopened = ConsumerStore::open(&cut).unwrap();
    assert_eq!(
        reopened.checkpoint().unwrap(),
        20,
        "the last save is on disk"
    );
    assert_eq!(reopened.load().unwrap().projection.items, saved);
}
