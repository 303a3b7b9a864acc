//! 1-2. The store: adds, list and stats of the legacy layout (one JSON file per item) against our sled sink.

use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use dlq::domain::command::Command;
use dlq::sink::{LocalSink, Sink};
use dlq_ops::query::list::{in_listing_order, page_in_order, ListRequest};
use dlq_ops::query::stats::stats;
use dlq_ops::query::Criteria;

use crate::reference;
use crate::run::{histogram, median_ms, open_sink, run_concurrent, Items, Run};
use crate::{Line, Mode, FILL_IN_FLIGHT, IN_FLIGHT, JOB, PAGE, TARGET_FACTOR, TARGET_SIZE, TOPIC};

/// Adds/s of the reference layout over the adds `size - window .. size`, after pre-filling the
/// rest; then list and stats at `size`. Leaves the directory in place for nothing: removed.
fn reference_at(base: &Path, items: &Items, size: usize, mode: &Mode) -> RefFigures {
    let window = mode.window.min(size);
    let dir = base.join(format!("ref-{size}"));
    let mut dlq = reference::RefDlq::open(&dir, JOB).expect("open reference dlq");
    let t = Instant::now();
    for i in 0..size - window {
        dlq.write_item(&items.nth(i)).expect("prefill item");
    }
    if size > window {
        dlq.update_index().expect("prefill index");
    }
    let prefill_secs = t.elapsed().as_secs_f64();
    let (mut hist, mut busy) = (histogram(), Duration::ZERO);
    for i in size - window..size {
        let item = items.nth(i);
        let t = Instant::now();
        dlq.add(item).expect("reference add");
        let took = t.elapsed();
        busy += took;
        hist.saturating_record(took.as_micros().max(1) as u64);
    }
    let index: serde_json::Value = serde_json::from_slice(
        &std::fs::read(dlq.job_dir().join("index.json")).expect("read index"),
    )
    .expect("index json");
    assert_eq!(index["item_count"], size, "reference index after the adds");
    let job_dir = dlq.job_dir().to_path_buf();
    let (list_ms, page) = median_ms(mode.reps, || reference::list(&job_dir, PAGE).expect("list"));
    assert_eq!(page.len(), PAGE.min(size));
    assert_eq!(
        page[0].item_id,
        format!("item-{}", size - 1),
        "newest first"
    );
    let (stats_ms, s) = median_ms(mode.reps, || reference::stats(&job_dir).expect("stats"));
    assert_eq!(s.total_items, size);
    assert!(s.oldest_item.is_some() && s.newest_item.is_some());
    assert!(s.eligible_for_reprocess <= size && s.requiring_manual_review <= size);
    let index_bytes = std::fs::metadata(job_dir.join("index.json")).map_or(0, |m| m.len());
    let item_bytes = std::fs::metadata(job_dir.join("items/item-0.json")).map_or(0, |m| m.len());
    std::fs::remove_dir_all(&dir).expect("remove reference dir");
    RefFigures {
        adds_per_sec: window as f64 / busy.as_secs_f64(),
        p99_ms: hist.value_at_quantile(0.99) as f64 / 1e3,
        list_ms,
        stats_ms,
        prefill_secs,
        index_bytes,
        item_bytes,
    }
}

struct RefFigures {
    adds_per_sec: f64,
    p99_ms: f64,
    list_ms: f64,
    stats_ms: f64,
    prefill_secs: f64,
    index_bytes: u64,
    item_bytes: u64,
}

struct OurFigures {
    /// Adds/s and p99 per entry of [`IN_FLIGHT`].
    adds: Vec<(usize, f64, f64)>,
    open_ms: f64,
    list_ms: f64,
    stats_ms: f64,
}

/// `Sink::append(Command::DeadLetter)` of items `from..to` at `k` in flight.
async fn append_items(
    sink: &LocalSink,
    items: &Arc<Items>,
    k: usize,
    from: usize,
    to: usize,
) -> Run {
    let (sink, items) = (sink.clone(), items.clone());
    let next = Arc::new(AtomicUsize::new(from));
    run_concurrent(k, to - from, move |_, _| {
        let item = std::sync::Arc::new(items.nth(next.fetch_add(1, Ordering::Relaxed)));
        let sink = sink.clone();
        async move {
            let command = Command::DeadLetter {
                topic: TOPIC.into(),
                item,
            };
            sink.append(command)
                .await
                .map(|_| true)
                .map_err(|e| e.to_string())
        }
    })
    .await
}

