//! The world of one simulation run: a real nats-server (small `max_payload`), the real sled sink
//! with its log on the simulated disk, the real emitter (reconciler, anti-entropy) and a durable
//! consumer; it applies the operations one by one and records what each was promised.

use std::path::{Path, PathBuf};
use std::time::Duration;

use dlq::bus::{Bus, BusConfig, NatsBus};
use dlq::consumer::{run_durable, ConsumerStore, DurableConfig};
use dlq::emitter::{
    AntiEntropyConfig, EmitterBuilder, ReconcilerConfig, TopicPolicies, TopicPolicy,
};
use dlq::sink::test_support::log::sim::SimFs;
use dlq::sink::{LocalSink, LogRetention, SinkConfig};
use dlq_testkit::node::NodeEmitter;
use dlq_testkit::NatsServer;
use tokio_util::sync::CancellationToken;

use super::model::Model;

/// The server's `max_payload`: a normal event (about 1 KB) fits, an oversized one does not.
pub const MAX_PAYLOAD: usize = 4096;
const NODE: &str = "sim-node";
const PUBLISH_TIMEOUT: Duration = Duration::from_millis(300);
/// The sink's store timeout (its default); a stalled writer exceeds it. Shorter, a loaded
/// machine makes appends time out, and a timed-out dead-letter is published unstored (the
/// symptom of scenario 5) in CI, where that scenario is switched off.
pub const STORE_TIMEOUT: Duration = Duration::from_secs(2);

/// The bus as the operations left it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BusState {
    Up,
    Down,
    Frozen,
}

/// Everything one run touches.
pub struct World {
    pub server: NatsServer,
    pub bus: BusState,
    work: tempfile::TempDir,
    generation: u32,
    /// The sink's directory now (a crash moves to a new one: sled as of the last checkpoint).
    data: PathBuf,
    /// The log's simulated disk.
    pub sim: SimFs,
    /// sled's files as the last checkpoint left them.
    checkpoint_copy: PathBuf,
    /// After a time jump: every done segment is past retention.
    pub retention_zero: bool,
    pub emitter: Option<NodeEmitter>,
    pub store: ConsumerStore,
    pub model: Model,
    /// One line per operation: what it was and what came of it.
    pub trace: Vec<String>,
    /// Crash states the model offered at the crashes (the one picked is opened).
    pub crash_states: u64,
}

impl World {
    pub async fn new() -> World {
        let work = tempfile::tempdir().expect("temp dir");
        let conf = work.path().join("nats.conf");
        std::fs::write(&conf, format!("max_payload: {MAX_PAYLOAD}\n")).expect("write conf");
        let server = NatsServer::start_with_args(&["-c", conf.to_str().expect("UTF-8 path")]);
        let store = ConsumerStore::open(&work.path().join("consumer")).expect("consumer store");
        let checkpoint_copy = work.path().join("checkpoint");
        std::fs::create_dir_all(&checkpoint_copy).expect("checkpoint dir");
        let mut world = World {
            server,
            bus: BusState::Up,
            data: work.path().join("data-0"),
            work,
            generation: 0,
            sim: SimFs::new(),
            checkpoint_copy,
            retention_zero: false,
            emitter: None,
            store,
            model: Model::default(),
            trace: Vec::new(),
            crash_states: 0,
        };
        world.open().await.expect("a new sink opens");
        world.checkpoint().await.expect("a new sink checkpoints");
        world
    }

    pub fn emitter(&self) -> &NodeEmitter {
        self.emitter.as_ref().expect("the sink is open")
    }

    pub fn sink(&self) -> &LocalSink {
        self.emitter().sink()
    }

    fn config(&self) -> SinkConfig {
        let mut config = SinkConfig::new(&self.data);
        config.node_id = Some(NODE.into());
        config.segment_bytes = 8 * 1024; // a rotation every few emits
        config.checkpoint_every = Duration::from_secs(3600); // only the operations checkpoint
        config.store_timeout = STORE_TIMEOUT;
        config.log_sim = Some(self.sim.clone());
        if self.retention_zero {
            config.log_retention = LogRetention {
                max_age: Duration::ZERO,
                max_bytes: 0,
            };
        }
        config
    }

