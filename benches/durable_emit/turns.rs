//! One call at a time, in turns with its ceilings. The K = 1 rows make their calls in turns of
//! [`TURN`] with as many plain appends + `fdatasync` of a stored event's size (and, with the
//! bus up, as many JetStream publishes + PubAck with nothing stored), so the disk's drift
//! during the run (one `fdatasync` moved by 2 x within a minute on this VM) reaches the row
//! and the ceilings it is read against alike. Measured apart, minutes apart, the ceiling of
//! section 1 can be the disk of another hour.

use std::fs::File;
use std::future::Future;
use std::io::Write as _;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use dlq::bus::Bus;
use dlq_testkit::bench::load::Run;
use dlq_testkit::items::{dead_lettered_event, template_item_sized};

use crate::run::{connect_bus, cpu_seconds, disk_bytes_written, next_item, wait_healthy, TOPIC};

/// Calls per turn.
pub const TURN: usize = 50;

/// What a run in turns measured.
pub struct InTurns {
    /// The row's calls; `secs` is the time of its turns only.
    pub ours: Run,
    /// This process's CPU seconds and bytes written during the row's turns only.
    pub cpu_secs: f64,
    pub disk_bytes: u64,
    /// One plain append + `fdatasync` of `record` bytes per call, in the turns between.
    pub plain: Run,
    /// One JetStream publish + PubAck per call, nothing stored (with a bus URL).
    pub bus: Option<Run>,
}

/// Mean seconds per call of a run made one call at a time.
pub fn mean_secs(run: &Run) -> f64 {
    run.secs / run.hist.len().max(1) as f64
}

/// The ceilings a K = 1 row takes turns with.
pub struct Probes {
    /// Where the plain file goes.
    pub dir: PathBuf,
    /// Bytes of each plain append: one stored event's.
    pub record: usize,
    /// The nats-server to publish to, when the bus is up.
    pub bus_url: Option<String>,
    /// Letters of the published items' blob: the row's payload.
    pub blob: usize,
}

/// `total` calls of `call(0, i)`, one at a time, in turns with the probes.
///
/// Everything runs on one task of the runtime's workers, as the K > 1 rows' calls and an
/// embedding scheduler's do: a call awaited on the thread that blocks on the runtime is woken
/// differently (at K = 1, ~6 µs from the writer's answer to the caller against ~18 µs on a
/// worker, docs/benchmarks.md).
pub async fn in_turns<F, Fut>(probes: Probes, total: usize, call: F) -> InTurns
where
    F: Fn(usize, usize) -> Fut + Send + 'static,
    Fut: Future<Output = Result<bool, String>> + Send + 'static,
{
    let turns = tokio::spawn(probes.take_turns(total, call));
    turns.await.expect("the turns' task")
}

impl Probes {
    async fn take_turns<F, Fut>(self, total: usize, call: F) -> InTurns
    where
        F: Fn(usize, usize) -> Fut,
        Fut: Future<Output = Result<bool, String>>,
    {
        let Probes {
            dir,
            record,
            bus_url,
            blob,
        } = self;
        let path = dir.join(format!("turns-{record}.probe"));
        let mut file = File::create(&path).expect("create probe file");
        let block = vec![0x5au8; record];
        let bus = match bus_url.as_deref() {
            Some(url) => {
                let bus = connect_bus(url.into(), true).await;
                wait_healthy(&bus).await;
                bus.prepare().await.expect("stream");
                Some(bus)
            }
            None => None,
        };
        let (template, seq) = (template_item_sized(blob), AtomicU64::new(0));
        let node = format!("bench-turns-{blob}");
        let mut turns = InTurns {
            ours: Run::empty(),
            cpu_secs: 0.0,
            disk_bytes: 0,
            plain: Run::empty(),
            bus: bus.as_ref().map(|_| Run::empty()),
        };
        let mut made = 0;
        while made < total {
            let turn = TURN.min(total - made);
            let (started, cpu, disk) = (Instant::now(), cpu_seconds(), disk_bytes_written());
            for i in made..made + turn {
                let pending = call(0, i);
                let t = Instant::now();
                let result = pending.await;
                turns.ours.record(t, result);
            }
            turns.ours.secs += started.elapsed().as_secs_f64();
            turns.cpu_secs += cpu_seconds() - cpu;
            turns.disk_bytes += disk_bytes_written().saturating_sub(disk);
            let started = Instant::now();
            for _ in 0..turn {
                let t = Instant::now();
                let written = file.write_all(&block).and_then(|()| file.sync_data());
                let written = written.map(|()| true).map_err(|e| e.to_string());
                turns.plain.record(t, written);
            }
            turns.plain.secs += started.elapsed().as_secs_f64();
            if let (Some(bus), Some(run)) = (&bus, &mut turns.bus) {
                let started = Instant::now();
                for i in made..made + turn {
                    let n = seq.fetch_add(1, Ordering::Relaxed) + 1;
                    let event = dead_lettered_event(&node, n, TOPIC, next_item(&template, i));
                    let t = Instant::now();
                    let published = bus.publish(&event).await;
                    run.record(t, published.map(|_| true).map_err(|e| e.to_string()));
                }
                run.secs += started.elapsed().as_secs_f64();
            }
            made += turn;
        }
        drop(file);
        std::fs::remove_file(&path).expect("remove probe file");
        turns
    }
}