/// Our adds at `size` for each in-flight level (a fresh sink each, pre-filled at 256 in flight),
/// then open / list / stats on the last one.
async fn ours_at(base: &Path, items: &Arc<Items>, size: usize, mode: &Mode) -> OurFigures {
    let window = mode.window.min(size);
    let mut adds = Vec::new();
    let mut last_dir = None;
    for k in IN_FLIGHT {
        let dir = base.join(format!("ours-{size}-k{k}"));
        let sink = open_sink(&dir);
        if size > window {
            let fill = append_items(&sink, items, FILL_IN_FLIGHT, 0, size - window).await;
            assert!(fill.errors.is_empty(), "pre-fill failed");
            // The pre-fill's work ends before the clock starts, as the legacy layout's does
            // (its files written, its index regenerated): everything applied to the
            // projection (a query waits for that) and checkpointed.
            assert_eq!(sink.job_len(JOB).expect("job len"), (size - window) as u64);
            sink.checkpoint()
                .await
                .expect("checkpoint after the pre-fill");
        }
        let run = append_items(&sink, items, k, size - window, size).await;
        assert!(run.errors.is_empty(), "adds failed");
        assert_eq!(sink.job_len(JOB).expect("job len"), size as u64);
        adds.push((k, run.rate(), run.p99_ms()));
        sink.close().await.expect("close sink");
        drop(sink);
        if let Some(previous) = last_dir.replace(dir) {
            std::fs::remove_dir_all(previous).expect("remove sink dir");
        }
    }
    let dir = last_dir.expect("a sink");
    let t = Instant::now();
    let sink = open_sink(&dir); // what a fresh `dlq list` / `dlq stats` process does first
    let open_ms = t.elapsed().as_secs_f64() * 1e3;
    let filter = Criteria::default();
    let request = ListRequest {
        filter: filter.clone(),
        limit: PAGE,
        offset: 0,
        after: None,
        count: false,
    };
    let (list_ms, page) = median_ms(mode.reps, || {
        let walk = in_listing_order(&sink, &filter, None).expect("listing walk");
        page_in_order(walk, &request).expect("page")
    });
    assert_eq!(page.items.len(), PAGE.min(size));
    assert_eq!(
        page.items[0].item_id,
        format!("item-{}", size - 1),
        "newest first"
    );
    let (stats_ms, s) = median_ms(mode.reps, || stats(&sink, None).expect("stats"));
    assert_eq!(s.total_items, size as u64);
    sink.close().await.expect("close sink");
    drop(sink);
    std::fs::remove_dir_all(&dir).expect("remove sink dir");
    OurFigures {
        adds,
        open_ms,
        list_ms,
        stats_ms,
    }
}

pub async fn store_section(base: &Path, mode: &Mode, lines: &mut Vec<Line>) {
    let items = Arc::new(Items::new());
    for &size in mode.sizes {
        let window = mode.window.min(size);
        eprintln!("  {size} items: legacy layout (one JSON file per item) ...");
        let r = reference_at(base, &items, size, mode);
        eprintln!(
            "    {:.0} adds/s (p99 {:.2} ms); list {:.1} ms; stats {:.1} ms",
            r.adds_per_sec, r.p99_ms, r.list_ms, r.stats_ms
        );
        eprintln!("  {size} items: ours ...");
        let o = ours_at(base, &items, size, mode).await;
        let span = if window == size {
            format!("the first {window} adds")
        } else {
            format!("adds {} → {size}", size - window)
        };
        for (k, rate, p99) in &o.adds {
            eprintln!("    K={k}: {rate:.0} adds/s (p99 {p99:.2} ms)");
            let mut note = format!(
                "{span}; ours p99 {p99:.2} ms, fsynced per group; baseline p99 {:.2} ms, \
                 one at a time, never fsynced; index.json {} B, item file {} B",
                r.p99_ms, r.index_bytes, r.item_bytes
            );
            if size > window {
                note += &format!("; baseline pre-fill {:.1} s (not timed)", r.prefill_secs);
            }
            let target = (size == TARGET_SIZE).then(|| {
                let met = *rate >= TARGET_FACTOR * r.adds_per_sec;
                ("ours ≥ 1000× baseline".to_string(), met)
            });
            lines.push(Line {
                what: format!("add, {size} items, ours {k} in flight"),
                unit: "adds/s",
                ours: *rate,
                baseline: r.adds_per_sec,
                higher_is_better: true,
                target,
                note,
            });
        }
        lines.push(Line {
            what: format!("list, newest {PAGE}, {size} items"),
            unit: "ms",
            ours: o.list_ms,
            baseline: r.list_ms,
            higher_is_better: false,
            target: None,
            note: format!(
                "median of {}; ours: recency index walk on an open sink; baseline: load every item file, sort all",
                mode.reps
            ),
        });
        lines.push(Line {
            what: format!("list incl. opening the store, {size} items"),
            unit: "ms",
            ours: o.open_ms + o.list_ms,
            baseline: r.list_ms,
            higher_is_better: false,
            target: None,
            note: format!(
                "ours: LocalSink::open {:.1} ms (one reopen right after writing: page cache warm) + list; what a fresh `dlq list` process pays",
                o.open_ms
            ),
        });
        lines.push(Line {
            what: format!("stats, {size} items"),
            unit: "ms",
            ours: o.stats_ms,
            baseline: r.stats_ms,
            higher_is_better: false,
            target: None,
            note: format!(
                "median of {}; ours: per-job counters + age/recency index ends; baseline: load every item file, count",
                mode.reps
            ),
        });
    }
}