    /// Opens the sink and the emitter on the current directory and disk (opening checkpoints
    /// nothing: the last sled copy stays what a power cut finds). Err: it does not open.
    pub async fn open(&mut self) -> Result<(), String> {
        let sink = LocalSink::open(self.config()).map_err(|err| err.to_string())?;
        let bus = NatsBus::connect(BusConfig {
            url: self.server.url(),
            publish_timeout: PUBLISH_TIMEOUT,
            reconnect_max_delay: Duration::from_millis(200),
            ..BusConfig::default()
        })
        .await
        .map_err(|err| format!("bus: {err}"))?;
        let policy = TopicPolicy {
            retry_attempts: 0,
            ..TopicPolicy::default()
        };
        let emitter = EmitterBuilder::new(sink, bus)
            .policies(TopicPolicies {
                default: policy,
                ..TopicPolicies::default()
            })
            .publish_timeout(PUBLISH_TIMEOUT)
            .reconciler(Some(ReconcilerConfig {
                interval: Duration::from_millis(100),
                ..ReconcilerConfig::default()
            }))
            .anti_entropy(Some(AntiEntropyConfig {
                interval: Duration::from_millis(300),
                horizon: Duration::from_secs(20),
                ..AntiEntropyConfig::default()
            }))
            .build();
        self.emitter = Some(emitter);
        if self.bus == BusState::Up {
            self.wait_bus(true).await;
        }
        Ok(())
    }

    /// Waits (bounded) until the emitter's client sees the bus as `healthy`.
    pub async fn wait_bus(&self, healthy: bool) {
        let Some(emitter) = &self.emitter else { return };
        for _ in 0..400 {
            if emitter.bus().is_healthy() == healthy {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// A checkpoint, then sled's files copied: what a power cut from now on finds of sled.
    pub async fn checkpoint(&mut self) -> Result<String, String> {
        let result = self.sink().checkpoint().await;
        // Copied also after a failed checkpoint: its sled flush may have happened before the
        // failing unlink, and segments may be gone.
        self.copy_sled();
        result.map(|()| "ok".into()).map_err(|err| err.to_string())
    }

    pub fn copy_sled(&self) {
        let _ = std::fs::remove_dir_all(&self.checkpoint_copy);
        copy_dir(&self.data, &self.checkpoint_copy);
    }

    /// Clean shutdown (errors are reported, not fatal); closing checkpoints, so sled's files
    /// are copied after it.
    pub async fn shutdown(&mut self) -> Result<(), String> {
        let closed = match self.emitter.take() {
            Some(emitter) => emitter.shutdown().await.map_err(|err| err.to_string()),
            None => Ok(()),
        };
        self.copy_sled();
        closed
    }

    /// Stops the process of a power cut: its sled files are left behind as they are.
    async fn abandon(&mut self) {
        if let Some(emitter) = self.emitter.take() {
            let _ = emitter.shutdown().await;
        }
    }

    /// Power cut: the log in one of its crash states, sled as of the last checkpoint, in a new
    /// directory; the old process is stopped afterwards (it writes only to what was left behind).
    pub async fn crash(&mut self, pick: u64) -> Result<String, String> {
        self.crash_into(self.sim.disk(), pick).await
    }

    /// Power cut with the log's disk model in state `disk`: one of its crash states is opened.
    pub async fn crash_into(
        &mut self,
        disk: dlq::sink::test_support::log::crash::Disk,
        pick: u64,
    ) -> Result<String, String> {
        let states = disk.crash_states();
        self.crash_states += states.len() as u64;
        let index = (pick % states.len().max(1) as u64) as usize;
        let files = states.get(index).cloned().unwrap_or_default();
        self.abandon().await;
        self.generation += 1;
        self.data = self.work.path().join(format!("data-{}", self.generation));
        copy_dir(&self.checkpoint_copy, &self.data);
        self.sim = SimFs::from_files(&files);
        self.open().await?;
        Ok(format!("state {index} of {}", states.len()))
    }

    /// The durable consumer reads what is new (bounded); None when the bus is not up.
    pub async fn consume(&self) -> Option<Result<dlq::consumer::DurableRun, String>> {
        if self.bus != BusState::Up {
            return None;
        }
        let config = DurableConfig {
            bus: BusConfig::at(self.server.url()),
            stream: "DLQ".into(),
            name: "sim".into(),
            from_start: false,
            follow: false,
            accept_gaps: Vec::new(),
        };
        let run = run_durable(&config, &self.store, CancellationToken::new());
        Some(
            match tokio::time::timeout(Duration::from_secs(60), run).await {
                Ok(result) => result.map_err(|err| err.to_string()),
                Err(_) => Err("the durable consumer did not catch up within 60 s".into()),
            },
        )
    }
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("create dir");
    let Ok(entries) = std::fs::read_dir(from) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let target = to.join(entry.file_name());
        if path.is_dir() {
            copy_dir(&path, &target);
        } else {
            // sled may be writing: a file it removes meanwhile is simply not copied.
            let _ = std::fs::copy(&path, &target);
        }
    }
}
