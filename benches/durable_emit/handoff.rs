//! 1b. The hand-off: one plain append + `fdatasync` made by another thread while the caller
//! (a Tokio task) awaits it, through the channels the sink's writer uses (a Tokio `mpsc`
//! queue the thread drains with `blocking_recv`, a `oneshot` answer), nothing else.
//!
//! It is the least a one-at-a-time `store` can take in any design that keeps the caller's
//! wait bounded: the `fdatasync` runs on a thread the caller can stop waiting for when the disk
//! stalls (`store_timeout`), so every call crosses two threads and back. Its excess over the
//! same append + `fdatasync` made inline is the hand-off alone (two wake-ups).

use std::fs::File;
use std::io::Write;
use std::path::Path;
use std::time::Instant;

use tokio::sync::{mpsc, oneshot};

use crate::limit::{kb, Limits};
use crate::run::{histogram, Row};

/// Measures `n` handed-off appends of each record size, each right after one made inline
/// (alternated, so the disk's drift reaches both alike); records the ratio of their means in
/// `limits`.
///
/// The caller is a task on the runtime's workers, as the `store` calls are: a call awaited on
/// the thread that blocks on the runtime is woken faster than one on a worker.
pub async fn handed_off_fsyncs(
    dir: &Path,
    n: usize,
    records: &[(usize, usize)],
    limits: &mut Limits,
    rows: &mut Vec<Row>,
) {
    let (dir, records) = (dir.to_owned(), records.to_vec());
    let (ratios, made) = tokio::spawn(async move {
        let (mut limits, mut rows) = (Limits::default(), Vec::new());
        made_on_a_worker(&dir, n, &records, &mut limits, &mut rows).await;
        (limits.handoff_ratio, rows)
    })
    .await
    .expect("the hand-off's task");
    limits.handoff_ratio.extend(ratios);
    rows.extend(made);
}

async fn made_on_a_worker(
    dir: &Path,
    n: usize,
    records: &[(usize, usize)],
    limits: &mut Limits,
    rows: &mut Vec<Row>,
) {
    for &(blob, record) in records {
        let inline_path = dir.join(format!("inline-{record}.probe"));
        let handed_path = dir.join(format!("handoff-{record}.probe"));
        let mut inline = File::create(&inline_path).expect("create probe file");
        let mut handed = File::create(&handed_path).expect("create probe file");
        let (queue, mut requests) = mpsc::channel::<oneshot::Sender<()>>(1024);
        let thread = std::thread::spawn(move || {
            let block = vec![0x5au8; record];
            while let Some(reply) = requests.blocking_recv() {
                handed.write_all(&block).expect("write probe");
                handed.sync_data().expect("sync probe");
                let _ = reply.send(());
            }
        });
        let block = vec![0x5au8; record];
        let (mut inline_h, mut handed_h) = (histogram(), histogram());
        let (mut inline_secs, mut handed_secs) = (0.0, 0.0);
        for _ in 0..n {
            let t = Instant::now();
            inline.write_all(&block).expect("write probe");
            inline.sync_data().expect("sync probe");
            inline_secs += t.elapsed().as_secs_f64();
            inline_h.saturating_record(t.elapsed().as_micros() as u64);
            let t = Instant::now();
            let (reply, answer) = oneshot::channel();
            queue.send(reply).await.expect("probe thread alive");
            answer.await.expect("probe thread answers");
            handed_secs += t.elapsed().as_secs_f64();
            handed_h.saturating_record(t.elapsed().as_micros() as u64);
        }
        drop(queue);
        thread.join().expect("probe thread");
        std::fs::remove_file(&inline_path).expect("remove probe file");
        std::fs::remove_file(&handed_path).expect("remove probe file");
        let ratio = handed_secs / inline_secs;
        limits.handoff_ratio.insert(blob, ratio);
        let (inline_us, handed_us) = (inline_secs * 1e6 / n as f64, handed_secs * 1e6 / n as f64);
        for (how, h, secs) in [
            ("inline", &inline_h, inline_secs),
            ("on another thread, caller awaits", &handed_h, handed_secs),
        ] {
            let name = format!("{} append + fdatasync {how}", kb(record));
            let row = Row::new("1b hand-off", name, n).latency(h);
            let row = row.rates(Some(n as f64 / secs), Some(n as f64 / secs));
            rows.push(row.note(format!(
                "alternated: mean {inline_us:.0} us inline, {handed_us:.0} us handed to a thread (the sink's shape with no work: mpsc + oneshot); the hand-off costs {:.0} us, {ratio:.2} x",
                handed_us - inline_us
            )));
        }
    }
}
